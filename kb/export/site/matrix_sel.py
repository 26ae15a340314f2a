"""The kernel-selection page: every (workload, mode, backend, pass) cell the gpu.matrix checks measure.

Read from the claims and their latest runs in the site data, never from the
verifier package (kb does not import it): a row is a gpu.matrix check's
params (workload, mode, backends, passes, skip), its cells are the latest run's
measurements (`ms.<backend>.<pass>`, `ms_spread.…`, `tflops.…`, `error.…`).
Before any GPU run every listed cell reads "not yet measured" with the claim's
status (needs-hardware and the requirement); cells no row lists read "not in
the measured rows". Written as kernels.html and kernels.csv.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from typing import Any

from jinja2 import Environment

VERIFIER = "gpu.matrix"
BACKENDS = ("sdpa", "sdpa-flash", "sdpa-cudnn", "sdpa-efficient", "sdpa-math", "flex", "fa4",
            "fa2-v2.0.0", "fa3-2024-08")
PASSES = ("forward", "backward")
WORKLOAD_ORDER = ("packed", "vision-d64", "vision-d80", "vision-d128", "causal-long", "gqa")
CSV_FIELDS = ("workload", "mode", "backend", "pass", "state", "median_ms", "lo_ms", "hi_ms", "tflops",
              "hardware_class", "claim", "note")


@dataclass
class CellView:
    """What the page shows for one cell."""

    state: str  # measured | error | unsupported | not yet measured | not in the measured rows
    median_ms: float | None = None
    spread: tuple[float, float] | None = None
    tflops: float | None = None
    hardware_class: str = ""
    claim: str = ""
    note: str = ""


@dataclass
class RowView:
    """One (workload, mode) row: a cell per backend and pass, and the claims whose checks fill it."""

    workload: str
    mode: str
    shape: dict[str, Any] = field(default_factory=dict)
    cells: dict[tuple[str, str], CellView] = field(default_factory=dict)
    claims: list[str] = field(default_factory=list)
    status: list[tuple[str, str, str]] = field(default_factory=list)  # (claim, overall status, reason)


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _meas(run: dict[str, Any], name: str) -> Any:
    m = (run.get("measurements") or {}).get(name)
    return m.get("value") if isinstance(m, dict) else None


def _latest(claim: dict[str, Any], index: int) -> dict[str, Any] | None:
    """The newest run of check `index` of the claim (runs come newest first), verdicts of any kind."""
    for r in claim.get("runs", []):
        if r.get("check_index") == index and r.get("verifier") == VERIFIER:
            return r
    return None


def _pending(claim: dict[str, Any]) -> str:
    o = claim.get("overall") or {}
    return f"{o.get('status', 'unverified')}: {o.get('reason', '')}".strip().rstrip(":")


def _cell(params: dict[str, Any], run: dict[str, Any] | None, claim: dict[str, Any], b: str, ps: str) -> CellView:
    skip = params.get("skip") or {}
    why = skip.get(f"{b}/{ps}") or skip.get(b)
    if why:
        return CellView("unsupported", claim=claim["id"], note=str(why))
    if run is None:
        return CellView("not yet measured", claim=claim["id"], note=_pending(claim))
    key = f"{b}.{ps}"
    err = _meas(run, f"error.{key}")
    hw = str(run.get("hardware_class", ""))
    if err is not None:
        return CellView("error", hardware_class=hw, claim=claim["id"], note=str(err))
    med = _num(_meas(run, f"ms.{key}"))
    if med is None:  # a run that failed as a whole (a crash, a timeout) has no cells
        return CellView("error", hardware_class=hw, claim=claim["id"],
                        note=f"run {run.get('verdict')}: {str(run.get('reason', ''))[:200]}")
    spread = _meas(run, f"ms_spread.{key}")
    lo_hi = (float(spread[0]), float(spread[1])) if isinstance(spread, list) and len(spread) == 2 else None
    return CellView("measured", med, lo_hi, _num(_meas(run, f"tflops.{key}")), hw, claim["id"])


def rows(claims: list[dict[str, Any]]) -> list[RowView]:
    """Every (workload, mode) row any gpu.matrix check names, with its cells (the newest run wins a tie)."""
    by_key: dict[tuple[str, str], RowView] = {}
    stamp: dict[tuple[str, str, str, str], str] = {}
    for c in claims:
        for i, ch in enumerate(c.get("checks") or []):
            if ch.get("verifier") != VERIFIER:
                continue
            p = ch.get("params") or {}
            key = (str(p.get("workload")), str(p.get("mode", "eager")))
            row = by_key.setdefault(key, RowView(*key, shape=dict(p.get("shape") or {})))
            if c["id"] not in row.claims:
                row.claims.append(c["id"])
                o = c.get("overall") or {}
                row.status.append((c["id"], str(o.get("status", "unverified")), str(o.get("reason", ""))))
            run = _latest(c, i)
            for b in p.get("backends") or []:
                for ps in p.get("passes") or PASSES:
                    cell = _cell(p, run, c, b, ps)
                    when = str((run or {}).get("started", ""))
                    ck = (*key, b, ps)
                    if ck not in stamp or when > stamp[ck]:
                        row.cells[(b, ps)], stamp[ck] = cell, when
    order = {w: i for i, w in enumerate(WORKLOAD_ORDER)}
    return sorted(by_key.values(), key=lambda r: (order.get(r.workload, 99), r.workload, r.mode != "eager"))


def conclusions(claims: list[dict[str, Any]], by_id: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The claims whose gpu.matrix checks expect ratios: the report's conclusions with the H200 verdicts."""
    out = []
    for c in claims:
        checks = [(i, ch) for i, ch in enumerate(c.get("checks") or [])
                  if ch.get("verifier") == VERIFIER and any(k != "cells_failed" for k in ch.get("expect") or {})]
        if not checks:
            continue
        ratios = []
        for i, ch in checks:
            run = _latest(c, i)
            for name, rule in (ch.get("expect") or {}).items():
                value = _meas(run, name) if run else None
                spread = _meas(run, f"{name}_spread") if run else None
                ratios.append({"workload": (ch.get("params") or {}).get("workload"), "name": name,
                               "rule": ", ".join(f"{k} {v}" for k, v in rule.items()),
                               "value": _num(value), "spread": spread if isinstance(spread, list) else None,
                               "verdict": (run or {}).get("verdict"), "hardware_class": (run or {}).get("hardware_class")})
        report = [by_id[r] for r in c.get("refines", []) if r in by_id]
        gpu = {hw: s for hw, s in (c.get("classes") or {}).items() if hw != "cpu"}
        out.append({"c": c, "ratios": ratios, "report": report, "gpu": gpu})
    return out


def to_csv(table: list[RowView]) -> str:
    """One line per cell of every row and every backend (cells no row lists included), with median and spread."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_FIELDS)
    for r in table:
        for b in BACKENDS:
            for ps in PASSES:
                cell = r.cells.get((b, ps)) or CellView("not in the measured rows")
                lo, hi = cell.spread or (None, None)
                w.writerow([r.workload, r.mode, b, ps, cell.state,
                            *("" if x is None else f"{x:.5g}" for x in (cell.median_ms, lo, hi, cell.tflops)),
                            cell.hardware_class, cell.claim, cell.note])
    return buf.getvalue()


def write(data: Any, env: Environment, out: Any) -> int:
    """Render kernels.html and kernels.csv into the site writer `out`; returns the number of HTML pages (1)."""
    table = rows(data.claims)
    out.write("kernels.csv", to_csv(table))
    out.render(env.get_template("kernels.html"), "kernels.html", root="", page="kernels.html", rows=table,
               backends=BACKENDS, passes=PASSES, conclusions=conclusions(data.claims, data.by_id))
    return 1
