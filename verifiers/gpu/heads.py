"""Heads as independent problems: a multi-head forward against one head run alone, bit for bit.

`gpu.head-independence` gives every one of H heads the inputs of head 0 (the same Q, K and V copied into
each head's slice), runs the H-head forward, runs the same single head with H = 1, and counts the heads
whose output equals the single-head output bitwise. With no reduction across heads and no head-dependent
arithmetic every head matches; a cross-head reduction, or a plan that the head count changes (a different
split of the K/V loop, say), shows up as heads that differ. Both runs use the same `num_splits` so that a
revision whose heuristic reads the head count is compared at one plan, as the claims say.
"""

from __future__ import annotations

from kb.registry import Context, Outcome, Requirements, verifier
from verifiers.gpu.params import PINNED_IMPLS, AttnParams

GPU = Requirements(cuda=True, min_cc=80)


@verifier("gpu.head-independence", kind="gpu-bitwise-repeat", params=AttnParams, requires=GPU, timeout_s=300)
def head_independence(p: AttnParams, ctx: Context) -> Outcome:
    """Heads whose output, in an H-head forward of copies of one head, equals that head's H = 1 output bitwise."""
    import torch

    from verifiers.gpu import common as g
    from verifiers.gpu import pinned as gpu_pinned

    if p.impl in PINNED_IMPLS and (why := gpu_pinned.available(p.impl)):
        return Outcome(verdict="skipped", reason=why)
    if p.heads_kv not in (None, p.heads):
        raise ValueError("gpu.head-independence copies one head into every head: heads_kv must equal heads")
    one = p.model_copy(update={"heads": 1, "heads_kv": None})
    x1 = g.make_inputs(one, requires_grad=False)
    xh = {n: t.expand(-1, -1, p.heads, -1).contiguous() for n, t in x1.items()}
    with torch.no_grad():
        o1, _ = g.forward(one, x1)
        oh, _ = g.forward(p, xh)
        kernels = [k["name"] for k in g.kernel_trace(lambda: g.forward(p, xh))]
    equal = [h for h in range(p.heads) if torch.equal(oh[:, :, h:h + 1], o1)]
    first = next((h for h in range(p.heads) if h not in equal), None)
    meas = {"heads": (p.heads, "heads in the multi-head run"),
            "heads_equal_to_single": (len(equal), "heads bitwise equal to the H = 1 output"),
            "all_heads_equal": (len(equal) == p.heads, "")}
    log = (f"{len(equal)} of {p.heads} heads equal the single-head output bitwise"
           + (f"; first differing head {first}, max |diff| "
              f"{float((oh[:, :, first:first + 1].double() - o1.double()).abs().max()):.3e}" if first is not None else ""))
    return Outcome(measurements=meas, log=log, environment={**g.versions(p.impl), "kernels": sorted(set(kernels))[:20],
                                                             "num_splits": p.num_splits})
