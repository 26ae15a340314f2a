"""Floating-point reduction order: when does the order of partial sums change the bits?"""

from __future__ import annotations

import itertools
from typing import Literal

from kb.registry import Context, Outcome, Params, verifier


class SumOrderParams(Params):
    """How many partials are added into a zeroed accumulator, and in which dtype."""

    partials: int
    dtype: Literal["float32", "float16", "bfloat16", "float64"] = "float32"
    trials: int = 2000
    seed: int = 0


@verifier("math.fp-sum-order", kind="cpu-check", params=SumOrderParams, timeout_s=60)
def fp_sum_order(p: SumOrderParams, ctx: Context) -> Outcome:
    """Search random partials for two accumulation orders that give different bits.

    Addition into a zeroed accumulator is sequential, as atomics land: acc = 0;
    acc += x_(order[0]); ... With two partials, 0 + a + b and 0 + b + a are both
    one rounding of a + b, so no order can differ; with three or more, some will.
    """
    import torch

    dt = getattr(torch, p.dtype)
    g = torch.Generator().manual_seed(p.seed)
    # Enough distinct orders to expose reassociation without enumerating n! permutations.
    orders = list(itertools.islice(itertools.permutations(range(p.partials)), 24))
    if p.partials > 3:
        orders.append(tuple(reversed(range(p.partials))))
    found = None
    for t in range(p.trials):
        x = (torch.randn(p.partials, generator=g, dtype=torch.float64) * 10 ** torch.randint(-3, 4, (1,), generator=g)).to(dt)
        sums = set()
        for order in orders:
            acc = torch.zeros((), dtype=dt)
            for i in order:
                acc = acc + x[i]
            sums.add(acc.view(torch.int16 if dt in (torch.float16, torch.bfloat16) else
                              torch.int32 if dt == torch.float32 else torch.int64).item())
        if len(sums) > 1:
            found = (t, x.tolist(), len(sums))
            break
    log = f"first differing trial {found[0]}: partials {found[1]} gave {found[2]} distinct sums" if found else \
        f"no differing order in {p.trials} trials x {len(orders)} orders"
    return Outcome(measurements={"order_dependent": (found is not None, "")}, log=log)
