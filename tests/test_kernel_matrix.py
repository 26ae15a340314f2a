"""The kernel-selection matrix: gpu.matrix parameters, the conclusion comparisons, and the site page without runs.

The comparisons are judged over fabricated cell figures (tests/fixtures/kernel-matrix/cells.json, plainly not
measurements); the negative control is the same cells with FA3 and FA2 swapped, which must flip the verdict.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from kb.export.site import matrix_sel
from kb.export.site.build import environment
from kb.registry import Context
from verifiers.gpu.matrix import Cell, MatrixParams, judge_row

ROOT = Path(__file__).resolve().parent.parent
CELLS = json.loads((ROOT / "tests" / "fixtures" / "kernel-matrix" / "cells.json").read_text())
ROW = {"workload": "packed", "shape": {"docs": 8, "seqlen": 1024, "heads": 16, "head_dim": 128},
       "backends": ["fa3-2024-08", "fa2-v2.0.0"],
       "ratios": [{"name": "fa3_speedup_train", "faster": "fa3-2024-08", "slower": "fa2-v2.0.0", "pass": "train"}]}


def _ctx(expect: dict[str, Any]) -> Context:
    return Context(claim={}, expect=expect, sources={}, clones={}, hardware={})


def _cells(name: str) -> dict[tuple[str, str], Cell]:
    out = {}
    for key, ms in CELLS[name].items():
        b, p = key.split("/")
        out[(b, p)] = Cell(batch_ms=ms)
    return out


# ------------------------------------------------------------------ parameters


def test_row_params_valid_and_pinned_rows_are_sm90() -> None:
    p = MatrixParams.model_validate(ROW)
    assert p.min_cc == 90 and p.max_cc == 90  # kb's builds of the pins hold sm_90 code only
    q = MatrixParams.model_validate({"workload": "vision-d80", "backends": ["sdpa", "sdpa-math"]})
    assert q.max_cc is None and q.passes == ["forward", "backward"]


@pytest.mark.parametrize("change, needle", [
    ({"backends": ["sdpa", "sdpa"]}, "twice"),
    ({"backends": []}, "at least 1"),
    ({"workload": "vision-d96"}, "workload"),
    ({"shape": {"docs": 8, "seqlen": 2048}}, "seqlen=2048"),
    ({"shape": {"causal": 1}}, "causal=1"),
    ({"skip": {"flex": "no"}}, "not a cell"),
    ({"skip": {"fa2-v2.0.0/sideways": "no"}}, "not a cell"),
    ({"skip": {"fa2-v2.0.0/backward": "no d128 backward"}}, "does not run"),
    ({"ratios": [{"name": "x", "faster": "sdpa", "slower": "fa2-v2.0.0"}]}, "not among backends"),
    ({"ratios": [{"name": "Bad-Name", "faster": "fa3-2024-08", "slower": "fa2-v2.0.0"}]}, "pattern"),
    ({"ratios": [ROW["ratios"][0], ROW["ratios"][0]]}, "share a name"),
    ({"batches": 1}, "greater than or equal to 3"),
    ({"mode": "jit"}, "mode"),
])
def test_row_params_rejected(change: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValidationError) as exc:
        MatrixParams.model_validate({**ROW, **change})
    assert needle in str(exc.value)


# ------------------------------------------------------------------ conclusion comparisons


def test_fa3_faster_supports_and_swapped_cells_refute() -> None:
    p = MatrixParams.model_validate(ROW)
    expect = {"fa3_speedup_train": {"between": [1.2, 2.0]}}
    out = judge_row(p, _cells("fa3_faster"), _ctx(expect))
    value = out.measurements["fa3_speedup_train"][0]
    assert value == pytest.approx((1.50 + 3.92) / (1.00 + 2.50), rel=1e-3)
    assert out.verdict == "supports", out.reason
    lo, hi = out.measurements["fa3_speedup_train_spread"][0]
    assert lo < value < hi
    # Negative control: the same figures with the two builds swapped give a speedup below 1.
    flipped = judge_row(p, _cells("flipped"), _ctx(expect))
    assert flipped.measurements["fa3_speedup_train"][0] < 1 and flipped.verdict == "refutes", flipped.reason
    # The compile conclusion's direction (FA3 slower) reads the same cells the other way round.
    slower = MatrixParams.model_validate({**ROW, "ratios": [
        {"name": "fa3_slowdown_train", "faster": "fa2-v2.0.0", "slower": "fa3-2024-08", "pass": "train"}]})
    rule = {"fa3_slowdown_train": {"at_least": 1.0}}
    assert judge_row(slower, _cells("flipped"), _ctx(rule)).verdict == "supports"
    assert judge_row(slower, _cells("fa3_faster"), _ctx(rule)).verdict == "refutes"


def test_spread_across_the_band_is_inconclusive() -> None:
    p = MatrixParams.model_validate(ROW)
    out = judge_row(p, _cells("overlapping"), _ctx({"fa3_speedup_train": {"at_least": 1.2}}))
    lo, hi = out.measurements["fa3_speedup_train_spread"][0]
    assert lo < 1.2 < hi
    assert out.verdict == "inconclusive" and "spread" in (out.reason or "")


def test_a_failed_compared_cell_is_an_error_not_a_verdict() -> None:
    p = MatrixParams.model_validate(ROW)
    cells = _cells("fa3_faster")
    cells[("fa2-v2.0.0", "backward")] = Cell(error="RuntimeError: no backward unit")
    out = judge_row(p, cells, _ctx({"fa3_speedup_train": {"between": [1.2, 2.0]}}))
    assert out.verdict == "error" and "no backward unit" in (out.reason or "")
    assert out.measurements["cells_failed"][0] == 1
    assert out.measurements["error.fa2-v2.0.0.backward"][0].startswith("RuntimeError")
    # A row whose claim is "every backend ran" refutes on the same failure.
    assert judge_row(p, cells, _ctx({"cells_failed": {"equals": 0}})).verdict == "refutes"


def test_cell_measurements_carry_median_spread_and_tflops() -> None:
    p = MatrixParams.model_validate(ROW)
    out = judge_row(p, _cells("fa3_faster"), _ctx({"cells_failed": {"equals": 0}}))
    m = {k: v[0] for k, v in out.measurements.items()}
    assert m["ms.fa3-2024-08.forward"] == pytest.approx(1.00)
    assert m["ms_spread.fa3-2024-08.forward"] == [0.99, 1.02]
    # 8 docs x 16 heads x 1024^2 x 128 x 4 / 2 (causal) = 34.4 GFLOP per forward, in 1 ms
    assert m["tflops.fa3-2024-08.forward"] == pytest.approx(34.4, abs=0.1)
    assert out.verdict == "supports"


# ------------------------------------------------------------------ the site page


def _claim(runs: list[dict[str, Any]]) -> dict[str, Any]:
    check = {"verifier": "gpu.matrix", "params": {**ROW, "backends": ["fa3-2024-08", "fa2-v2.0.0", "sdpa"],
                                                  "skip": {"sdpa/backward": "fabricated skip"}},
             "expect": {"fa3_speedup_train": {"between": [1.2, 2.0]}}}
    report = {"id": "cross.report.x", "statement": "The report says FA3 is faster."}
    c = {"id": "h200.select.x", "statement": "FA3 is faster on the H200.", "checks": [check], "runs": runs,
         "refines": ["cross.report.x"], "classes": {},
         "overall": {"status": "needs-hardware", "reason": "check 0 (gpu.matrix) needs CUDA sm_90"}}
    return {"claims": [c, report], "by_id": {"h200.select.x": c, "cross.report.x": report}}


class _Out:
    def __init__(self) -> None:
        self.files: dict[str, str] = {}

    def write(self, rel: str, text: str) -> None:
        self.files[rel] = text

    def render(self, tpl: Any, rel: str, **ctx: Any) -> None:
        self.write(rel, tpl.render(**ctx))


def _render(data: dict[str, Any]) -> dict[str, str]:
    class D:
        claims, by_id = data["claims"], data["by_id"]
    out = _Out()
    matrix_sel.write(D, environment(ROOT / "site" / "templates"), out)
    return out.files


def test_page_renders_with_no_runs() -> None:
    files = _render(_claim([]))
    html = files["kernels.html"]
    assert "not yet measured" in html and "needs CUDA sm_90" in html
    assert "The report says FA3 is faster." in html and "fabricated skip" in html
    rows = list(csv.DictReader(io.StringIO(files["kernels.csv"])))
    assert len(rows) == len(matrix_sel.BACKENDS) * 2  # one row (packed, eager): every backend, both passes
    state = {(r["backend"], r["pass"]): r["state"] for r in rows}
    assert state[("fa3-2024-08", "forward")] == "not yet measured"
    assert state[("sdpa", "backward")] == "unsupported"
    assert state[("flex", "forward")] == "not in the measured rows"
    assert all(r["median_ms"] == "" for r in rows)


def test_page_shows_a_run_with_median_spread_and_verdict() -> None:
    p = MatrixParams.model_validate(ROW)
    out = judge_row(p, _cells("flipped"), _ctx({"fa3_speedup_train": {"between": [1.2, 2.0]}}))
    run = {"verifier": "gpu.matrix", "check_index": 0, "verdict": out.verdict, "reason": out.reason,
           "hardware_class": "NVIDIA H200 sm_90", "started": "2026-12-01T00:00:00+00:00",
           "measurements": {k: {"value": v[0], "unit": v[1]} for k, v in out.measurements.items()}}
    files = _render(_claim([run]))
    rows = {(r["backend"], r["pass"]): r for r in csv.DictReader(io.StringIO(files["kernels.csv"]))}
    assert rows[("fa2-v2.0.0", "forward")]["state"] == "measured"
    assert float(rows[("fa2-v2.0.0", "forward")]["median_ms"]) == pytest.approx(1.00)
    assert rows[("fa2-v2.0.0", "forward")]["lo_ms"] == "0.99" and rows[("fa2-v2.0.0", "forward")]["hi_ms"] == "1.02"
    # A cell the run does not carry (here: fabricated without sdpa) reads as the run's failure, never as a figure.
    assert rows[("sdpa", "forward")]["state"] == "error" and rows[("sdpa", "forward")]["median_ms"] == ""
    assert "refutes on NVIDIA H200 sm_90" in files["kernels.html"]
