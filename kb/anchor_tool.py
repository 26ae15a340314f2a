"""Author's helper: print the hash and text an anchor must record.

    python -m kb.anchor_tool repo GITDIR SHA PATH START END
    python -m kb.anchor_tool note GITDIR SHA PATH [SLUG]

With no SLUG, `note` lists every section of the note with slug and hash.
"""

from __future__ import annotations

import sys

from kb.gitsrc import GitRepo
from kb.notes import find_section, lines_sha256, sections


def main(argv: list[str]) -> int:
    """Entry point; returns an exit code."""
    if len(argv) >= 6 and argv[0] == "repo":
        _, gitdir, sha, path, start, end = argv[:6]
        blob = GitRepo(gitdir).read(sha, path)
        if blob is None:
            print(f"error: {path} does not exist at {sha}", file=sys.stderr)
            return 2
        got = lines_sha256(blob, int(start), int(end))
        if got is None:
            print(f"error: lines {start}-{end} outside {path}", file=sys.stderr)
            return 2
        print(f"sha256: {got[0]}")
        for n, line in enumerate(got[1].splitlines(), int(start)):
            print(f"{n:6d}| {line}")
        return 0
    if len(argv) >= 4 and argv[0] == "note":
        _, gitdir, sha, path = argv[:4]
        blob = GitRepo(gitdir).read(sha, path)
        if blob is None:
            print(f"error: {path} does not exist at {sha}", file=sys.stderr)
            return 2
        text = blob.decode("utf-8")
        if len(argv) >= 5:
            sec = find_section(text, argv[4])
            if sec is None:
                print(f"error: no heading with slug {argv[4]}", file=sys.stderr)
                return 2
            print(f"slug: {sec.slug}\nsha256: {sec.sha256}\nlines: {sec.start}-{sec.end}")
            return 0
        for sec in sections(text):
            print(f"{'#' * sec.level} {sec.slug}  lines {sec.start}-{sec.end}  sha256 {sec.sha256}")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
