"""Smoke run of kb's pinned builds and probes on a GPU: does each pin run, how fast, how accurate.

Needs only torch and the builds under .kb/build/pinned (no kb install): run it on the GPU machine
before the verify suite to see that every harness fills its params right.

    python bench/pinned_smoke.py [--out DIR]

Prints, per pinned revision: forward and backward time at b2 h16 N1024 d128 bf16 (causal and not),
max error against an fp64 reference next to PyTorch's bf16 error, whether two runs are bitwise equal,
and the kernels launched; then the probe results.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _reference(q, k, v, do, causal, dtype):
    import torch

    q, k, v = (t.detach().to(dtype).transpose(1, 2).requires_grad_() for t in (q, k, v))
    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    if causal:
        n, m = s.shape[-2:]
        s = s.masked_fill(torch.ones(n, m, dtype=torch.bool, device=s.device).triu(m - n + 1), float("-inf"))
    o = torch.softmax(s, -1) @ v
    o.backward(do.to(dtype).transpose(1, 2))
    return {"o": o.transpose(1, 2), "dq": q.grad.transpose(1, 2), "dk": k.grad.transpose(1, 2),
            "dv": v.grad.transpose(1, 2)}


def run_impl(impl: str, causal: bool, head_dim: int = 128, dtype: str = "bfloat16") -> dict:
    """One forward+backward of the pinned build against fp64, twice for bitwise equality."""
    import torch

    from verifiers.gpu import pinned as gpu_pinned

    p = SimpleNamespace(impl=impl, causal=causal, dropout_p=0.0, head_dim=head_dim, seed=0, philox_offset=0,
                        num_splits=0, deterministic=False)
    g = torch.Generator(device="cuda").manual_seed(0)
    dt = getattr(torch, dtype)
    shape = (2, 1024, 16, head_dim)
    q, k, v, do = (torch.randn(*shape, generator=g, device="cuda", dtype=dt) for _ in range(4))
    outs = []
    for _ in range(2):
        x = {n: t.clone().requires_grad_() for n, t in (("q", q), ("k", k), ("v", v))}
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        o, lse = gpu_pinned.forward(p, x)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        o.backward(do)
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        outs.append({"o": o.detach(), "lse": lse.detach(), "dq": x["q"].grad, "dk": x["k"].grad, "dv": x["v"].grad,
                     "ms": ((t1 - t0) * 1e3, (t2 - t1) * 1e3)})
    ref = _reference(q, k, v, do, causal, torch.float64)
    low = _reference(q, k, v, do, causal, dt)
    res = {"impl": impl, "causal": causal, "head_dim": head_dim, "dtype": dtype, "ms_fwd_bwd_2nd": outs[1]["ms"]}
    for t in ("o", "dq", "dk", "dv"):
        res[f"err_{t}"] = float((outs[0][t].double() - ref[t]).abs().max())
        res[f"torch_err_{t}"] = float((low[t].double() - ref[t]).abs().max())
        res[f"bitwise_{t}"] = bool(torch.equal(outs[0][t], outs[1][t]))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        x = {n: t.clone().requires_grad_() for n, t in (("q", q), ("k", k), ("v", v))}
        o, _ = gpu_pinned.forward(p, x)
        o.backward(do)
        torch.cuda.synchronize()
    res["kernels"] = sorted({e.name[:160] for e in prof.events() if e.device_type.name == "CUDA"})
    res["build"] = gpu_pinned.provenance(impl)["key"]
    return res


def main() -> int:
    """Run every pinned build and probe that is present; print and optionally save the results."""
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    results: list[dict] = []
    print(torch.cuda.get_device_name(), torch.__version__)
    for impl in ("fa2-v2.0.0", "fa1-v1.0.9", "fa3-2024-08"):
        for causal in (False, True):
            try:
                r = run_impl(impl, causal)
            except Exception as e:  # a smoke run reports every failure and goes on
                r = {"impl": impl, "causal": causal, "error": f"{type(e).__name__}: {e}"}
            results.append(r)
            print(json.dumps(r)[:1500], flush=True)
    try:
        from verifiers.gpu import probe as gpu_probe

        for probe, extra in (("smid", {"grid": 2000, "block": 256, "smem_bytes": 150 * 1024}),
                             ("smid", {"grid": 500, "block": 1024}), ("mma-fragment", {}),
                             ("mma-fragment", {"perturb": "swap-a-rows"}), ("atomic", {"grid": 512, "block": 256})):
            p = gpu_probe.ProbeParams(probe=probe, **extra)
            lib, _ = gpu_probe._lib()
            fn = {"smid": gpu_probe._smid, "mma-fragment": gpu_probe._mma, "atomic": gpu_probe._atomic}[probe]
            out = fn(p, lib)
            r = {"probe": probe, **extra, **{k: v[0] for k, v in out.measurements.items()}, "log": out.log}
            results.append(r)
            print(json.dumps(r)[:1500], flush=True)
    except Exception as e:
        results.append({"probe": "all", "error": f"{type(e).__name__}: {e}"})
        print(results[-1], flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "pinned_smoke.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
