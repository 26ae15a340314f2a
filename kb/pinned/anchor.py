"""Author's helper: print the hash and text an anchor must record (`kb anchor`).

    python -m kb.pinned.anchor repo GITDIR SHA PATH START END
    python -m kb.pinned.anchor note GITDIR SHA PATH [SLUG]   (a deck, PATH *.html: [SLIDE])

With no SLUG, `note` lists every section of the note with slug and hash.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from kb.config import Config
from kb.pinned.clones import clone_paths
from kb.pinned.git import GitRepo
from kb.pinned.notes import find_section, lines_sha256, sections
from kb.records.loader import Corpus


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


def describe_deck(html: str, position: str | None = None) -> list[str]:
    """One line per slide of a deck (or just slide `position`): position, section, hash, title or text start."""
    from kb.pinned.slides import slides

    all_slides = slides(html)
    if position is not None:
        if not position.isdigit() or not 1 <= int(position) <= len(all_slides):
            raise AnchorError(f"no slide {position!r}: the deck has slides 1-{len(all_slides)}")
        s = all_slides[int(position) - 1]
        return [f"slide {s.position}  [{s.section}]  line {s.line}  sha256 {s.sha256}", s.text]
    return [f"slide {s.position:3d}  [{s.section}]  sha256 {s.sha256}  {(s.title or s.text)[:70]}" for s in all_slides]


def describe_lines(blob: bytes, path: str, start: int, end: int) -> list[str]:
    """The sha256 a repository anchor records for lines start..end, then the numbered lines to read."""
    got = lines_sha256(blob, start, end)
    if got is None:
        raise AnchorError(f"lines {start}-{end} run past the end of {path}")
    return [f"sha256: {got[0]}", *(f"{n:6d}| {line}" for n, line in enumerate(got[1].splitlines(), start))]


def describe_anchor(cfg: Config, corpus: Corpus, source_id: str, path: str, where: Sequence[str],
                    sha: str | None = None) -> list[str]:
    """What an anchor on `source_id` must record, read from the configured clone; raises AnchorError."""
    src = corpus.sources.get(source_id)
    if src is None:
        raise AnchorError(f"source {source_id!r} is not registered")
    clone = clone_paths(cfg, corpus).get(source_id)
    if not clone:
        raise AnchorError(f"no local clone of {source_id}: set [clones] in kb.local.toml")
    rev = sha or src.commit
    if not rev:
        raise AnchorError("give --sha: a repository anchor needs the pinned commit")
    from kb.pinned.git import GitError

    try:
        with GitRepo(clone) as repo:
            blob = repo.read(rev, path)
    except (GitError, OSError) as exc:
        raise AnchorError(f"cannot read {path} at {rev[:12]} from {clone}: {exc}") from None
    if blob is None:
        raise AnchorError(f"{path} does not exist at {rev[:12]}")
    if src.kind == "notes" and path.endswith(".html"):
        return describe_deck(blob.decode("utf-8"), where[0] if where else None)
    if src.kind == "notes":
        return describe_note(blob.decode("utf-8"), where[0] if where else None)
    if len(where) != 2:
        raise AnchorError("a repository anchor needs START END line numbers")
    return describe_lines(blob, path, int(where[0]), int(where[1]))


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
            describe = describe_deck if path.endswith(".html") else describe_note
            out = describe(blob.decode("utf-8"), argv[4] if len(argv) > 4 else None)
    except AnchorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
