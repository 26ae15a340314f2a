"""gpu.variant-benchmark: a pinned forward against kb's variant of it (verifiers/pinned/variants.py), timed.

A variant is the pinned tree with named edits (the FA3 pin without its warp-scheduler barrier, for one),
built exactly as the pin. This check runs the base build and the variant on the same inputs and reports:

- both forwards' TFLOP/s, timed in `batches` interleaved batches of `iters` calls each between CUDA events,
  the order swapped every batch (base first, then variant first) so a drift of clocks favours neither, after
  `warmup_s` seconds of back-to-back calls of both: a card starts at its boost clock and settles as power and
  temperature rise (on an H100, a first batch after three warm-up calls ran ~10% faster than the next six), so
  a short warm-up gives the first timed build an advantage. The median batch decides, and the spread of the
  per-batch ratio is judged as gpu.benchmark does (a verdict that flips within it is inconclusive);
- `ratio` = base TFLOP/s over variant TFLOP/s (above 1: the pin's code is faster than without the edit);
- `o_max_abs_diff` between the two outputs and `o_bitwise_equal`: the variant must compute the same
  attention, so a large difference means a broken variant, not a speed-up;
- the named-barrier instructions (BAR.SYNC / BAR.ARV / BAR.RED) in each library's SASS (cuobjdump), so a
  variant whose edit changed nothing in the machine code is an error, not a measurement.
"""

from __future__ import annotations

import re
import shutil
import statistics
import subprocess
import time
from typing import Any, Literal

from pydantic import Field, field_validator

from kb.registry import Context, Outcome, Params, Requirements, verifier

GPU = Requirements(cuda=True, min_cc=90, max_cc=90)


class VariantParams(Params):
    """The base build, the variant, the forward's shape and the timing plan."""

    base: Literal["fa3-2024-08"] = "fa3-2024-08"
    variant: str
    batch: int = Field(2, gt=0)
    heads: int = Field(16, gt=0)
    seqlen: int = Field(8192, gt=0)
    head_dim: Literal[64, 128] = 128
    dtype: Literal["bfloat16", "float16"] = "float16"
    causal: bool = False
    batches: int = Field(9, ge=3, le=50)
    iters: int = Field(20, ge=1, le=1000)
    warmup_s: float = Field(5.0, ge=0, le=60)
    seed: int = 0
    # A source's figures for the same comparison (the paper's TFLOP/s with and without the feature): the run
    # is then also reported against their ratio. Low and high end of the base figure; the variant's figure.
    reported_base_tflops: list[float] = Field(default_factory=list, max_length=2)
    reported_variant_tflops: float | None = Field(None, gt=0)

    @field_validator("variant")
    @classmethod
    def _known(cls, v: str) -> str:
        from verifiers.pinned.variants import variant

        variant(v)
        return v


def _bar_count(lib_path: str) -> int | None:
    """Named-barrier instructions in a library's SASS (cuobjdump), or None without cuobjdump."""
    tool = shutil.which("cuobjdump")
    if tool is None:
        return None
    res = subprocess.run([tool, "-sass", lib_path], capture_output=True, text=True, timeout=600)
    return len(re.findall(r"\bBAR\.(?:SYNC|ARV|RED)\b", res.stdout)) if res.returncode == 0 else None


@verifier("gpu.variant-benchmark", kind="gpu-benchmark", params=VariantParams, requires=GPU, timeout_s=900)
def variant_benchmark(p: VariantParams, ctx: Context) -> Outcome:
    """Time the base pinned forward against the variant on the same inputs; compare outputs and SASS."""
    import torch

    from verifiers.gpu import pinned as gp
    from verifiers.gpu.verdict import judge_spread
    from verifiers.pinned import build as pinned_build
    from verifiers.pinned import variants

    if why := variants.unavailable(p.base, p.variant):
        return Outcome(verdict="skipped", reason=why)
    bars = {n: _bar_count(str(pinned_build.load(n).path / "libkb.so")) for n in (p.base, p.variant)}
    if None not in bars.values() and bars[p.base] == bars[p.variant]:
        raise RuntimeError(f"the variant's SASS has as many named-barrier instructions as the base's ({bars[p.base]}): "
                           "its edit did not reach the machine code")
    dtype = getattr(torch, p.dtype)
    gen = torch.Generator(device="cuda").manual_seed(p.seed)
    shape = (p.batch, p.seqlen, p.heads, p.head_dim)
    q, k, v = (torch.randn(shape, device="cuda", dtype=dtype, generator=gen) for _ in range(3))
    impls = {n: gp.as_impl(n, p.causal, p.head_dim) for n in (p.base, p.variant)}
    x = {"q": q, "k": k, "v": v}

    def run(name: str) -> Any:
        return gp.forward(impls[name], x)[0]

    with torch.no_grad():
        outs = {n: run(n) for n in impls}
        t0 = time.monotonic()
        warm_calls = 0
        while warm_calls < 3 or time.monotonic() - t0 < p.warmup_s:
            for n in impls:
                run(n)
            torch.cuda.synchronize()
            warm_calls += 1
        times: dict[str, list[float]] = {n: [] for n in impls}
        for b in range(p.batches):
            for n in (p.base, p.variant) if b % 2 == 0 else (p.variant, p.base):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(p.iters):
                    run(n)
                end.record()
                end.synchronize()
                times[n].append(start.elapsed_time(end) / p.iters * 1e-3)
    diff = float((outs[p.base].float() - outs[p.variant].float()).abs().max())
    # The variant must compute the same attention: a different O is a broken variant, not a finding.
    if not diff <= 1e-2:
        raise RuntimeError(f"the variant's output differs from the base's by {diff:.3g}: not the same computation")
    flops = 4 * p.batch * p.heads * p.seqlen * p.seqlen * p.head_dim * (0.5 if p.causal else 1.0)
    tflops = {n: [flops / t / 1e12 for t in ts] for n, ts in times.items()}
    ratios = [b / w for b, w in zip(tflops[p.base], tflops[p.variant], strict=True)]
    meas: dict[str, tuple[Any, str]] = {
        "base_tflops": (round(statistics.median(tflops[p.base]), 2), f"TFLOP/s, {p.base} (median of {p.batches} batches)"),
        "variant_tflops": (round(statistics.median(tflops[p.variant]), 2), f"TFLOP/s, {p.variant}"),
        "ratio": (round(statistics.median(ratios), 4), "x (base over variant TFLOP/s, median of per-batch ratios)"),
        "o_max_abs_diff": (diff, "max |O_base - O_variant|"),
        "o_bitwise_equal": (bool(torch.equal(outs[p.base], outs[p.variant])), ""),
    }
    ends = {"ratio": (min(ratios), max(ratios)),
            "base_tflops": (min(tflops[p.base]), max(tflops[p.base])),
            "variant_tflops": (min(tflops[p.variant]), max(tflops[p.variant]))}
    if p.reported_base_tflops and p.reported_variant_tflops:
        lo, hi = min(p.reported_base_tflops), max(p.reported_base_tflops)
        rep_lo, rep_hi = lo / p.reported_variant_tflops, hi / p.reported_variant_tflops
        meas["reported_ratio_low"] = (round(rep_lo, 4), f"x ({lo:g} over {p.reported_variant_tflops:g} TFLOP/s, as reported)")
        meas["reported_ratio_high"] = (round(rep_hi, 4), f"x ({hi:g} over {p.reported_variant_tflops:g} TFLOP/s)")
        meas["ratio_over_reported_low"] = (round(meas["ratio"][0] / rep_lo, 4), "x (measured ratio over the reported low)")
        meas["ratio_over_reported_high"] = (round(meas["ratio"][0] / rep_hi, 4), "x (measured ratio over the reported high)")
        ends["ratio_over_reported_low"] = (min(ratios) / rep_lo, max(ratios) / rep_lo)
        ends["ratio_over_reported_high"] = (min(ratios) / rep_hi, max(ratios) / rep_hi)
    for n, label in ((p.base, "base"), (p.variant, "variant")):
        if bars[n] is not None:
            meas[f"{label}_named_barrier_sass"] = (bars[n], "BAR.SYNC/ARV/RED instructions in the library's SASS")
    log = (f"{torch.cuda.get_device_name()}: B {p.batch} H {p.heads} N {p.seqlen} d {p.head_dim} {p.dtype} "
           f"causal {p.causal}; per-batch TFLOP/s {p.base} {[round(t, 1) for t in tflops[p.base]]}, "
           f"{p.variant} {[round(t, 1) for t in tflops[p.variant]]}; ratios {[round(r, 4) for r in ratios]}")
    timing = (f"{p.batches} interleaved batches of {p.iters} calls, order swapped each batch, after {warm_calls} "
              f"warm-up calls of each ({p.warmup_s:g} s)")
    out = Outcome(measurements=meas, log=log, environment={
        "base_build": pinned_build.provenance(p.base), "variant_build": variants.provenance(p.variant),
        "device": torch.cuda.get_device_name(), "timing": timing})
    return judge_spread(out, ends, ctx) if ctx.expect else out
