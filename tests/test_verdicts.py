"""Verdicts a reviewer can sign: a cause on every refuted and inconclusive verdict, by rule where the data allows.

One test per artifact kind the KB can produce on its own: a tie (a real git repository and compiled float
code against an exact rule), a band's direction, a figure reported for other hardware, and the KB's own
extraction error (which validation refuses to publish); plus the rules around them: batches that disagree,
expectations that always apply, and the statement re-read at verify time.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kb.verify.hw import find_tool
from tests.conftest import claim, commit_files, kb_subprocess, trusting, write_claims
from tests.test_evidence_trust import H200, _bench_claim, _run, _write

TIE_SRC = """#include <cmath>
// An efficiency rule in the style of the pinned split heuristics (not copied from them), in float32.
inline int pick(int bh, int cap) {
    float n1 = float(bh * 1) / 108;
    float e1 = n1 / ceilf(n1);
    float n2 = float(bh * 2) / 108;
    float e2 = n2 / ceilf(n2);
    float best = e1 > e2 ? e1 : e2;
    if (cap < 2) return 1;
    return e1 > 0.95 * best ? 1 : 2;
}
"""
# The rule as a note would state it; at bh = 1000 both sides are exactly 25/27 (1000/1080 = 0.95 * 2000/2052).
RULE = ("1 if cap < 2 or (bh / 108) / ceil(bh / 108) > 0.95 * max((bh / 108) / ceil(bh / 108), "
        "(2 * bh / 108) / ceil(2 * bh / 108)) else 2")


def _status(project: Path, cid: str, env: dict | None = None) -> dict:
    rec = json.loads(kb_subprocess(project, "show", cid, "--json", env=env).stdout)
    return next(s for s in rec["status"] if s["hardware_class"] == "*")


def _arith(cid: str, value: float, expect: dict, **over: object) -> dict:
    return claim(cid, statement="The figure reaches between 620 and 640 TFLOP/s.", label="paper-reported",
                 checks=[{"verifier": "arith.eval", "params": {"expr": str(value)}, "expect": {"value": expect}}], **over)


def test_a_disagreement_only_at_an_exact_tie_is_a_tie_not_a_refutation(project: Path, tmp_path: Path) -> None:
    if find_tool("g++") is None:
        pytest.skip("needs g++")
    up = tmp_path / "up"
    sha = commit_files(up, {"src/heur.h": TIE_SRC}, "heuristic")
    (project / "sources" / "testrepo.yaml").write_text(
        f"sources:\n  - id: testrepo\n    kind: repo\n    url: https://example.invalid/up\n    pins:\n      main: {sha}\n")
    note = claim("x")["anchors"][0]
    anchor = {"source": "testrepo", "sha": sha, "path": "src/heur.h"}

    def c(cid: str, grid: list[int]) -> dict:
        return claim(cid, statement="The heuristic picks the smaller split count within 95% of the best.",
                     label="source-backed", anchors=[note, anchor], labels=["95"],
                     checks=[{"verifier": "code.host-exec", "params": {
                         "anchor": 1, "functions": ["pick"], "call": "pick(bh, cap)", "grid": {"bh": grid, "cap": [2]},
                         "rule": RULE}, "expect": {"disagreements": {"equals": 0}}}])

    write_claims(project, "tie", [c("test.tie.at-tie", [500, 1000]), c("test.tie.clean", [500])])
    env = trusting("testrepo", sha, KB_CLONE_TESTREPO=str(up), KB_BUILD_CACHE=str(tmp_path / "build"))
    res = kb_subprocess(project, "verify", "--json", env=env)
    assert res.stdout, res.stderr
    tie = _status(project, "test.tie.at-tie", env)
    assert tie["status"] == "inconclusive" and tie["cause"] == "tie" and tie["cause_by"] == "rule", tie
    assert "exact tie" in tie["cause_why"] and "'bh': 1000" in tie["cause_why"]
    assert _status(project, "test.tie.clean", env)["status"] == "verified"


def test_a_band_refutation_says_its_direction(project: Path) -> None:
    write_claims(project, "band", [_arith("test.band.above", 650.2, {"between": [620, 640]}),
                                   _arith("test.band.below", 600, {"between": [620, 640]}),
                                   _arith("test.band.inside", 630, {"between": [620, 640]})])
    kb_subprocess(project, "verify")
    above, below = _status(project, "test.band.above"), _status(project, "test.band.below")
    assert (above["status"], above["cause"]) == ("refuted", "band-above") and "above" in above["cause_why"]
    assert (below["status"], below["cause"]) == ("refuted", "band-below") and "below" in below["cause_why"]
    inside = _status(project, "test.band.inside")
    assert inside["status"] == "verified" and inside["cause"] is None


def test_a_figure_reported_for_other_hardware_is_not_reproduced(project: Path) -> None:
    scoped = _arith("test.scope.h100", 600, {"at_least": 620}, scope={"reported_on": "H100"})
    write_claims(project, "scope", [scoped, _arith("test.scope.here", 600, {"at_least": 620})])
    kb_subprocess(project, "verify")
    elsewhere = _status(project, "test.scope.h100")
    assert elsewhere["cause"] == "not-reproduced" and "H100" in elsewhere["cause_why"], elsewhere
    assert _status(project, "test.scope.here")["cause"] == "band-below"  # the same shortfall, no other hardware named


def test_a_within_tolerance_figure_is_a_band_with_a_direction(project: Path) -> None:
    # "within ±10% of 0.75" is the band [0.675, 0.825]: 0.656 lies below it; reported for an H100, not reproduced.
    write_claims(project, "approx", [
        _arith("test.approx.h100", 0.656, {"approx": 0.75, "rel": 0.1}, scope={"reported_on": "H100"}),
        _arith("test.approx.above", 0.9, {"approx": 0.75, "rel": 0.1}),
        _arith("test.approx.inside", 0.7, {"approx": 0.75, "rel": 0.1})])
    kb_subprocess(project, "verify")
    assert _status(project, "test.approx.h100")["cause"] == "not-reproduced"
    above = _status(project, "test.approx.above")
    assert (above["status"], above["cause"]) == ("refuted", "band-above") and "0.825" in above["cause_why"], above
    assert _status(project, "test.approx.inside")["status"] != "refuted"  # (the statement's 620-640 binds nothing here)


def test_validate_requires_a_cause_and_refuses_to_publish_an_extraction(project: Path, run_kb) -> None:
    write_claims(project, "causes", [
        _arith("test.cause.none", 5, {"equals": 4}),
        _arith("test.cause.extraction", 5, {"equals": 4},
               cause={"kind": "extraction", "why": "The claim dropped a condition its source states."}),
        _arith("test.cause.judged", 5, {"equals": 4},
               cause={"kind": "note", "why": "The note states four where the arithmetic gives five."}),
    ])
    assert run_kb("verify").exit_code == 1
    res = run_kb("validate")
    assert res.exit_code == 2
    lines = [ln for ln in res.output.splitlines() if "field cause" in ln]
    assert any("test.cause.none" in ln and "record the judgement" in ln for ln in lines), res.output
    assert any("test.cause.extraction" in ln and "extraction" in ln for ln in lines), res.output
    assert not any("test.cause.judged" in ln for ln in lines)
    assert all(ln.startswith("claims/causes.yaml:") for ln in lines)
    rows = json.loads(run_kb("claims", "--status", "refuted", "--json").stdout)
    causes = {r["id"]: (r["cause"], r["cause_by"]) for r in rows if r["id"].startswith("test.cause.")}
    assert causes["test.cause.judged"] == ("note", "judgement")
    assert causes["test.cause.none"] == ("unjudged", "rule")


def test_batches_that_disagree_are_inconclusive_and_show_lists_them(project: Path, run_kb) -> None:
    c = _bench_claim()
    c["checks"][0]["expect"] = {"tflops": {"at_least": 620.0}}
    c["statement"] = "The forward pass reaches at least 620 TFLOP/s on the lent GPU."
    write_claims(project, "bench", [c])
    one = _run(project, c, measurements={"tflops": {"value": 650.2, "unit": "TFLOP/s"},
                                         "tflops_spread": {"value": [648.0, 652.0], "unit": ""}},
               verdict="supports", started="2026-11-20T10:00:00+00:00")
    _write(project, [one], stamp="20261120T100500Z", tag="aaaaaaaaaaaa")
    assert _status(project, "test.gpu.tflops")["status"] == "verified"  # one batch: it decides
    two = _run(project, c, measurements={"tflops": {"value": 601.0, "unit": "TFLOP/s"}}, verdict="refutes",
               reason="tflops = 601 (expected >= 620)", started="2026-11-21T10:00:00+00:00")
    _write(project, [two], stamp="20261121T100500Z", tag="bbbbbbbbbbbb")
    st = _status(project, "test.gpu.tflops")
    assert st["status"] == "inconclusive" and st["cause"] == "spread", st
    assert "2 batches on record disagree" in st["reason"] and "650.2" in st["reason"] and "601" in st["reason"]
    shown = run_kb("show", "test.gpu.tflops")
    assert "batches (" in shown.output and "tflops = 650.2  p20-p80 [648, 652]" in shown.output
    assert "tflops = 601" in shown.output and H200 in shown.output
    assert len(json.loads(run_kb("show", "test.gpu.tflops", "--json").stdout)["batches"]) == 2


def test_a_flipped_expectation_on_a_source_check_refutes(project: Path, tmp_path: Path) -> None:
    from kb.pinned.notes import lines_sha256

    body = b"int a;\natomicAdd(dq_accum, x);\nint b;\n"
    up = tmp_path / "src"
    sha = commit_files(up, {"k.h": body.decode()}, "k")
    (project / "sources" / "testrepo.yaml").write_text(
        f"sources:\n  - id: testrepo\n    kind: repo\n    url: https://example.invalid/src\n    pins:\n      main: {sha}\n")
    anchor = {"source": "testrepo", "sha": sha, "path": "k.h", "lines": [2, 2], "sha256": lines_sha256(body, 2, 2)[0]}

    def c(cid: str, found: bool) -> dict:
        return claim(cid, label="source-backed", anchors=[claim("x")["anchors"][0], anchor],
                     checks=[{"verifier": "source.lines", "params": {"anchor": 1, "tokens": ["atomicAdd"]},
                              "expect": {"hash_ok": {"is": True}, "tokens_found": {"is": found}}}])

    write_claims(project, "src", [c("test.src.as-found", True), c("test.src.flipped", False)])
    summary = json.loads(kb_subprocess(project, "verify", "--json", env={"KB_CLONE_TESTREPO": str(up)}).stdout)
    assert "test.src.flipped" in summary["refuted"] and "test.src.as-found" not in summary["refuted"]


def test_a_number_no_check_binds_keeps_the_claim_from_verified(project: Path) -> None:
    """The statement is re-read at verify time: an unbound number no measurement reproduces is not verified."""
    write_claims(project, "reread", [
        claim("test.reread.bound", statement="Two plus two equals 4."),
        claim("test.reread.edited", statement="Two plus two equals 4, in 7 steps."),
    ])
    kb_subprocess(project, "verify")
    assert _status(project, "test.reread.bound")["status"] == "verified"
    st = _status(project, "test.reread.edited")
    assert st["status"] == "inconclusive" and st["cause"] == "unbound" and "'7'" in st["cause_why"], st


def test_errata_lists_every_finding_by_section_with_its_correction_and_links(project: Path, run_kb) -> None:
    wrong = _arith("test.errata.wrong", 5, {"equals": 4},
                   cause={"kind": "note", "why": "The note says four where the pinned arithmetic gives five."})
    fixed = _arith("test.errata.fixed", 5, {"equals": 5}, supersedes=["test.errata.wrong"])
    fixed["statement"] = "The figure is 5, not 4."
    fixed["labels"] = ["4"]
    artifact = _arith("test.errata.band", 650, {"between": [620, 640]})  # band-above: never an erratum
    write_claims(project, "errata", [wrong, fixed, artifact])
    run_kb("verify")
    data = json.loads(run_kb("errata", "--json").stdout)
    ids = [f["claim"] for n in data["notes"] for s in n["sections"] for f in s["findings"]]
    assert "test.errata.wrong" in ids and "test.errata.band" not in ids and "test.arith.wrong" in ids
    f = next(f for n in data["notes"] for s in n["sections"] for f in s["findings"] if f["claim"] == "test.errata.wrong")
    anchor = claim("x")["anchors"][0]
    assert f["where"] == f"{anchor['path']}#{anchor['heading']}"
    assert f["link"].endswith(f"/blob/{data['commit']}/{anchor['path']}#{anchor['heading']}")
    assert f["true_instead"] == [{"claim": "test.errata.fixed", "statement": "The figure is 5, not 4.",
                                  "status": "verified"}]
    md = run_kb("errata").stdout
    assert f"## {anchor['path']}" in md and "**True instead** (`test.errata.fixed`, verified)" in md
    assert "pinned arithmetic gives five" in md


def test_a_recorded_judgement_outranks_the_band_rule(project: Path) -> None:
    # A count expected `at_least: 1` that measures 0 is what the note says failing, not a figure short of a band.
    judged = _arith("test.judged.count", 0, {"at_least": 1},
                    cause={"kind": "note", "why": "The note says the instruction is there; the count is 0 (a test finding)."})
    write_claims(project, "judged", [judged, _arith("test.unjudged.count", 0, {"at_least": 1})])
    kb_subprocess(project, "verify")
    got = _status(project, "test.judged.count")
    assert (got["status"], got["cause"], got["cause_by"]) == ("refuted", "note", "judgement"), got
    assert _status(project, "test.unjudged.count")["cause"] == "band-below"


def test_an_inconclusive_run_with_its_own_reason_is_unreached_not_spread() -> None:
    from types import SimpleNamespace

    from kb.index import cause

    claim = SimpleNamespace(scope=SimpleNamespace(reported_on=None), cause=None, checks=[])
    run = SimpleNamespace(reason="13.2 and 13.0 give the same bits on this input", measurements={}, expect={},
                          check_index=0)
    assert cause.derive(claim, "inconclusive", [run], "NVIDIA H200")[:1] == ("unreached",)
    noisy = SimpleNamespace(reason="the median gives 'refutes' but the run-to-run spread [0.8, 1.3] lies partly "
                                   "inside", measurements={}, expect={}, check_index=0)
    assert cause.derive(claim, "inconclusive", [noisy], "NVIDIA H200")[0] == "spread"
