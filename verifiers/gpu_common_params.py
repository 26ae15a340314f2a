"""GPU check parameters, importable without torch (the registry scan loads them)."""

from __future__ import annotations

from typing import Literal

from kb.registry import Params

# fa1-v1.0.9, fa2-v2.0.0, fa3-2024-08: kb's builds of those pins (verifiers/pinned_build.py), run via ctypes.
Impl = Literal["sdpa-flash", "sdpa-efficient", "sdpa-cudnn", "sdpa-math", "fa4", "flex",
               "fa1-v1.0.9", "fa2-v2.0.0", "fa3-2024-08"]


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
    philox_offset: int = 0  # pinned builds with dropout: the generator offset handed to the pinned API
    num_splits: int = 0  # fa1-v1.0.9: 0 = the pinned heuristic, > 0 forces the backward's split count
    min_cc: int | None = None
    max_cc: int | None = None
