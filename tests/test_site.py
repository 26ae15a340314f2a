"""The static site: links resolve, nothing comes from another host, claim text is inert, the list filters in a browser."""

from __future__ import annotations

import copy
import functools
import json
import re
import shutil
import threading
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from kb.config import load_config
from kb.export.site.build import build_site
from kb.index.store import open_index
from kb.records.models import Claim, Run
from kb.verify.registry import load_verifiers

ROOT = Path(__file__).resolve().parent.parent
SHOTS = Path("/tmp/kb-shots")
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
EVIL = "Tiles <script>alert(1)</script> and a link javascript:alert(1) in the statement text"
H200 = "NVIDIA H200 sm_90"
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _base_claim() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "claims" / "gpu-h200.yaml").read_text())
    base = next(c for c in data["claims"] if c["id"] == "h200.fa2.fwd.bitwise-repeatable")
    # Relations point into the full corpus, which this small project does not have.
    return {k: v for k, v in base.items() if k not in ("depends_on", "refines", "supersedes")}


def _claims() -> list[dict[str, Any]]:
    base = _base_claim()
    note = base["anchors"][0]
    out = [{**copy.deepcopy(base), "id": "t.fa2.fwd-repeatable"}]
    out.append({
        "id": "t.fa2.evil", "statement": EVIL, "generation": "FA2", "phase": "forward", "topics": ["determinism"],
        "label": "inferred", "scope": {"arch": "<b>sm_90</b>"},
        "anchors": [note, {"source": "evil-web", "note": "javascript:alert(2)"}],
        "checks": [], "review": "<img src=x onerror=alert(1)> reading task", "depends_on": ["t.fa2.fwd-repeatable"],
    })
    for i, gen in enumerate(["FA1", "FA1", "FA3", "FA3", "FA3", "FA4", "cross"]):
        out.append({
            "id": f"t.{gen.lower()}.filler-{i}", "statement": f"Filler claim number {i} about {gen} tiling and memory traffic.",
            "generation": gen, "phase": "both", "topics": ["tiling"], "label": "mathematical",
            "anchors": [note, {"source": "fa2-paper", "section": "3.1", "figure": "2"}],
            "checks": [], "review": "reading task",
        })
    # A deck's version of a fact that the note states differently (issue #18): slide anchor + disagreement.
    out[-1]["anchors"].append({"source": "fa-notes", "path": "docs/slides/fa2-forward.html", "slide": 3,
                               "sha256": "ab" * 32})
    out[-1]["disagrees_with"] = ["t.fa3.filler-4"]
    return out


def _run(claim: dict[str, Any]) -> dict[str, Any]:
    """A supporting H200 run for the first check of `claim`, made current (right hashes, right id)."""
    model = Claim.model_validate(claim)
    check = model.checks[0]
    run = Run(
        claim_id=model.id, claim_hash=model.content_hash(), check_index=0, verifier=check.verifier,
        verifier_hash=load_verifiers(ROOT / "verifiers")[check.verifier].code_hash(), params=check.params,
        expect={k: v.model_dump(by_alias=True, exclude_none=True) for k, v in check.expect.items()},
        verdict="supports", reason="1 distinct O over 20 repeats", hardware_class=H200,
        measurements={"distinct_o": {"value": 1, "unit": "tensors"}, "ms_per_call": {"value": 1.2345678, "unit": "ms"}},
        environment={"gpu": {"name": "NVIDIA H200"}, "torch": "2.11.0+cu130", "kernels": ["flash_fwd_kernel<Flash_fwd_traits>"]},
        started="2026-11-29T12:00:00+00:00", duration_s=3.5,
    )
    run.run_id = run.compute_id()
    return run.model_dump(mode="json")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small real project (the real sources, a few claims, one H200 run), indexed and exported."""
    proj = tmp_path_factory.mktemp("proj")
    shutil.copytree(ROOT / "sources", proj / "sources")
    (proj / "sources" / "evil.yaml").write_text(yaml.safe_dump({"sources": [
        {"id": "evil-web", "kind": "web", "url": "javascript:alert(1)", "title": "<b>evil</b> page"}]}))
    (proj / "claims").mkdir()
    claims = _claims()
    (proj / "claims" / "x.yaml").write_text(yaml.safe_dump({"claims": claims}, sort_keys=False))
    (proj / "evidence" / "h200").mkdir(parents=True)
    (proj / "evidence" / "h200" / "run.json").write_text(json.dumps({"format": 1, "runs": [_run(claims[0])]}))
    cfg = load_config(root=proj, db=str(proj / "kb.db"))
    out = proj / "site"
    n = build_site(open_index(cfg).db, cfg, out)
    # dashboard, claims, claims-all, matrix, generations, graph, sources, measurements; notes index, errata, glossary; the one
    # note and the one deck the claims anchor (no clone of the notes here: the outline comes from the anchors);
    # a page per claim
    assert n == 8 + 3 + 2 + len(claims)
    return out


class _Refs(HTMLParser):
    """Every (tag, attribute, value) that points somewhere, and every id."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[tuple[str, str, str]] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for k, v in attrs:
            if k in ("href", "src", "action", "srcset", "poster", "data") and v is not None:
                self.refs.append((tag, k, v))
            if k == "id" and v:
                self.ids.add(v)


def _parse(path: Path) -> _Refs:
    p = _Refs()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def test_links_resolve_and_nothing_external(site: Path) -> None:
    pages = sorted(site.rglob("*.html"))
    assert (site / ".nojekyll").exists() and (site / "claims.json").exists()
    assert {p.name for p in pages} >= {"index.html", "claims.html", "claims-all.html", "sources.html", "generations.html",
                                       "matrix.html", "graph.html", "notes.html", "errata.html", "glossary.html",
                                       "current-implementation-and-determinism.html", "fa2-forward.html"}
    parsed = {p: _parse(p) for p in pages}
    external = 0
    for page, refs in parsed.items():
        for tag, attr, value in refs.refs:
            where = f"{page.relative_to(site)}: <{tag} {attr}={value!r}>"
            if value.startswith("https://"):
                assert tag == "a" and attr == "href", f"only plain links may leave the site: {where}"
                external += 1
                continue
            if value == "data:," and tag == "link":
                continue  # the empty favicon, so browsers do not ask for /favicon.ico
            assert not SCHEME.match(value) and not value.startswith("//"), f"absolute or scripted URL: {where}"
            path, _, frag = value.partition("#")
            target = (page.parent / path).resolve() if path else page
            assert target.is_file(), f"broken link: {where}"
            if frag and target.suffix == ".html" and target.name != "claims.html":
                assert frag in parsed[target].ids, f"no #{frag} in {target.name}: {where}"
    assert external > 0  # provenance permalinks exist
    for f in (site / "static").iterdir():
        text = f.read_text()
        assert "http://" not in text and "https://" not in text and "@import" not in text, f
    assert len((site / "index.html").read_bytes()) <= 1 << 20


def test_provenance_and_evidence_on_claim_page(site: Path) -> None:
    page = (site / "claims" / "t.fa2.fwd-repeatable.html").read_text()
    notes = "https://github.com/zyeric/fa-notes/blob/5cd99800d4cc22da918f8e4609a6fc3a454fca82/"
    assert notes + "docs/notes/current-implementation-and-determinism.md#forward" in page
    for text in ("gpu.bitwise-repeat", "distinct_o = 1", "NVIDIA H200", "2.11.0+cu130", "flash_fwd_kernel&lt;Flash_fwd_traits&gt;",
                 "1.23457", "tensors", H200, "verified", "depended on by", "t.fa2.evil.html"):
        assert text in page, text
    filler = (site / "claims" / "t.fa1.filler-0.html").read_text()
    assert 'href="https://arxiv.org/abs/2307.08691v1"' in filler and "section 3.1, figure 2" in filler
    index = json.loads((site / "claims.json").read_text())
    assert {c["id"] for c in index["claims"]} >= {"t.fa2.evil", "t.fa2.fwd-repeatable"}
    assert H200 in (site / "index.html").read_text() and "<svg" in (site / "index.html").read_text()


def test_claim_text_is_inert(site: Path) -> None:
    page = (site / "claims" / "t.fa2.evil.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page and "&lt;b&gt;sm_90&lt;/b&gt;" in page
    for html in site.rglob("*.html"):
        text = html.read_text()
        assert "<script>alert" not in text and "<img src=x" not in text and "<b>evil" not in text, html
        for _, _, value in _parse(html).refs:
            assert "javascript:" not in value.lower(), (html, value)
    assert "<" not in (site / "claims-index.js").read_text().partition("=")[2]


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Headless Chromium through Selenium, with the browser console captured."""
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.skip("needs /usr/bin/chromium and /usr/bin/chromedriver (apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium')}", "--window-size=1280,1800"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)
    yield driver
    driver.quit()


def _severe(driver: Any) -> list[dict[str, Any]]:
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def _resources(driver: Any) -> list[str]:
    """Every URL the page loaded (documents excluded)."""
    return driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")


def _visible_rows(driver: Any) -> int:
    return driver.execute_script("return [...document.querySelectorAll('#claims tbody tr')].filter(r => !r.hidden).length")


def test_in_browser(site: Path, browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    SHOTS.mkdir(parents=True, exist_ok=True)
    browser.get((site / "index.html").as_uri())
    assert browser.find_element(By.TAG_NAME, "h1").text == "Dashboard"
    assert not _severe(browser)
    assert all(u.startswith("file://") for u in _resources(browser)), _resources(browser)
    browser.save_screenshot(str(SHOTS / "test-dashboard.png"))

    browser.get((site / "claims.html").as_uri())
    wait = WebDriverWait(browser, 10)
    wait.until(lambda d: d.find_element(By.ID, "filters").is_displayed())
    total = len(_claims())
    assert _visible_rows(browser) == total
    browser.find_element(By.ID, "q").send_keys("filler tiling")
    wait.until(lambda d: _visible_rows(d) == total - 2)
    assert "7 of 9" in browser.find_element(By.ID, "count").text
    Select(browser.find_element(By.ID, "f-generation")).select_by_value("FA3")
    wait.until(lambda d: _visible_rows(d) == 3)
    assert "generation=FA3" in browser.current_url
    browser.find_element(By.ID, "q").clear()
    Select(browser.find_element(By.ID, "f-generation")).select_by_value("FA2")
    wait.until(lambda d: _visible_rows(d) == 2)
    # Search covers review reasons, and '_' '-' '.' separate words as in the CLI's full-text search.
    Select(browser.find_element(By.ID, "f-generation")).select_by_value("")
    browser.find_element(By.ID, "q").send_keys("filler_claim")
    wait.until(lambda d: _visible_rows(d) == 7)
    browser.find_element(By.ID, "q").clear()
    browser.find_element(By.ID, "q").send_keys("reading task")
    wait.until(lambda d: _visible_rows(d) == 8)
    browser.find_element(By.ID, "q").clear()
    Select(browser.find_element(By.ID, "f-generation")).select_by_value("FA2")
    wait.until(lambda d: _visible_rows(d) == 2)
    assert not _severe(browser)
    assert all(u.startswith("file://") for u in _resources(browser)), _resources(browser)

    link = next(a for a in browser.find_elements(By.CSS_SELECTOR, "#claims tbody tr a.cid") if a.is_displayed())
    cid = link.text
    link.click()
    wait.until(lambda d: d.current_url.endswith(f"claims/{cid}.html"))
    assert browser.find_element(By.TAG_NAME, "h1").text == cid
    assert not _severe(browser)

    browser.get((site / "claims" / "t.fa2.evil.html").as_uri())
    assert EVIL in browser.find_element(By.CLASS_NAME, "statement").text  # shown as text, not run
    browser.get((site / "claims.html").as_uri() + "#status=verified&hardware=" + H200.replace(" ", "%20"))
    wait.until(lambda d: _visible_rows(d) == 1)
    browser.get((site / "claims" / "t.fa2.fwd-repeatable.html").as_uri())
    browser.save_screenshot(str(SHOTS / "test-claim.png"))
    assert not _severe(browser)


def test_served_over_http_uses_claims_json(site: Path, browser: Any) -> None:
    """As on GitHub Pages: the list loads claims.json with fetch() and nothing from another host."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(site))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}/"
        browser.get(base + "claims.html#topic=tiling")
        WebDriverWait(browser, 10).until(lambda d: d.find_element(By.ID, "filters").is_displayed())
        WebDriverWait(browser, 10).until(lambda d: _visible_rows(d) == 7)
        loaded = _resources(browser)
        assert base + "claims.json" in loaded and all(u.startswith(base) for u in loaded), loaded
        assert not _severe(browser)
    finally:
        server.shutdown()


def test_dashboard_shows_changes_since_previous_export(site: Path) -> None:
    index = (site / "index.html").read_text(encoding="utf-8")
    assert "No earlier export in this folder" in index  # the first build has nothing to compare with
    proj = site.parent
    # Drop the evidence (a status moves) and add a claim, then export into the same folder again.
    shutil.rmtree(proj / "evidence")
    data = yaml.safe_load((proj / "claims" / "x.yaml").read_text())
    data["claims"].append({**copy.deepcopy(data["claims"][0]), "id": "t.fa2.fwd-new-claim"})
    (proj / "claims" / "x.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    cfg = load_config(root=proj, db=str(proj / "kb.db"))
    build_site(open_index(cfg).db, cfg, site)
    index = (site / "index.html").read_text(encoding="utf-8")
    assert "1 new claim(s), 0 removed, 1 status change(s)" in index
    assert 'href="claims/t.fa2.fwd-new-claim.html"' in index
    assert 'href="claims/t.fa2.fwd-repeatable.html"' in index


def test_dashboard_names_its_commit_and_groups_waiting_claims(project: Path, tmp_path: Path) -> None:
    """The dashboard says which commit it was exported from; waiting claims are grouped by the hardware they need."""
    from kb.export.site.data import pending_hardware
    from tests.conftest import git

    cfg = load_config(project)
    out = tmp_path / "site"
    build_site(open_index(cfg).db, cfg, out)
    assert "Exported outside a git checkout" in (out / "index.html").read_text()
    git(project, "init", "-q")
    git(project, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    git(project, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "corpus")
    sha = git(project, "rev-parse", "HEAD")
    build_site(open_index(cfg).db, cfg, out)
    assert f"Exported from commit <code>{sha[:12]}</code>" in (out / "index.html").read_text()

    def waiting(reason: str) -> dict:
        return {"overall": {"status": "needs-hardware", "reason": reason}}

    groups = pending_hardware([
        waiting("check 0 (gpu.profile) needs CUDA sm_80"), waiting("needs sm_80: time FA2 against FA1"),
        waiting("needs sm_90a running hopper/"), waiting("needs sm_80 or sm_90: compare bits"),
        waiting("Rubin hardware (none available)"), {"overall": {"status": "verified", "reason": ""}},
    ])
    assert [(g, n) for g, n, _ in groups] == [("Ampere (sm_80, A100)", 2), ("Hopper (sm_90, H100/H200)", 1),
                                              ("Rubin (not yet available)", 1), ("any of Ampere, Hopper", 1)]
    assert dict(groups[0][2]) == {"CUDA sm_80": 1, "sm_80": 1}


def test_sources_page_counts_claims_that_use_a_hardware_sheet(project: Path, tmp_path: Path) -> None:
    """A hardware sheet is read by checks, not cited by anchors: the sources page says how many claims use it."""
    from tests.conftest import claim, write_claims

    check = {"verifier": "arith.eval", "params": {"expr": "H100.sm_count"}, "expect": {"value": {"equals": 132}}}
    write_claims(project, "hw", [claim("test.hw.sms", statement="The H100 SXM5 has 132 SMs.", checks=[check])])
    cfg = load_config(project)
    out = tmp_path / "site"
    build_site(open_index(cfg).db, cfg, out)
    page = (out / "sources.html").read_text()
    assert "its constants are used by the checks of 1 claim</p>" in page
    claim_page = (out / "claims" / "test.hw.sms.html").read_text()
    assert "constants read: <code>H100.sm_count = 132</code>" in claim_page  # what a refutation would turn on


def test_a_kernel_list_is_shown_once_per_claim_page() -> None:
    from kb.export.site.build import _dedupe_kernels

    runs = [{"run_id": "a", "kernels": ["k1", "k2"]}, {"run_id": "b", "kernels": ["k1", "k2"]},
            {"run_id": "c", "kernels": ["k3"]}, {"run_id": "d", "kernels": []}]
    out = _dedupe_kernels(runs)
    assert [r.get("kernels_same_as") for r in out] == [None, "a", None, None]


def test_deck_disagreements_and_slide_anchors_are_shown(site: Path) -> None:
    """The dashboard lists each deck/note disagreement once with both statuses; claim pages link the slide."""
    index = (site / "index.html").read_text(encoding="utf-8")
    section = index.split("Deck and note disagreements", 1)[1].split("<h2", 1)[0]
    assert section.count("t.cross.filler-6") == 2 and section.count("t.fa3.filler-4") == 2  # link text + href
    page = (site / "claims" / "t.cross.filler-6.html").read_text(encoding="utf-8")
    assert "docs/slides/fa2-forward.html slide 3" in page and "disagrees with" in page
    other = (site / "claims" / "t.fa3.filler-4.html").read_text(encoding="utf-8")
    assert "disagreed with by" in other


def test_changes_compare_with_a_previous_export_handed_in(project: Path, tmp_path: Path) -> None:
    """CI builds into a fresh folder: --previous takes the published claims.json to compare with."""
    from tests.conftest import kb_subprocess as _kb

    out = tmp_path / "first"
    assert _kb(project, "export", "site", "-o", str(out)).returncode == 0
    prev = json.loads((out / "claims.json").read_text())
    prev["claims"] = [c for c in prev["claims"] if c["id"] != prev["claims"][0]["id"]]  # one claim "new" now
    (tmp_path / "prev.json").write_text(json.dumps(prev))
    fresh = tmp_path / "fresh"
    res = _kb(project, "export", "site", "-o", str(fresh), "--previous", str(tmp_path / "prev.json"))
    assert res.returncode == 0, res.stderr
    index = (fresh / "index.html").read_text()
    assert "1 new claim(s), 0 removed" in index
    missing = _kb(project, "export", "site", "-o", str(fresh), "--previous", str(tmp_path / "nope.json"))
    assert missing.returncode == 2 and "nope.json" in missing.stderr
