"""Slide decks as a note source: parsing, anchor validation, drift in the audit, coverage per slide."""

from __future__ import annotations

import json
from pathlib import Path

from kb.audit.run import audit
from kb.pinned.slides import slides
from tests.conftest import kb_subprocess
from tests.test_audit_support import NOTE_PIN, Repos, claim, commit_tree, index, new_repo, write_project

DECK_PIN = """<!doctype html><html><head><style>.slide{display:none}</style></head><body><main class="deck">
<section class="slide" data-section="Title"><h1>FA2 <span>forward</span></h1><p>A map of the deck.</p></section>
<section class="slide" data-section="Tiles"><div class="kicker">Tiles</div>
  <p>d=128 uses <code>128 x 64</code> tiles &amp; 4 warps.</p><script>var ignored = "not slide text";</script>
  <section class="nested"><p>Inner part.</p></section></section>
<section class="slide" data-section="Grid"><p>The grid is (N/128, B, H).</p></section>
</main></body></html>
"""
# At head: slide 2's number changed, a new slide was inserted before the grid slide (which moved to 4).
DECK_HEAD = DECK_PIN.replace("4 warps", "8 warps").replace(
    '<section class="slide" data-section="Grid">',
    '<section class="slide" data-section="New"><p>Something new.</p></section>\n'
    '<section class="slide" data-section="Grid">')


def test_slides_are_split_and_hashed_by_their_visible_text() -> None:
    s = slides(DECK_PIN)
    assert [x.position for x in s] == [1, 2, 3]
    assert [x.section for x in s] == ["Title", "Tiles", "Grid"]
    assert s[0].title == "FA2 forward"
    # Entities decoded, tags dropped, scripts ignored, a nested <section> stays inside its slide.
    assert s[1].text == "Tiles d=128 uses 128 x 64 tiles & 4 warps. Inner part."
    head = slides(DECK_HEAD)
    assert head[1].sha256 != s[1].sha256  # one changed number changes the hash
    assert head[3].sha256 == s[2].sha256  # the moved slide keeps its hash


def _deck_anchor(pos: int, html: str = DECK_PIN, path: str = "docs/slides/fa2.html") -> dict:
    return {"source": "fa-notes", "path": path, "slide": pos, "sha256": slides(html)[pos - 1].sha256}


def _repos(tmp: Path) -> Repos:
    code = new_repo(tmp / "code")
    pin = commit_tree(code, {"src/a.cu": "int a = 1;\n"}, "pin")
    notes = new_repo(tmp / "notes")
    n_pin = commit_tree(notes, {"docs/notes/a.md": NOTE_PIN, "docs/slides/fa2.html": DECK_PIN}, "pin")
    n_head = commit_tree(notes, {"docs/slides/fa2.html": DECK_HEAD}, "deck edit")
    return Repos(code, notes, pin, pin, pin, n_pin, n_head)


def test_audit_finds_edited_moved_and_unchanged_slides(tmp_path: Path) -> None:
    r = _repos(tmp_path)
    root = write_project(tmp_path / "proj", r, [
        claim("t.slide.title", _deck_anchor(1)),
        claim("t.slide.tiles", _deck_anchor(2)),
        claim("t.slide.grid", _deck_anchor(3)),
        claim("t.slide.bad", {**_deck_anchor(3), "sha256": "0" * 64}),
    ])
    cfg, db = index(root)
    found = {f.claim_id: f for f in audit(cfg, db, offline=True).findings
             if f.source == "fa-notes" and f.path == "docs/slides/fa2.html"}
    assert found["t.slide.title"].status == "unchanged"
    assert found["t.slide.tiles"].status == "edited"
    assert "+" in (found["t.slide.tiles"].diff or "") and "8 warps" in found["t.slide.tiles"].diff
    assert found["t.slide.tiles"].proposal["slide"] == 2
    assert found["t.slide.grid"].status == "moved"
    assert found["t.slide.grid"].proposal == {"path": "docs/slides/fa2.html", "slide": 4,
                                              "sha256": slides(DECK_PIN)[2].sha256}
    assert found["t.slide.bad"].status == "invalid"


def test_slide_anchor_rules_are_validated(tmp_path: Path) -> None:
    r = _repos(tmp_path)
    bad = [
        claim("t.slide.no-position", {k: v for k, v in _deck_anchor(2).items() if k != "slide"}),
        claim("t.slide.on-markdown", {**_deck_anchor(2), "path": "docs/notes/a.md"}),
        claim("t.slide.with-heading", {**_deck_anchor(2), "heading": "tiles"}),
        claim("t.slide.zero", {**_deck_anchor(2), "slide": 0}),
    ]
    root = write_project(tmp_path / "proj", r, bad)
    res = kb_subprocess(root, "validate")
    assert res.returncode == 2
    err = res.stderr
    assert "a slide anchor needs slide" in err
    assert "slide applies only to a deck" in err
    assert "a slide anchor names its slide, not a heading" in err
    assert "is not a slide position" in err
    assert "claims/audit.yaml:" in err  # located: file and line


def test_coverage_and_anchor_helper_count_slides(tmp_path: Path) -> None:
    r = _repos(tmp_path)
    root = write_project(tmp_path / "proj", r, [claim("t.slide.tiles", _deck_anchor(2))])
    (root / "docs").mkdir()
    (root / "docs" / "coverage-allowlist.yaml").write_text(
        "slides:\n  docs/slides/fa2.html:\n    1: title slide, nothing checkable\n")
    env = {"KB_CLONE_FA_NOTES": str(r.notes)}
    res = kb_subprocess(root, "coverage", "--json", env=env)
    decks = {c["path"]: c for c in json.loads(res.stdout)}
    deck = decks["docs/slides/fa2.html"]
    assert deck["covered"] == ["slide-2"]
    assert deck["allowed"] == {"slide-1": "title slide, nothing checkable"}
    assert deck["missing"] == ["slide-3"]
    assert res.returncode == 1  # a missing slide fails coverage like a missing section
    shown = kb_subprocess(root, "anchor", "fa-notes", "docs/slides/fa2.html", "2", env=env)
    assert slides(DECK_PIN)[1].sha256 in shown.stdout and "4 warps" in shown.stdout
    out_of_range = kb_subprocess(root, "anchor", "fa-notes", "docs/slides/fa2.html", "9", env=env)
    assert out_of_range.returncode == 2 and "slides 1-3" in out_of_range.stderr
    show = kb_subprocess(root, "show", "t.slide.tiles", env=env)
    assert "docs/slides/fa2.html slide 2" in show.stdout
