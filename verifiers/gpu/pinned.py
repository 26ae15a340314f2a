"""The pinned revisions as attention implementations: torch tensors in, the pinned kernels run via ctypes.

`impl: fa2-v2.0.0` (or `fa1-v1.0.9`, `fa3-2024-08`) in a GPU check runs kb's
build of that pin (verifiers/pinned/build.py) instead of a packaged library.
An autograd Function wraps the pinned forward and backward, so every GPU
verifier (profile, bitwise repeat, kernel run, benchmark) drives them the same
way it drives SDPA. Imported only inside GPU verifier functions (torch).
"""

from __future__ import annotations

import ctypes
from typing import Any

from verifiers.pinned import build as pinned_build


def available(impl: str) -> str | None:
    """None when the build of `impl` loads here, else the reason it does not."""
    try:
        pinned_build.load(impl)
    except (FileNotFoundError, RuntimeError, OSError, KeyError) as e:
        return str(e)
    return None


def as_impl(name: str, causal: bool, head_dim: int) -> Any:
    """The parameters forward() reads, for a build that is not one of AttnParams' impls (kb's variants)."""
    import types

    return types.SimpleNamespace(impl=name, causal=causal, dropout_p=0.0, head_dim=head_dim, seed=0, philox_offset=0,
                                 num_splits=0, deterministic=False)


def _args(p: Any, x: dict[str, Any], phase: int) -> tuple[Any, pinned_build.KbAttnArgs]:
    import torch

    q = x["q"]
    a = pinned_build.KbAttnArgs()
    a.batch, a.seqlen_q, a.heads, a.head_dim = q.shape
    a.seqlen_k, a.heads_k = x["k"].shape[1], x["k"].shape[2]
    a.is_bf16 = int(q.dtype == torch.bfloat16)
    a.is_e4m3 = int(q.dtype == torch.float8_e4m3fn)
    a.is_causal = int(p.causal)
    a.p_dropout = float(p.dropout_p)
    a.softmax_scale = float(p.head_dim ** -0.5)
    a.seed, a.offset = int(p.seed), int(getattr(p, "philox_offset", 0))
    a.num_splits = int(getattr(p, "num_splits", 0))
    a.deterministic = int(p.deterministic)
    lib = pinned_build.load(p.impl).lib
    if lib.kb_workspace(ctypes.byref(a), phase) != 0:
        raise RuntimeError(f"{p.impl}: {lib.kb_last_error().decode()}")
    return lib, a


def _ws(a: pinned_build.KbAttnArgs, device: Any) -> list[Any]:
    """Scratch buffers as the pinned API allocates them (torch.empty: uninitialised, the caching allocator's)."""
    import torch

    bufs = []
    for i in range(4):
        n = int(a.ws_bytes[i])
        t = torch.empty(max(n, 1), dtype=torch.uint8, device=device)
        bufs.append(t)
        a.ws[i] = t.data_ptr() if n else None
    return bufs


def _check(lib: Any, rc: int, what: str) -> None:
    if rc != 0:
        raise RuntimeError(f"{what}: {lib.kb_last_error().decode()}")


def _fwd(p: Any, q: Any, k: Any, v: Any) -> tuple[Any, Any, list[Any]]:
    import torch

    lib, a = _args(p, {"q": q, "k": k}, 0)
    # mha_fwd allocates the output like q, in fp16 for e4m3 input.
    o = torch.empty_like(q, dtype=torch.float16 if a.is_e4m3 else q.dtype)
    # (b, h, seqlen_q) for every pin: v1.0.9 pads its LSE rows to 16, so its harness takes only seqlen_q % 16 == 0.
    lse = torch.empty(q.shape[0], q.shape[2], q.shape[1], dtype=torch.float32, device=q.device)
    a.q, a.k, a.v, a.o, a.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()
    keep = _ws(a, q.device)
    _check(lib, lib.kb_fwd(ctypes.byref(a), torch.cuda.current_stream().cuda_stream), f"{p.impl} forward")
    return o, lse, keep


def _bwd(p: Any, q: Any, k: Any, v: Any, o: Any, lse: Any, do: Any) -> tuple[Any, Any, Any]:
    import torch

    lib, a = _args(p, {"q": q, "k": k}, 1)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    a.q, a.k, a.v, a.o, a.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()
    a.dout, a.dq, a.dk, a.dv = do.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
    keep = _ws(a, q.device)
    _check(lib, lib.kb_bwd(ctypes.byref(a), torch.cuda.current_stream().cuda_stream), f"{p.impl} backward")
    del keep  # the caching allocator keeps the blocks until the stream has used them
    return dq, dk, dv


def forward(p: Any, x: dict[str, Any]) -> tuple[Any, Any]:
    """Pinned forward (and a backward through autograd when the inputs require grad)."""
    import torch

    class _Pinned(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, q: Any, k: Any, v: Any) -> tuple[Any, Any]:
            q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
            o, lse, _ = _fwd(p, q, k, v)
            ctx.save_for_backward(q, k, v, o, lse)
            ctx.mark_non_differentiable(lse)
            return o, lse

        @staticmethod
        def backward(ctx: Any, do: Any, _dlse: Any) -> tuple[Any, Any, Any]:
            q, k, v, o, lse = ctx.saved_tensors
            return _bwd(p, q, k, v, o, lse, do.contiguous())

    o, lse = _Pinned.apply(x["q"], x["k"], x["v"])
    return o, lse


def provenance(impl: str) -> dict[str, Any]:
    """The build record every run on this implementation carries."""
    return pinned_build.provenance(impl)
