"""The child interpreter of `code.teaching-run`: imports a pinned teaching implementation and measures it.

Started by verifiers/pinned/teaching.py as `python -I teaching_child.py` inside
`kb.verify.sandbox` (no network, read-only files, limits), with the pinned tree
materialised read-only at the pinned SHA. It reads one JSON task on stdin and
prints one JSON object as its last line. It imports nothing from kb.

What is kb's own here: the fp64 reference (softmax(Q K^T / sqrt(d)) V and its
gradients, written out, not autograd), the inputs, the adapters that call each
repository's functions the way its own scripts do, and the measurements. What
is the repository's: every function an adapter calls, imported unchanged from
the pinned tree. Where a repository imports CuPy, NumPy stands in for it on the
CPU (CuPy follows NumPy's API); the adapter says so in what it reports.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import sys
import tracemalloc
import types
import weakref
from pathlib import Path
from typing import Any

import torch

TREE = Path(".")


# --------------------------------------------------------------------------- kb's fp64 reference


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
              do: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """softmax(Q K^T / sqrt(d)) V in float64 over (..., n, d) inputs, and dQ, dK, dV for the cotangent `do`.

    Causal masks key j > query i (queries and keys of equal length, top-left aligned, as every adapter here
    uses). The gradients are the closed forms dV = P^T dO, dS = P * (dO V^T - rowsum(dO * O)),
    dQ = dS K / sqrt(d), dK = dS^T Q / sqrt(d); tests/test_teaching.py checks them against autograd.
    """
    q, k, v = (x.to(torch.float64) for x in (q, k, v))
    d = q.shape[-1]
    s = q @ k.transpose(-1, -2) / math.sqrt(d)
    if causal:
        n, m = s.shape[-2], s.shape[-1]
        s = s.masked_fill(torch.ones(n, m, dtype=torch.bool).triu(1), float("-inf"))
    p = torch.softmax(s, dim=-1)
    o = p @ v
    out = {"o": o, "lse": torch.logsumexp(s, dim=-1)}
    if do is not None:
        do = do.to(torch.float64)
        dp = do @ v.transpose(-1, -2)
        ds = p * (dp - (do * o).sum(-1, keepdim=True))
        out.update(dq=ds @ k / math.sqrt(d), dk=ds.transpose(-1, -2) @ q / math.sqrt(d), dv=p.transpose(-1, -2) @ do)
    return out


# --------------------------------------------------------------------------- loading pinned files


def _load(relpath: str, name: str, extra_path: str | None = None) -> types.ModuleType:
    """Import one pinned file as module `name` (its folder, or `extra_path`, first on sys.path)."""
    if name in sys.modules:  # once per process: a module's globals (BLOCK_SIZE) are set by the adapter per call
        return sys.modules[name]
    folder = str(TREE / (extra_path or Path(relpath).parent))
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, TREE / relpath)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {relpath}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _cupy_is_numpy() -> None:
    """NumPy stands in for CuPy on the CPU: the pinned CuPy-op files run unchanged over NumPy arrays."""
    import numpy

    sys.modules.setdefault("cupy", numpy)


def _readme_code(relpath: str) -> types.ModuleType:
    """A module made of the ```python blocks of a pinned Markdown file, in order (a tutorial's own code)."""
    text = (TREE / relpath).read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
    if "kb_readme_code" in sys.modules:
        return sys.modules["kb_readme_code"]
    mod = types.ModuleType("kb_readme_code")
    sys.modules[mod.__name__] = mod
    exec(compile("\n\n".join(blocks), f"{relpath} (python blocks)", "exec"), mod.__dict__)  # pinned code, in the sandbox
    return mod


# --------------------------------------------------------------------------- adapters
# Each adapter takes fp64 tensors (b, h, n, d), the point's causal flag and tile, and the input dtype, and
# returns the implementation's outputs as tensors: {"o": ...} and, for backward, {"dq", "dk", "dv"}.

def _np(x: torch.Tensor, dtype: str) -> Any:
    import numpy

    return x.numpy().astype(numpy.float32 if dtype == "float32" else numpy.float64)


def _t(x: Any) -> torch.Tensor:
    return x if isinstance(x, torch.Tensor) else torch.from_numpy(__import__("numpy").asarray(x))


def mog9_cupy_ops(q, k, v, do, causal, tile, dtype, backward, device):
    """Mog9: naive.py (O, l, m) then pure_backward.py (the recomputation backward); one head, (N, d)."""
    if causal or tile:
        raise ValueError("naive.py and pure_backward.py have no causal mode and no tile size")
    if device == "cpu":
        _cupy_is_numpy()
    naive = _load("naive.py", "naive")
    bwd = _load("pure_backward.py", "pure_backward")
    import cupy as xp  # NumPy on the CPU (see _cupy_is_numpy), CuPy on a GPU

    def arr(x: torch.Tensor) -> Any:
        a = _np(x, dtype)
        return xp.asarray(a)

    def back(a: Any) -> torch.Tensor:
        return torch.from_numpy(xp.asnumpy(a)) if hasattr(xp, "asnumpy") else _t(a)

    out: dict[str, Any] = {}
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            Q, K, V = arr(q[b, h]), arr(k[b, h]), arr(v[b, h])
            o_, l_, m_ = naive.naive_attention(Q, K, V)
            res = {"o": o_}
            if backward:
                dq, dk, dv = bwd.flash_attention_backward(Q, K, V, o_, arr(do[b, h]), l_, m_)
                res.update(dq=dq, dk=dk, dv=dv)
            for key, val in res.items():
                out.setdefault(key, []).append(back(val))
    shape = q.shape
    return {key: torch.stack(vals).reshape(shape[0], shape[1], *vals[0].shape) for key, vals in out.items()}


def mog9_kernel(q, k, v, do, causal, tile, dtype, backward, device):
    """Mog9: flash.py's CUDA RawKernel forward (CuPy, GPU only); the tile is fixed to Bc = d there."""
    if device != "cuda" or causal or tile or backward:
        raise ValueError("flash.py's kernel runs forward only, non-causal, on a CUDA GPU, with its own tile (Bc = d)")
    flash = _load("flash.py", "flash")
    import cupy

    outs = []
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            o_, _, _ = flash.flash_attention(*(cupy.asarray(_np(x[b, h], "float32")) for x in (q, k, v)))
            outs.append(torch.from_numpy(cupy.asnumpy(o_)))
    return {"o": torch.stack(outs).reshape(q.shape[0], q.shape[1], *outs[0].shape)}


def _peterr0(version: str):
    def run(q, k, v, do, causal, tile, dtype, backward, device):
        """PeTeRr0: src/faN/torch/impl.py, faN_forward_torch / faN_backward_torch; default tiles from faN/spec.py."""
        impl = _load(f"src/{version}/torch/impl.py", f"kb_{version}_torch_impl", extra_path="src")
        spec = _load(f"src/{version}/spec.py", f"kb_{version}_spec", extra_path="src")
        b, h, n, d = q.shape
        dt = torch.float32 if dtype == "float32" else torch.float64
        qb, kb, vb, dob = (x.reshape(b * h, n, d).to(dt).to(device) for x in (q, k, v, do))
        if tile:
            br, bc = tile
        else:
            s = getattr(spec, f"pick_{version}_spec")(d)
            br, bc = s.br, s.bc
        scale = d ** -0.5
        fwd = getattr(impl, f"{version}_forward_torch")
        o, lse = fwd(qb, kb, vb, causal, scale, br, bc)
        out = {"o": o}
        if backward:
            bwd = getattr(impl, f"{version}_backward_torch", None)
            if bwd is None:
                raise ValueError(f"src/{version}/torch/impl.py has no backward")
            dq, dk, dv = bwd(qb, kb, vb, o, dob, lse, causal, scale, br, bc)
            out.update(dq=dq, dk=dk, dv=dv)
        return {key: val.cpu().reshape(b, h, n, d) for key, val in out.items()}

    return run


def _gitctrlx(relpath: str, has_causal: bool, torch_file: bool):
    def run(q, k, v, do, causal, tile, dtype, backward, device):
        """gitctrlx: the script's flash_attention_*forward / *backward; the tile is its module's BLOCK_SIZE."""
        if causal != has_causal:
            raise ValueError(f"{relpath} is {'causal only' if has_causal else 'non-causal (key-padding mask) only'}")
        name = "kb_" + Path(relpath).stem
        mod = _readme_code(relpath) if relpath.endswith(".md") else _load(relpath, name)
        if tile:
            mod.BLOCK_SIZE = tile[0]  # the module global its functions read; the Q block is derived from it
        b, n = q.shape[0], q.shape[2]
        if torch_file:
            dt = torch.float32 if dtype == "float32" else torch.float64
            Q, K, V, dO = (x.to(dt).to(device) for x in (q, k, v, do))
            ones = torch.ones(b, n, device=device)
        else:
            Q, K, V, dO = (_np(x, dtype) for x in (q, k, v, do))
            ones = None
        if relpath.endswith(".md"):
            o_, l_, m_ = mod.flash_attention_forward(Q, K, V)
            grads = mod.flash_attention_backward(dO, Q, K, V, o_, l_, m_) if backward else None
        elif has_causal:
            o_, l_, m_ = mod.flash_attention_causal_forward(Q, K, V)
            grads = mod.flash_attention_causal_backward(Q, K, V, o_, l_, m_, dO) if backward else None
        else:
            o_, l_, m_ = mod.flash_attention_forward(Q, K, V, ones)
            grads = mod.flash_attention_backward(Q, K, V, ones, o_, l_, m_, dO) if backward else None
        out = {"o": _t(o_).cpu()}
        if grads is not None:
            out.update({key: _t(g).cpu() for key, g in zip(("dq", "dk", "dv"), grads, strict=True)})
        return out

    return run


def _peterr0_triton(version: str):
    def run(q, k, v, do, causal, tile, dtype, backward, device):
        """PeTeRr0: src/faN/triton/impl.py faN_triton (forward, CUDA only), default tiles from faN/spec.py."""
        if device != "cuda" or backward or tile:
            raise ValueError("the Triton path runs forward on a CUDA device with the spec's tiles")
        # impl.py imports its kernels relatively (`from .kernels_fwd import ...`): import it as the package
        # module it is, with src/ on the path, as the repository's own op.py does.
        src = str(TREE / "src")
        if src not in sys.path:
            sys.path.insert(0, src)
        impl = importlib.import_module(f"{version}.triton.impl")
        spec = _load(f"src/{version}/spec.py", f"kb_{version}_spec", extra_path="src")
        b, h, n, d = q.shape
        qb, kb, vb = (x.reshape(b * h, n, d).to(torch.float16).to(device) for x in (q, k, v))
        o, _ = getattr(impl, f"{version}_triton")(qb, kb, vb, causal, d ** -0.5, getattr(spec, f"pick_{version}_spec")(d))
        return {"o": o.float().cpu().reshape(b, h, n, d)}

    return run


def gitctrlx_causal_triton_import(q, k, v, do, causal, tile, dtype, backward, device):
    """gitctrlx: import flash_attn_causal_triton.py as its own __main__ block would (its first import line decides)."""
    _load("flash_attn_causal_triton.py", "kb_flash_attn_causal_triton")
    return {}


ADAPTERS = {
    "mog9-cupy-ops": mog9_cupy_ops,
    "mog9-kernel": mog9_kernel,
    "peterr0-fa1-torch": _peterr0("fa1"),
    "peterr0-fa2-torch": _peterr0("fa2"),
    "peterr0-fa3-torch": _peterr0("fa3"),
    "gitctrlx-numpy": _gitctrlx("flash_attn_numpy.py", False, False),
    "gitctrlx-numpy-causal": _gitctrlx("flash_attn_causal_numpy.py", True, False),
    "gitctrlx-torch": _gitctrlx("flash_attn_pytorch.py", False, True),
    "gitctrlx-torch-causal": _gitctrlx("flash_attn_causal_pytorch.py", True, True),
    "gitctrlx-readme": _gitctrlx("README.md", False, True),
    "gitctrlx-triton-causal-import": gitctrlx_causal_triton_import,
    "peterr0-fa1-triton": _peterr0_triton("fa1"),
}


# --------------------------------------------------------------------------- measurements


def make_inputs(seed: int, b: int, h: int, n: int, d: int) -> list[torch.Tensor]:
    """q, k, v, do: standard normal fp64 from a seeded generator (the same for every implementation)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + n * 1009 + d)
    return [torch.randn(b, h, n, d, generator=g, dtype=torch.float64) for _ in range(4)]


def _as_used(x: torch.Tensor, dtype: str) -> torch.Tensor:
    """The input as the implementation sees it (rounded to float32 when that is the input dtype)."""
    return x.to(torch.float32).to(torch.float64) if dtype == "float32" else x


def errors(task: dict[str, Any]) -> dict[str, Any]:
    """Max abs / rel error against the fp64 reference at every grid point; the first failing input."""
    run = ADAPTERS[task["entry"]]
    backward = task["phase"] == "backward"
    rows = []
    for pt in task["points"]:
        q, k, v, do = (_as_used(x, task["dtype"]) for x in make_inputs(task["seed"], pt["batch"], pt["heads"], pt["n"], pt["d"]))
        ref = reference(q, k, v, pt["causal"], do)
        try:
            got = run(q, k, v, do, pt["causal"], pt["tile"], task["dtype"], backward, task["device"])
        except Exception as exc:  # a call that fails at this input fails it (a kernel launch error, an overflow)
            rows.append({"input": pt, "max_abs_err": float("inf"), "max_rel_err": float("inf"), "fails": True,
                         "worst_tensor": f"{type(exc).__name__}: {str(exc)[:200]}"})
            continue
        tensors = ("dq", "dk", "dv") if backward else ("o",)
        worst: dict[str, Any] = {"abs": 0.0, "rel": 0.0, "tensor": None}
        for t in tensors:
            diff = (got[t].to(torch.float64) - ref[t]).abs()
            a = float(diff.max()) if bool(torch.isfinite(diff).all()) else float("inf")
            r = a / max(float(ref[t].abs().max()), 1e-300)
            if a > worst["abs"] or worst["tensor"] is None:
                worst.update(abs=a, tensor=t)
            worst["rel"] = max(worst["rel"], r)
        rows.append({"input": pt, "max_abs_err": worst["abs"], "max_rel_err": worst["rel"], "worst_tensor": worst["tensor"],
                     "fails": not worst["abs"] <= task["tol"]})
    return {"rows": rows}


class _TorchAllocations(torch.utils._python_dispatch.TorchDispatchMode):
    """Live bytes of the tensor storages that torch ops create during the call; the peak of their sum."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, list[int]] = {}
        self.current = 0
        self.peak = 0

    def _release(self, ptr: int) -> None:
        entry = self.live.get(ptr)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            del self.live[ptr]
            self.current -= entry[0]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                st = t.untyped_storage()
                ptr = st.data_ptr()
                if ptr == 0:
                    continue
                if ptr in self.live:  # a view or an in-place result: same storage, one more owner
                    self.live[ptr][1] += 1
                else:
                    self.live[ptr] = [st.nbytes(), 1]
                    self.current += st.nbytes()
                    self.peak = max(self.peak, self.current)
                weakref.finalize(t, self._release, ptr)
        return out


def memory(task: dict[str, Any]) -> dict[str, Any]:
    """Peak bytes allocated by one call (forward, or backward after an untracked forward) at each N; the exponent."""
    run = ADAPTERS[task["entry"]]
    backward = task["phase"] == "backward"
    pt = task["points"][0]
    rows = []
    for n in task["seqlens"]:
        q, k, v, do = (_as_used(x, task["dtype"]) for x in make_inputs(task["seed"], 1, 1, n, pt["d"]))
        # One untracked call first: imports, lazy library buffers and caches are not the implementation's memory.
        with _TorchAllocations():  # the dispatch mode's own first-use imports happen here, untraced
            run(q, k, v, do, pt["causal"], pt["tile"], task["dtype"], backward, "cpu")
        tracemalloc.start()  # NumPy reports its buffers to tracemalloc
        with _TorchAllocations() as torch_alloc:
            run(q, k, v, do, pt["causal"], pt["tile"], task["dtype"], backward, "cpu")
        _, np_peak = tracemalloc.get_traced_memory()  # NumPy buffers and Python objects; torch's are not traced here
        tracemalloc.stop()
        # The two allocators' peaks, added: an upper bound of their joint peak (each dominates one kind of code).
        rows.append({"n": n, "peak_bytes": np_peak + torch_alloc.peak, "numpy_peak": np_peak, "torch_peak": torch_alloc.peak})
    xs = [math.log(r["n"]) for r in rows]
    ys = [math.log(max(r["peak_bytes"], 1)) for r in rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return {"rows": rows, "memory_exponent": slope}


def runs(task: dict[str, Any]) -> dict[str, Any]:
    """Whether one forward (and backward) call completes on this device at the first grid point."""
    run = ADAPTERS[task["entry"]]
    pt = task["points"][0]
    q, k, v, do = make_inputs(task["seed"], pt["batch"], pt["heads"], pt["n"], pt["d"])
    try:
        run(q, k, v, do, pt["causal"], pt["tile"], task["dtype"], task["phase"] == "backward", task["device"])
    except Exception as exc:  # the finding: the call fails on this device; its message is the evidence
        return {"runs": False, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    return {"runs": True, "error": ""}


def main() -> None:
    """Run the task on stdin; print one JSON object."""
    global TREE
    task = json.loads(sys.stdin.read())
    TREE = Path(task["tree"])
    torch.manual_seed(0)
    torch.set_num_threads(1)  # two shared cores: one thread keeps runs comparable and polite
    out = {"memory": memory, "errors": errors, "runs": runs}[task["measure"]](task)
    out["torch"] = torch.__version__
    try:
        import numpy

        out["numpy"] = numpy.__version__
    except ImportError:
        out["numpy"] = None
    sys.stdout.write("\n" + json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
