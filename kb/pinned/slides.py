"""Slide decks of the notes: one `<section class="slide">` per slide, numbered from 1, hashed by its text.

A slide anchor names a deck (`docs/slides/<deck>.html`), the slide's position
and the sha256 of the slide's visible text (tags dropped, entities decoded,
`<script>`/`<style>` left out, runs of whitespace folded to one space). The
hash is what drift is judged by: a slide whose text is unchanged but which
moved is found again by its hash.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from html.parser import HTMLParser

_SKIP = {"script", "style", "template"}
_BREAK = {"p", "li", "tr", "td", "th", "div", "h1", "h2", "h3", "h4", "br", "footer", "span", "code", "text", "tspan"}


@dataclass(frozen=True)
class Slide:
    """One slide: its 1-based position, the deck section label, its title and normalised text."""

    position: int
    section: str
    title: str
    text: str
    line: int  # 1-based line of the opening <section> tag

    @property
    def sha256(self) -> str:
        """Hash of the slide's normalised text (what an anchor records)."""
        return hashlib.sha256(self.text.encode()).hexdigest()


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.slides: list[Slide] = []
        self._depth = 0  # <section> nesting inside the current slide (0 = not in a slide)
        self._skip = 0
        self._buf: list[str] = []
        self._title: list[str] | None = None
        self._title_done = False
        self._section = ""
        self._line = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "section":
            if self._depth:
                self._depth += 1
            elif "slide" in (a.get("class") or "").split():
                self._depth = 1
                self._buf, self._title, self._title_done = [], None, False
                self._section = a.get("data-section") or ""
                self._line = self.getpos()[0]
            return
        if not self._depth:
            return
        if tag in _SKIP:
            self._skip += 1
        if tag in ("h1", "h2") and not self._title_done and self._title is None:
            self._title = []
        if tag in _BREAK:
            self._buf.append(" ")
            if self._title is not None and not self._title_done:
                self._title.append(" ")  # a <br> inside a title separates its lines (titles are not hashed)

    def handle_endtag(self, tag: str) -> None:
        if not self._depth:
            return
        if tag == "section":
            self._depth -= 1
            if self._depth == 0:
                text = re.sub(r"\s+", " ", "".join(self._buf)).strip()
                title = re.sub(r"\s+", " ", "".join(self._title or [])).strip()
                self.slides.append(Slide(len(self.slides) + 1, self._section, title, text, self._line))
            return
        if tag in _SKIP and self._skip:
            self._skip -= 1
        if tag in ("h1", "h2") and self._title is not None:
            self._title_done = True
        if tag in _BREAK:
            self._buf.append(" ")

    def handle_data(self, data: str) -> None:
        if self._depth and not self._skip:
            self._buf.append(data)
            if self._title is not None and not self._title_done:
                self._title.append(data)


def slides(html: str) -> list[Slide]:
    """Every slide of a deck, in document order."""
    p = _Parser()
    p.feed(html)
    p.close()
    return p.slides


def is_deck(path: str | None) -> bool:
    """Whether a notes path names a slide deck rather than a Markdown note."""
    return bool(path) and path.endswith(".html")
