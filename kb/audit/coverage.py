"""Coverage: which sections of the pinned notes have claims, and which are skipped on purpose.

Reads the notes at their pinned commit from a local clone (only with `kb
coverage --online` from GitHub's raw files, through kb's HTTP client), takes
every `##` and `###` heading, and counts a section covered when a claim anchors it or one of its sub-headings. Sections that
state nothing checkable are listed in `docs/coverage-allowlist.yaml` with a
reason; anything else uncovered is reported. The slide decks beside the notes
(`docs/slides/*.html`) are counted the same way, per slide: covered when a
claim anchors it, allow-listed under `slides:` with a reason, else missing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import sqlite_utils
import yaml

from kb.config import Config
from kb.pinned.git import GitRepo
from kb.pinned.notes import sections
from kb.records.models import Source

ALLOWLIST = Path("docs") / "coverage-allowlist.yaml"


@dataclass
class FileCoverage:
    """Coverage of one note file."""

    path: str
    covered: list[str] = field(default_factory=list)
    allowed: dict[str, str] = field(default_factory=dict)
    structural: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


class CoverageError(RuntimeError):
    """The notes could not be read (online: a network fault; offline: a clone without the pin)."""


class NeedsNotes(CoverageError):
    """The notes at the pin are not here (no clone with the pin, nothing cached) and not asked for online."""


def _read_notes(cfg: Config, src: Source, paths: list[str], folder: str = "docs/notes",
                suffix: str = ".md", *, online: bool = False) -> dict[str, str]:
    """The note files (or decks) at the pinned commit: from a local clone, else GitHub's raw files.

    The raw files are read through kb's HTTP client: online, fetched (and cached for good: content at a
    full SHA never changes); offline, only what that cache already holds.
    """
    clone = cfg.clones.get(src.id) or next((str(p) for p in (cfg.clone_cache / src.id, cfg.clone_cache / f"{src.id}.git")
                                             if p.exists()), None)
    out: dict[str, str] = {}
    if clone:
        with GitRepo(clone) as repo:
            if not repo.has_commit(src.commit or ""):
                raise NeedsNotes(f"{clone} does not contain the pinned commit {src.commit}"
                                    f" (run `kb sources fetch {src.id}`)")
            if not paths:
                paths = [p for p in repo.git("ls-tree", "-r", "--name-only", src.commit or "", folder).split()
                         if p.endswith(suffix)]
            for p in paths:
                blob = repo.read(src.commit or "", p)
                if blob is not None:
                    out[p] = blob.decode("utf-8")
        return out
    from kb.http import FetchError, HttpClient, cache_dir

    client = HttpClient(cache_dir(cfg.root))
    owner_repo = (src.repo or "").removeprefix("https://github.com/")
    base = os.environ.get("KB_RAW_BASE", "https://raw.githubusercontent.com").rstrip("/")
    for p in paths:
        url = f"{base}/{owner_repo}/{src.commit}/{p}"
        if not online:
            body = client.cached(url, "*/*")
            if body is None:
                raise NeedsNotes(f"no local clone of {src.id} and {p} is not in the HTTP cache: run "
                                 f"`kb sources fetch {src.id}`, name a clone in kb.local.toml ([clones] {src.id}), "
                                 "or pass --online")
            out[p] = body.decode("utf-8")
            continue
        try:
            out[p] = client.get(url, "*/*", immutable=True).text()
        except FetchError as exc:
            raise CoverageError(f"cannot fetch {p} at {(src.commit or '')[:12]}: {exc} "
                                f"(or configure a local clone of {src.id})") from exc
    return out


def note_paths(db: sqlite_utils.Database, folder: str = "docs/notes") -> list[str]:
    """Note files (or decks) the corpus anchors: what coverage reads when no clone lists the folder."""
    return sorted({r["path"] for r in db.query("SELECT DISTINCT a.path FROM anchors a JOIN sources s ON s.id = a.source "
                                                "WHERE s.kind = 'notes' AND a.path LIKE ?", [f"{folder}/%"])})


def coverage(cfg: Config, db: sqlite_utils.Database, *, online: bool = False) -> list[FileCoverage]:
    """Per note file: covered, allow-listed, structural-only and missing sections.

    Reads a local clone; without one, GitHub's raw files only when `online` (else the HTTP cache, or
    NeedsNotes).
    """
    rows = list(db.query("SELECT id, json FROM sources WHERE kind = 'notes'"))
    if not rows:
        raise CoverageError("no notes source is registered")
    src = Source.model_validate_json(rows[0]["json"])
    texts = _read_notes(cfg, src, [] if cfg.clones.get(src.id) else note_paths(db), online=online)
    anchored: dict[str, set[str]] = {}
    for r in db.query("SELECT path, heading FROM anchors WHERE source = ?", [src.id]):
        anchored.setdefault(r["path"], set()).add(r["heading"])
    allow_path = cfg.root / ALLOWLIST
    allow = yaml.safe_load(allow_path.read_text()) if allow_path.exists() else {}
    allow = allow or {}
    out = []
    for path, text in sorted(texts.items()):
        fc = FileCoverage(path)
        secs = sections(text)
        have = anchored.get(path, set())
        allowed = (allow.get("files") or {}).get(path, {}) or {}
        for i, sec in enumerate(secs):
            if sec.level not in (2, 3):
                continue
            # Covered by its own anchor or by any anchor inside it (a deeper heading).
            inner = [s for s in secs[i:] if s.start <= sec.end and s.start >= sec.start]
            if any(s.slug in have for s in inner):
                fc.covered.append(sec.slug)
            elif sec.slug in allowed:
                fc.allowed[sec.slug] = allowed[sec.slug]
            elif _only_subheadings(text, sec, inner[1:]) and inner[1:]:
                fc.structural.append(sec.slug)
            else:
                fc.missing.append(sec.slug)
        out.append(fc)
    return out + _slide_coverage(cfg, db, src, allow, online=online)


def _slide_coverage(cfg: Config, db: sqlite_utils.Database, src: Source, allow: dict, *,
                    online: bool = False) -> list[FileCoverage]:
    """Per deck: slides a claim anchors, slides allow-listed under `slides:`, the rest missing."""
    from kb.pinned.slides import slides

    decks = _read_notes(cfg, src, [] if cfg.clones.get(src.id) else note_paths(db, "docs/slides"),
                        folder="docs/slides", suffix=".html", online=online)
    anchored: dict[str, set[int]] = {}
    for r in db.query("SELECT path, slide FROM anchors WHERE source = ? AND slide IS NOT NULL", [src.id]):
        anchored.setdefault(r["path"], set()).add(int(r["slide"]))
    out = []
    for path, html in sorted(decks.items()):
        fc = FileCoverage(path)
        allowed = {int(k): v for k, v in ((allow.get("slides") or {}).get(path) or {}).items()}
        for sl in slides(html):
            name = f"slide-{sl.position}"
            if sl.position in anchored.get(path, set()):
                fc.covered.append(name)
            elif sl.position in allowed:
                fc.allowed[name] = allowed[sl.position]
            else:
                fc.missing.append(name)
        out.append(fc)
    return out


def _only_subheadings(text: str, sec, children) -> bool:
    """True when a heading has no body of its own before its first sub-heading."""
    lines = text.split("\n")[sec.start : children[0].start - 1] if children else []
    return not any(line.strip() for line in lines)
