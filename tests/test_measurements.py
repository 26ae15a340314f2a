"""The measurements page and the dashboard's throughput chart, on the real corpus and its evidence.

What the page must list is worked out here from the evidence files and the claim files directly (every
gpu.benchmark and gpu.probe run of a check as it stands), not through kb.export.site.measurements, and
compared with the rendered page and its CSV. A headless Chromium filters and sorts the table; axe-core
checks it at 1440 and 390 px.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import yaml

from kb.config import load_config
from kb.export.site.build import _dashboard_context, environment, render_measurements, site_dir
from kb.export.site.data import load_site
from kb.index.store import open_index
from tests.test_site import browser  # noqa: F401  (the shared headless Chromium fixture)
from tests.test_site_pages import AXE, _fetch_axe

ROOT = Path(__file__).resolve().parent.parent
DECIDED = ("supports", "refutes", "inconclusive")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The real corpus indexed into a private database; the measurements page, its CSV and the dashboard."""
    tmp = tmp_path_factory.mktemp("meas")
    cfg = load_config(root=ROOT, db=str(tmp / "kb.db"))
    data = load_site(open_index(cfg).db)
    env = environment(site_dir(cfg) / "templates")
    html, table = render_measurements(data, env)
    site = tmp / "site"
    shutil.copytree(site_dir(cfg) / "static", site / "static")
    (site / "measurements.html").write_text(html, encoding="utf-8")
    (site / "measurements.csv").write_text(table, encoding="utf-8")
    # The dashboard's errata line is the reader pages' business (tests/test_site_readers.py): none here.
    dash = env.get_template("index.html").render(root="", page="index.html", changes=None, revision=None,
                                                 errata={"count": 0, "notes": [], "decks": []}, **_dashboard_context(data))
    (site / "index.html").write_text(dash, encoding="utf-8")
    return {"site": site, "html": html, "csv": table, "dashboard": dash}


def _claim_checks() -> dict[str, list[dict[str, Any]]]:
    out = {}
    for f in sorted((ROOT / "claims").glob("*.yaml")):
        for c in yaml.safe_load(f.read_text(encoding="utf-8")).get("claims") or []:
            out[c["id"]] = c.get("checks") or []
    return out


def _evidence_runs() -> list[dict[str, Any]]:
    runs = []
    for f in sorted(ROOT.glob("evidence/*/*.json")):
        if f.parent.name in ("audit", "cpu"):
            continue
        runs += json.loads(f.read_text(encoding="utf-8")).get("runs") or []
    return runs


def _expected() -> dict[tuple[str, int, str, str], Any]:
    """(claim, check, hardware class, measurement) -> the newest value, for every expectation of every
    gpu.benchmark / gpu.probe run whose check still has those parameters and that expectation."""
    checks, newest = _claim_checks(), {}
    for r in _evidence_runs():
        if r["verifier"] not in ("gpu.benchmark", "gpu.probe") or r["verdict"] not in DECIDED:
            continue
        mine = checks.get(r["claim_id"]) or []
        if r["check_index"] >= len(mine):
            continue
        ch = mine[r["check_index"]]
        if ch["verifier"] != r["verifier"] or (ch.get("params") or {}) != r["params"] or (ch.get("expect") or {}) != r["expect"]:
            continue  # a run of a check that has changed since: history, not a figure of the check as it stands
        for name in r["expect"]:
            key = (r["claim_id"], r["check_index"], r["hardware_class"], name)
            if key not in newest or r["started"] > newest[key][0]:
                newest[key] = (r["started"], r["measurements"][name]["value"])
    return {k: v for k, (_, v) in newest.items()}


class _Rows(HTMLParser):
    """The table's rows: their data-* attributes and the data-v of each cell."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, Any]] = []
        self.heads: list[str] = []
        self._in_body = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "tbody":
            self._in_body = True
        elif tag == "th" and not self._in_body and a.get("data-col"):
            self.heads.append(a["data-col"] or "")
        elif tag == "tr" and self._in_body:
            self.rows.append({**{k.removeprefix("data-"): v for k, v in a.items() if k.startswith("data-")}, "cells": []})
        elif tag in ("td", "th") and self._in_body and self.rows:
            self.rows[-1]["cells"].append(a.get("data-v"))


def _parse(html: str) -> _Rows:
    p = _Rows()
    p.feed(html)
    return p


def test_page_lists_every_benchmark_and_probe_figure(corpus: dict[str, Any]) -> None:
    expected = _expected()
    assert len(expected) >= 40, "the corpus has dozens of benchmark and probe figures"
    page = _parse(corpus["html"])
    median = page.heads.index("median")
    listed = {(r["claim"], int(r["check"]), r["hardware"], r["figure"]): r["cells"][median] for r in page.rows}
    missing = sorted(set(expected) - set(listed))
    assert not missing, f"{len(missing)} figure(s) missing from measurements.html: {missing[:5]}"
    for key, value in expected.items():
        shown = listed[key]
        if isinstance(value, bool) or not isinstance(value, int | float):
            assert shown == "", key  # a boolean or a list is shown as text, not sorted as a number
        else:
            assert float(shown) == pytest.approx(value, rel=1e-9), f"{key}: page shows {shown}, newest run {value}"
    # Nothing listed as a benchmark or probe figure that no such run measured, beyond the TFLOP/s, ratio or
    # exponent a benchmark is about (listed beside a derived expectation such as util_vs_peak).
    extra = {k for r in page.rows if r["kind"] == "benchmark" or r["kind"].startswith("probe")
             for k in [(r["claim"], int(r["check"]), r["hardware"], r["figure"])]
             if k not in expected and k[3] not in ("tflops", "time_ratio", "memory_exponent")}
    assert not extra, sorted(extra)[:5]


def test_csv_holds_the_same_rows(corpus: dict[str, Any]) -> None:
    page = _parse(corpus["html"])
    rows = list(csv.DictReader(io.StringIO(corpus["csv"])))
    assert [(r["claim"], r["check"], r["hardware"], r["figure"]) for r in rows] == \
        [(r["claim"], r["check"], r["hardware"], r["figure"]) for r in page.rows]
    assert {"median", "p20", "p80", "band", "direction", "first_run", "last_run", "pin"} <= set(rows[0])
    # A text cell never starts as a spreadsheet formula.
    assert not [v for r in rows for k, v in r.items() if k != "median" and re.match(r"[=+@]", v or "")]


def test_batches_are_the_runs_under_the_claims_current_content(corpus: dict[str, Any]) -> None:
    """A run made before the claim's scope or statement changed is history: the page does not count it as a batch."""
    from kb.records.loader import load_corpus

    current = {cid: c.content_hash() for cid, c in load_corpus(ROOT).claims.items()}
    rows = list(csv.DictReader(io.StringIO(corpus["csv"])))
    runs = _evidence_runs()
    checks = _claim_checks()
    history_seen = False
    for row in rows:
        ch = checks[row["claim"]][int(row["check"])]
        same = [r for r in runs if r["claim_id"] == row["claim"] and r["check_index"] == int(row["check"])
                and r["hardware_class"] == row["hardware"] and r["verifier"] == ch["verifier"]
                and r["params"] == (ch.get("params") or {}) and r["expect"] == (ch.get("expect") or {})
                and r["verdict"] in DECIDED]
        mine = [r for r in same if r.get("claim_hash") in (None, current[row["claim"]])]
        history_seen |= len(mine) < len(same)
        assert int(row["batches"]) == len(mine), (row["claim"], row["check"], row["figure"])
    assert history_seen  # the corpus holds such runs (fa1.causal.residual-imbalance's first H100 batch, say)


def test_rows_carry_pin_spread_band_and_direction(corpus: dict[str, Any]) -> None:
    page = _parse(corpus["html"])
    tflops = [r for r in page.rows if r["figure"] == "tflops" and r["kind"] == "benchmark"]
    assert tflops, "the corpus has TFLOP/s benchmarks"
    rows = {(r["claim"], r["check"], r["hardware"], r["figure"]): r for r in csv.DictReader(io.StringIO(corpus["csv"]))}
    for r in tflops:
        row = rows[(r["claim"], r["check"], r["hardware"], r["figure"])]
        # The spread of a TFLOP/s figure: the slow end of its timings below the median, the fast end above.
        assert row["p20"] and row["p80"], row
        assert float(row["p20"]) <= float(row["median"]) * 1.001 and float(row["median"]) <= float(row["p80"]) * 1.001, row
        assert row["band"] and row["direction"] in ("inside", "above", "below"), row
        if row["implementation"] in ("fa1-v1.0.9", "fa2-v2.0.0", "fa3-2024-08"):
            assert re.search(r"@ [0-9a-f]{12}$", row["pin"]), row  # the pinned build's source SHA
        lo, hi = float(row["batch_min"]), float(row["batch_max"])
        assert lo <= float(row["median"]) <= hi


def test_dashboard_throughput_is_coloured_by_verdict_with_spread_and_band(corpus: dict[str, Any]) -> None:
    dash = corpus["dashboard"]
    chart = dash[dash.index("<h2>Measured throughput</h2>"):]
    chart = chart[: chart.index("</svg>")]
    bars = re.findall(r'<rect class="st-([a-z-]+)" x="0"', chart)
    assert bars and set(bars) <= {"verified", "refuted", "inconclusive", "stale"}
    assert chart.count('class="chart-whisker"') >= 3 * len(bars) - 3  # three lines per whisker; spread on (nearly) all
    assert 'class="chart-band"' in chart and "p20–p80" in chart
    assert 'href="measurements.html"' in dash


def _open(driver: Any, site: Path, frag: str = "") -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get((site / "measurements.html").as_uri() + (f"#{frag}" if frag else ""))
    WebDriverWait(driver, 10).until(lambda d: d.execute_script("return document.documentElement.dataset.measReady"))


VISIBLE = ("return [...document.querySelectorAll('#meas tbody tr')].filter(r => !r.hidden).map(r => ({kind: r.dataset.kind, "
           "impl: r.dataset.implementation, claim: r.dataset.claim, median: r.cells[6].dataset.v, text: r.textContent}))")


def test_browser_filters_and_sorts(corpus: dict[str, Any], browser: Any) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    site, page = corpus["site"], _parse(corpus["html"])
    assert page.heads[6] == "median"
    _open(browser, site)
    assert len(browser.execute_script(VISIBLE)) == len(page.rows)
    # Filter: one kind, then one implementation within it.
    Select(browser.find_element(By.NAME, "kind")).select_by_value("benchmark")
    rows = browser.execute_script(VISIBLE)
    assert rows and all(r["kind"] == "benchmark" for r in rows)
    assert len(rows) == sum(1 for r in page.rows if r["kind"] == "benchmark")
    assert browser.find_element(By.ID, "meas-shown").text == str(len(rows))
    Select(browser.find_element(By.NAME, "implementation")).select_by_value("fa4")
    rows = browser.execute_script(VISIBLE)
    assert rows and all(r["impl"] == "fa4" and r["kind"] == "benchmark" for r in rows)
    assert len(rows) == sum(1 for r in page.rows if r["kind"] == "benchmark" and r["implementation"] == "fa4")
    # Sort by the median, descending (a second click): numbers in order, the header says so.
    head = browser.find_element(By.CSS_SELECTOR, 'th[data-col="median"] button')
    head.click()
    head.click()
    values = [float(r["median"]) for r in browser.execute_script(VISIBLE) if r["median"]]
    assert len(values) >= 2 and values == sorted(values, reverse=True)
    assert browser.find_element(By.CSS_SELECTOR, 'th[data-col="median"]').get_attribute("aria-sort") == "descending"
    # The view is in the fragment: reopening it gives the same rows in the same order.
    frag = browser.execute_script("return location.hash.slice(1)")
    assert "kind=benchmark" in frag and "sort=-median" in frag
    before = browser.execute_script(VISIBLE)
    _open(browser, site, frag)
    assert browser.execute_script(VISIBLE) == before
    # Search narrows within the filters; Clear shows every row again, in the page's order.
    word = before[-1]["claim"].rsplit(".", 1)[-1].split("-")[0]
    browser.find_element(By.NAME, "q").send_keys(word)
    rows = browser.execute_script(VISIBLE)
    assert rows and len(rows) <= len(before)
    assert all(word in re.sub(r"[_.-]+", " ", r["text"].lower()) for r in rows)
    browser.find_element(By.CSS_SELECTOR, "#meas-filters button[type=reset]").click()
    rows = browser.execute_script(VISIBLE)
    assert [r["claim"] for r in rows] == [r["claim"] for r in page.rows]


AXE_RUN = ("const done = arguments[arguments.length - 1];"
           "axe.run(document, {resultTypes: ['violations']}).then(r => done(r.violations.map(v => "
           "[v.id, v.nodes.length, v.nodes.slice(0, 3).map(n => n.target.join(' '))])), e => done([['error', 0, [String(e)]]]));")


def test_axe_and_phone_width(corpus: dict[str, Any], browser: Any) -> None:  # noqa: F811
    """axe-core on the measurements page and the dashboard at 1440 and 390 px; neither scrolls sideways."""
    why = _fetch_axe()
    if why:
        pytest.skip(f"needs axe-core: {why}")
    script = AXE.read_text(encoding="utf-8")
    browser.set_script_timeout(120)
    report = {}
    try:
        for width in (1440, 390):
            browser.set_window_size(width, 900)
            for page in ("measurements.html", "index.html"):
                browser.get((corpus["site"] / page).as_uri())
                wide = browser.execute_script("return [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
                assert wide[0] <= wide[1], f"{page} at {width} px scrolls sideways: {wide}"
                browser.execute_script(script)
                report[f"{page} @{width}"] = browser.execute_async_script(AXE_RUN)
    finally:
        browser.set_window_size(1280, 1800)
    bad = {k: v for k, v in report.items() if v}
    assert not bad, json.dumps(bad, indent=1)
