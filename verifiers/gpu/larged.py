"""The large-d pin's Hopper forward on the GPU: what its two consumer warpgroups produce, and what it costs.

Both verifiers run kb's build of the large-d pin (verifiers/pinned/larged.py: the pinned units of
flash-attention d7e4dba, unchanged, with kb's harness): `64x512` is the LargeHeadDimV forward
(head_dim 64 for Q/K, head_dim_v 512; the pinned mainloop splits the 512 columns of O between two consumer
warpgroups, columns 0-255 and 256-511), `128` the same revision's ordinary d = 128 forward.

`gpu.larged-fwd` runs one configuration into a NaN-poisoned output and compares it with an fp64 attention,
column half by column half. To show that each half holds every K/V tile's contribution (not merely a
small error), it also compares each half with the fp64 results that leave one K/V tile of `kv_tile` rows
out, and reports the nearest such result's distance over the half's error (`drop_one_margin_*`): a half
that skipped a tile would sit on one of them. `drop_tile` is the negative control's mutation: the reference
itself leaves that tile out, so the error must be large.

`gpu.larged-profile` profiles one forward of each configuration at the same (batch, heads, seqlen_q,
seqlen_k) under Nsight Compute (clock control off) and reads the tensor pipe's utilisation, the shared-memory
bytes stored (the SASS data-byte counter for STS, plus 512 bytes per warp-level STSM, which that counter
leaves out), barrier stalls, registers, dynamic shared memory and occupancy limits. `smem_st_over_p_bytes`
relates the stored bytes to the P matrix's size (batch x heads x seqlen_q x seqlen_k x 2 bytes): about 1 when
P is published through shared memory once. With `existential`, an unmet
expectation reads inconclusive: one shape that does not show an effect does not show it cannot occur.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any, Literal

from pydantic import model_validator

from kb.registry import Context, Outcome, Params, Requirements, verifier

GPU = Requirements(cuda=True, min_cc=90, max_cc=90)  # the pinned units are built for sm_90a only
CONFIGS = {"64x512": (64, 512), "128": (128, 128)}
MAX_SCORES = 1 << 28  # batch x heads x seqlen_q x seqlen_k: bounds the fp64 reference (8 bytes each)


class LargedParams(Params):
    """One dense forward of one configuration of the pinned large-d build."""

    config: Literal["64x512", "128"] = "64x512"
    batch: int = 2
    heads: int = 8
    seqlen_q: int = 512
    seqlen_k: int = 512
    causal: bool = False
    seed: int = 0
    repeats: int = 3
    kv_tile: int = 64  # rows of K/V per tile for the drop-one comparison (the pin's kBlockN for hdim64/512)
    drop_tile: int | None = None  # negative control: the reference leaves this K/V tile out

    @model_validator(mode="after")
    def _bounds(self) -> LargedParams:
        if min(self.batch, self.heads, self.seqlen_q, self.seqlen_k) < 1:
            raise ValueError("batch, heads, seqlen_q and seqlen_k must be positive")
        if self.batch * self.heads * self.seqlen_q * self.seqlen_k > MAX_SCORES:
            raise ValueError(f"batch x heads x seqlen_q x seqlen_k must be at most {MAX_SCORES} (the fp64 reference)")
        if not (1 <= self.repeats <= 50 and 1 <= self.kv_tile <= self.seqlen_k):
            raise ValueError("repeats in 1..50, kv_tile in 1..seqlen_k")
        if self.drop_tile is not None and not 0 <= self.drop_tile * self.kv_tile < self.seqlen_k:
            raise ValueError("drop_tile must name a K/V tile inside seqlen_k")
        return self


class ProfileParams(Params):
    """The shape both configurations are profiled at."""

    batch: int = 4
    heads: int = 16
    seqlen_q: int = 4096
    seqlen_k: int = 4096
    causal: bool = False
    seed: int = 0
    existential: bool = False

    @model_validator(mode="after")
    def _bounds(self) -> ProfileParams:
        if min(self.batch, self.heads, self.seqlen_q, self.seqlen_k) < 1:
            raise ValueError("batch, heads, seqlen_q and seqlen_k must be positive")
        if self.batch * self.heads * max(self.seqlen_q, self.seqlen_k) * 512 > 1 << 31:
            raise ValueError("batch x heads x seqlen x 512 must be at most 2^31 elements (the V and O tensors)")
        return self


def _unavailable() -> str | None:
    from verifiers.pinned import larged as pinned_larged

    try:
        pinned_larged.load()
    except (FileNotFoundError, RuntimeError, OSError) as e:
        return str(e)
    return None


def make_inputs(config: str, batch: int, heads: int, seqlen_q: int, seqlen_k: int, seed: int) -> dict[str, Any]:
    """bf16 q, k (b, s, h, d) and v (b, s_k, h, d_v) from a fixed seed."""
    import torch

    d, dv = CONFIGS[config]
    g = torch.Generator(device="cuda").manual_seed(seed)
    mk = lambda s, w: torch.randn(batch, s, heads, w, generator=g, device="cuda", dtype=torch.bfloat16)  # noqa: E731
    return {"q": mk(seqlen_q, d), "k": mk(seqlen_k, d), "v": mk(seqlen_k, dv)}


def forward(config: str, x: dict[str, Any], causal: bool, o: Any, lse: Any) -> None:
    """One pinned forward into caller-allocated o (b, s_q, h, d_v) and lse (b, h, s_q) float32."""
    import ctypes

    import torch

    from verifiers.pinned import build as pinned_build
    from verifiers.pinned import larged as pinned_larged

    lib = pinned_larged.load().lib
    d, dv = CONFIGS[config]
    b, sq, h, _ = x["q"].shape
    a = pinned_build.KbAttnArgs()
    a.batch, a.heads, a.heads_k, a.head_dim = b, h, h, d
    a.seqlen_q, a.seqlen_k = sq, x["k"].shape[1]
    a.is_bf16, a.is_causal = 1, int(causal)
    a.softmax_scale = float(d ** -0.5)
    if lib.kb_workspace(ctypes.byref(a), 0) != 0:
        raise RuntimeError(f"large-d forward: {lib.kb_last_error().decode()}")
    keep = []
    for i in range(4):
        n = int(a.ws_bytes[i])
        t = torch.empty(max(n, 1), dtype=torch.uint8, device="cuda")
        keep.append(t)
        a.ws[i] = t.data_ptr() if n else None
    a.q, a.k, a.v, a.o, a.lse = x["q"].data_ptr(), x["k"].data_ptr(), x["v"].data_ptr(), o.data_ptr(), lse.data_ptr()
    if lib.kb_larged_fwd(ctypes.byref(a), dv, torch.cuda.current_stream().cuda_stream) != 0:
        raise RuntimeError(f"large-d forward: {lib.kb_last_error().decode()}")
    torch.cuda.synchronize()
    del keep


def _reference(p: LargedParams, x: dict[str, Any], drop: int | None) -> Any:
    """fp64 attention (b, s_q, h, d_v), leaving K/V tile `drop` out when given."""
    import torch

    d = CONFIGS[p.config][0]
    q, k, v = (x[n].double().permute(0, 2, 1, 3) for n in ("q", "k", "v"))  # (b, h, s, w)
    s = q @ k.transpose(-1, -2) * d ** -0.5
    mask = torch.zeros(p.seqlen_q, p.seqlen_k, dtype=torch.bool, device=s.device)
    if p.causal:  # bottom-right aligned, as the pin's causal mask
        mask |= torch.ones_like(mask).triu(p.seqlen_k - p.seqlen_q + 1)
    if drop is not None:
        mask[:, drop * p.kv_tile:(drop + 1) * p.kv_tile] = True
    s = s.masked_fill(mask, float("-inf"))
    return (torch.softmax(s, dim=-1) @ v).permute(0, 2, 1, 3).nan_to_num(0.0)


@verifier("gpu.larged-fwd", kind="gpu-kernel-run", params=LargedParams, requires=GPU, timeout_s=600)
def larged_fwd(p: LargedParams, ctx: Context) -> Outcome:
    """The pinned large-d (or d128) forward against fp64, by column half, with a drop-one-tile comparison."""
    if why := _unavailable():
        return Outcome(verdict="skipped", reason=why)
    import torch

    from verifiers.gpu import common as g
    from verifiers.pinned import larged as pinned_larged

    dv = CONFIGS[p.config][1]
    x = make_inputs(p.config, p.batch, p.heads, p.seqlen_q, p.seqlen_k, p.seed)
    outs = []
    for _ in range(p.repeats):
        o = torch.full((p.batch, p.seqlen_q, p.heads, dv), float("nan"), dtype=torch.bfloat16, device="cuda")
        lse = torch.full((p.batch, p.heads, p.seqlen_q), float("nan"), dtype=torch.float32, device="cuda")
        forward(p.config, x, p.causal, o, lse)
        outs.append((o, lse))
    o, lse = outs[0]
    distinct = 1 + sum(1 for oo, ll in outs[1:] if not (torch.equal(oo.view(torch.int16), o.view(torch.int16))
                                                          and torch.equal(ll.view(torch.int32), lse.view(torch.int32))))
    unwritten = int(torch.isnan(o).any(dim=-1).sum())
    ref = _reference(p, x, p.drop_tile)
    halves = {"first_half": slice(0, dv // 2), "second_half": slice(dv // 2, dv)}
    od = o.double()
    err = {n: float((od[..., c] - ref[..., c]).abs().nan_to_num(float("inf")).max()) for n, c in halves.items()}
    tiles = (p.seqlen_k + p.kv_tile - 1) // p.kv_tile
    nearest = dict.fromkeys(halves, float("inf"))
    if p.drop_tile is None:
        for j in range(tiles):
            rj = _reference(p, x, j)
            for n, c in halves.items():
                nearest[n] = min(nearest[n], float((od[..., c] - rj[..., c]).abs().max()))
            del rj
    meas: dict[str, tuple[Any, str]] = {
        "max_abs_err_first_half": (err["first_half"], f"|O - fp64| over columns 0..{dv // 2 - 1}"),
        "max_abs_err_second_half": (err["second_half"], f"|O - fp64| over columns {dv // 2}..{dv - 1}"),
        "rows_unwritten": (unwritten, "(b, s_q, h) rows still holding the NaN poison"),
        "distinct_results": (distinct, f"distinct O/LSE over {p.repeats} runs"),
        "kv_tiles": (tiles, f"K/V tiles of {p.kv_tile} rows"),
    }
    if p.drop_tile is None:
        for n in halves:
            meas[f"nearest_drop_one_err_{n}"] = (nearest[n], "smallest |O - fp64 without one K/V tile| over tiles")
            meas[f"drop_one_margin_{n}"] = (round(nearest[n] / max(err[n], 1e-30), 3),
                                            "x (nearest drop-one distance over the half's error)")
    log = (f"config {p.config}: B {p.batch} H {p.heads} s_q {p.seqlen_q} s_k {p.seqlen_k} causal {p.causal}; "
           f"errors {err}" + (f"; nearest drop-one distances {nearest}" if p.drop_tile is None else
                              f"; reference leaves K/V tile {p.drop_tile} out (negative control)"))
    env = {k: v for k, v in g.versions().items() if k in ("torch", "cuda")}
    return Outcome(measurements=meas, log=log, environment={**env, "pinned_build": pinned_larged.provenance()})


_CHILD = """
import json, sys, torch
from verifiers.gpu import larged as L
p = L.ProfileParams.model_validate(json.loads(sys.argv[1]))
for config in ("64x512", "128"):
    x = L.make_inputs(config, p.batch, p.heads, p.seqlen_q, p.seqlen_k, p.seed)
    dv = L.CONFIGS[config][1]
    o = torch.empty(p.batch, p.seqlen_q, p.heads, dv, dtype=torch.bfloat16, device="cuda")
    lse = torch.empty(p.batch, p.heads, p.seqlen_q, dtype=torch.float32, device="cuda")
    run = lambda: L.forward(config, x, p.causal, o, lse)
    run(); run()
    torch.cuda.profiler.start()
    run()
    torch.cuda.profiler.stop()
    del x, o, lse
    torch.cuda.empty_cache()
"""
# Nsight Compute metrics by role, each with its candidates in order of preference (names differ between ncu
# versions): the tensor pipe's active cycles as WGMMA uses it, bytes stored to shared memory by SASS
# instructions, warp stalls on barriers per issued instruction. The first candidate whose base name the
# installed ncu lists (`ncu --query-metrics`) is used and recorded with the run.
ROLES: dict[str, tuple[str, ...]] = {
    "tensor_util_pct": ("sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
                        "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"),
    "smem_st_bytes": ("smsp__sass_data_bytes_mem_shared_op_st.sum", "sm__sass_data_bytes_mem_shared_op_st.sum"),
    # stmatrix (STSM) is not in the SASS data-byte counters (measured on an H100: 0 bytes for the d128 forward,
    # whose epilogue stores O with STSM only), so its warp-level instructions are counted on their own.
    # Names as ncu 2025.3.1 lists them on the H100 (`ncu --query-metrics`, 2026-12-08): "op_shared_stsm".
    "stsm_inst": ("smsp__sass_inst_executed_op_shared_stsm.sum", "smsp__inst_executed_op_shared_stsm.sum",
                  "sm__sass_inst_executed_op_shared_stsm.sum"),
    "barrier_stall_per_issue": ("smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
                                "smsp__average_warp_latency_issue_stalled_barrier.ratio"),
}
# Bytes one warp-level STSM stores: every STSM in the build is STSM.16.M88.4 (cuobjdump of the library), four
# 8x8 matrices of 16-bit values.
STSM_BYTES = 4 * 8 * 8 * 2
# Metrics every ncu of the lent GPUs has, by the name a measurement takes.
FIXED = {"gpu__time_duration.sum": "time_ns", "launch__registers_per_thread": "registers_per_thread",
         "launch__shared_mem_per_block_dynamic": "dyn_smem_bytes",
         "launch__occupancy_limit_shared_mem": "occupancy_limit_shared_mem",
         "launch__occupancy_limit_registers": "occupancy_limit_registers", "launch__block_size": "block_size",
         "launch__grid_size": "grid_size"}


def choose_metrics(listed: set[str]) -> dict[str, str]:
    """role -> the first candidate metric whose base name is in `listed`; ValueError naming a role with none."""
    chosen = {}
    for role, names in ROLES.items():
        hit = next((n for n in names if n.split(".")[0] in listed), None)
        if hit is None:
            raise ValueError(f"this ncu lists none of {', '.join(names)} ({role})")
        chosen[role] = hit
    return chosen


def listed_metrics(ncu: str) -> set[str]:
    """Base metric names `ncu --query-metrics` lists for the GPU at hand."""
    res = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, timeout=120)
    return {ln.split()[0] for ln in res.stdout.splitlines() if ln.strip() and "__" in ln.split()[0]}


def profile(p: ProfileParams, timeout: float = 600) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The two configurations' attention kernels under ncu, in order (64x512, then 128), and the metrics used."""
    from verifiers.gpu.ncu import parse_rows

    ncu = shutil.which("ncu")
    if ncu is None:
        raise RuntimeError("ncu (Nsight Compute) is not on PATH")
    try:
        chosen = choose_metrics(listed_metrics(ncu))
    except ValueError as e:
        raise RuntimeError(str(e)) from e
    metrics = [*chosen.values(), *FIXED]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--target-processes", "all",
           "--kernel-name", "regex:device_kernel",
           "--metrics", ",".join(metrics), "--csv", "--page", "raw", "--print-units", "base",
           sys.executable, "-c", _CHILD, p.model_dump_json()]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=root)
    rows = parse_rows(res.stdout, metrics)
    if res.returncode != 0 or len(rows) != 2:
        raise RuntimeError(f"ncu: exit {res.returncode}, {len(rows)} kernels profiled (two expected): "
                           f"{(res.stderr or res.stdout)[-800:]}")
    for r in rows:
        missing = [role for role, m in chosen.items() if r[m] is None]
        if missing or not r["gpu__time_duration.sum"]:
            raise RuntimeError(f"Nsight Compute gave no {', '.join(missing) or 'duration'} for {r['name'][:80]}")
        for role, m in chosen.items():
            r[role] = r[m]
        for m, short in FIXED.items():
            r[short] = r[m]
    return rows, chosen


@verifier("gpu.larged-profile", kind="gpu-profile", params=ProfileParams, requires=GPU, timeout_s=900)
def larged_profile(p: ProfileParams, ctx: Context) -> Outcome:
    """Tensor-pipe utilisation, shared-memory stores and resources of the 64x512 and d128 forwards, one shape."""
    if why := _unavailable():
        return Outcome(verdict="skipped", reason=why)
    from verifiers.pinned import larged as pinned_larged

    rows, chosen = profile(p)
    p_bytes = p.batch * p.heads * p.seqlen_q * p.seqlen_k * 2  # P in bf16, once
    meas: dict[str, tuple[Any, str]] = {}
    for prefix, r in zip(("large", "d128"), rows, strict=True):
        for role, metric in chosen.items():
            meas[f"{prefix}_{role}"] = (r[role], metric)
        for metric, short in FIXED.items():
            meas[f"{prefix}_{short}"] = (r[short], metric)
        d, dv = CONFIGS["64x512" if prefix == "large" else "128"]
        flops = 2 * p.batch * p.heads * p.seqlen_q * p.seqlen_k * (d + dv) * (0.5 if p.causal else 1)
        meas[f"{prefix}_tflops"] = (round(flops / r["time_ns"] / 1e3, 3), "TFLOP/s (QK and PV)")
        stored = r["smem_st_bytes"] + STSM_BYTES * r["stsm_inst"]
        meas[f"{prefix}_smem_st_over_p_bytes"] = (round(stored / p_bytes, 4),
                                                 "x (shared bytes stored, STS and STSM, over B*H*s_q*s_k*2)")
    meas["tensor_util_ratio"] = (round(rows[0]["tensor_util_pct"] / rows[1]["tensor_util_pct"], 4),
                                 "x (64x512 over d128)")
    meas["work_per_score_ratio"] = ((64 + 512) / (128 + 128), "x (QK + PV flops per score, 64x512 over d128)")
    log = json.dumps([{"kernel": r["name"][:200], **{k: r[k] for k in (*chosen, *FIXED.values())}} for r in rows],
                     indent=1)
    out = Outcome(measurements=meas, log=log, environment={"method": "ncu --clock-control none", "metrics": chosen,
                                                           "pinned_build": pinned_larged.provenance()})
    if not p.existential:
        return out
    from verifiers.gpu.varlen import judge_existential

    return judge_existential(out, ctx)
