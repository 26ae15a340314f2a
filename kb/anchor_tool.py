"""Author's helper: print the hash and text an anchor must record.

    python -m kb.anchor_tool repo GITDIR SHA PATH START END
    python -m kb.anchor_tool note GITDIR SHA PATH [SLUG]

With no SLUG, `note` lists every section of the note with slug and hash.
"""

from __future__ import annotations

import sys

from kb.gitsrc import GitRepo
from kb.notes import find_section, lines_sha256, sections


class AnchorError(ValueError):
    """The file, section or span an anchor would cite does not exist."""


def describe_note(text: str, slug: str | None = None) -> list[str]:
    """One line per section (or just `slug`): level, slug, line span and section hash."""
    if slug is not None:
        sec = find_section(text, slug)
        if sec is None:
            raise AnchorError(f"no heading with slug {slug!r}")
        secs = [sec]
    else:
        secs = sections(text)
    return [f"{'#' * s.level} {s.slug}  lines {s.start}-{s.end}  sha256 {s.sha256}" for s in secs]


def describe_lines(blob: bytes, path: str, start: int, end: int) -> list[str]:
    """The sha256 a repository anchor records for lines start..end, then the numbered lines to read."""
    got = lines_sha256(blob, start, end)
    if got is None:
        raise AnchorError(f"lines {start}-{end} run past the end of {path}")
    return [f"sha256: {got[0]}", *(f"{n:6d}| {line}" for n, line in enumerate(got[1].splitlines(), start))]


def main(argv: list[str]) -> int:
    """Entry point; returns an exit code."""
    kinds = {"repo": 6, "note": 4}
    if not argv or argv[0] not in kinds or len(argv) < kinds[argv[0]]:
        print(__doc__, file=sys.stderr)
        return 2
    gitdir, sha, path = argv[1:4]
    blob = GitRepo(gitdir).read(sha, path)
    try:
        if blob is None:
            raise AnchorError(f"{path} does not exist at {sha}")
        if argv[0] == "repo":
            out = describe_lines(blob, path, int(argv[4]), int(argv[5]))
        else:
            out = describe_note(blob.decode("utf-8"), argv[4] if len(argv) > 4 else None)
    except AnchorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
