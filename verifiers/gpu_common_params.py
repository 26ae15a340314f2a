"""GPU check parameters, importable without torch (the registry scan loads them)."""

from __future__ import annotations

from typing import Literal

from kb.registry import Params

Impl = Literal["sdpa-flash", "sdpa-efficient", "sdpa-cudnn", "sdpa-math", "fa4", "flex"]


class AttnParams(Params):
    """Which implementation, the problem shape and mode, and the architecture the claim is about."""

    impl: Impl = "sdpa-flash"  # flex = torch.compile'd flex_attention (Triton kernels)
    batch: int = 2
    heads: int = 16
    heads_kv: int | None = None
    seqlen_q: int = 1024
    seqlen_k: int | None = None
    head_dim: int = 128
    dtype: Literal["bfloat16", "float16"] = "bfloat16"
    causal: bool = False
    deterministic: bool = False
    dropout_p: float = 0.0
    seed: int = 0
    min_cc: int | None = None
    max_cc: int | None = None
