"""Nsight Compute metrics: DRAM and L2 bytes and occupancy limiters of the kernels a pass launches.

The pass runs in a child process under `ncu` (clock control off, as the lent
H200 requires); the child warms up first (JIT compilation, autotuning) and
brackets the measured pass with cudaProfilerStart/Stop, so only that pass is
profiled (`--profile-from-start off`); `kernel_filter` narrows it to the
kernels whose function name contains one of the given strings. Byte counts are
summed over every profiled kernel; launch and occupancy figures come from the
longest kernel. Ratios relate the counters to the problem's own tensor sizes
(Q, K, V, O, LSE), so an expectation can say "O is written once" or "K/V is
read once per Q block" without restating a byte count.
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
from typing import Any, Literal

from pydantic import field_validator

from kb.registry import Context, Outcome, Requirements, verifier
from verifiers.gpu.params import AttnParams

# Nsight Compute metric names (Kernel Profiling Guide). The sector counters count 32-byte sectors: what the
# SMs read from L2 (every read that leaves the SM, cp.async.cg included), and what global-load instructions
# requested of L1 (LDG only: the logical loads, whatever the caches then serve).
METRICS = [
    "dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum",
    "lts__t_sectors_srcunit_tex_op_read.sum", "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "launch__occupancy_limit_blocks", "launch__occupancy_limit_registers", "launch__occupancy_limit_shared_mem",
    "launch__occupancy_limit_warps", "launch__registers_per_thread", "launch__block_size",
    "launch__shared_mem_per_block_dynamic",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
]
SECTOR_BYTES = 32

_CHILD = """
import json, sys, torch
from verifiers.gpu import common as g
from verifiers.gpu.params import AttnParams
p = AttnParams.model_validate(json.loads(sys.argv[1]))
phase = sys.argv[2]
g.set_deterministic(p)
x = g.make_inputs(p, requires_grad=phase != "forward")
def fresh():
    for n in ("q", "k", "v"):
        x[n].grad = None
if phase == "backward":
    o, _ = g.forward(p, x)
def run():
    if phase == "forward":
        with torch.no_grad():
            g.forward(p, x)
    elif phase == "backward":
        fresh()
        o.backward(x["do"], retain_graph=True)
    else:
        g.forward_backward(p, x)
run(); run(); torch.cuda.synchronize()
torch.cuda.profiler.start()
run(); torch.cuda.synchronize()
torch.cuda.profiler.stop()
"""


class NcuParams(AttnParams):
    """The pass to profile, which kernels, and optionally a second configuration to compare with."""

    phase: Literal["forward", "backward", "both"] = "forward"
    kernel_filter: list[str] = []  # substrings of the kernel function name (as gpu.profile's); empty = all
    other: dict[str, Any] = {}

    @field_validator("kernel_filter")
    @classmethod
    def _plain_names(cls, v: list[str]) -> list[str]:
        # Names, not patterns: the filter is escaped into ncu's regex, so only identifier text is meaningful.
        for s in v:
            if not re.fullmatch(r"[A-Za-z0-9_]+", s):
                raise ValueError(f"kernel_filter entries are identifier substrings, got {s!r}")
        return v


# Unit prefixes Nsight Compute prints when it scales a value ("Mbyte", "usecond"); --print-units base asks
# for none, and the units row is read anyway so a scaled value can never pass for a base one.
_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_TIME_NS = {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9, "ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def unit_factor(unit: str) -> float:
    """The factor turning a value printed in `unit` into base units (bytes, sectors, nanoseconds, counts)."""
    u = unit.strip()
    if u in _TIME_NS:
        return _TIME_NS[u]
    m = re.fullmatch(r"([KMGT]?)(byte|sector)", u)
    if m:
        return _PREFIX[m.group(1)]
    return 1.0  # counts, blocks, registers, percentages


def _num(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def parse_rows(text: str, metrics: list[str]) -> list[dict[str, Any]]:
    """One row per profiled kernel from `ncu --csv --page raw` output: its name and `metrics` in base units.

    The row after the header holds the units (its ID cell is empty); lines that are not CSV rows
    (the child's own output, ncu's ==PROF== notes) are dropped.
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


def parse_csv(text: str) -> list[dict[str, Any]]:
    """parse_rows for METRICS, the fixed set this verifier reads."""
    return parse_rows(text, METRICS)


def run_ncu(p: AttnParams, phase: str, kernel_filter: list[str] | None, metrics: list[str],
            timeout: float = 240) -> list[dict[str, Any]]:
    """Profile one pass of `p` in a child process under ncu; one row per profiled kernel with `metrics`.

    Only names from a verifier's own metric list reach ncu's command line; the kernel filter is escaped.
    """
    ncu = shutil.which("ncu")
    if ncu is None:
        raise RuntimeError("ncu (Nsight Compute) is not on PATH")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the project root
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
           "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG", ":4096:8")}
    select = ["--kernel-name", "regex:" + "|".join(re.escape(s) for s in kernel_filter)] if kernel_filter else []
    cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--target-processes", "all",
           *select, "--metrics", ",".join(metrics), "--csv", "--page", "raw", "--print-units", "base",
           sys.executable, "-c", _CHILD, json.dumps(p.model_dump(include=set(AttnParams.model_fields))), phase]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=root)
    rows = parse_rows(res.stdout, metrics)
    if res.returncode != 0 or not rows:
        raise RuntimeError(f"ncu failed (exit {res.returncode}, {len(rows)} kernels profiled): "
                           f"{(res.stderr or res.stdout)[-600:]}")
    return rows


def profile_pass(p: NcuParams | AttnParams, phase: str, kernel_filter: list[str] | None = None,
                 timeout: float = 240) -> list[dict[str, Any]]:
    """One row per profiled kernel: name and the METRICS values (base units: bytes, sectors, ns, %)."""
    return run_ncu(p, phase, kernel_filter, METRICS, timeout)


def configurations(p: NcuParams) -> tuple[AttnParams | None, str | None]:
    """The comparison configuration (`other` over p) and why the check must skip here, if it must.

    A pinned implementation whose build is not on this machine skips rather than fails.
    """
    from verifiers.gpu import pinned as gpu_pinned
    from verifiers.gpu.params import PINNED_IMPLS

    other_p = (AttnParams.model_validate({**p.model_dump(include=set(AttnParams.model_fields)), **p.other})
               if p.other else None)
    for q in (p, other_p):
        if q is not None and q.impl in PINNED_IMPLS and (why := gpu_pinned.available(q.impl)):
            return other_p, why
    return other_p, None


def tensor_bytes(p: AttnParams) -> dict[str, int]:
    """Sizes of the problem's tensors in bytes: Q, K+V, O (in the input dtype) and the FP32 LSE."""
    elt = 2  # bf16 / fp16, the only dtypes AttnParams admits
    sk, hk = p.seqlen_k or p.seqlen_q, p.heads_kv or p.heads
    q = p.batch * p.seqlen_q * p.heads * p.head_dim * elt
    return {"q": q, "kv": 2 * p.batch * sk * hk * p.head_dim * elt, "o": q, "lse": p.batch * p.heads * p.seqlen_q * 4}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Byte totals over the kernels and the longest kernel's launch and occupancy figures."""
    longest = max(rows, key=lambda r: r["gpu__time_duration.sum"] or 0)
    limits = [longest[m] for m in ("launch__occupancy_limit_blocks", "launch__occupancy_limit_registers",
                                   "launch__occupancy_limit_shared_mem", "launch__occupancy_limit_warps")]
    read = sum(r["dram__bytes_read.sum"] or 0 for r in rows)
    write = sum(r["dram__bytes_write.sum"] or 0 for r in rows)
    return {
        "kernels": len(rows),
        "dram_bytes": read + write, "dram_read_bytes": read, "dram_write_bytes": write,
        "l2_read_bytes": SECTOR_BYTES * sum(r["lts__t_sectors_srcunit_tex_op_read.sum"] or 0 for r in rows),
        "global_load_bytes": SECTOR_BYTES * sum(r["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"] or 0
                                                for r in rows),
        "occ_limit_blocks": limits[0], "occ_limit_registers": limits[1],
        "occ_limit_shared_mem": limits[2], "occ_limit_warps": limits[3],
        "occ_ctas_per_sm": min((v for v in limits if v is not None), default=None),
        "registers_per_thread": longest["launch__registers_per_thread"],
        "block_threads": longest["launch__block_size"],
        "smem_dynamic_bytes": longest["launch__shared_mem_per_block_dynamic"],
        "achieved_occupancy_pct": longest["sm__warps_active.avg.pct_of_peak_sustained_active"],
        "longest_kernel": longest["name"][:160],
    }


def measurements(this: dict[str, Any], sizes: dict[str, int], other: dict[str, Any] | None) -> dict[str, tuple[Any, str]]:
    """The verifier's measurements from one profile (and the comparison configuration's, if any)."""
    meas: dict[str, tuple[Any, str]] = {
        "dram_bytes": (this["dram_bytes"], "bytes"),
        "dram_read_bytes": (this["dram_read_bytes"], "bytes"),
        "dram_write_bytes": (this["dram_write_bytes"], "bytes"),
        "l2_read_bytes": (this["l2_read_bytes"], "bytes the SMs read from L2"),
        "global_load_bytes": (this["global_load_bytes"], "bytes global-load instructions requested"),
        "kernels": (this["kernels"], "launches"),
        "occ_limit_blocks": (this["occ_limit_blocks"], "CTAs/SM"),
        "occ_limit_registers": (this["occ_limit_registers"], "CTAs/SM"),
        "occ_limit_shared_mem": (this["occ_limit_shared_mem"], "CTAs/SM"),
        "occ_limit_warps": (this["occ_limit_warps"], "CTAs/SM"),
        "occ_ctas_per_sm": (this["occ_ctas_per_sm"], "CTAs/SM (the tightest limit)"),
        "registers_per_thread": (this["registers_per_thread"], "registers"),
        "block_threads": (this["block_threads"], "threads"),
        "smem_dynamic_bytes": (this["smem_dynamic_bytes"], "bytes per CTA"),
        "achieved_occupancy_pct": (this["achieved_occupancy_pct"], "% of peak warps"),
        "dram_write_over_o_lse": (this["dram_write_bytes"] / (sizes["o"] + sizes["lse"]), "x bytes of O and LSE"),
        "dram_read_over_l2_read": (this["dram_read_bytes"] / max(this["l2_read_bytes"], 1), "x"),
        "l2_read_over_kv": (this["l2_read_bytes"] / sizes["kv"], "x bytes of K and V"),
    }
    if other is not None:
        meas["other_dram_bytes"] = (other["dram_bytes"], "bytes")
        meas["other_l2_read_bytes"] = (other["l2_read_bytes"], "bytes")
        meas["dram_ratio_other_to_this"] = (other["dram_bytes"] / max(this["dram_bytes"], 1), "x")
        meas["l2_read_delta_over_kv"] = ((other["l2_read_bytes"] - this["l2_read_bytes"]) / sizes["kv"],
                                         "x bytes of K and V (other minus this)")
        meas["global_load_delta_over_kv"] = ((other["global_load_bytes"] - this["global_load_bytes"]) / sizes["kv"],
                                             "x bytes of K and V (other minus this)")
    return meas


@verifier("gpu.ncu-metrics", kind="gpu-profile", params=NcuParams, requires=Requirements(cuda=True, min_cc=80),
          timeout_s=600)
def ncu_metrics(p: NcuParams, ctx: Context) -> Outcome:
    """DRAM and L2 bytes over the pass's kernels and the longest kernel's occupancy limiters (Nsight Compute)."""
    other_p, why = configurations(p)
    if why:
        return Outcome(verdict="skipped", reason=why)
    this = summarize(profile_pass(p, p.phase, p.kernel_filter))
    other = summarize(profile_pass(other_p, p.phase, p.kernel_filter)) if other_p is not None else None
    log: dict[str, Any] = {"this": this, "tensor_bytes": tensor_bytes(p)}
    if other is not None:
        log["other"] = other
    return Outcome(measurements=measurements(this, tensor_bytes(p), other), log=json.dumps(log, indent=1),
                   environment={"kernels": [this["longest_kernel"]], "method": "ncu --clock-control none",
                                "kernel_filter": p.kernel_filter})
