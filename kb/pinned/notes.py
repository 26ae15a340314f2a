"""Markdown note sections: heading slugs and section hashes.

A note anchor names a heading by its GitHub-style slug; the section is the
heading line up to (not including) the next heading of the same or a higher
level. Headings inside fenced code blocks are ignored, as GitHub does.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")


@dataclass(frozen=True)
class Section:
    """One heading of a note and the text it governs."""

    level: int
    title: str
    slug: str
    start: int  # 1-based line of the heading
    end: int  # 1-based last line of the section (inclusive)
    text: str

    @property
    def sha256(self) -> str:
        """Hash of the section text, the value a note anchor records."""
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


def slugify(title: str) -> str:
    """GitHub's heading slug: lower case, punctuation dropped, spaces to '-'.

    The slug is taken from the rendered heading: code spans keep their text
    (`dq_accum` keeps its underscore), emphasis markers (`*x*`, `_x_`) go.
    """
    parts = re.split(r"(`[^`]*`)", title.strip().lower())
    rendered = "".join(
        part[1:-1] if part.startswith("`") and part.endswith("`") and len(part) > 1
        else re.sub(r"(?<![^\W_])_+|_+(?![^\W_])", "", part.replace("*", ""))
        for part in parts
    )
    text = re.sub(r"[^\w\- ]", "", rendered, flags=re.UNICODE)
    return text.replace(" ", "-")


def sections(markdown: str) -> list[Section]:
    """Split a note into its heading sections, with de-duplicated slugs."""
    lines = markdown.split("\n")
    heads: list[tuple[int, int, str]] = []
    in_fence = False
    for i, line in enumerate(lines):
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        m = _HEADING.match(line)
        if m:
            heads.append((i, len(m.group(1)), m.group(2)))
    seen: dict[str, int] = {}
    out: list[Section] = []
    for n, (i, level, title) in enumerate(heads):
        j = len(lines)
        for k, lvl, _ in heads[n + 1 :]:
            if lvl <= level:
                j = k
                break
        body = lines[i:j]
        while body and not body[-1].strip():
            body.pop()
        base = slugify(title)
        count = seen.get(base, 0)
        seen[base] = count + 1
        slug = base if count == 0 else f"{base}-{count}"
        out.append(Section(level, title, slug, i + 1, i + len(body), "\n".join(body) + "\n"))
    return out


def find_section(markdown: str, slug: str) -> Section | None:
    """The section whose slug is `slug`, or None."""
    for sec in sections(markdown):
        if sec.slug == slug:
            return sec
    return None


def lines_sha256(blob: bytes, start: int, end: int) -> tuple[str, str] | None:
    """Hash and text of lines start..end (1-based, inclusive) of a file.

    Returns None when the span runs past the end of the file.
    """
    all_lines = blob.split(b"\n")
    if blob.endswith(b"\n"):
        all_lines = all_lines[:-1]
    if start < 1 or end < start or end > len(all_lines):
        return None
    chunk = b"\n".join(all_lines[start - 1 : end]) + b"\n"
    return hashlib.sha256(chunk).hexdigest(), chunk.decode("utf-8", "replace")
