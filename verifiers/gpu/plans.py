"""Two tile plans on one problem: a causal forward and its prefix, compared bit for bit.

`gpu.prefix-plans` decides statements that kernels with different tile plans, each deterministic, can give
different bits for the same mathematical result. A pinned forward picks its plan from the sequence length
(FA1 v1.0.9's d = 64 forward takes B_c = 128 at 128 keys and B_c = 256 beyond), so one input cannot run
under two plans; a causal problem and its prefix can. Under a causal mask the first `prefix` query rows of
a length-N problem attend to the first `prefix` keys only, so their output equals, in real arithmetic, the
output of the length-`prefix` problem made of the same first rows of Q, K and V. The verifier runs both
(each twice), records each run's kernels (the plans), and compares the prefix rows bitwise.

Measured: whether the two lengths launched different kernels (`plans_differ`; with one plan the check is
inconclusive), whether each repeats itself bitwise, whether the prefix rows' bits differ and by how much.
Equal bits do not show that the plans cannot differ: inconclusive, never a refutation.
"""

from __future__ import annotations

from typing import Any

from pydantic import model_validator

from kb.registry import Context, Outcome, Requirements, verifier
from verifiers.gpu.params import PINNED_IMPLS, AttnParams

GPU = Requirements(cuda=True, min_cc=80)


class PrefixParams(AttnParams):
    """The causal problem (seqlen_q = seqlen_k) and the prefix length whose rows are compared."""

    prefix: int

    @model_validator(mode="after")
    def _causal_prefix(self) -> PrefixParams:
        if not self.causal:
            raise ValueError("gpu.prefix-plans needs causal: true (only then do the prefix rows see the prefix keys alone)")
        if self.seqlen_k not in (None, self.seqlen_q):
            raise ValueError("gpu.prefix-plans compares self-attention problems: seqlen_k must equal seqlen_q")
        if not 0 < self.prefix < self.seqlen_q:
            raise ValueError(f"prefix must lie between 0 and seqlen_q ({self.seqlen_q}), got {self.prefix}")
        return self


@verifier("gpu.prefix-plans", kind="gpu-bitwise-repeat", params=PrefixParams, requires=GPU, timeout_s=600,
          own_verdict=True)
def prefix_plans(p: PrefixParams, ctx: Context) -> Outcome:
    """A causal forward's first rows against the forward of its prefix: two plans, compared bit for bit."""
    import torch

    from verifiers.gpu import common as g
    from verifiers.gpu import pinned as gpu_pinned

    if p.impl in PINNED_IMPLS and (why := gpu_pinned.available(p.impl)):
        return Outcome(verdict="skipped", reason=why)
    long_x = g.make_inputs(p, requires_grad=False)
    short_p = p.model_copy(update={"seqlen_q": p.prefix, "seqlen_k": None})
    short_x = {n: t[:, :p.prefix].contiguous() for n, t in long_x.items()}

    def run(q: AttnParams, x: dict[str, Any]) -> Any:
        with torch.no_grad():
            o, _ = g.forward(q, x)
        torch.cuda.synchronize()
        return o.detach().clone()

    outs = {"long": [run(p, long_x) for _ in range(2)], "short": [run(short_p, short_x) for _ in range(2)]}
    kernels = {k: sorted({e["name"] for e in g.kernel_trace(lambda q=q, x=x: run(q, x))})
               for k, (q, x) in {"long": (p, long_x), "short": (short_p, short_x)}.items()}
    kernels = {k: [n for n in v if not n.startswith(("void at::", "at::"))] for k, v in kernels.items()}  # ATen copies

    def same(a: Any, b: Any) -> bool:
        return torch.equal(a.view(torch.uint8), b.view(torch.uint8))

    repeats = same(outs["long"][0], outs["long"][1]) and same(outs["short"][0], outs["short"][1])
    head = outs["long"][0][:, :p.prefix].contiguous()
    short = outs["short"][0]
    differ = int((head.view(torch.int16) != short.view(torch.int16)).sum()) if head.element_size() == 2 else \
        int((head != short).sum())
    plans_differ = kernels["long"] != kernels["short"]
    meas: dict[str, tuple[Any, str]] = {
        "plans_differ": (int(plans_differ), "1 when the two lengths launch different kernels"),
        "repeats_agree": (int(repeats), "1 when each length gives the same bits twice"),
        "bits_differ": (int(differ > 0), "1 when the prefix rows' bits differ between the plans"),
        "elements_differ": (differ, f"of {head.numel()} prefix output elements"),
        "max_abs_diff": (float((head.double() - short.double()).abs().max()), "largest |long - prefix|"),
    }
    env = {**g.versions(p.impl), "kernels_long": kernels["long"][:6], "kernels_prefix": kernels["short"][:6]}
    log = f"long ({p.seqlen_q}): {kernels['long']}\nprefix ({p.prefix}): {kernels['short']}\n" + \
        "\n".join(f"{k} = {v[0]}" for k, v in meas.items())
    if not plans_differ:
        return Outcome(verdict="inconclusive", measurements=meas, log=log, environment=env,
                       reason="both lengths launched the same kernels: one plan, nothing about two")
    if not repeats:
        return Outcome(verdict="inconclusive", measurements=meas, log=log, environment=env,
                       reason="a length does not repeat its own bits, so a difference is not the plan's")
    if not differ and "bits_differ" in ctx.expect:
        return Outcome(verdict="inconclusive", measurements=meas, log=log, environment=env,
                       reason="the two plans give the same bits on this input; that does not show they cannot differ")
    return Outcome(measurements=meas, log=log, environment=env)
