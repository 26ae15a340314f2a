"""Shared GPU plumbing: inputs, the attention implementations, digests, kernel traces.

Imported only inside GPU verifier functions (it imports torch at module level
on purpose: this module is never loaded by the CLI or the registry scan).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import tempfile
from typing import Any

from verifiers.gpu.params import PINNED_IMPLS, AttnParams

AttnShape = AttnParams


def _torch():
    import torch

    return torch


def make_inputs(p: AttnShape, requires_grad: bool = True) -> dict[str, Any]:
    """q, k, v, dO on the GPU in (batch, seq, heads, dim) layout, from a fixed seed."""
    torch = _torch()
    g = torch.Generator(device="cuda").manual_seed(p.seed)
    dt = getattr(torch, p.dtype)
    fp8 = p.dtype == "float8_e4m3fn"
    hk = p.heads_kv or p.heads
    sk = p.seqlen_k or p.seqlen_q

    def rnd(*shape: int) -> Any:
        # FP8: standard normal drawn in fp16 and rounded to e4m3 (randn has no float8 kernel).
        return torch.randn(*shape, generator=g, device="cuda", dtype=torch.float16 if fp8 else dt).to(dt)

    q, k, v = rnd(p.batch, p.seqlen_q, p.heads, p.head_dim), rnd(p.batch, sk, hk, p.head_dim), rnd(p.batch, sk, hk, p.head_dim)
    do = rnd(p.batch, p.seqlen_q, p.heads, p.head_dim)
    for t in (q, k, v):
        t.requires_grad_(requires_grad and not fp8)  # the FP8 path is forward only
    return {"q": q, "k": k, "v": v, "do": do}


def _sdpa_backend(impl: str) -> Any:
    from torch.nn.attention import SDPBackend

    return {
        "sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION,
        "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION, "sdpa-math": SDPBackend.MATH,
    }[impl]


def _causal(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
    return q_idx >= kv_idx


@functools.lru_cache(maxsize=1)
def _flex() -> Any:
    """flex_attention compiled once per worker (the first call JIT-compiles Triton kernels)."""
    torch = _torch()
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


def forward(p: AttnShape, x: dict[str, Any]) -> tuple[Any, Any]:
    """Run the implementation's forward; returns (out in BSHD layout, lse or None)."""
    torch = _torch()
    if p.dropout_p:
        # Dropout is replayable only from the same RNG state: restore it before every call.
        torch.manual_seed(p.seed)
        torch.cuda.manual_seed(p.seed)
    if p.impl in PINNED_IMPLS:
        from verifiers.gpu import pinned as gpu_pinned

        return gpu_pinned.forward(p, x)
    if p.impl == "fa4":
        from flash_attn.cute import flash_attn_func

        kwargs: dict[str, Any] = {"causal": p.causal}
        sig = inspect.signature(flash_attn_func).parameters
        if "deterministic" in sig:
            kwargs["deterministic"] = p.deterministic
        if "return_lse" in sig:
            kwargs["return_lse"] = True
        res = flash_attn_func(x["q"], x["k"], x["v"], **kwargs)
        if isinstance(res, tuple):
            return res[0], (res[1] if len(res) > 1 else None)
        return res, None
    q, k, v = (x[n].transpose(1, 2) for n in ("q", "k", "v"))
    if p.impl == "flex":
        from torch.nn.attention.flex_attention import create_block_mask

        mask = None
        if p.causal:
            mask = create_block_mask(_causal, None, None, q.shape[2], k.shape[2], device="cuda")
        out = _flex()(q, k, v, block_mask=mask, enable_gqa=k.shape[1] != q.shape[1])
        return out.transpose(1, 2), None
    from torch.nn.attention import sdpa_kernel

    with sdpa_kernel([_sdpa_backend(p.impl)]):
        gqa = {"enable_gqa": True} if (p.heads_kv and p.heads_kv != p.heads) else {}
        out = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=p.causal, dropout_p=p.dropout_p, **gqa)
    return out.transpose(1, 2), None


def forward_backward(p: AttnShape, x: dict[str, Any]) -> dict[str, Any]:
    """Forward then backward with dO; returns o, lse (if any), dq, dk, dv."""
    _torch()
    for n in ("q", "k", "v"):
        x[n].grad = None
    o, lse = forward(p, x)
    o.backward(x["do"])
    return {"o": o.detach(), "lse": lse.detach() if lse is not None else None,
            "dq": x["q"].grad.detach(), "dk": x["k"].grad.detach(), "dv": x["v"].grad.detach()}


def digest(t: Any) -> str:
    """sha256 of a tensor's bytes (bitwise identity)."""
    torch = _torch()
    b = t.contiguous().view(torch.uint8).cpu().numpy().tobytes() if t.dtype != torch.uint8 else t.cpu().numpy().tobytes()
    return hashlib.sha256(b).hexdigest()[:16]


def set_deterministic(p: AttnShape) -> None:
    """For SDPA, the deterministic flag is PyTorch's global deterministic-algorithms switch.

    warn_only must be False: with warn_only=True PyTorch's flash backward only warns
    and keeps its non-deterministic dQ path (attention_backward.cu reads the flag so).
    CUBLAS_WORKSPACE_CONFIG is set when the worker starts, before any cuBLAS handle exists.
    """
    torch = _torch()
    if p.impl.startswith("sdpa"):
        torch.use_deterministic_algorithms(p.deterministic, warn_only=False)


def kernel_trace(fn: Any) -> list[dict[str, Any]]:
    """Run fn under torch.profiler; every CUDA kernel with grid, block, registers, shared memory."""
    torch = _torch()
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    prof.export_chrome_trace(path)
    with open(path) as fh:
        events = json.load(fh).get("traceEvents", [])
    os.unlink(path)
    out = []
    for e in events:
        if e.get("cat") != "kernel":
            continue
        a = e.get("args", {})
        out.append({
            "name": e.get("name", ""), "grid": a.get("grid"), "block": a.get("block"),
            "registers": a.get("registers per thread"), "smem": a.get("shared memory"),
            "dur_us": e.get("dur"), "ts": e.get("ts"),
        })
    out.sort(key=lambda k: k["ts"] or 0)
    return out


def versions(impl: str | None = None) -> dict[str, Any]:
    """Versions of what ran, for the evidence record (a pinned build's manifest when impl names one)."""
    torch = _torch()
    env: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda}
    if impl in PINNED_IMPLS:
        from verifiers.gpu import pinned as gpu_pinned

        env["pinned_build"] = gpu_pinned.provenance(impl)
    try:
        import flash_attn

        env["flash_attn"] = getattr(flash_attn, "__version__", "?")
    except ImportError:
        pass
    return env


class ClockSampler:
    """SM clock and board power sampled by nvidia-smi every 50 ms while a timed loop runs.

    A single read before the loop shows the idle clock (345 MHz on the H200), not what the
    kernels ran at; sampling during the loop records the clocks the timing depended on.
    """

    def __init__(self, interval_ms: int = 50) -> None:
        self.interval_ms = interval_ms
        self.samples: list[tuple[float, float]] = []
        self._proc: Any = None

    def __enter__(self) -> ClockSampler:
        import subprocess

        torch = _torch()
        idx = os.environ.get("CUDA_VISIBLE_DEVICES", str(torch.cuda.current_device())).split(",")[0]
        try:
            self._proc = subprocess.Popen(
                ["nvidia-smi", "-i", idx, "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                 f"-lms={self.interval_ms}"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            self._proc = None
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._proc is None:
            return
        self._proc.terminate()
        out, _ = self._proc.communicate(timeout=10)
        for line in out.splitlines():
            parts = [x.strip() for x in line.split(",")]
            try:
                self.samples.append((float(parts[0]), float(parts[1])))
            except (ValueError, IndexError):
                continue

    def summary(self) -> dict[str, tuple[Any, str]]:
        """Median and range of the SM clock and power over the samples (empty without nvidia-smi)."""
        import statistics

        if not self.samples:
            return {}
        clocks = [c for c, _ in self.samples]
        power = [w for _, w in self.samples]
        return {"sm_clock_mhz_median": (statistics.median(clocks), "MHz during the timed loop"),
                "sm_clock_mhz_min": (min(clocks), "MHz"), "sm_clock_mhz_max": (max(clocks), "MHz"),
                "power_w_median": (round(statistics.median(power), 1), "W during the timed loop"),
                "clock_samples": (len(clocks), f"every {self.interval_ms} ms")}
