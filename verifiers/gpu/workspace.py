"""The deterministic backward's dQ workspace: how much memory it takes and how long it lives.

A chain of `layers` attention calls (each layer's output is the next layer's Q, K and V) runs its
backward once with deterministic off and once with it on (for SDPA, PyTorch's global switch, as
verifiers.gpu.common.set_deterministic sets it). Everything autograd saves is the same in both
runs, so the difference in peak allocated memory is the deterministic path's own workspace; the
difference in memory still allocated after the backward is what of it outlives the call; running
one layer and `layers` layers tells a per-call workspace (the extra peak stays flat) from one that
persists per layer (the extra peak grows with the layer count).
"""

from __future__ import annotations

from typing import Any

from kb.registry import Context, Outcome, Requirements, verifier
from verifiers.gpu.params import AttnParams


class WorkspaceParams(AttnParams):
    """The attention shape and implementation, and how many layers the long chain has."""

    layers: int = 4


def _backward_memory(p: AttnParams, layers: int, deterministic: bool) -> dict[str, int]:
    import torch

    from verifiers.gpu import common as g

    q = p.model_copy(update={"deterministic": deterministic})
    g.set_deterministic(q)
    x = g.make_inputs(q)["q"]
    torch.cuda.synchronize()
    h = x
    for _ in range(layers):
        h, _lse = g.forward(q, {"q": h, "k": h, "v": h})
    grad = torch.randn_like(h)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    h.backward(grad)
    torch.cuda.synchronize()
    out = {"peak": torch.cuda.max_memory_allocated() - before, "after": torch.cuda.memory_allocated() - before,
           "reserved": torch.cuda.memory_reserved()}
    del h, grad, x
    torch.cuda.empty_cache()
    return out


@verifier("gpu.det-workspace", kind="gpu-profile", params=WorkspaceParams,
          requires=Requirements(cuda=True, min_cc=80), timeout_s=300)
def det_workspace(p: WorkspaceParams, ctx: Context) -> Outcome:
    """Extra peak and retained memory of the deterministic backward, for one layer and for a chain of layers."""
    import torch

    from verifiers.gpu import common as g

    runs: dict[tuple[int, bool], dict[str, int]] = {}
    for layers in (1, p.layers):
        for det in (False, True, False, True):  # each twice: the second run sees a warm caching allocator
            runs[(layers, det)] = _backward_memory(p, layers, det)
    torch.use_deterministic_algorithms(False)
    extra1 = runs[(1, True)]["peak"] - runs[(1, False)]["peak"]
    extra_l = runs[(p.layers, True)]["peak"] - runs[(p.layers, False)]["peak"]
    kept = runs[(p.layers, True)]["after"] - runs[(p.layers, False)]["after"]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    nsplits = -(-sms // (p.batch * p.heads))
    split = p.batch * (-(-p.seqlen_q // 128) * 128) * p.heads * (-(-p.head_dim // 32) * 32) * 4
    meas: dict[str, tuple[Any, str]] = {
        "extra_peak_bytes_1_layer": (extra1, "peak allocated during backward, deterministic minus default"),
        f"extra_peak_bytes_{p.layers}_layers": (extra_l, "the same for the chain"),
        "extra_peak_growth": (round(extra_l / extra1, 3) if extra1 > 0 else None,
                              f"{p.layers}-layer extra peak over the 1-layer extra peak (1 = per call, "
                              f"{p.layers} = one workspace kept per layer)"),
        "retained_after_backward_bytes": (kept, "still allocated after the backward, deterministic minus default"),
        "retained_over_extra_peak": (round(kept / extra1, 4) if extra1 > 0 else None, "x the 1-layer extra peak"),
        "reserved_covers_peak": (runs[(p.layers, True)]["reserved"] >= runs[(p.layers, True)]["peak"],
                                 "the caching allocator still reserves at least the peak after the call"),
        "predicted_extra_bytes": ((nsplits - 1) * split, f"(nsplits - 1) x one FP32 dQ image, nsplits = "
                                  f"ceil({sms} SMs / (batch x heads)) = {nsplits} (upstream FA2's rule)"),
    }
    log = "; ".join(f"layers {k[0]} det {k[1]}: {v}" for k, v in runs.items())
    return Outcome(measurements=meas, log=log, environment=g.versions(p.impl))
