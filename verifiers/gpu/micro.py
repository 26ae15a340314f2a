"""kb's own CUDA microbenchmarks and tool probes on sm_90: per-SM per-clock throughput, occupancy
against spills, Compute Sanitizer's four tools, and which fatbinary image the runtime runs.

The CUDA sources are kb's (verifiers/gpu/cuda/), compiled here with fixed flags by
verifiers.pinned.trajectory.build when the check runs (a few seconds; nothing of the claims data
reaches nvcc). Throughput is counted in the kernel: each CTA records its SM (%smid) and clock64 at
the start and end of its timed loop; per SM, the operations its CTAs did over the cycles between the
earliest start and the latest end. That is a per-clock figure whatever clock the GPU ran at; launch
skew only lengthens the window, so it can only understate a peak. The SASS of each kernel is counted
too: a figure is refused if the instruction it is about is not the one the binary holds.
"""

from __future__ import annotations

import ctypes
import re
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Literal

from kb.hw import find_tool
from kb.registry import Context, Outcome, Params, Requirements, verifier
from verifiers.gpu.verdict import judge_spread

HASH_FILES = ["cuda/micro_tput.cu", "cuda/sanitizer_bugs.cu", "cuda/image_select.cu"]
SM90 = Requirements(cuda=True, min_cc=90, max_cc=90)

# Per probe: kernel index in micro_tput.cu, threads per CTA, the SASS opcode the figure is about (prefix), how many
# of them one loop iteration holds at least (the unrolled body), operations per thread per iteration, and the unit.
PROBES: dict[str, dict[str, Any]] = {
    "mufu-ex2": {"which": 0, "block": 1024, "sass": "MUFU.EX2", "per_iter": 8, "ops": 8,
                 "unit": "ex2 results per clock per SM", "kernel": "kb_ex2_kernel"},
    "smem-read": {"which": 1, "block": 1024, "sass": "LDS.128", "per_iter": 8, "ops": 8 * 16,
                  "unit": "bytes read from shared memory per clock per SM", "kernel": "kb_lds_kernel"},
    # a warpgroup (128 threads) issues 4 m64n256k16 MMAs per iteration: 4 * 2*64*256*16 FLOPs over 128 threads
    "wgmma-bf16": {"which": 2, "block": 256, "sass": "HGMMA.64x256x16.F32.BF16", "per_iter": 4,
                   "ops": 4 * 2 * 64 * 256 * 16 // 128,
                   "unit": "dense BF16 FLOPs (multiply-add = 2) per clock per SM", "kernel": "kb_wgmma_kernel"},
}


class MicroParams(Params):
    """Which microbenchmark, its loop length and how many timed launches."""

    probe: Literal["mufu-ex2", "smem-read", "wgmma-bf16", "occupancy-spill"]
    iters: int = 0  # 0 = the probe's default (about 1 ms of work per launch on an H200)
    repeats: int = 5
    min_cc: int | None = None
    max_cc: int | None = None


def _library(work: Path) -> tuple[Any, Path]:
    from verifiers.pinned.trajectory import build

    so, _ = build("micro_tput.cu", work / "libmicro.so", ("arch=compute_90a,code=sm_90a",), kind="so")
    lib = ctypes.CDLL(str(so))
    lib.kb_micro_tput.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                  ctypes.c_void_p]
    lib.kb_micro_regheavy.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                      ctypes.c_void_p, ctypes.c_void_p]
    return lib, so


def _kernel_counts(so: Path, kernel: str) -> dict[str, int]:
    from verifiers.pinned.trajectory import sass_counts

    for name, counts in sass_counts(so).items():
        if kernel in name:
            return dict(counts)
    raise RuntimeError(f"{kernel} not found in the SASS of {so.name}")


def per_sm_rates(rec: list[list[int]], ops_per_cta: float) -> tuple[list[float], list[float]]:
    """Per SM: operations per cycle and the clock (MHz) implied by cycles over globaltimer nanoseconds.

    rec holds (smid, clock64 start, clock64 end, ns elapsed) per CTA. clock64 is per SM, so the
    window is taken within one SM only: earliest start to latest end of the CTAs it ran.
    """
    by_sm: dict[int, list[list[int]]] = {}
    for r in rec:
        by_sm.setdefault(int(r[0]), []).append(r)
    rates, mhz = [], []
    for rows in by_sm.values():
        cycles = max(r[2] for r in rows) - min(r[1] for r in rows)
        if cycles <= 0:
            raise RuntimeError("a CTA recorded no elapsed cycles")
        rates.append(len(rows) * ops_per_cta / cycles)
        mhz.extend((r[2] - r[1]) / r[3] * 1e3 for r in rows if r[3] > 0)
    return rates, mhz


def _quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def _throughput(p: MicroParams, lib: Any, so: Path) -> Outcome:
    import torch

    spec = PROBES[p.probe]
    counts = _kernel_counts(so, spec["kernel"])
    n_sass = sum(v for k, v in counts.items() if k.startswith(spec["sass"]))
    if n_sass < spec["per_iter"]:
        # The operation count below assumes per_iter such instructions per iteration; the binary must hold them.
        raise RuntimeError(f"{spec['kernel']}: {n_sass} {spec['sass']} in its SASS, fewer than the {spec['per_iter']} "
                           "one loop iteration is counted as")
    ctas, regs, local = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    if lib.kb_micro_ctas_per_sm(spec["which"], ctypes.byref(ctas), ctypes.byref(regs), ctypes.byref(local)) != 0:
        raise RuntimeError("occupancy query failed")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    grid = sms * max(ctas.value, 1)  # one full wave: every CTA resident at once
    iters = p.iters or {"mufu-ex2": 2000, "smem-read": 1000, "wgmma-bf16": 2000}[p.probe]
    rec = torch.zeros(grid * 4, dtype=torch.int64, device="cuda")
    sink = torch.zeros(grid, dtype=torch.float32, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    ops_per_cta = spec["block"] * iters * spec["ops"]
    medians, rates_all, mhz_all = [], [], []
    for i in range(p.repeats + 2):  # two warm-up launches: module load, clocks ramping up
        rc = lib.kb_micro_tput(spec["which"], grid, iters, ctypes.c_void_p(rec.data_ptr()),
                               ctypes.c_void_p(sink.data_ptr()), ctypes.c_void_p(stream))
        torch.cuda.synchronize()
        if rc != 0:
            raise RuntimeError(f"launch failed ({rc})")
        if i < 2:
            continue
        rates, mhz = per_sm_rates(rec.view(grid, 4).cpu().tolist(), ops_per_cta)
        medians.append(statistics.median(rates))
        rates_all += rates
        mhz_all += mhz
    med = statistics.median(medians)
    lo, hi = _quantile(rates_all, 0.1), _quantile(rates_all, 0.9)
    meas: dict[str, tuple[Any, str]] = {
        "per_clock_per_sm": (round(med, 2), spec["unit"] + f" (median over SMs, median of {p.repeats} launches)"),
        "per_clock_per_sm_p10": (round(lo, 2), "10th percentile over SMs and launches"),
        "per_clock_per_sm_p90": (round(hi, 2), "90th percentile over SMs and launches"),
        "sms_measured": (len(rates_all) // p.repeats, f"of {sms} SMs"),
        "ctas_per_sm": (ctas.value, "resident CTAs per SM (cudaOccupancyMaxActiveBlocksPerMultiprocessor)"),
        "sass_instructions": (n_sass, f"static {spec['sass']} in {spec['kernel']}"),
        "sm_clock_mhz_in_kernel": (round(statistics.median(mhz_all), 1), "clock64 cycles over %globaltimer ns"),
        "registers": (regs.value, "per thread"),
    }
    log = (f"{p.probe}: grid {grid} x {spec['block']} threads, {iters} iterations, {p.repeats} timed launches; "
           f"per-launch medians {[round(x, 2) for x in medians]}; SASS {spec['kernel']}: "
           f"{ {k: v for k, v in counts.items() if k.startswith(spec['sass'].split('.')[0])} }")
    return Outcome(measurements=meas, log=log, environment={"torch": torch.__version__})


def _occupancy_spill(p: MicroParams, lib: Any, so: Path) -> Outcome:
    import torch

    info = {}
    for capped in (0, 1):
        ctas, regs, local = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        if lib.kb_micro_ctas_per_sm(3 + capped, ctypes.byref(ctas), ctypes.byref(regs), ctypes.byref(local)) != 0:
            raise RuntimeError("occupancy query failed")
        info[capped] = {"ctas": ctas.value, "regs": regs.value, "local": local.value}
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    grid, iters = sms * 16, p.iters or 400
    out = torch.empty(grid * 256, dtype=torch.float32, device="cuda")
    live = torch.zeros(1024, dtype=torch.int32, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    times: dict[int, list[float]] = {0: [], 1: []}
    most: dict[int, int] = {}
    for i in range(p.repeats + 2):
        for capped in (0, 1):  # interleaved, so drift in clocks touches both builds alike
            peak = torch.zeros(1024, dtype=torch.int32, device="cuda")
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            rc = lib.kb_micro_regheavy(capped, grid, iters, ctypes.c_void_p(out.data_ptr()),
                                       ctypes.c_void_p(live.data_ptr()), ctypes.c_void_p(peak.data_ptr()),
                                       ctypes.c_void_p(stream))
            b.record()
            torch.cuda.synchronize()
            if rc != 0:
                raise RuntimeError(f"launch failed ({rc})")
            if i >= 2:
                times[capped].append(a.elapsed_time(b))
                most[capped] = max(most.get(capped, 0), int(peak.max().item()))
    ratios = sorted(c / u for c, u in zip(times[1], times[0], strict=True))
    ratio = statistics.median(ratios)
    warps = {k: v["ctas"] * 256 // 32 for k, v in info.items()}
    meas: dict[str, tuple[Any, str]] = {
        "registers_uncapped": (info[0]["regs"], "per thread, __launch_bounds__(256, 1)"),
        "registers_capped": (info[1]["regs"], "per thread, __launch_bounds__(256, 8)"),
        "local_bytes_capped": (info[1]["local"], "local memory per thread (spills)"),
        "warps_per_sm_uncapped": (warps[0], "theoretical, from the occupancy API"),
        "warps_per_sm_capped": (warps[1], "theoretical, from the occupancy API"),
        "occupancy_gain": (round(warps[1] / max(warps[0], 1), 3), "capped over uncapped warps per SM"),
        "ctas_resident_seen_uncapped": (most[0], "most CTAs on one SM at once (in-kernel counter)"),
        "ctas_resident_seen_capped": (most[1], "most CTAs on one SM at once (in-kernel counter)"),
        "time_ratio_capped_over_uncapped": (round(ratio, 3), f"median over {p.repeats} interleaved launch pairs"),
        "higher_occupancy_slower": (warps[1] > warps[0] and most[1] > most[0] and ratio > 1.0,
                                    "the build with more resident warps took longer"),
    }
    # The ratio's spread is its lowest and highest launch pair: a verdict that flips within it is inconclusive.
    meas["time_ratio_spread"] = ([round(ratios[0], 3), round(ratios[-1], 3)], "lowest..highest launch pair")
    log = (f"grid {grid} x 256, {iters} iterations of 64 FMAs; ms uncapped {[round(t, 3) for t in times[0]]}, "
           f"capped {[round(t, 3) for t in times[1]]}; {info}")
    return Outcome(measurements=meas, log=log, environment={"torch": torch.__version__})


@verifier("gpu.micro", kind="gpu-benchmark", params=MicroParams, requires=SM90, timeout_s=240)
def micro(p: MicroParams, ctx: Context) -> Outcome:
    """One of kb's microbenchmarks (verifiers/gpu/cuda/micro_tput.cu): per-SM per-clock throughput, or occupancy vs spills."""
    with tempfile.TemporaryDirectory() as tmp:
        lib, so = _library(Path(tmp))
        out = _occupancy_spill(p, lib, so) if p.probe == "occupancy-spill" else _throughput(p, lib, so)
    m = out.measurements
    if p.probe == "occupancy-spill":
        ends = {"time_ratio_capped_over_uncapped": tuple(m["time_ratio_spread"][0])}
    else:
        ends = {"per_clock_per_sm": (m["per_clock_per_sm_p10"][0], m["per_clock_per_sm_p90"][0])}
    return judge_spread(out, ends, ctx)


# ---- Compute Sanitizer ----

# Per tool: the seeded case it must catch, and a phrase of its report that names the bug class.
SANITIZER_CASES = {
    "memcheck": ("oob", r"Invalid __global__ write"),
    "initcheck": ("uninit", r"Uninitialized __global__ memory read"),
    "racecheck": ("race", r"(Race reported|hazard)"),
    "synccheck": ("divergent", r"Barrier error"),
}


class SanitizerParams(Params):
    """Which tools to run (each on its seeded bug and on the clean kernel), plus optional cross runs."""

    tools: list[Literal["memcheck", "initcheck", "racecheck", "synccheck"]] = list(SANITIZER_CASES)
    # (tool, case) pairs run besides: a tool on another tool's bug (what it does not claim to find)
    cross: list[tuple[Literal["memcheck", "initcheck", "racecheck", "synccheck"],
                      Literal["oob", "uninit", "race", "divergent", "clean"]]] = []
    min_cc: int | None = None
    max_cc: int | None = None


def sanitizer_errors(text: str) -> int | None:
    """The error count of a Compute Sanitizer report (ERROR SUMMARY, or racecheck's hazard summary)."""
    found = [int(m) for m in re.findall(r"ERROR SUMMARY: (\d+) error", text)]
    found += [int(m) for m in re.findall(r"RACECHECK SUMMARY: (\d+) hazard", text)]
    return max(found) if found else None


@verifier("gpu.sanitizer", kind="gpu-kernel-run", params=SanitizerParams,
          requires=Requirements(cuda=True, min_cc=80, tools=("nvcc", "compute-sanitizer")), timeout_s=300)
def sanitizer(p: SanitizerParams, ctx: Context) -> Outcome:
    """Run each Compute Sanitizer tool on kb's kernel seeded with its bug class and on a clean kernel."""
    from verifiers.pinned.trajectory import build

    tool = find_tool("compute-sanitizer")
    if tool is None:
        return Outcome(verdict="skipped", reason="compute-sanitizer is not installed")
    meas: dict[str, tuple[Any, str]] = {}
    log = []
    with tempfile.TemporaryDirectory() as tmp:
        exe, _ = build("sanitizer_bugs.cu", Path(tmp) / "bugs", ("arch=compute_90,code=sm_90",), extra=("-lineinfo",))

        def run(t: str, case: str) -> tuple[int | None, str]:
            try:
                res = subprocess.run([tool, "--tool", t, str(exe), case], capture_output=True, text=True, timeout=60)
                text = res.stdout + res.stderr
            except subprocess.TimeoutExpired:
                text = "(timed out after 60 s)"
            log.append(f"--- {t} {case}:\n" + "\n".join(text.splitlines()[:12]))
            return sanitizer_errors(text), text

        for t in p.tools:
            case, marker = SANITIZER_CASES[t]
            n, text = run(t, case)
            meas[f"{t}_reports_{case}"] = (bool(n) and re.search(marker, text) is not None,
                                            f"{t} reports the seeded bug with '{marker}'")
            meas[f"{t}_errors_{case}"] = (n, "errors reported")
            n_clean, _ = run(t, "clean")
            meas[f"{t}_errors_clean"] = (n_clean, "errors on the clean kernel")
        for t, case in p.cross:
            n, _ = run(t, case)
            meas[f"{t}_errors_{case}"] = (n, "errors reported (a bug of another class)")
        version = subprocess.run([tool, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    return Outcome(measurements=meas, log="\n".join(log)[-6000:],
                   environment={"compute_sanitizer": version[-1] if version else "?"})


# ---- which fatbinary image runs ----

# Three builds of one kernel: which images each fatbinary holds (verifiers/pinned/trajectory.py names the codes).
IMAGE_BUILDS = {
    "sass80-sass90-ptx86": ("arch=compute_80,code=sm_80", "arch=compute_90,code=sm_90",
                            "arch=compute_86,code=compute_86"),
    "sass80-ptx86": ("arch=compute_80,code=sm_80", "arch=compute_86,code=compute_86"),
    "sass80": ("arch=compute_80,code=sm_80",),
}


class ImageParams(Params):
    """No knobs: the three builds are fixed (IMAGE_BUILDS)."""

    min_cc: int | None = None
    max_cc: int | None = None


@verifier("gpu.image-select", kind="gpu-kernel-run", params=ImageParams, requires=SM90, timeout_s=240)
def image_select(p: ImageParams, ctx: Context) -> Outcome:
    """Launch one kernel from three fatbinaries; the kernel reports the __CUDA_ARCH__ of the image that ran."""
    from verifiers.pinned.trajectory import build

    meas: dict[str, tuple[Any, str]] = {}
    log = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, codes in IMAGE_BUILDS.items():
            exe, _ = build("image_select.cu", Path(tmp) / name, codes)
            res = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
            line = (res.stdout.strip().splitlines() or ["(no output)"])[-1]
            log.append(f"{name} ({', '.join(codes)}): {line}")
            m = re.fullmatch(r"arch (\d+)", line)
            if m:  # no launch, no arch: the launch error below says why (a measurement is never null)
                meas[f"arch_ran_{name.replace('-', '_')}"] = (int(m.group(1)), "__CUDA_ARCH__ of the image that ran")
            meas[f"launch_error_{name.replace('-', '_')}"] = (line.split()[1] if line.startswith("error") else "none",
                                                              "the runtime's error name")
    return Outcome(measurements=meas, log="\n".join(log), environment={})
