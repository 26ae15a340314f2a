"""GPU probes of the execution model: which SM runs a CTA, whether waves have barriers, the mma.sync
fragment layout, atomics, and dense GEMM throughput.

The kernels are kb's own (verifiers/pinned/harness/probes.cu, built by verifiers.pinned.build as `probes`);
GEMM throughput uses torch.matmul (cuBLAS). Each probe reports raw observations; the claim's
expectation decides.
"""

from __future__ import annotations

import ctypes
from typing import Any, Literal

from kb.registry import Context, Outcome, Params, Requirements, verifier
from verifiers.gpu.verdict import judge_absence, judge_spread

SM90 = Requirements(cuda=True, min_cc=90, max_cc=90)


class ProbeParams(Params):
    """Which probe and its knobs."""

    probe: Literal["smid", "mma-fragment", "atomic", "gemm"]
    # smid: grid of CTAs, threads per CTA, dynamic shared memory per CTA (sizes CTAs per SM), spin time
    grid: int = 1000
    block: int = 1024
    smem_bytes: int = 0
    spin_us: float = 20.0
    slow_factor: int = 20  # CTA 0 spins this many times longer
    # mma-fragment: a deliberately wrong layout for negative controls
    perturb: Literal["none", "swap-a-rows", "swap-cd-cols"] = "none"
    # atomic
    repeats: int = 20
    # gemm
    m: int = 8192
    n: int = 8192
    k: int = 8192
    dtype: Literal["bfloat16", "float16"] = "bfloat16"
    peak_gpu: str = "H200"
    min_cc: int | None = None
    max_cc: int | None = None


def _lib() -> tuple[Any, dict[str, Any]]:
    from verifiers.pinned import build as pinned_build

    return pinned_build.load_probes()


def _stream() -> int:
    import torch

    return torch.cuda.current_stream().cuda_stream


@verifier("gpu.probe", kind="gpu-profile", params=ProbeParams, requires=SM90, timeout_s=300)
def probe(p: ProbeParams, ctx: Context) -> Outcome:
    """Run one probe (verifiers/pinned/harness/probes.cu or cuBLAS) and report what the hardware did."""
    if p.probe == "gemm":
        return _gemm(p, ctx)
    try:
        lib, manifest = _lib()
    except (FileNotFoundError, RuntimeError, OSError) as e:
        return Outcome(verdict="skipped", reason=str(e))
    env = {"probes_build": {k: manifest[k] for k in ("source_sha256", "flags", "compiler", "key")}}
    out = {"smid": _smid, "mma-fragment": _mma, "atomic": _atomic}[p.probe](p, lib)
    out.environment.update(env)
    # Seeing one float sum in N runs does not show the order of atomics is fixed: absence is not proof.
    return judge_absence(out, ctx, p.repeats) if ctx.expect else out


def _smid(p: ProbeParams, lib: Any) -> Outcome:
    import torch

    dev = torch.device("cuda")
    thread_sm = torch.full((p.grid * p.block,), -1, dtype=torch.int32, device=dev)
    start = torch.zeros(p.grid, dtype=torch.int64, device=dev)
    end = torch.zeros(p.grid, dtype=torch.int64, device=dev)
    cta_sm = torch.full((p.grid,), -1, dtype=torch.int32, device=dev)
    per_sm = lib.kb_probe_smid_occupancy(ctypes.c_int(p.block), ctypes.c_int(p.smem_bytes))
    rc = lib.kb_probe_smid(ctypes.c_int(p.grid), ctypes.c_int(p.block), ctypes.c_int(p.smem_bytes),
                           ctypes.c_longlong(int(p.spin_us * 1000)), ctypes.c_int(p.slow_factor),
                           ctypes.c_void_p(thread_sm.data_ptr()), ctypes.c_void_p(start.data_ptr()),
                           ctypes.c_void_p(end.data_ptr()), ctypes.c_void_p(cta_sm.data_ptr()),
                           ctypes.c_void_p(_stream()))
    torch.cuda.synchronize()
    if rc != 0:
        raise RuntimeError(f"probe launch failed ({rc})")
    ts = thread_sm.view(p.grid, p.block).cpu()
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    ran = bool((ts != -1).all())
    single = bool((ts == ts[:, :1]).all())
    s, e, sm = start.cpu().tolist(), end.cpu().tolist(), cta_sm.cpu().tolist()
    # Most CTAs resident on one SM at once, from the start/end intervals of the CTAs each SM ran.
    events: dict[int, list[tuple[int, int]]] = {}
    for i in range(p.grid):
        events.setdefault(sm[i], []).extend([(s[i], 1), (e[i], -1)])
    most = 0
    for evs in events.values():
        cur = 0
        for _, d in sorted(evs, key=lambda x: (x[0], x[1])):
            cur += d
            most = max(most, cur)
    resident = max(per_sm, 1) * sm_count
    later = [i for i in range(resident, p.grid) if s[i] < e[0]]
    meas: dict[str, tuple[Any, str]] = {
        "all_coordinates_ran": (ran, "every (CTA, thread) wrote its SM id"),
        "ctas_single_sm": (single, "all threads of each CTA report one SM"),
        "distinct_sms": (len(set(sm)), "SM ids seen"), "sm_count": (sm_count, "SMs on the device"),
        "grid_ctas": (p.grid, "CTAs launched"), "ctas_per_sm_runtime": (per_sm, "cudaOccupancyMaxActiveBlocks"),
        "max_resident_per_sm_seen": (most, "CTAs overlapping in time on one SM"),
        "later_ctas_started_before_cta0_end": (len(later), f"CTAs with index >= {resident} that began while CTA 0 ran"),
        "no_wave_barrier": (len(later) > 0, "a CTA beyond the first full wave started before CTA 0 ended"),
    }
    log = (f"grid {p.grid} x {p.block} threads, smem {p.smem_bytes} B, {per_sm} CTA/SM per the runtime; "
           f"CTA 0 on SM {sm[0]} ran {(e[0] - s[0]) / 1e3:.1f} us; first later CTA: "
           f"{later[0] if later else None}")
    return Outcome(measurements=meas, log=log, environment={})


# m16n8k16 fragment layout as the PTX ISA gives it (groupID = lane / 4, tig = lane % 4).
def _layout(perturb: str = "none") -> tuple[list[list[tuple[int, int]]], list[list[tuple[int, int]]],
                                            list[list[tuple[int, int]]]]:
    a, b, c = [], [], []
    for lane in range(32):
        g, t = lane // 4, lane % 4
        a.append([(g + 8 * ((j // 2) % 2), t * 2 + (j % 2) + 8 * (j // 4)) for j in range(8)])
        b.append([(t * 2 + (j % 2) + 8 * (j // 2), g) for j in range(4)])
        c.append([(g + 8 * (j // 2), t * 2 + (j % 2)) for j in range(4)])
    if perturb == "swap-a-rows":  # a plausible mistake: rows 0..7 and 8..15 the other way round in A
        a = [[((r + 8) % 16, col) for r, col in slots] for slots in a]
    if perturb == "swap-cd-cols":
        c = [[(r, col ^ 1) for r, col in slots] for slots in c]
    return a, b, c


def _mma(p: ProbeParams, lib: Any) -> Outcome:
    import torch

    a_l, b_l, c_l = _layout(p.perturb)
    g = torch.Generator().manual_seed(7)
    A = torch.randint(-4, 5, (16, 16), generator=g).double()
    B = torch.randint(-4, 5, (16, 8), generator=g).double()
    C = torch.randint(-8, 9, (16, 8), generator=g).double()
    dev = torch.device("cuda")
    a_idx = torch.tensor([r * 16 + col for slots in a_l for r, col in slots], dtype=torch.int32, device=dev)
    b_idx = torch.tensor([k * 8 + n for slots in b_l for k, n in slots], dtype=torch.int32, device=dev)
    c_idx = torch.tensor([r * 8 + col for slots in c_l for r, col in slots], dtype=torch.int32, device=dev)
    Ad, Bd = A.to(torch.bfloat16).to(dev).contiguous(), B.to(torch.bfloat16).to(dev).contiguous()
    Cd = C.float().to(dev).contiguous()
    D = torch.full((16, 8), float("nan"), dtype=torch.float32, device=dev)
    rc = lib.kb_probe_mma(ctypes.c_void_p(Ad.data_ptr()), ctypes.c_void_p(Bd.data_ptr()),
                          ctypes.c_void_p(Cd.data_ptr()), ctypes.c_void_p(D.data_ptr()),
                          ctypes.c_void_p(a_idx.data_ptr()), ctypes.c_void_p(b_idx.data_ptr()),
                          ctypes.c_void_p(c_idx.data_ptr()), ctypes.c_void_p(_stream()))
    torch.cuda.synchronize()
    if rc != 0:
        raise RuntimeError(f"mma probe launch failed ({rc})")
    want = A @ B + C
    got = D.double().cpu()
    wrong = int((got != want).sum())
    meas: dict[str, tuple[Any, str]] = {
        "product_exact": (wrong == 0, "D = A @ B + C exactly with these fragment tables"),
        "wrong_elements": (wrong, "of 128"),
        "lane0_a_coords": ([list(x) for x in a_l[0]], "(row, col) of A per register half, lane 0"),
        "lane0_b_coords": ([list(x) for x in b_l[0]], "(row k, col n) of B per register half, lane 0"),
        "lane0_cd_coords": ([list(x) for x in c_l[0]], "(row, col) of C/D per register, lane 0"),
    }
    log = ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 on one warp; each lane loads A/B/C through the "
           f"layout tables (PTX ISA formulas{'' if p.perturb == 'none' else ', perturbed: ' + p.perturb}) and stores "
           f"D through the C table; {wrong} of 128 outputs differ from A@B+C. A correct product fixes the m and n "
           "positions and the pairing of A's and B's k slots (a permutation of k shared by A and B is unobservable).")
    return Outcome(measurements=meas, log=log, environment={})


def _atomic(p: ProbeParams, lib: Any) -> Outcome:
    import torch

    dev = torch.device("cuda")
    n = p.grid * p.block
    g = torch.Generator().manual_seed(3)
    # Mixed magnitudes: large and small terms, so the float sum depends on the order of the additions.
    vals = (torch.randn(n, generator=g) * torch.where(torch.rand(n, generator=g) < 0.01, 1e6, 1.0)).float().to(dev)
    sums, counts = [], []
    for _ in range(p.repeats):
        fsum = torch.zeros(1, dtype=torch.float32, device=dev)
        count = torch.zeros(1, dtype=torch.int64, device=dev)
        rc = lib.kb_probe_atomic(ctypes.c_int(p.grid), ctypes.c_int(p.block), ctypes.c_void_p(vals.data_ptr()),
                                 ctypes.c_void_p(fsum.data_ptr()), ctypes.c_void_p(count.data_ptr()),
                                 ctypes.c_void_p(_stream()))
        torch.cuda.synchronize()
        if rc != 0:
            raise RuntimeError(f"atomic probe launch failed ({rc})")
        sums.append(float(fsum.item()))
        counts.append(int(count.item()))
    meas: dict[str, tuple[Any, str]] = {
        "count_exact": (all(c == n for c in counts), f"every run counted all {n} integer atomicAdds"),
        "distinct_float_sums": (len(set(sums)), f"over {p.repeats} runs"), "repeats": (p.repeats, "runs"),
    }
    return Outcome(measurements=meas, log=f"counts {sorted(set(counts))}; float sums {sorted(set(sums))[:6]}",
                   environment={})


def _gemm(p: ProbeParams, ctx: Context) -> Outcome:
    import torch

    from verifiers.gpu import common as gpu_common

    dt = getattr(torch, p.dtype)
    a = torch.randn(p.m, p.k, device="cuda", dtype=dt)
    b = torch.randn(p.k, p.n, device="cuda", dtype=dt)
    from triton.testing import do_bench

    with gpu_common.ClockSampler() as clocks:
        med, lo, hi = (float(x) for x in do_bench(lambda: a @ b, warmup=25, rep=200, quantiles=[0.5, 0.2, 0.8]))
    flops = 2.0 * p.m * p.n * p.k
    tf = flops / (med * 1e-3) / 1e12
    peak = ctx.hardware.get(p.peak_gpu, {}).get("peak_bf16_dense_tflops")
    meas: dict[str, tuple[Any, str]] = {"tflops": (round(tf, 1), "TFLOP/s"), "ms_median": (med, "ms"),
                                        **clocks.summary()}
    ends: dict[str, tuple[float, float]] = {}
    if peak:
        meas["util_vs_peak"] = (round(tf / peak, 3), f"of {p.peak_gpu} dense peak {peak} TFLOP/s")
        ends["util_vs_peak"] = (flops / (hi * 1e-3) / 1e12 / peak, flops / (lo * 1e-3) / 1e12 / peak)
    out = Outcome(measurements=meas, log=f"torch.matmul {p.m}x{p.k} @ {p.k}x{p.n} {p.dtype}; do_bench median "
                  f"{med:.3f} ms [p20 {lo:.3f}, p80 {hi:.3f}]", environment={"torch": torch.__version__})
    return judge_spread(out, ends, ctx)
