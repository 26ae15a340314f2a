"""Nsight Compute metrics: DRAM bytes and occupancy limiters of the kernels a pass launches.

The pass runs in a child process under `ncu` (clock control off, as the lent
H200 requires); the child warms up first (JIT compilation, autotuning) and
brackets the measured pass with cudaProfilerStart/Stop, so only that pass is
profiled (`--profile-from-start off`). DRAM bytes are summed over every
profiled kernel; occupancy limits come from the longest kernel.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from typing import Any, Literal

from kb.registry import Context, Outcome, Requirements, verifier
from verifiers.gpu.params import AttnParams

METRICS = [
    "dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum",
    "launch__occupancy_limit_registers", "launch__occupancy_limit_shared_mem",
    "launch__occupancy_limit_warps", "launch__registers_per_thread",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
]

_CHILD = """
import json, sys, torch
from verifiers.gpu import common as g
from verifiers.gpu.params import AttnParams
p = AttnParams.model_validate(json.loads(sys.argv[1]))
phase = sys.argv[2]
x = g.make_inputs(p, requires_grad=phase != "forward")
def run():
    if phase == "forward":
        with torch.no_grad():
            g.forward(p, x)
    else:
        g.forward_backward(p, x)
run(); run(); torch.cuda.synchronize()
torch.cuda.profiler.start()
run(); torch.cuda.synchronize()
torch.cuda.profiler.stop()
"""


class NcuParams(AttnParams):
    """The pass to profile, and optionally a second configuration to compare DRAM bytes with."""

    phase: Literal["forward", "both"] = "forward"
    other: dict[str, Any] = {}


def _num(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def profile_pass(p: AttnParams, phase: str, timeout: float = 240) -> list[dict[str, Any]]:
    """One row per profiled kernel: name and the METRICS values (raw units: bytes, ns, %)."""
    ncu = shutil.which("ncu")
    if ncu is None:
        raise RuntimeError("ncu (Nsight Compute) is not on PATH")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the project root
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--target-processes", "all",
           "--metrics", ",".join(METRICS), "--csv", "--page", "raw",
           sys.executable, "-c", _CHILD, json.dumps(p.model_dump(include=set(AttnParams.model_fields))), phase]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=root)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith('"')]
    if res.returncode != 0 or not lines:
        raise RuntimeError(f"ncu failed (exit {res.returncode}): {(res.stderr or res.stdout)[-600:]}")
    rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
    out = []
    for row in rows[1:]:  # the first row after the header holds units
        rec: dict[str, Any] = {"name": row.get("Kernel Name", "")}
        for m in METRICS:
            rec[m] = _num(row.get(m, ""))
        out.append(rec)
    return out


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    longest = max(rows, key=lambda r: r["gpu__time_duration.sum"] or 0)
    return {
        "kernels": len(rows),
        "dram_bytes": sum((r["dram__bytes_read.sum"] or 0) + (r["dram__bytes_write.sum"] or 0) for r in rows),
        "occ_limit_registers": longest["launch__occupancy_limit_registers"],
        "occ_limit_shared_mem": longest["launch__occupancy_limit_shared_mem"],
        "occ_limit_warps": longest["launch__occupancy_limit_warps"],
        "registers_per_thread": longest["launch__registers_per_thread"],
        "achieved_occupancy_pct": longest["sm__warps_active.avg.pct_of_peak_sustained_active"],
        "longest_kernel": longest["name"][:160],
    }


@verifier("gpu.ncu-metrics", kind="gpu-profile", params=NcuParams, requires=Requirements(cuda=True, min_cc=80),
          timeout_s=600)
def ncu_metrics(p: NcuParams, ctx: Context) -> Outcome:
    """DRAM bytes over the pass's kernels and the longest kernel's occupancy limiters (Nsight Compute)."""
    this = _summary(profile_pass(p, p.phase))
    meas: dict[str, tuple[Any, str]] = {
        "dram_bytes": (this["dram_bytes"], "bytes"),
        "kernels": (this["kernels"], "launches"),
        "occ_limit_registers": (this["occ_limit_registers"], "CTAs/SM"),
        "occ_limit_shared_mem": (this["occ_limit_shared_mem"], "CTAs/SM"),
        "occ_limit_warps": (this["occ_limit_warps"], "CTAs/SM"),
        "registers_per_thread": (this["registers_per_thread"], "registers"),
        "achieved_occupancy_pct": (this["achieved_occupancy_pct"], "% of peak warps"),
    }
    log = {"this": this}
    if p.other:
        other_p = AttnParams.model_validate({**p.model_dump(include=set(AttnParams.model_fields)), **p.other})
        other = _summary(profile_pass(other_p, p.phase))
        log["other"] = other
        meas["other_dram_bytes"] = (other["dram_bytes"], "bytes")
        meas["dram_ratio_other_to_this"] = (other["dram_bytes"] / max(this["dram_bytes"], 1), "x")
    return Outcome(measurements=meas, log=json.dumps(log, indent=1),
                   environment={"kernels": [this["longest_kernel"]], "method": "ncu --clock-control none"})
