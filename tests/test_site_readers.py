"""The site's pages for readers of the notes: a page per note and per deck, errata, the glossary, claim-page tops.

A small notes repository is built in the test (two notes, a deck, the published notes.html with its heading
ids written out by hand), with claims anchored to its sections and slides: a note finding corrected by a
superseding claim, a deck finding that disagrees with a note claim, a claim on two sections. What each page
must list is computed from the claim files (the records), never from the page-data functions. A last test
does the same over the real corpus where a clone of the notes at the pin is present.
"""

from __future__ import annotations

import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import yaml

from kb.config import load_config
from kb.export.site.build import build_site
from kb.export.site.outline import published_ids
from kb.export.site.readers import upstream_notice
from kb.index.store import open_index
from kb.pinned.notes import find_section
from kb.pinned.slides import slides
from tests.conftest import commit_files
from tests.test_site import browser  # noqa: F401  (the shared headless Chromium fixture)
from tests.test_site_pages import AXE, OVERFLOW, _fetch_axe, _run

ROOT = Path(__file__).resolve().parent.parent
SITE = "https://example.github.io/notes/"
NOTE_A = """# Note A: Tiles

Intro text that the site must not republish.

## 1. First Section

FA2 uses 128 threads, a sentence only the note holds.

### 1.1 `dq_accum` Detail

Inner detail.

## 2. Second Section

More text.

## 2. Second Section

A repeated heading.
"""
NOTE_B = """# Note B

## Only Section

Words.
"""
DECK = """<!doctype html><html><body><main class="deck">
<section class="slide" data-section="Title"><h1>Deck <br>title</h1><p>Map.</p></section>
<section class="slide" data-section="Tiles"><h2>Tile shapes</h2><p>d=128 uses 4 warps.</p></section>
<section class="slide" data-section="Grid"><h2>The grid</h2><p>(N/128, B, H).</p></section>
</main></body></html>
"""
# The notes' own renderer's ids for note A (only A is published here): written out, not computed.
PUBLISHED = ('<section id="doc-a"><h2 id="doc-a-note-a-tiles"></h2><h3 id="doc-a-1-first-section"></h3>'
             '<h4 id="doc-a-1-1-dq-accum-detail"></h4><h3 id="doc-a-2-second-section"></h3>'
             '<h3 id="doc-a-2-second-section-2"></h3></section>')


def _note_anchor(path: str, text: str, slug: str) -> dict[str, Any]:
    return {"source": "fa-notes", "path": path, "heading": slug, "sha256": find_section(text, slug).sha256}


def _slide_anchor(n: int) -> dict[str, Any]:
    return {"source": "fa-notes", "path": "docs/slides/d.html", "slide": n, "sha256": slides(DECK)[n - 1].sha256}


def _claim(cid: str, anchors: list[dict[str, Any]], **over: Any) -> dict[str, Any]:
    base = {"id": cid, "statement": f"Our statement of {cid}.", "generation": "FA2", "phase": "forward",
            "topics": ["tiling"], "label": "mathematical", "anchors": anchors,
            "checks": [{"verifier": "arith.eval", "params": {"expr": "2 + 2"}, "expect": {"value": {"equals": 4}}}]}
    base.update(over)
    return base


def _wrong(expect: int) -> list[dict[str, Any]]:
    return [{"verifier": "arith.eval", "params": {"expr": "2 + 2"}, "expect": {"value": {"equals": expect}}}]


A, B = "docs/notes/a.md", "docs/notes/b.md"
CLAIMS = [
    _claim("t.a.wrong", [_note_anchor(A, NOTE_A, "1-first-section")], checks=_wrong(5),
           cause={"kind": "note", "why": "The note says five; two plus two is four (a test finding)."}),
    _claim("t.a.fix", [_note_anchor(A, NOTE_A, "1-first-section")], supersedes=["t.a.wrong"]),
    _claim("t.a.two-places", [_note_anchor(A, NOTE_A, "11-dq_accum-detail"), _note_anchor(A, NOTE_A, "2-second-section-1")]),
    _claim("t.b.review", [_note_anchor(B, NOTE_B, "only-section")], checks=[], review="a reading task"),
    _claim("t.d.wrong", [_slide_anchor(2)], checks=_wrong(6), disagrees_with=["t.a.fix"],
           cause={"kind": "deck", "why": "The deck says six; the note and the code say four (a test finding)."}),
    _claim("t.d.title", [_slide_anchor(1), _slide_anchor(3)]),
]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("readers")
    notes = tmp / "notes"
    sha = commit_files(notes, {A: NOTE_A, B: NOTE_B, "docs/slides/d.html": DECK, "docs/notes.html": PUBLISHED})
    proj = tmp / "proj"
    shutil.copytree(ROOT / "sources", proj / "sources")
    (proj / "sources" / "notes.yaml").write_text(yaml.safe_dump({"sources": [
        {"id": "fa-notes", "kind": "notes", "repo": "https://github.com/example/notes", "commit": sha, "site": SITE}]}))
    (proj / "claims").mkdir()
    (proj / "claims" / "x.yaml").write_text(yaml.safe_dump({"claims": CLAIMS}, sort_keys=False))
    t = "2026-11-30T10:00:00+00:00"
    runs = [_run(c, "refutes" if c["id"].endswith("wrong") else "supports", "cpu", {"value": (4, "")}, t)
            for c in CLAIMS if c["checks"]]
    (proj / "evidence" / "cpu").mkdir(parents=True)
    (proj / "evidence" / "cpu" / "runs.json").write_text(json.dumps({"format": 1, "runs": runs}))
    (proj / "kb.local.toml").write_text(f'[clones]\nfa-notes = "{notes}"\n')
    return proj


@pytest.fixture(scope="module")
def site(project: Path) -> Path:
    cfg = load_config(root=project, db=str(project / "kb.db"))
    out = project / "site"
    build_site(open_index(cfg).db, cfg, out)
    return out


class _Page(HTMLParser):
    """Links, ids, and which claim links sit inside which element with a sec-/slide- id."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.ids: set[str] = set()
        self.places: dict[str, list[str]] = {}  # place id -> claim ids linked inside it, in order
        self._stack: list[tuple[str, str | None]] = []
        self.in_link: list[bool] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"] or "")
        place = a.get("id") if tag in ("section", "li") and re.match(r"^(sec|slide)-", a.get("id") or "") else None
        if place:
            self.places[place] = []
        self._stack.append((tag, place))
        if tag == "a" and a.get("href"):
            href = a["href"] or ""
            self.hrefs.append(href)
            m = re.match(r"^(?:\.\./)?claims/([^/]+)\.html$", href)
            inner = next((p for _, p in reversed(self._stack) if p), None)
            if m and inner and "cid" in (a.get("class") or ""):
                self.places[inner].append(m.group(1))

    def handle_endtag(self, tag: str) -> None:
        while self._stack:
            t, _ = self._stack.pop()
            if t == tag:
                break


def _parse(path: Path) -> _Page:
    p = _Page()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def _expected(claims: list[dict[str, Any]]) -> tuple[dict[tuple[str, str], list[str]], dict[tuple[str, int], list[str]]]:
    """From the records: claim ids per (note path, heading slug) and per (deck path, slide), in file order."""
    heads: dict[tuple[str, str], list[str]] = {}
    decks: dict[tuple[str, int], list[str]] = {}
    for c in claims:
        for a in c.get("anchors", []):
            if a.get("source") != "fa-notes":
                continue
            if a.get("slide"):
                decks.setdefault((a["path"], int(a["slide"])), []).append(c["id"])
            elif a.get("heading"):
                heads.setdefault((a["path"], a["heading"]), []).append(c["id"])
    return heads, decks


def _page_of(path: str) -> str:
    stem = Path(path).stem
    if path.startswith("docs/slides/"):
        return f"decks/{stem}.html"
    if path.startswith("docs/notes/"):
        return f"notes/{stem}.html"
    return "notes/repo-" + path.removesuffix(".md").replace("/", "-") + ".html"


def _check_placement(site: Path, claims: list[dict[str, Any]]) -> int:
    """Every anchored claim is listed under its section or slide, once, and nowhere else on that page."""
    heads, decks = _expected(claims)
    pages: dict[str, _Page] = {}
    checked = 0
    for (path, key), ids in [*heads.items(), *decks.items()]:
        page = _page_of(path)
        parsed = pages.setdefault(page, _parse(site / page))
        place = f"slide-{key}" if isinstance(key, int) else f"sec-{key}"
        assert place in parsed.places, f"{page}: no {place} for {ids}"
        got = parsed.places[place]
        assert sorted(set(got)) == sorted(set(ids)) and len(got) == len(set(got)), f"{page}#{place}: {got} != {ids}"
        checked += len(ids)
    return checked


def test_one_page_per_note_and_deck_in_order(site: Path) -> None:
    assert (site / "notes" / "a.html").is_file() and (site / "notes" / "b.html").is_file()
    assert (site / "decks" / "d.html").is_file()
    a = (site / "notes" / "a.html").read_text()
    # Sections in the note's order, by heading (markup dropped), with the repeated heading's GitHub slug.
    order = [m for m in re.findall(r'<section class="note-section lvl-\d" id="(sec-[^"]+)"', a)]
    assert order == ["sec-note-a-tiles", "sec-1-first-section", "sec-11-dq_accum-detail", "sec-2-second-section",
                     "sec-2-second-section-1"]
    assert "1.1 dq_accum Detail" in a
    # Headings and our statements only: none of the note's text.
    for text in ("Intro text", "a sentence only the note holds", "Inner detail", "A repeated heading"):
        assert text not in a
    d = (site / "decks" / "d.html").read_text()
    assert re.findall(r'<li class="slide-item" id="(slide-\d+)"', d) == ["slide-1", "slide-2", "slide-3"]
    assert "Deck title" in d and "Tile shapes" in d and "4 warps" not in d
    index = (site / "notes.html").read_text()
    assert 'href="notes/a.html"' in index and 'href="notes/b.html"' in index and 'href="decks/d.html"' in index


def test_every_anchored_claim_is_under_its_section_or_slide(site: Path) -> None:
    assert _check_placement(site, CLAIMS) == 8


def test_links_to_the_notes_and_the_slides(site: Path) -> None:
    a = (site / "notes" / "a.html").read_text()
    # The published site only where its notes.html has the id; GitHub at the pin always.
    assert f'href="{SITE}notes.html#doc-a-1-first-section"' in a and f'href="{SITE}notes.html#doc-a-2-second-section-2"' in a
    assert re.search(r'href="https://github.com/example/notes/blob/[0-9a-f]{40}/docs/notes/a.md#11-dq_accum-detail"', a)
    b = (site / "notes" / "b.html").read_text()
    assert f"{SITE}notes.html" not in b  # note B is not on the published page: no link that would go nowhere
    d = (site / "decks" / "d.html").read_text()
    assert [f"{SITE}slides/d.html#{n}" for n in (1, 2, 3)] == re.findall(rf'href="({re.escape(SITE)}slides/d.html#\d+)"', d)[1:]
    claim = (site / "claims" / "t.d.wrong.html").read_text()
    assert f'href="{SITE}slides/d.html#2"' in claim and 'href="../decks/d.html#slide-2"' in claim
    # Slide links everywhere carry #N: a link to a deck is to its slide, or it is labelled as its source.
    for page in site.rglob("*.html"):
        for m in re.finditer(r'<a [^>]*href="([^"]*slides/[^"#]+\.html[^"]*)"[^>]*>([^<]*)<', page.read_text()):
            url, text = m.groups()
            assert re.search(r"#\d+$", url) or ("github.com" in url and "source" in text), (page.name, url, text)
    # Claim pages link back to their section and slide on our pages.
    two = (site / "claims" / "t.a.two-places.html").read_text()
    assert 'href="../notes/a.html#sec-11-dq_accum-detail"' in two and 'href="../notes/a.html#sec-2-second-section-1"' in two


def test_links_resolve(site: Path) -> None:
    """The site's link check over the new pages: every relative link and fragment lands."""
    parsed = {p: _parse(p) for p in site.rglob("*.html")}
    for page, p in parsed.items():
        for href in p.hrefs:
            if href.startswith("https://"):
                continue
            path, _, frag = href.partition("#")
            target = (page.parent / path).resolve() if path else page
            assert target.is_file(), f"{page.relative_to(site)}: broken {href}"
            if frag and target.suffix == ".html" and target.name != "claims.html":
                assert frag in parsed[target].ids, f"{page.relative_to(site)}: no #{frag} in {target.name}"


def test_claim_page_opens_with_verdict_cause_correction_and_location(site: Path) -> None:
    page = (site / "claims" / "t.a.wrong.html").read_text()
    top = page.split('<section class="verdict-box"', 1)[1].split("</section>", 1)[0]
    assert "refuted" in top and 'href="../glossary.html#cause-note"' in top and "a test finding" in top
    assert "Superseded by" in top and 'href="t.a.fix.html"' in top
    assert 'href="../notes/a.html#sec-1-first-section"' in top
    assert page.index("verdict-box") < page.index("<h2>Status per hardware class</h2>")
    deck = (site / "claims" / "t.d.wrong.html").read_text().split('<section class="verdict-box"', 1)[1]
    assert "Disagrees with" in deck.split("</section>", 1)[0] and 'href="t.a.fix.html"' in deck


def test_glossary_is_linked_from_every_status_grade_and_cause(site: Path) -> None:
    gloss = _parse(site / "glossary.html").ids
    for word in ("verified", "refuted", "inconclusive", "stale", "unverified", "needs-hardware", "review-only"):
        assert f"status-{word}" in gloss
    assert {"grade-measured", "grade-derived", "grade-cited", "grade-restated", "cause-note", "cause-deck",
            "cause-unbound", "rests-rests-on", "rests-refuted"} <= gloss
    for page in site.rglob("*.html"):
        text = page.read_text()
        if page.name == "glossary.html":
            continue
        # A badge, grade or cause is a link to its entry unless it sits inside another link.
        for cls in re.findall(r'<span class="(badge|grade|cause)\b', text):
            assert cls == "badge", (page.name, cls)  # grades and causes are always links
        for m in re.finditer(r'<a class="(badge|grade|cause)[^"]*" href="([^"]+)"', text):
            assert "glossary.html#" in m.group(2), (page.name, m.group(0))
            assert m.group(2).split("#")[1] in gloss, (page.name, m.group(2))
        # A status badge that is not a link sits inside a link (a dashboard tile, a generation's status line).
        for m in re.finditer(r'<span class="badge st-', text):
            before = text[: m.start()]
            assert before.rfind("<a ") > before.rfind("</a>"), f"{page.name}: an unlinked badge outside a link"


def test_errata_page_groups_findings_by_section_and_slide(site: Path) -> None:
    page = (site / "errata.html").read_text()
    assert "2 findings" in page
    by_note = page.split('id="by-note"', 1)[1].split('id="by-deck"', 1)[0]
    assert 'href="notes/a.html#sec-1-first-section"' in by_note and 'href="claims/t.a.wrong.html"' in by_note
    assert 'href="claims/t.a.fix.html"' in by_note  # what is true instead
    assert f'href="{SITE}notes.html#doc-a-1-first-section"' in by_note
    by_deck = page.split('id="by-deck"', 1)[1]
    assert 'href="decks/d.html#slide-2"' in by_deck and f'href="{SITE}slides/d.html#2"' in by_deck
    assert 'href="claims/t.d.wrong.html"' in by_deck and 'href="claims/t.a.fix.html"' in by_deck
    index = (site / "index.html").read_text()
    assert 'href="errata.html"' in index and "2 findings" in index
    for page_name in ("index.html", "notes/a.html", "claims/t.a.fix.html"):
        nav = (site / page_name).read_text().split('<nav aria-label="Site">', 1)[1].split("</nav>", 1)[0]
        assert all(f"{name}.html" in nav for name in ("notes", "errata", "glossary")), page_name


def test_without_a_clone_every_anchored_claim_still_has_a_place(project: Path, tmp_path: Path) -> None:
    """No clone of the notes: the outline comes from the anchors, every claim is placed, and the pages say so."""
    proj = tmp_path / "proj"
    shutil.copytree(project, proj, ignore=shutil.ignore_patterns("site", "kb.db*"))
    (proj / "kb.local.toml").unlink()
    cfg = load_config(root=proj, db=str(proj / "kb.db"))
    cfg.clone_cache = tmp_path / "no-cache"
    out = tmp_path / "site"
    build_site(open_index(cfg).db, cfg, out)
    assert _check_placement(out, CLAIMS) == 8
    assert "no local clone of fa-notes" in (out / "notes" / "a.html").read_text()


def test_upstream_notice_is_worded_for_the_pin_role() -> None:
    src = {"code": {"kind": "repo", "pins": {"v1": "a" * 40, "now": "b" * 40}, "tracking": ["now"]}}

    def claim(text: str, sha: str) -> dict[str, Any]:
        return {"overall": {"upstream": text}, "anchors": [{"source": "code", "sha": sha}]}

    fixed = upstream_notice(claim("upstream changed since the pin: code@aaaaaaaaaa x.cu:1-2 edited at cc", "a" * 40), src)
    moved = upstream_notice(claim("upstream changed since the pin: code@bbbbbbbbbb x.cu:1-2 moved at cc", "b" * 40), src)
    assert fixed == {"text": fixed["text"], "fixed": True, "tracking": False}
    assert moved is not None and moved["tracking"] and not moved["fixed"]
    assert upstream_notice({"overall": {"upstream": None}, "anchors": []}, src) is None


def test_published_ids_match_the_notes_site_at_the_pin() -> None:
    """The notes' renderer's heading ids, restated in outline.published_ids, against docs/notes.html at the pin."""
    from kb.pinned.git import GitRepo
    from kb.pinned.notes import sections

    cfg = load_config(ROOT)
    src = yaml.safe_load((ROOT / "sources" / "notes.yaml").read_text())["sources"][0]
    clone = cfg.clones.get("fa-notes") or next((str(p) for p in (cfg.clone_cache / "fa-notes",) if p.exists()), None)
    if not clone:
        pytest.skip("needs a clone of fa-notes (kb sources fetch fa-notes)")
    with GitRepo(clone) as repo:
        ids = set(re.findall(r'\bid="([^"]+)"', repo.read(src["commit"], "docs/notes.html").decode()))
        names = [n for n in repo.git("ls-tree", "--name-only", src["commit"], "docs/notes/").split() if n.endswith(".md")]
        n = 0
        for name in names:
            secs = sections(repo.read(src["commit"], name).decode())
            got = published_ids(name, [s.title for s in secs])
            assert set(got) <= ids, (name, sorted(set(got) - ids)[:3])
            n += len(got)
    assert len(names) == 13 and n > 300


def test_real_corpus_notes_and_decks(tmp_path: Path) -> None:
    """The real corpus: a page per note (12 and the reading guide) and per deck (8); every claim with a note or
    slide anchor is under its section or slide, computed from the claim files."""
    from kb.export.site.build import _reader_pages, _Writer, environment, notes_outline, site_dir
    from kb.export.site.data import load_site

    cfg = load_config(ROOT)
    data = load_site(open_index(cfg).db)
    outline = notes_outline(cfg, data)
    if not outline.complete:
        pytest.skip(f"needs a clone of fa-notes at the pin: {outline.why}")
    out = tmp_path / "site"
    out.mkdir()
    _reader_pages(open_index(cfg).db, data, outline, environment(site_dir(cfg) / "templates"), _Writer(out, tmp_path / "none"))
    # The 12 notes and the reading guide (docs/notes/README.md), each with claims; the anchored repository files.
    assert len([p for p in (out / "notes").glob("*.html") if not p.name.startswith("repo-")]) == 13
    assert {p.name for p in (out / "notes").glob("repo-*.html")} == {"repo-PROVENANCE.html", "repo-STATUS.html"}
    assert len(list((out / "decks").glob("*.html"))) == 8
    claims = [c for f in sorted((ROOT / "claims").glob("*.yaml")) for c in yaml.safe_load(f.read_text())["claims"]]
    checked = _check_placement(out, claims)
    assert checked > 3000, checked
    print(f"{checked} claim placements checked on {len(list(out.rglob('*.html')))} reader pages")


PAGES = {"errata": "errata.html", "note": "notes/a.html", "deck": "decks/d.html", "claim": "claims/t.a.wrong.html",
         "notes index": "notes.html", "glossary": "glossary.html"}


def test_reader_pages_in_chromium_with_axe(site: Path, browser: Any) -> None:  # noqa: F811
    """At 1440 and 390 px: axe-core finds nothing, no page scrolls sideways on the phone."""
    why = _fetch_axe()
    if why:
        pytest.skip(f"needs axe-core: {why}")
    script = AXE.read_text(encoding="utf-8")
    browser.set_script_timeout(120)
    report, wide = {}, {}
    try:
        for width in (1440, 390):
            browser.set_window_size(width, 900)
            for kind, page in PAGES.items():
                browser.get((site / page).as_uri())
                if width == 390:
                    got = browser.execute_script(OVERFLOW)
                    if got["scroll"] > got["client"] or got["wide"]:
                        wide[kind] = got
                browser.execute_script(script)
                report[f"{kind} @{width}"] = browser.execute_async_script(
                    "const done = arguments[arguments.length - 1];"
                    "axe.run(document, {resultTypes: ['violations']}).then(r => done(r.violations.map(v => "
                    "[v.id, v.nodes.length, v.nodes.slice(0, 3).map(n => n.target.join(' '))])),"
                    " e => done([['error', 0, [String(e)]]]));")
    finally:
        browser.set_window_size(1280, 1800)
    assert not wide, wide
    bad = {k: v for k, v in report.items() if v}
    assert not bad, json.dumps(bad, indent=1)


def test_matrix_keeps_the_status_in_view_on_a_phone(site: Path, browser: Any) -> None:  # noqa: F811
    """At 390 px the hardware matrix scrolls sideways inside its region; the claim and its overall status stay."""
    browser.set_window_size(390, 900)
    try:
        browser.get((site / "matrix.html").as_uri())
        # The fixture has one hardware class; the real matrix has several: widen the table as they would.
        got = browser.execute_script("""
            document.querySelector('table.matrix').style.minWidth = '1400px';
            const region = document.querySelector('.scroll'); region.scrollLeft = region.scrollWidth;
            const cell = document.querySelector('table.matrix tbody tr td:nth-child(2)').getBoundingClientRect();
            const head = document.querySelector('table.matrix tbody tr th').getBoundingClientRect();
            return {scrolled: region.scrollLeft, left: cell.left, right: cell.right, head: head.left,
                    width: document.documentElement.clientWidth};""")
    finally:
        browser.set_window_size(1280, 1800)
    assert got["scrolled"] > 0, got  # the table is wider than the phone
    assert 0 <= got["head"] and got["right"] <= got["width"], got  # both sticky columns still on screen
