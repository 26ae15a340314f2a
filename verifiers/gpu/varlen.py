"""FA1 v1.0.9's packed variable-length forward on the GPU: who writes each output row, and how evenly it loads SMs.

Both verifiers run kb's packed entry (verifiers/pinned/varlen.py: the pinned units, unchanged, with the
caller's cu_seqlens handed to the pinned launcher as `mha_fwd` does).

`gpu.varlen-rows` runs one packed forward over sequences of the given lengths into an output whose rows, and
guard rows on both sides, hold a NaN poison; then each sequence alone (batch 1) with the same max_seqlen and
the same split count the packed launch used, so the only difference is the other sequences' presence. It
counts valid rows still poisoned (nothing wrote them), guard rows no longer poisoned (a write outside the
packed rows), rows and LSE rows whose bits differ from the sequence's own run (a second writer, or arithmetic
the packing changes), distinct results over repeated packed runs, and the error against an fp64 attention.
`shift_single` is the negative control's mutation: each single run reads its sequence rotated by that many
rows, so its rows must differ.

`gpu.varlen-balance` profiles the packed forward kernel under Nsight Compute (clock control off) and reads
the busiest SM's active cycles over the mean over all SMs (idle ones included), for `lengths` and for
`other_lengths`, with the split count each launch used. With `existential`, an unmet expectation is
inconclusive: one balanced batch does not show that imbalance cannot be significant.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any, Literal

from pydantic import field_validator, model_validator

from kb.registry import Context, Outcome, Params, Requirements, verifier

GPU = Requirements(cuda=True, min_cc=90, max_cc=90)  # kb's builds of the pins hold sm_90 code only
MAX_TOTAL = 1 << 20  # rows of the packed batch; bounds the memory a check can ask for


class VarlenParams(Params):
    """The packed batch: one length per sequence (self-attention, so Q and K lengths are equal)."""

    lengths: list[int]
    heads: int = 8
    head_dim: Literal[64, 128] = 128
    dtype: Literal["bfloat16", "float16"] = "float16"
    causal: bool = False
    seed: int = 0
    repeats: int = 5
    guard_rows: int = 64
    shift_single: int = 0  # negative control: rotate each single run's inputs by this many rows

    @field_validator("lengths")
    @classmethod
    def _lengths(cls, v: list[int]) -> list[int]:
        if not v or any(n <= 0 for n in v) or sum(v) > MAX_TOTAL:
            raise ValueError(f"lengths: one or more positive lengths, {MAX_TOTAL} rows in all at most")
        return v

    @model_validator(mode="after")
    def _bounds(self) -> VarlenParams:
        if not (1 <= self.heads <= 64 and 1 <= self.repeats <= 100 and 0 <= self.guard_rows <= 4096):
            raise ValueError("heads in 1..64, repeats in 1..100, guard_rows in 0..4096")
        return self


class BalanceParams(VarlenParams):
    """The batch to profile and, optionally, a second batch profiled the same way (`other_lengths`)."""

    other_lengths: list[int] = []
    # The statement says imbalance *can* be significant: a batch that stays under the bound does not refute
    # it, so an unmet expectation reads inconclusive (the KB's cause `unreached`), never refuted.
    existential: bool = False

    @field_validator("other_lengths")
    @classmethod
    def _other(cls, v: list[int]) -> list[int]:
        if v and (any(n <= 0 for n in v) or sum(v) > MAX_TOTAL):
            raise ValueError(f"other_lengths: positive lengths, {MAX_TOTAL} rows in all at most")
        return v


def _unavailable() -> str | None:
    from verifiers.pinned import varlen as pinned_varlen

    try:
        pinned_varlen.load()
    except (FileNotFoundError, RuntimeError, OSError) as e:
        return str(e)
    return None


def make_inputs(p: VarlenParams, lengths: list[int]) -> dict[str, Any]:
    """Packed q, k, v (total, heads, head_dim) from a fixed seed, and the int32 cu_seqlens on the GPU."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(p.seed)
    dt = getattr(torch, p.dtype)
    total = sum(lengths)
    x = {n: torch.randn(total, p.heads, p.head_dim, generator=g, device="cuda", dtype=dt) for n in ("q", "k", "v")}
    offsets = [0]
    for n in lengths:
        offsets.append(offsets[-1] + n)
    x["cu"] = torch.tensor(offsets, dtype=torch.int32, device="cuda")
    return x


def packed_forward(p: VarlenParams, q: Any, k: Any, v: Any, cu: Any, max_len: int, o: Any, lse: Any,
                   num_splits: int = 0) -> int:
    """One packed forward into caller-allocated o and lse; returns the split count the launch used."""
    import ctypes

    import torch

    from verifiers.pinned import build as pinned_build
    from verifiers.pinned import varlen as pinned_varlen

    lib = pinned_varlen.load().lib
    a = pinned_build.KbAttnArgs()
    a.batch, a.heads, a.heads_k, a.head_dim = cu.numel() - 1, p.heads, p.heads, p.head_dim
    a.seqlen_q = a.seqlen_k = max_len
    a.is_bf16, a.is_causal = int(p.dtype == "bfloat16"), int(p.causal)
    a.softmax_scale = float(p.head_dim ** -0.5)
    a.num_splits = num_splits
    total = q.shape[0]
    if lib.kb_varlen_workspace(ctypes.byref(a), total) != 0:
        raise RuntimeError(f"packed forward: {lib.kb_last_error().decode()}")
    keep = []
    for i in range(4):
        n = int(a.ws_bytes[i])
        t = torch.empty(max(n, 1), dtype=torch.uint8, device=q.device)
        keep.append(t)
        a.ws[i] = t.data_ptr() if n else None
    a.q, a.k, a.v, a.o, a.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()
    rc = lib.kb_varlen_fwd(ctypes.byref(a), cu.data_ptr(), cu.data_ptr(), total,
                           torch.cuda.current_stream().cuda_stream)
    if rc != 0:
        raise RuntimeError(f"packed forward: {lib.kb_last_error().decode()}")
    torch.cuda.synchronize()
    del keep
    return int(a.num_splits)


def _poisoned(p: VarlenParams, rows: int, lse_b: int, lse_len: int) -> tuple[Any, Any]:
    import torch

    o = torch.full((rows, p.heads, p.head_dim), float("nan"), dtype=getattr(torch, p.dtype), device="cuda")
    lse = torch.full((lse_b, p.heads, lse_len), float("nan"), dtype=torch.float32, device="cuda")
    return o, lse


def _reference(p: VarlenParams, q: Any, k: Any, v: Any) -> Any:
    """fp64 attention of one sequence, (L, heads, head_dim)."""
    import torch

    qd, kd, vd = (t.double().transpose(0, 1) for t in (q, k, v))  # (heads, L, d)
    s = qd @ kd.transpose(1, 2) * p.head_dim ** -0.5
    if p.causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return (torch.softmax(s, dim=-1) @ vd).transpose(0, 1)


@verifier("gpu.varlen-rows", kind="gpu-kernel-run", params=VarlenParams, requires=GPU, timeout_s=600)
def varlen_rows(p: VarlenParams, ctx: Context) -> Outcome:
    """A packed forward's rows against each sequence run alone: unwritten, out-of-range, differing, repeated."""
    if why := _unavailable():
        return Outcome(verdict="skipped", reason=why)
    import torch

    from verifiers.gpu import common as g
    from verifiers.pinned import varlen as pinned_varlen

    x = make_inputs(p, p.lengths)
    total, b, gr = sum(p.lengths), len(p.lengths), p.guard_rows
    max_len = max(p.lengths)
    lse_len = (max_len + 15) // 16 * 16  # the pin's softmax_lse is (b, h, max_seqlen_q rounded to 16)
    offs = x["cu"].tolist()
    results, splits = [], 0
    for _ in range(p.repeats):
        buf, lse = _poisoned(p, gr + total + gr, b, lse_len)
        splits = packed_forward(p, x["q"], x["k"], x["v"], x["cu"], max_len, buf[gr:gr + total], lse)
        results.append((buf, lse))
    buf, lse = results[0]
    o = buf[gr:gr + total]
    distinct = 1 + sum(1 for bb, ll in results[1:] if not (torch.equal(bb.view(torch.int16), buf.view(torch.int16))
                                                           and torch.equal(ll.view(torch.int32), lse.view(torch.int32))))
    unwritten = int(torch.isnan(o).flatten(1).any(dim=1).sum())
    guards = torch.cat([buf[:gr], buf[gr + total:]])
    guard_written = int((~torch.isnan(guards)).flatten(1).any(dim=1).sum())
    rows_diff = lse_diff = 0
    max_err = 0.0
    first_diff: list[str] = []
    for i, n in enumerate(p.lengths):
        s0 = offs[i]
        one = {t: x[t][s0:s0 + n].roll(p.shift_single, dims=0).contiguous() for t in ("q", "k", "v")}
        cu1 = torch.tensor([0, n], dtype=torch.int32, device="cuda")
        o1, l1 = _poisoned(p, n, 1, lse_len)
        packed_forward(p, one["q"], one["k"], one["v"], cu1, max_len, o1, l1, num_splits=splits)
        rows = o[s0:s0 + n]
        differs = (rows.view(torch.int16) != o1.view(torch.int16)).flatten(1).any(dim=1)
        rows_diff += int(differs.sum())
        lse_rows = (lse[i, :, :n].view(torch.int32) != l1[0, :, :n].view(torch.int32)).any(dim=0)
        lse_diff += int(lse_rows.sum())
        if bool(differs.any()) and len(first_diff) < 3:
            first_diff.append(f"sequence {i} (length {n}): first differing row {int(differs.nonzero()[0])}")
        ref = _reference(p, x["q"][s0:s0 + n], x["k"][s0:s0 + n], x["v"][s0:s0 + n])
        max_err = max(max_err, float((rows.double() - ref).abs().nan_to_num(float("inf")).max()))
    meas = {
        "sequences": (b, "sequences packed"), "total_rows": (total, "query rows"),
        "rows_unwritten": (unwritten, "valid rows still holding the NaN poison"),
        "guard_rows_written": (guard_written, f"of {2 * gr} guard rows around the packed output"),
        "rows_differing_from_single": (rows_diff, "rows whose bits differ from the sequence run alone"),
        "lse_rows_differing_from_single": (lse_diff, "valid LSE rows whose bits differ from the run alone"),
        "distinct_packed_results": (distinct, f"distinct O/LSE over {p.repeats} packed runs"),
        "max_abs_err_vs_fp64": (max_err, "largest |O - fp64 attention| over the valid rows"),
        "num_splits": (splits, "split count (gridDim.z) of the packed launch, forced on each single run"),
    }
    log = (f"lengths {p.lengths}, max_seqlen {max_len}, causal {p.causal}, splits {splits}; "
           + ("; ".join(first_diff) or "every row equals its sequence's own run")
           + (f"; single runs rotated by {p.shift_single} rows (negative control)" if p.shift_single else ""))
    env = {k: v for k, v in g.versions().items() if k in ("torch", "cuda")}
    return Outcome(measurements=meas, log=log, environment={**env, "pinned_build": pinned_varlen.provenance()})


_CHILD = """
import json, sys, torch
from verifiers.gpu import varlen as vl
p = vl.BalanceParams.model_validate(json.loads(sys.argv[1]))
lengths = json.loads(sys.argv[2])
x = vl.make_inputs(p, lengths)
m = max(lengths)
o = torch.empty(sum(lengths), p.heads, p.head_dim, dtype=getattr(torch, p.dtype), device="cuda")
lse = torch.empty(len(lengths), p.heads, (m + 15) // 16 * 16, dtype=torch.float32, device="cuda")
run = lambda: vl.packed_forward(p, x["q"], x["k"], x["v"], x["cu"], m, o, lse)
run(); run()
torch.cuda.profiler.start()
splits = run()
torch.cuda.profiler.stop()
print("KB_SPLITS", splits)
"""
_METRICS = ["sm__cycles_active.max", "sm__cycles_active.avg", "gpu__time_duration.sum"]


def profile(p: BalanceParams, lengths: list[int], timeout: float = 300) -> dict[str, Any]:
    """The packed forward kernel of `lengths` under ncu: busiest SM over mean active cycles, time, splits."""
    from verifiers.gpu.ncu import parse_rows

    ncu = shutil.which("ncu")
    if ncu is None:
        raise RuntimeError("ncu (Nsight Compute) is not on PATH")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--target-processes", "all",
           "--metrics", ",".join(_METRICS), "--csv", "--page", "raw", "--print-units", "base",
           sys.executable, "-c", _CHILD, p.model_dump_json(), json.dumps(lengths)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=root)
    rows = parse_rows(res.stdout, _METRICS)
    splits = [ln.split()[1] for ln in res.stdout.splitlines() if ln.startswith("KB_SPLITS ")]
    if res.returncode != 0 or len(rows) != 1 or not splits:
        raise RuntimeError(f"ncu: exit {res.returncode}, {len(rows)} kernels profiled (one expected): "
                           f"{(res.stderr or res.stdout)[-600:]}")
    r = rows[0]
    if None in (r["sm__cycles_active.max"], r["sm__cycles_active.avg"]) or not r["sm__cycles_active.avg"]:
        raise RuntimeError(f"Nsight Compute gave no per-SM active cycles for {r['name'][:80]}")
    return {"kernel": r["name"][:120], "max_over_avg": r["sm__cycles_active.max"] / r["sm__cycles_active.avg"],
            "active_max": r["sm__cycles_active.max"], "active_avg": r["sm__cycles_active.avg"],
            "time_ns": r["gpu__time_duration.sum"], "splits": int(splits[0])}


@verifier("gpu.varlen-balance", kind="gpu-profile", params=BalanceParams, requires=GPU, timeout_s=900)
def varlen_balance(p: BalanceParams, ctx: Context) -> Outcome:
    """How unevenly the packed forward's CTAs load the SMs: busiest SM over the mean, for one or two batches."""
    if why := _unavailable():
        return Outcome(verdict="skipped", reason=why)
    from verifiers.pinned import varlen as pinned_varlen

    this = profile(p, p.lengths)
    meas: dict[str, tuple[Any, str]] = {
        "sm_active_max_over_avg": (round(this["max_over_avg"], 6), "x (busiest SM over the mean over all SMs)"),
        "gpu_time_ns": (this["time_ns"], "ns"), "num_splits": (this["splits"], "split count (gridDim.z)"),
        "sequences": (len(p.lengths), ""), "total_rows": (sum(p.lengths), "query rows")}
    other = profile(p, p.other_lengths) if p.other_lengths else None
    if other is not None:
        meas.update({
            "other_sm_active_max_over_avg": (round(other["max_over_avg"], 6), "x (busiest SM over the mean)"),
            "other_gpu_time_ns": (other["time_ns"], "ns"), "other_num_splits": (other["splits"], ""),
            "other_total_rows": (sum(p.other_lengths), "query rows"),
            "ratio_sm_active_max_over_avg": (round(other["max_over_avg"] / this["max_over_avg"], 6),
                                             "x (other over this)")})
    log = json.dumps({"this": {"lengths": p.lengths, **this},
                      "other": other and {"lengths": p.other_lengths, **other}}, indent=1)
    out = Outcome(measurements=meas, log=log, environment={"method": "ncu --clock-control none",
                                                           "kernel": this["kernel"],
                                                           "pinned_build": pinned_varlen.provenance()})
    return judge_existential(out, ctx) if p.existential else out


def judge_existential(out: Outcome, ctx: Context) -> Outcome:
    """Judge the expectations; a miss is inconclusive, since the statement says the effect can occur."""
    from kb.expect import judge
    from kb.models import Comparison

    verdict, reason = judge({k: v[0] for k, v in out.measurements.items()},
                            {k: Comparison.model_validate(v) for k, v in ctx.expect.items()})
    if verdict == "refutes":
        verdict, reason = "inconclusive", (f"not reached at this shape ({reason}); one batch under the bound "
                                           "does not show the effect cannot occur")
    out.verdict, out.reason = verdict, reason
    return out
