"""Nsight Compute counters a check names: memory-system sectors, reductions at L2, SM activity, and ratios.

gpu.ncu-metrics reads a fixed set (DRAM and L2 bytes, occupancy limiters); this verifier reads the counters a
claim needs from a closed list (COUNTERS: kb's names for Nsight Compute metrics, so claims data never reaches
ncu's command line as free text), from the same profiled pass (ncu.py's child: warm-up first, then one pass
between cudaProfilerStart/Stop), and derives the ratios those claims are stated in: sectors per global-load
request (coalescing), DRAM writes over the bytes of reductions that reached L2 (whether L2 resolves atomics),
the share of SM cycles that were active (how full the GPU was). With `other`, a second configuration is
profiled the same way and every figure gets an `other_` value and a `ratio_` (other over this).

Counters are summed over every profiled kernel that `kernel_filter` selects; a counter Nsight Compute does not
report on this GPU is an error that names it, never a zero.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
from typing import Any

from pydantic import field_validator

from kb.registry import Context, Outcome, Requirements, verifier
from verifiers.gpu.ncu import _CHILD, NcuParams, _num, tensor_bytes, unit_factor
from verifiers.gpu.params import AttnParams

SECTOR = 32  # bytes per L2 / L1 sector
# Bytes per unit of the counters that count memory traffic: their other-minus-this deltas are also given in
# bytes of K and V ("4 splits read K/V 3 more times"), which no per-configuration ratio can say when another
# traffic (FA1's FP32 running output, say) dominates both totals.
BYTES_PER = {"dram_read_bytes": 1, "dram_write_bytes": 1, "l2_read_sectors": SECTOR, "global_ld_sectors": SECTOR,
             "l2_red_sectors": SECTOR}
# kb's name -> the Nsight Compute metric (Kernel Profiling Guide names). All are .sum: they add over kernels.
COUNTERS: dict[str, str] = {
    "dram_read_bytes": "dram__bytes_read.sum",
    "dram_write_bytes": "dram__bytes_write.sum",
    "gpu_time_ns": "gpu__time_duration.sum",
    "l2_read_sectors": "lts__t_sectors_srcunit_tex_op_read.sum",  # every read leaving the SMs (LDG, LDGSTS, TMA)
    "l2_red_sectors": "lts__t_sectors_op_red.sum",  # sectors that reduction operations (RED) touched at L2
    "l2_atom_sectors": "lts__t_sectors_op_atom.sum",  # sectors that atomics with a return (ATOM) touched at L2
    "global_ld_sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",  # LDG only
    "global_ld_requests": "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",  # one per warp-level LDG
    "global_red_requests": "l1tex__t_requests_pipe_lsu_mem_global_op_red.sum",
    "sm_active_cycles": "sm__cycles_active.sum",  # summed over SMs: cycles with at least one warp resident
    "sm_elapsed_cycles": "sm__cycles_elapsed.sum",
}
UNITS = {
    "dram_read_bytes": "bytes", "dram_write_bytes": "bytes", "gpu_time_ns": "ns (sum over the kernels)",
    "l2_read_sectors": "32-byte sectors read from L2 by the SMs", "l2_red_sectors": "sectors reduced at L2",
    "l2_atom_sectors": "sectors of atomics at L2", "global_ld_sectors": "LDG sectors",
    "global_ld_requests": "LDG requests", "global_red_requests": "RED requests",
    "sm_active_cycles": "SM-cycles", "sm_elapsed_cycles": "SM-cycles",
    "sectors_per_ld_request": "sectors per global-load request", "sm_active_frac": "of SM-cycles elapsed",
    "dram_write_over_red_bytes": "x bytes of reductions at L2", "l2_read_over_kv": "x bytes of K and V",
    "red_bytes_over_dram_write": "x DRAM bytes written",
}


class CounterParams(NcuParams):
    """The pass and kernels to profile (as gpu.ncu-metrics), and which of COUNTERS to read."""

    counters: list[str]

    @field_validator("counters")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        unknown = [c for c in v if c not in COUNTERS]
        if unknown or not v:
            raise ValueError(f"counters must name some of {sorted(COUNTERS)}; unknown: {unknown}")
        return v


def parse_rows(text: str, metrics: list[str]) -> list[dict[str, Any]]:
    """One row per profiled kernel from `ncu --csv --page raw` output: its name and `metrics` in base units.

    As ncu.parse_csv, for any metric list (ncu.py's fixed-list parser is left as it is so that the evidence
    of gpu.ncu-metrics keeps its code hash; the two can merge at the next full GPU re-run).
    """
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
    units: dict[str, str] = {}
    if rows and not (rows[0].get("ID") or "").strip():
        units = {k: v or "" for k, v in rows[0].items() if k}
        rows = rows[1:]
    out = []
    for row in rows:
        rec: dict[str, Any] = {"name": row.get("Kernel Name", "")}
        for m in metrics:
            v = _num(row.get(m) or "")
            rec[m] = None if v is None else v * unit_factor(units.get(m, ""))
        out.append(rec)
    return out


def profile(p: AttnParams, phase: str, kernel_filter: list[str], names: list[str],
            timeout: float = 300) -> list[dict[str, Any]]:
    """One row per profiled kernel: its name and the named counters in base units (None where not reported)."""
    ncu = shutil.which("ncu")
    if ncu is None:
        raise RuntimeError("ncu (Nsight Compute) is not on PATH")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
           "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG", ":4096:8")}
    metrics = [COUNTERS[n] for n in names]
    select = ["--kernel-name", "regex:" + "|".join(re.escape(s) for s in kernel_filter)] if kernel_filter else []
    cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--target-processes", "all", *select,
           "--metrics", ",".join(metrics), "--csv", "--page", "raw", "--print-units", "base",
           sys.executable, "-c", _CHILD, json.dumps(p.model_dump(include=set(AttnParams.model_fields))), phase]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=root)
    rows = parse_rows(res.stdout, metrics)
    if res.returncode != 0 or not rows:
        raise RuntimeError(f"ncu failed (exit {res.returncode}, {len(rows)} kernels profiled): "
                           f"{(res.stderr or res.stdout)[-600:]}")
    return [{"name": r["name"], **{n: r[COUNTERS[n]] for n in names}} for r in rows]


def totals(rows: list[dict[str, Any]], names: list[str]) -> dict[str, float]:
    """Each counter summed over the kernels, then the ratios its inputs allow."""
    out: dict[str, float] = {}
    for n in names:
        missing = [r["name"][:80] for r in rows if r.get(n) is None]
        if missing:
            raise RuntimeError(f"Nsight Compute reported no value of {COUNTERS[n]} ({n}) for {missing[:3]}")
        out[n] = float(sum(r[n] for r in rows))
    if out.get("global_ld_requests"):
        out["sectors_per_ld_request"] = out["global_ld_sectors"] / out["global_ld_requests"]
    if out.get("sm_elapsed_cycles"):
        out["sm_active_frac"] = out["sm_active_cycles"] / out["sm_elapsed_cycles"]
    if "l2_red_sectors" in out and "dram_write_bytes" in out:
        red = SECTOR * out["l2_red_sectors"]
        out["dram_write_over_red_bytes"] = out["dram_write_bytes"] / red if red else float("inf")
        out["red_bytes_over_dram_write"] = red / max(out["dram_write_bytes"], 1.0)
    return out


def measurements(this: dict[str, float], other: dict[str, float] | None,
                 sizes: dict[str, int]) -> dict[str, tuple[Any, str]]:
    """This configuration's figures, and with another one its figures and other-over-this ratios."""
    if "l2_read_sectors" in this:
        this = {**this, "l2_read_over_kv": SECTOR * this["l2_read_sectors"] / sizes["kv"]}
    meas: dict[str, tuple[Any, str]] = {k: (round(v, 6), UNITS.get(k, "")) for k, v in this.items()}
    if other is not None:
        if "l2_read_sectors" in other:
            other = {**other, "l2_read_over_kv": SECTOR * other["l2_read_sectors"] / sizes["kv"]}
        for k, v in other.items():
            meas[f"other_{k}"] = (round(v, 6), UNITS.get(k, ""))
            if k in this:
                meas[f"ratio_{k}"] = (round(v / this[k], 6) if this[k] else float("inf"), "x (other over this)")
            if k in BYTES_PER and k in this:
                meas[f"{k}_delta_over_kv"] = (round((v - this[k]) * BYTES_PER[k] / sizes["kv"], 6),
                                              "x bytes of K and V (other minus this)")
    return meas


@verifier("gpu.ncu-counters", kind="gpu-profile", params=CounterParams, requires=Requirements(cuda=True, min_cc=80),
          timeout_s=900)
def ncu_counters(p: CounterParams, ctx: Context) -> Outcome:
    """The named Nsight Compute counters over the pass's kernels (and another configuration's), with ratios."""
    from verifiers.gpu import pinned as gpu_pinned
    from verifiers.gpu.params import PINNED_IMPLS

    other_p = (AttnParams.model_validate({**p.model_dump(include=set(AttnParams.model_fields)), **p.other})
               if p.other else None)
    for q in (p, other_p):
        if q is not None and q.impl in PINNED_IMPLS and (why := gpu_pinned.available(q.impl)):
            return Outcome(verdict="skipped", reason=why)
    rows = profile(p, p.phase, p.kernel_filter, p.counters)
    this = totals(rows, p.counters)
    other_rows = profile(other_p, p.phase, p.kernel_filter, p.counters) if other_p is not None else None
    other = totals(other_rows, p.counters) if other_rows is not None else None
    log: dict[str, Any] = {"this": rows, "other": other_rows, "metrics": {n: COUNTERS[n] for n in p.counters}}
    names = sorted({r["name"][:120] for r in rows + (other_rows or [])})
    return Outcome(measurements=measurements(this, other, tensor_bytes(p)), log=json.dumps(log, indent=1)[-20000:],
                   environment={"kernels": names[:8], "method": "ncu --clock-control none",
                                "kernel_filter": p.kernel_filter})
