"""Launch heuristics recomputed from the pinned source, for the notes' example shapes.

Each rule re-states one C++ function at its pinned revision (the claim's
repository anchor cites it), with float32 arithmetic where the source uses
`float`, so the split count comes out as the kernel would choose it.
"""

from __future__ import annotations

import math
import struct
from typing import Literal

from kb.registry import Context, Outcome, Params, verifier


def f32(x: float) -> float:
    """Round to IEEE float32, as a C++ `float` holds it."""
    return struct.unpack("f", struct.pack("f", x))[0]


def splits_fwd_v109(batch_nheads: int, num_sms: int, ctas_per_sm: int, max_splits: int) -> int:
    """v1.0.9 `num_splits_heuristic_fwd` (csrc/flash_attn/src/fmha_fwd_launch_template.h)."""
    effs = []
    for s in range(1, max_splits + 1):
        waves = f32(f32(batch_nheads * s) / (num_sms * ctas_per_sm))
        effs.append(f32(waves / math.ceil(waves)))
    best = max(effs)
    for s, e in enumerate(effs, 1):
        if e > f32(0.95 * best):
            return s
    return 1


def splits_bwd_v109(batch_nheads: int, num_sms: int, ctas_per_sm: int, seqlen: int, block: int, causal: bool) -> int:
    """v1.0.9 `num_splits_heuristic_bwd` (csrc/flash_attn/src/fmha_bwd_launch_template.h)."""
    w1 = f32(batch_nheads / (num_sms * ctas_per_sm))
    eff1 = f32(w1 / math.ceil(w1))
    par = seqlen // block
    wp = f32(batch_nheads * par / (num_sms * ctas_per_sm))
    effp_raw = f32(wp / math.ceil(wp))
    if not causal:
        discount = f32(1.0 + f32(block / seqlen))
    else:
        if seqlen // block >= 10:
            return par
        discount = f32(1.0 + 0.5 * f32(block / seqlen))
    return 1 if eff1 >= f32(effp_raw / discount) else par


def splits_deterministic(batch: int, heads: int, num_sms: int) -> int:
    """Current legacy-CUDA deterministic backward: ceil(num_SMs / (batch * heads)) split buffers."""
    bh = batch * heads
    return (num_sms + bh - 1) // bh


class SplitsParams(Params):
    """Inputs of the chosen rule; unused ones are ignored by that rule."""

    rule: Literal["v1.0.9", "fwd-v1.0.9", "bwd-v1.0.9", "deterministic-current"]
    batch: int
    heads: int
    sm_count: int
    ctas_per_sm: int = 1
    max_splits: int | None = None
    seqlen_k: int | None = None
    seqlen_q: int | None = None
    block: int = 128
    cta_m: int = 16  # Kernel_traits::Cta_tile_p::M of the v1.0.9 forward
    causal: bool = False


@verifier("heuristic.num-splits", kind="cpu-check", params=SplitsParams, timeout_s=10)
def num_splits(p: SplitsParams, ctx: Context) -> Outcome:
    """Recompute the split count the pinned heuristic picks for the given shape and SM count."""
    bh = p.batch * p.heads
    if p.rule in ("v1.0.9", "fwd-v1.0.9"):
        # The v1.0.9 call site passes min(30, (seqlen_q + M - 1 / M)); integer 1 / M is 0,
        # so the cap is min(30, seqlen_q + M), not a ceil-divide. Reproduce it as written.
        if p.max_splits is not None:
            cap = p.max_splits
        elif p.seqlen_q is not None:
            cap = min(30, p.seqlen_q + p.cta_m - 1 // p.cta_m)
        else:
            raise ValueError("fwd-v1.0.9 needs max_splits or seqlen_q")
        n = splits_fwd_v109(bh, p.sm_count, p.ctas_per_sm, cap)
    elif p.rule == "bwd-v1.0.9":
        if p.seqlen_k is None:
            raise ValueError("bwd-v1.0.9 needs seqlen_k")
        n = splits_bwd_v109(bh, p.sm_count, p.ctas_per_sm, p.seqlen_k, p.block, p.causal)
    else:
        n = splits_deterministic(p.batch, p.heads, p.sm_count)
    return Outcome(measurements={"num_splits": (n, "splits")}, log=f"rule {p.rule}, batch*heads={bh}, SMs={p.sm_count}")
