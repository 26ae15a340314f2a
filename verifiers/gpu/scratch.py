"""The pinned backwards' scratch buffers, repeated: which of softmax_d, the FP32 dQ accumulator, dQ, dK and dV
keep their bits over identical runs, and, for a grouped-query shape, whether the head-group sum adds a change.

kb's harnesses (verifiers/pinned/harness/) return dQ, dK and dV only; the pinned APIs' scratch tensors are the
ABI's caller-allocated workspaces (kb_attn_abi.h, ws[i]), which this verifier keeps and compares instead of
freeing them. Each repeat fills every workspace with one fixed byte before the call, so bytes a run does not
write compare equal instead of carrying another allocation's leftovers (the pinned API allocates them with
torch.empty: any content is as valid as another); where the pinned API zero-fills, the harness still does.

Grouped-query attention (`kv_heads_group` > 1) on v2.0.0: the pinned mha_bwd lets the kernel write dK and dV
for every query head (dk_expanded) and then sums each group with ATen (at::sum_out over the group axis). kb's
harness takes no GQA backward, so this verifier passes K and V with each head repeated over its group: the
kernel then does, per query head, the arithmetic the pinned GQA call does (it reads one K/V head per query
head either way), and the group sum is torch.sum over the same axis, run by the installed PyTorch.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import model_validator

from kb.registry import Context, Outcome, Requirements, verifier
from verifiers.gpu.params import AttnParams
from verifiers.gpu.verdict import judge_absence

# The ws[] index of each named scratch tensor, per pin (the harness headers document the layout).
SCRATCH: dict[str, dict[str, int]] = {
    "fa1-v1.0.9": {"softmax_d": 1, "dq_tmp": 2},
    "fa2-v2.0.0": {"softmax_d": 0, "dq_accum": 1},
}
POISON = 0xA5  # the byte every workspace holds before a call
Tensor = Literal["softmax_d", "dq_tmp", "dq_accum", "dq", "dk", "dv", "dk_expanded", "dv_expanded"]


class ScratchParams(AttnParams):
    """Repeats, the tensors to compare, and the query heads per K/V head (v2.0.0 only)."""

    repeats: int = 20
    tensors: list[Tensor] = ["softmax_d", "dq", "dk", "dv"]
    kv_heads_group: int = 1

    @model_validator(mode="after")
    def _pinned_scratch(self) -> ScratchParams:
        if self.impl not in SCRATCH:
            raise ValueError(f"gpu.scratch-repeat reads the workspaces of {sorted(SCRATCH)}, not {self.impl}")
        own = set(SCRATCH[self.impl]) | {"dq", "dk", "dv"}
        if self.kv_heads_group > 1:
            if self.impl != "fa2-v2.0.0" or self.heads % self.kv_heads_group:
                raise ValueError("kv_heads_group > 1 needs impl fa2-v2.0.0 and heads divisible by the group")
            own |= {"dk_expanded", "dv_expanded"}
        if bad := [t for t in self.tensors if t not in own]:
            raise ValueError(f"{self.impl} has no {bad} here; choose from {sorted(own)}")
        return self


def _backward_once(p: ScratchParams, x: dict[str, Any], o: Any, lse: Any) -> dict[str, Any]:
    """One pinned backward; the requested tensors, scratch buffers as typed views of the workspaces."""
    import ctypes

    import torch

    from verifiers.gpu import pinned as gpu_pinned

    q, k, v, do = x["q"], x["k"], x["v"], x["do"]
    lib, a = gpu_pinned._args(p, {"q": q, "k": k}, 1)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    a.q, a.k, a.v, a.o, a.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()
    a.dout, a.dq, a.dk, a.dv = do.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
    bufs = gpu_pinned._ws(a, q.device)
    for b in bufs:
        b.fill_(POISON)
    gpu_pinned._check(lib, lib.kb_bwd(ctypes.byref(a), torch.cuda.current_stream().cuda_stream),
                      f"{p.impl} backward")
    torch.cuda.synchronize()
    out: dict[str, Any] = {"dq": dq, "dk": dk, "dv": dv}
    for name, i in SCRATCH[p.impl].items():
        out[name] = bufs[i][: int(a.ws_bytes[i])].view(torch.float32)  # both scratch tensors are FP32
    if p.kv_heads_group > 1:
        # The pinned GQA step: dk_expanded (b, s, h, d) summed over each group of query heads.
        b_, s_, h_, d_ = dk.shape
        g = p.kv_heads_group
        out["dk_expanded"], out["dv_expanded"] = dk, dv
        out["dk"] = torch.sum(dk.reshape(b_, s_, h_ // g, g, d_), dim=3)
        out["dv"] = torch.sum(dv.reshape(b_, s_, h_ // g, g, d_), dim=3)
    return out


@verifier("gpu.scratch-repeat", kind="gpu-bitwise-repeat", params=ScratchParams,
          requires=Requirements(cuda=True, min_cc=80), timeout_s=300)
def scratch_repeat(p: ScratchParams, ctx: Context) -> Outcome:
    """Repeat a pinned backward on fixed inputs; distinct results per output and per scratch tensor."""
    from verifiers.gpu import pinned as gpu_pinned

    if why := gpu_pinned.available(p.impl):
        return Outcome(verdict="skipped", reason=why)
    import torch

    from verifiers.gpu import common as g

    x = g.make_inputs(p.model_copy(update={"heads_kv": None}), requires_grad=False)
    if p.kv_heads_group > 1:
        # K/V of heads/group heads, each repeated over its group of query heads (see the module docstring).
        hk = p.heads // p.kv_heads_group
        for n in ("k", "v"):
            x[n] = x[n][:, :, :hk].repeat_interleave(p.kv_heads_group, dim=2).contiguous()
    with torch.no_grad():
        o, lse, _keep = gpu_pinned._fwd(p, x["q"], x["k"], x["v"])
    seen: dict[str, list[Any]] = {t: [] for t in p.tensors}
    first_run: dict[str, int] = {}
    for r in range(p.repeats):
        res = _backward_once(p, x, o, lse)
        for t in p.tensors:
            kept = seen[t]
            if not any(torch.equal(k_, res[t]) for k_ in kept):
                if kept and t not in first_run:
                    first_run[t] = r
                kept.append(res[t].detach().clone())
    meas: dict[str, tuple[Any, str]] = {f"distinct_{t}": (len(v), "distinct results") for t, v in seen.items()}
    meas["repeats"] = (p.repeats, "backward runs on one forward's O and LSE")
    differing = sorted(first_run, key=lambda t: (first_run[t], p.tensors.index(t)))
    meas["differing_tensors"] = (",".join(differing) or "none", "tensors with more than one result, by first run")
    log = (f"first differing run per tensor: {first_run}" if first_run else "every repeat bitwise identical")
    log += f"; workspaces pre-filled with byte 0x{POISON:02X}"
    out = Outcome(measurements=meas, log=log, environment={**g.versions(p.impl)})
    return judge_absence(out, ctx, p.repeats, "bitwise difference")
