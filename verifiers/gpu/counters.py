"""Nsight Compute counters a check names: memory-system sectors, reductions at L2, SM activity, and ratios.

gpu.ncu-metrics reads a fixed set (DRAM and L2 bytes, occupancy limiters); this verifier reads the counters a
claim needs from a closed list (COUNTERS: kb's names for Nsight Compute metrics, so claims data never reaches
ncu's command line as free text), from the same profiled pass (ncu.py's child: warm-up first, then one pass
between cudaProfilerStart/Stop), and derives the ratios those claims are stated in: sectors per global-load
request (coalescing), DRAM writes over the bytes of reductions that reached L2 (whether L2 resolves atomics),
the share of SM cycles that were active (how full the GPU was). With `other`, a second configuration is
profiled the same way and every figure gets an `other_` value and a `ratio_` (other over this).

Counters are summed over every profiled kernel that `kernel_filter` selects; a counter Nsight Compute does not
report on this GPU is an error that names it, never a zero. Two counters are per-SM statistics of one kernel
(the busiest SM's active cycles and the mean over all SMs, idle ones included): their ratio says how unevenly
the kernel's CTAs loaded the SMs, and a check that reads them must select exactly one kernel. `part_filter`
names some of the profiled kernels; each summed counter then also gets `part_share_<counter>`, their share of
the total (the time of a backward's preprocess and conversion launches, say). A ratio whose denominator is 0
is left out and the log says so; it is never recorded as infinite.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import field_validator

from kb.registry import Context, Outcome, Requirements, verifier
from verifiers.gpu.ncu import NcuParams, configurations, run_ncu, tensor_bytes
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
    # Per-SM statistics of one kernel, not sums: the busiest SM's active cycles and the mean over every SM.
    "sm_active_cycles_max": "sm__cycles_active.max",
    "sm_active_cycles_avg": "sm__cycles_active.avg",
}
PER_KERNEL = {"sm_active_cycles_max", "sm_active_cycles_avg"}
UNITS = {
    "dram_read_bytes": "bytes", "dram_write_bytes": "bytes", "gpu_time_ns": "ns (sum over the kernels)",
    "l2_read_sectors": "32-byte sectors read from L2 by the SMs", "l2_red_sectors": "sectors reduced at L2",
    "l2_atom_sectors": "sectors of atomics at L2", "global_ld_sectors": "LDG sectors",
    "global_ld_requests": "LDG requests", "global_red_requests": "RED requests",
    "sm_active_cycles": "SM-cycles", "sm_elapsed_cycles": "SM-cycles",
    "sectors_per_ld_request": "sectors per global-load request", "sm_active_frac": "of SM-cycles elapsed",
    "dram_write_over_red_bytes": "x bytes of reductions at L2", "l2_read_over_kv": "x bytes of K and V",
    "red_bytes_over_dram_write": "x DRAM bytes written",
    "sm_active_cycles_max": "cycles (busiest SM)", "sm_active_cycles_avg": "cycles (mean over SMs)",
    "sm_active_max_over_avg": "x (busiest SM over the mean)", "red_bytes_over_kv": "x bytes of K and V",
}


class CounterParams(NcuParams):
    """The pass and kernels to profile (as gpu.ncu-metrics), and which of COUNTERS to read."""

    counters: list[str]
    part_filter: list[str] = []  # substrings of some profiled kernels' names: their share of each summed counter

    @field_validator("part_filter")
    @classmethod
    def _part_names(cls, v: list[str]) -> list[str]:
        for x in v:
            if not re.fullmatch(r"[A-Za-z0-9_]+", x):
                raise ValueError(f"part_filter entries are identifier substrings, got {x!r}")
        return v

    @field_validator("counters")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        unknown = [c for c in v if c not in COUNTERS]
        if unknown or not v:
            raise ValueError(f"counters must name some of {sorted(COUNTERS)}; unknown: {unknown}")
        return v


def profile(p: AttnParams, phase: str, kernel_filter: list[str], names: list[str],
            timeout: float = 300) -> list[dict[str, Any]]:
    """One row per profiled kernel: its name and the named counters in base units (None where not reported)."""
    rows = run_ncu(p, phase, kernel_filter, [COUNTERS[n] for n in names], timeout)
    return [{"name": r["name"], **{n: r[COUNTERS[n]] for n in names}} for r in rows]


def totals(rows: list[dict[str, Any]], names: list[str], part_filter: list[str] | None = None,
           notes: list[str] | None = None) -> dict[str, float]:
    """Each counter summed over the kernels (a per-SM statistic: of the one kernel), then the ratios it allows.

    A ratio with a zero denominator is left out and explained in `notes`.
    """
    notes = notes if notes is not None else []
    out: dict[str, float] = {}
    for n in names:
        missing = [r["name"][:80] for r in rows if r.get(n) is None]
        if missing:
            raise RuntimeError(f"Nsight Compute reported no value of {COUNTERS[n]} ({n}) for {missing[:3]}")
        if n in PER_KERNEL and len(rows) != 1:
            raise RuntimeError(f"{n} is a per-SM statistic of one kernel, but {len(rows)} kernels were profiled "
                               f"({sorted({r['name'][:60] for r in rows})[:3]}); narrow kernel_filter")
        out[n] = float(sum(r[n] for r in rows))

    def ratio(key: str, num: float, den: float) -> None:
        if den:
            out[key] = num / den
        else:
            notes.append(f"{key} left out: its denominator is 0")

    if "global_ld_requests" in out:
        ratio("sectors_per_ld_request", out["global_ld_sectors"], out["global_ld_requests"])
    if "sm_elapsed_cycles" in out:
        ratio("sm_active_frac", out["sm_active_cycles"], out["sm_elapsed_cycles"])
    if "sm_active_cycles_max" in out and "sm_active_cycles_avg" in out:
        ratio("sm_active_max_over_avg", out["sm_active_cycles_max"], out["sm_active_cycles_avg"])
    if "l2_red_sectors" in out and "dram_write_bytes" in out:
        red = SECTOR * out["l2_red_sectors"]
        ratio("dram_write_over_red_bytes", out["dram_write_bytes"], red)
        ratio("red_bytes_over_dram_write", red, out["dram_write_bytes"])
    if part_filter:
        part = [r for r in rows if any(f in r["name"] for f in part_filter)]
        if not part:
            raise RuntimeError(f"no profiled kernel matches part_filter {part_filter}: "
                               f"{sorted({r['name'][:60] for r in rows})[:4]}")
        for n in names:
            if n not in PER_KERNEL:
                ratio(f"part_share_{n}", float(sum(r[n] for r in part)), out[n])
    return out


def _per_kv(figures: dict[str, float], kv: int) -> dict[str, float]:
    """The figures with the traffic ones restated in bytes of K and V."""
    extra = {}
    if "l2_read_sectors" in figures:
        extra["l2_read_over_kv"] = SECTOR * figures["l2_read_sectors"] / kv
    if "l2_red_sectors" in figures:
        extra["red_bytes_over_kv"] = SECTOR * figures["l2_red_sectors"] / kv
    return {**figures, **extra}


def measurements(this: dict[str, float], other: dict[str, float] | None, sizes: dict[str, int],
                 notes: list[str] | None = None) -> dict[str, tuple[Any, str]]:
    """This configuration's figures, and with another one its figures and other-over-this ratios."""
    notes = notes if notes is not None else []
    this = _per_kv(this, sizes["kv"])
    meas: dict[str, tuple[Any, str]] = {k: (round(v, 6), UNITS.get(k, "")) for k, v in this.items()}
    if other is not None:
        other = _per_kv(other, sizes["kv"])
        for k, v in other.items():
            meas[f"other_{k}"] = (round(v, 6), UNITS.get(k, ""))
            if k in this:
                if this[k]:
                    meas[f"ratio_{k}"] = (round(v / this[k], 6), "x (other over this)")
                else:
                    notes.append(f"ratio_{k} left out: this configuration's {k} is 0")
            if k in BYTES_PER and k in this:
                meas[f"{k}_delta_over_kv"] = (round((v - this[k]) * BYTES_PER[k] / sizes["kv"], 6),
                                              "x bytes of K and V (other minus this)")
    return meas


@verifier("gpu.ncu-counters", kind="gpu-profile", params=CounterParams, requires=Requirements(cuda=True, min_cc=80),
          timeout_s=900)
def ncu_counters(p: CounterParams, ctx: Context) -> Outcome:
    """The named Nsight Compute counters over the pass's kernels (and another configuration's), with ratios."""
    other_p, why = configurations(p)
    if why:
        return Outcome(verdict="skipped", reason=why)
    notes: list[str] = []
    rows = profile(p, p.phase, p.kernel_filter, p.counters)
    this = totals(rows, p.counters, p.part_filter, notes)
    other_rows = profile(other_p, p.phase, p.kernel_filter, p.counters) if other_p is not None else None
    other = totals(other_rows, p.counters, p.part_filter, notes) if other_rows is not None else None
    meas = measurements(this, other, tensor_bytes(p), notes)
    log: dict[str, Any] = {"this": rows, "other": other_rows, "metrics": {n: COUNTERS[n] for n in p.counters},
                           "notes": notes}
    names = sorted({r["name"][:120] for r in rows + (other_rows or [])})
    return Outcome(measurements=meas, log=json.dumps(log, indent=1)[-20000:],
                   environment={"kernels": names[:8], "method": "ncu --clock-control none",
                                "kernel_filter": p.kernel_filter})
