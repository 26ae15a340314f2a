"""The outline of the pinned notes and decks: every note's headings and every deck's slide titles, in order.

The site's note and deck pages list what the claims are about in the order a reader meets it. Only the
structure is read (heading titles and slugs, slide numbers and titles), never the notes' text, which the
site does not republish. The outline comes from a local clone of the notes at the pinned commit (the
clone `kb sources fetch` makes, or one named in kb.local.toml / KB_CLONE_<ID>). Without a clone it is
rebuilt from the claims' anchors alone (`complete` False): the sections and slides that claims anchor,
named by their slugs and numbers, and the pages say so.

The notes publish themselves (their README): `docs/` served as it is, every note a section of
`notes.html` whose heading ids are `doc-<note>-<heading>` in their renderer's own slug rule, and every
deck `slides/<deck>.html`, which opens slide N at `#N`. `published_ids` restates that id rule; a test
compares it with the ids in `docs/notes.html` at the pin.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kb.config import Config
from kb.pinned.git import GitError, GitRepo
from kb.pinned.notes import sections
from kb.pinned.slides import slides

NOTES_DIR, DECKS_DIR = "docs/notes", "docs/slides"


@dataclass
class Heading:
    """One section of a note: its level, title (as the note's Markdown writes it), GitHub slug and line span."""

    level: int
    title: str
    slug: str
    start: int | None = None
    end: int | None = None
    published: str | None = None  # the heading's id on the notes' published notes.html


@dataclass
class SlideHead:
    """One slide of a deck: its 1-based number (the deck's own #N) and its title."""

    number: int
    title: str
    section: str = ""
    line: int | None = None  # line of the slide's opening tag in the deck at the pin


@dataclass
class Outline:
    """Every note's headings and every deck's slides, from the pinned commit or (incomplete) from anchors."""

    source: str
    commit: str
    complete: bool
    why: str
    notes: dict[str, list[Heading]] = field(default_factory=dict)
    decks: dict[str, list[SlideHead]] = field(default_factory=dict)
    note_ids: dict[str, str] = field(default_factory=dict)  # a note's own id on the published notes.html

    def published(self) -> dict[tuple[str, str], str | None]:
        """(note path, heading slug) -> the heading's id on the published site (None where it has none)."""
        return {(path, h.slug): h.published for path, heads in self.notes.items() for h in heads}


def _site_slug(text: str) -> str:
    """The notes' renderer's slug: tags dropped, lower case, every run of other than a-z, 0-9 and CJK as '-'."""
    text = re.sub(r"<[^>]+>", "", text).lower()
    return re.sub(r"[^a-z0-9\u4e00-\u9fff]+", "-", text).strip("-") or "section"


def published_ids(path: str, titles: list[str]) -> list[str]:
    """The ids the notes' published notes.html gives a note's headings, in order (a repeat gets -2, -3, ...)."""
    doc = "doc-" + _site_slug(Path(path).stem)
    seen: dict[str, int] = {}
    out = []
    for title in titles:
        base = f"{doc}-{_site_slug(title)}"
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.append(base if n == 0 else f"{base}-{n + 1}")
    return out


def _clone(cfg: Config, sid: str) -> str | None:
    configured = cfg.clones.get(sid)
    if configured:
        return configured
    cache = cfg.clone_cache
    return next((str(p) for p in (cache / sid, cache / f"{sid}.git") if p.exists()), None) if cache else None


def _ids_in(html: str) -> set[str]:
    return set(re.findall(r'\bid="([^"]+)"', html))


def read_outline(cfg: Config, src: dict[str, Any], anchors: list[dict[str, Any]]) -> Outline:
    """The outline of the notes source `src` at its pinned commit; from `anchors` when no clone has the commit.

    `anchors` are the notes anchors of every claim (dicts with path and heading or slide): they fill in a
    file or a heading the pinned tree lacks, so every anchored claim has a place on the site.
    """
    sid, commit = src.get("id", ""), src.get("commit") or ""
    out = Outline(sid, commit, False, "")
    clone = _clone(cfg, sid)
    if clone is None:
        out.why = f"no local clone of {sid} (kb sources fetch {sid}): outline rebuilt from the claims' anchors"
    else:
        try:
            with GitRepo(clone) as repo:
                if not repo.has_commit(commit):
                    out.why = f"the clone {clone} lacks the pinned commit {commit[:12]}: outline from the anchors"
                else:
                    _read_tree(repo, commit, out, {a.get("path") or "" for a in anchors})
                    out.complete, out.why = True, f"read from the notes at {commit[:12]}"
        except (GitError, OSError) as exc:
            out.why = f"cannot read the clone {clone} ({exc}): outline from the anchors"
    _add_anchored(out, anchors)
    return out


def _read_tree(repo: GitRepo, commit: str, out: Outline, anchored: set[str]) -> None:
    """Every note and deck in the pinned tree, and any other Markdown file of the repository a claim anchors
    (its PROVENANCE.md, STATUS.md)."""
    names = repo.git("ls-tree", "-r", "--name-only", commit, NOTES_DIR, DECKS_DIR).split()
    names += [p for p in anchored if p.endswith(".md") and not p.startswith(NOTES_DIR + "/")]
    site_html = repo.read(commit, "docs/notes.html")
    published = _ids_in(site_html.decode("utf-8", "replace")) if site_html is not None else set()
    for name in sorted(names):
        blob = repo.read(commit, name)
        if blob is None:
            continue
        text = blob.decode("utf-8", "replace")
        if name.endswith(".md") and (name.startswith(NOTES_DIR + "/") or name in anchored):
            secs = sections(text)
            ids = published_ids(name, [s.title for s in secs])
            # Only an id the published page at the pin really has becomes a link.
            out.notes[name] = [Heading(s.level, s.title, s.slug, s.start, s.end, i if i in published else None)
                               for s, i in zip(secs, ids, strict=True)]
            doc = "doc-" + _site_slug(Path(name).stem)
            if doc in published:
                out.note_ids[name] = doc
        elif name.startswith(DECKS_DIR + "/") and name.endswith(".html"):
            out.decks[name] = [SlideHead(s.position, s.title or s.section, s.section, s.line) for s in slides(text)]


def _add_anchored(out: Outline, anchors: list[dict[str, Any]]) -> None:
    """Anchored headings and slides the outline lacks (no clone, or text not at the pin), appended at the end."""
    for a in sorted(anchors, key=lambda a: (a.get("path") or "", a.get("slide") or 0, a.get("heading") or "")):
        path = a.get("path") or ""
        if a.get("slide"):
            have = out.decks.setdefault(path, [])
            if all(s.number != a["slide"] for s in have):
                have.append(SlideHead(int(a["slide"]), f"slide {a['slide']}"))
                have.sort(key=lambda s: s.number)
        elif a.get("heading"):
            heads = out.notes.setdefault(path, [])
            if all(h.slug != a["heading"] for h in heads):
                heads.append(Heading(2, a["heading"], a["heading"]))
