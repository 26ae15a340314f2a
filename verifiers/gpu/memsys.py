"""kb's microbenchmarks of two memory-system rules on the GPU at hand: same-word atomics and the carveout.

The CUDA source is kb's (verifiers/gpu/cuda/memsys.cu), built here with fixed flags when the check runs.

- gpu.atomic-contention times one RED.E.ADD.F32 loop in two layouts that differ only in whether CTAs share
  the words they add to (each warp's lanes always address different words), and checks that every word ends
  at exactly the number of updates it received (FP32 adds of 1.0 are exact below 2**24): contention that
  serialises updates costs time; a lost update would show as a wrong sum.
- gpu.carveout-residency sweeps the preferred shared-memory carveout of a kernel with a fixed dynamic
  shared-memory size and counts, in the kernel, the most CTAs resident on one SM at once. The counts are
  compared with the two models a claim may name: the SM picks one of the documented shared-memory capacities
  (SUPPORTED_KB) and fits whole CTAs into it, or the requested percentage of the pool is divided on a
  continuous scale.
"""

from __future__ import annotations

import ctypes
import statistics
import tempfile
from pathlib import Path
from typing import Any, Literal

from kb.registry import Context, Outcome, Params, Requirements, verifier
from verifiers.gpu.verdict import judge_spread

HASH_FILES = ["cuda/memsys.cu"]
CUDA_ANY = Requirements(cuda=True, min_cc=80)
GENCODES = ("arch=compute_80,code=sm_80", "arch=compute_90,code=sm_90")

# Shared-memory capacities an SM can be configured to, in KB: the Ampere tuning guide (A100, sm_80) and the
# Hopper tuning guide (sm_90), sources nvidia-ampere-tuning-guide and nvidia-hopper-tuning-guide.
SUPPORTED_KB: dict[int, tuple[int, ...]] = {
    80: (0, 8, 16, 32, 64, 100, 132, 164),
    90: (0, 8, 16, 32, 64, 100, 132, 164, 196, 228),
}
MAX_CTAS_PER_SM = {80: 32, 90: 32}  # the block-count limit per SM (CUDA compute capability tables)


def _library(work: Path) -> tuple[Any, Path]:
    from verifiers.pinned.trajectory import build

    so, _ = build("memsys.cu", work / "libmemsys.so", GENCODES, kind="so")
    lib = ctypes.CDLL(str(so))
    lib.kb_red_run.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    lib.kb_resident_run.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                    ctypes.c_ulonglong, ctypes.c_void_p]
    lib.kb_smem_limits.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    return lib, so


def _red_sass(so: Path) -> int:
    from verifiers.pinned.trajectory import sass_counts

    for name, counts in sass_counts(so).items():
        if "kb_red_kernel" in name:
            return sum(v for k, v in counts.items() if k.startswith("RED") and ".ADD.F32" in k)
    raise RuntimeError("kb_red_kernel not found in the SASS of libmemsys.so")


class ContentionParams(Params):
    """Which two layouts to time against each other, grid size per SM, loop length and launch pairs."""

    # slow / fast: the layout expected to be slower, and the one it is compared with (the negative control
    # compares a layout with itself).
    slow: Literal["shared-words", "private-words"] = "shared-words"
    fast: Literal["shared-words", "private-words"] = "private-words"
    ctas_per_sm: int = 8
    iters: int = 200
    repeats: int = 7
    min_cc: int | None = None
    max_cc: int | None = None


@verifier("gpu.atomic-contention", kind="gpu-benchmark", params=ContentionParams, requires=CUDA_ANY, timeout_s=240)
def atomic_contention(p: ContentionParams, ctx: Context) -> Outcome:
    """Time FP32 RED adds when CTAs share their target words against when each CTA owns its own words."""
    import torch

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    grid = sms * p.ctas_per_sm
    if grid * p.iters >= 2**24:
        raise ValueError(f"{grid} CTAs x {p.iters} iterations reaches 2**24 adds per word: FP32 sums stop being exact")
    stream = torch.cuda.current_stream().cuda_stream
    times: dict[str, list[float]] = {"slow": [], "fast": []}
    exact = True
    with tempfile.TemporaryDirectory() as tmp:
        lib, so = _library(Path(tmp))
        n_red = _red_sass(so)
        if n_red < 1:
            raise RuntimeError("kb_red_kernel holds no RED.E.ADD.F32: the loop is not the instruction measured")
        for i in range(p.repeats + 2):
            for role in ("slow", "fast"):  # interleaved: clock drift touches both alike
                layout = p.slow if role == "slow" else p.fast
                shared = 1 if layout == "shared-words" else 0
                words = torch.zeros(128 * grid, dtype=torch.float32, device="cuda")
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                rc = lib.kb_red_run(ctypes.c_void_p(words.data_ptr()), shared, grid, p.iters, ctypes.c_void_p(stream))
                b.record()
                torch.cuda.synchronize()
                if rc != 0:
                    raise RuntimeError(f"launch failed ({rc})")
                want = float(grid * p.iters) if shared else float(p.iters)
                used = words[:128] if shared else words
                exact = exact and bool(torch.all(used == want).item())
                if i >= 2:
                    times[role].append(a.elapsed_time(b))
    ratios = sorted(s / f for s, f in zip(times["slow"], times["fast"], strict=True))
    updates = grid * 128 * p.iters
    meas: dict[str, tuple[Any, str]] = {
        "slow_over_fast": (round(statistics.median(ratios), 3),
                           f"{p.slow} time over {p.fast} time, median of {p.repeats} interleaved launch pairs"),
        "slow_over_fast_spread": ([round(ratios[0], 3), round(ratios[-1], 3)], "lowest..highest launch pair"),
        "slow_ms": (round(statistics.median(times["slow"]), 4), f"{p.slow}, median launch"),
        "fast_ms": (round(statistics.median(times["fast"]), 4), f"{p.fast}, median launch"),
        "updates_per_launch": (updates, "FP32 RED adds"),
        "sums_exact": (exact, "every word ended at exactly the number of adds it received"),
        "red_sass": (n_red, "static RED.E.ADD.F32 in kb_red_kernel"),
        "ctas": (grid, f"{p.ctas_per_sm} per SM x {sms} SMs, 128 threads each"),
    }
    log = (f"grid {grid} x 128, {p.iters} adds per thread; ms {p.slow} {[round(t, 4) for t in times['slow']]}, "
           f"{p.fast} {[round(t, 4) for t in times['fast']]}")
    out = Outcome(measurements=meas, log=log, environment={"torch": torch.__version__})
    return judge_spread(out, {"slow_over_fast": (ratios[0], ratios[-1])}, ctx)


class CarveoutParams(Params):
    """Dynamic shared memory per CTA, the carveout percentages to sweep, and how long each CTA stays resident."""

    smem_bytes: int = 9 * 1024
    percents: list[int] = list(range(0, 101, 5))
    hold_us: int = 200
    min_cc: int | None = None
    max_cc: int | None = None


def residency_models(smem: int, reserved: int, per_sm: int, supported_kb: tuple[int, ...], max_ctas: int,
                     pct: int) -> tuple[set[int], int]:
    """CTAs per SM allowed by each documented capacity (at least one: a launch always fits one CTA), and what
    a continuous division of the requested percentage would give."""
    per_cta = smem + reserved
    discrete = {max(1, min(max_ctas, (kb * 1024) // per_cta)) for kb in supported_kb}
    continuous = max(1, min(max_ctas, int(pct / 100 * per_sm) // per_cta))
    return discrete, continuous


@verifier("gpu.carveout-residency", kind="gpu-kernel-run", params=CarveoutParams, requires=CUDA_ANY, timeout_s=240)
def carveout_residency(p: CarveoutParams, ctx: Context) -> Outcome:
    """Most CTAs resident per SM at each preferred carveout, against the discrete and the continuous model."""
    import torch

    major, minor = torch.cuda.get_device_capability(0)
    cc = 10 * major + minor
    if cc not in SUPPORTED_KB:
        return Outcome(verdict="skipped", reason=f"no documented shared-memory capacities for sm_{cc} in kb")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    stream = torch.cuda.current_stream().cuda_stream
    grid = sms * (MAX_CTAS_PER_SM[cc] + 8)  # more CTAs than any SM can hold at once
    seen: dict[int, int] = {}
    agree: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        lib, _ = _library(Path(tmp))
        per_sm, reserved = ctypes.c_int(), ctypes.c_int()
        if lib.kb_smem_limits(ctypes.byref(per_sm), ctypes.byref(reserved)) != 0:
            raise RuntimeError("device attribute query failed")
        for pct in p.percents:
            best = 0
            for _ in range(2):  # the first launch of a new configuration may still be reconfiguring SMs
                live = torch.zeros(1024, dtype=torch.int32, device="cuda")
                most = torch.zeros(1024, dtype=torch.int32, device="cuda")
                rc = lib.kb_resident_run(p.smem_bytes, pct, grid, ctypes.c_void_p(live.data_ptr()),
                                         ctypes.c_void_p(most.data_ptr()), p.hold_us * 1000, ctypes.c_void_p(stream))
                torch.cuda.synchronize()
                if rc != 0:
                    raise RuntimeError(f"launch at {pct}% failed ({rc})")
                used = [x for x in most.cpu().tolist() if x > 0]  # indexed by %smid, which may exceed the SM count
                top = max(used)
                if top >= best:
                    best = top
                    agree[pct] = sum(1 for x in used if x == top) / len(used)
            seen[pct] = best
    outside, differs = [], []
    for pct, r in seen.items():
        discrete, continuous = residency_models(p.smem_bytes, reserved.value, per_sm.value, SUPPORTED_KB[cc],
                                                MAX_CTAS_PER_SM[cc], pct)
        if r not in discrete:
            outside.append(pct)
        if r != continuous:
            differs.append(pct)
    discrete_all = sorted(residency_models(p.smem_bytes, reserved.value, per_sm.value, SUPPORTED_KB[cc],
                                           MAX_CTAS_PER_SM[cc], 0)[0])
    meas: dict[str, tuple[Any, str]] = {
        "residency_by_percent": ([seen[x] for x in p.percents], f"most CTAs on one SM at carveout {p.percents} %"),
        "distinct_residencies": (len(set(seen.values())), "different CTA counts over the sweep"),
        "percents_outside_supported": (len(outside), f"sweep points whose count no documented capacity gives "
                                                    f"(allowed: {discrete_all})"),
        "percents_continuous_differs": (len(differs), "sweep points where a continuous division gives another count"),
        "sms_at_max_min_fraction": (round(min(agree.values()), 3), "lowest share of SMs that reached the count"),
        "smem_per_sm_bytes": (per_sm.value, "cudaDevAttrMaxSharedMemoryPerMultiprocessor"),
        "reserved_per_cta_bytes": (reserved.value, "cudaDevAttrReservedSharedMemoryPerBlock"),
    }
    log = (f"sm_{cc}, {sms} SMs, {p.smem_bytes} B dynamic + {reserved.value} B reserved per CTA; counts {seen}; "
           f"outside the documented set at {outside}; continuous model differs at {differs}")
    return judge_spread(Outcome(measurements=meas, log=log, environment={"torch": torch.__version__}), {}, ctx)
