"""GPU check parameters, importable without torch (the registry scan loads them)."""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from kb.registry import Params

# kb's builds of those pins (verifiers/pinned/build.py, the same names), run via ctypes (verifiers/gpu_pinned.py).
PINNED_IMPLS = ("fa1-v1.0.9", "fa2-v2.0.0", "fa3-2024-08")
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
    # float8_e4m3fn: the FA3 pin's FP8 forward only (e4m3 q, k, v; fp16 output; no scaling factors at that revision).
    dtype: Literal["bfloat16", "float16", "float8_e4m3fn"] = "bfloat16"
    causal: bool = False
    deterministic: bool = False
    dropout_p: float = 0.0
    seed: int = 0
    philox_offset: int = 0  # pinned builds with dropout: the generator offset handed to the pinned API
    num_splits: int = 0  # fa1-v1.0.9: 0 = the pinned heuristic, > 0 forces the backward's split count
    min_cc: int | None = None
    max_cc: int | None = None

    @model_validator(mode="after")
    def _fp8_only_where_built(self) -> AttnParams:
        if self.dtype == "float8_e4m3fn" and self.impl != "fa3-2024-08":
            raise ValueError(f"dtype float8_e4m3fn runs only on impl fa3-2024-08 (its FP8 forward), not {self.impl}")
        return self

    @model_validator(mode="after")
    def _pinned_builds_are_sm90(self) -> AttnParams:
        # The pinned builds hold sm_90 / sm_90a code only: a check on one is about sm_90 unless it says otherwise.
        if self.impl in PINNED_IMPLS:
            self.min_cc = 90 if self.min_cc is None else self.min_cc
            self.max_cc = 90 if self.max_cc is None else self.max_cc
        return self
