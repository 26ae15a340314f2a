"""The teaching implementations on the notes author's resource list, run against kb's fp64 reference.

`code.teaching-run` materialises a pinned teaching repository (Mog9/FlashAttention-CuPy,
PeTeRr0/FlashAttention-pytorch, gitctrlx/flash-attention-tutorial) at its SHA, imports the
file the check's anchor names through one of kb's adapters (verifiers/pinned/teaching_child.py)
and runs it in the sandbox on the CPU. Three measures:

- `errors`: every point of the grid (sequence lengths that are not multiples of the tile,
  causal and not, several head dims, default and non-default tiles), forward or backward,
  against softmax(Q K^T / sqrt(d)) V and its gradients in float64. Reports the max abs and
  rel error, how many inputs exceed the check's tolerance and the first one that does.
- `memory`: the peak bytes one call allocates at each N (NumPy through tracemalloc, torch
  through a dispatch mode that follows every storage its ops create) and the least-squares
  exponent of peak against N: about 1 for O(N) extra memory, 2 for a materialised N x N.
- `runs`: whether a call completes on this device (platform statements), with the error.

`gpu.teaching-run` / `gpu.teaching-cupy` are the same measures on a CUDA device, for the
CuPy kernel and the scripts that hard-code `cuda`; they need the H200 run.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from kb.registry import Context, Outcome, Params, Requirements, verifier
from kb.verify import sandbox
from verifiers.pinned.compiled import _anchor, _cache_root, _git
from verifiers.trust import executable_pins  # noqa: F401 - read by kb's validation: what these verifiers may execute

HASH_FILES = ["teaching_child.py"]

# The adapters of teaching_child.py (kb's code that calls each repository's functions), by name.
Entry = Literal["mog9-cupy-ops", "mog9-kernel", "peterr0-fa1-torch", "peterr0-fa2-torch", "peterr0-fa3-torch",
                "gitctrlx-numpy", "gitctrlx-numpy-causal", "gitctrlx-torch", "gitctrlx-torch-causal", "gitctrlx-readme",
                "gitctrlx-triton-causal-import", "peterr0-fa1-triton"]


class TeachingParams(Params):
    """A pinned teaching implementation over a grid of inputs (kb's adapter `entry`, the anchor's tree)."""

    anchor: int = 0  # a repository anchor with a path (the file the adapter imports) at a pinned sha
    entry: Entry
    measure: Literal["errors", "memory", "runs"] = "errors"
    phase: Literal["forward", "backward"] = "forward"
    dtype: Literal["float32", "float64"] = "float32"
    seqlens: list[int] = Field(default=[100], min_length=1)
    head_dims: list[int] = Field(default=[32], min_length=1)
    causal: list[bool] = [False]
    # Tile sizes: null = the implementation's default; [br, bc] for PeTeRr0; [block] for gitctrlx's BLOCK_SIZE.
    tiles: list[list[int] | None] = [None]
    batch: int = Field(default=1, ge=1, le=4)
    heads: int = Field(default=2, ge=1, le=8)
    tol: float = Field(default=1e-4, gt=0)  # an input fails when its max abs error exceeds this
    # memory: the exponent of peak bytes vs N that still counts as "about linear" (N^2 gives 2).
    max_exponent: float = Field(default=1.2, gt=0)
    seed: int = 0

    @field_validator("seqlens", "head_dims")
    @classmethod
    def _sizes(cls, v: list[int]) -> list[int]:
        if any(not 1 <= x <= 8192 for x in v):
            raise ValueError("sizes must be between 1 and 8192")
        return v

    @field_validator("tiles")
    @classmethod
    def _tiles(cls, v: list[list[int] | None]) -> list[list[int] | None]:
        if any(t is not None and (not 1 <= len(t) <= 2 or any(not 1 <= x <= 4096 for x in t)) for t in v):
            raise ValueError("a tile is null, [block] or [br, bc] with sizes 1..4096")
        return v


def grid(p: TeachingParams) -> list[dict[str, Any]]:
    """Every input point of the check, in a fixed order (first failing input is well defined)."""
    return [{"n": n, "d": d, "causal": c, "tile": t, "batch": p.batch, "heads": p.heads}
            for c in p.causal for t in p.tiles for d in p.head_dims for n in p.seqlens]


def _tree(p: TeachingParams, ctx: Context) -> tuple[dict[str, Any], Path]:
    """The anchor, and the whole pinned tree extracted once into the build cache (these repositories are small)."""
    a, clone = _anchor(p, ctx)
    _git(clone, "cat-file", "-e", f"{a['sha']}:{a['path']}")  # the adapter's file exists at the pin
    dest = _cache_root(ctx) / "trees" / f"teaching-{a['sha']}"
    if not (dest / ".complete").exists():
        tmp = Path(tempfile.mkdtemp(dir=dest.parent if dest.parent.exists() else _mk(dest.parent)))
        with tarfile.open(fileobj=BytesIO(_git(clone, "archive", "--format=tar", a["sha"], binary=True))) as tar:
            tar.extractall(tmp, filter="data")
        (tmp / ".complete").write_text(a["sha"] + "\n")
        try:
            os.rename(tmp, dest)
        except OSError:  # another lane extracted the same tree first
            shutil.rmtree(tmp, ignore_errors=True)
    return a, dest


def _mk(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _task(p: TeachingParams, tree: Path, device: str) -> str:
    return json.dumps({"tree": str(tree), "entry": p.entry, "measure": p.measure, "phase": p.phase, "dtype": p.dtype,
                       "points": grid(p), "seqlens": p.seqlens, "tol": p.tol, "seed": p.seed, "device": device})


def _answer(stdout: str, stderr: str, code: int) -> dict[str, Any]:
    if code != 0:
        raise RuntimeError(f"pinned teaching code failed (exit {code}): {stderr[-1200:]}")
    return json.loads(stdout.strip().splitlines()[-1])


def _outcome(p: TeachingParams, a: dict[str, Any], out: dict[str, Any], device: str) -> Outcome:
    meas: dict[str, tuple[Any, str]] = {}
    log = [f"{a['source']} {a['path']} @ {a['sha']}; adapter {p.entry}; {p.measure} {p.phase} {p.dtype} on {device}"]
    if p.measure == "errors":
        rows = out["rows"]
        failing = [r for r in rows if r["fails"]]
        # An input whose call raised has no error size (it failed outright): counted, never averaged in.
        finite = [r for r in rows if math.isfinite(r["max_abs_err"])]
        if finite:
            meas["max_abs_err"] = (max(r["max_abs_err"] for r in finite), "")
            meas["max_rel_err"] = (max(r["max_rel_err"] for r in finite), "")
        meas["inputs"] = (len(rows), "inputs")
        meas["failing_inputs"] = (len(failing), "inputs")
        meas["raised_inputs"] = (len(rows) - len(finite), "inputs")
        if failing:
            f = failing[0]
            size = ({"max_abs_err": f["max_abs_err"], "max_rel_err": f["max_rel_err"], "tensor": f["worst_tensor"]}
                    if math.isfinite(f["max_abs_err"]) else {"raised": f["worst_tensor"]})
            meas["first_failing"] = ({**f["input"], **size}, "")
        for r in rows:
            log.append(f"{'FAIL' if r['fails'] else 'ok  '} {json.dumps(r['input'])} abs {r['max_abs_err']:.3e} "
                       f"rel {r['max_rel_err']:.3e} ({r['worst_tensor']})")
    elif p.measure == "memory":
        meas["memory_exponent"] = (out["memory_exponent"], "")
        meas["within_exponent"] = (out["memory_exponent"] <= p.max_exponent, "")
        meas["peak_bytes"] = ([r["peak_bytes"] for r in out["rows"]], "bytes")
        log += [f"n={r['n']} peak {r['peak_bytes']} B (numpy {r['numpy_peak']}, torch {r['torch_peak']})" for r in out["rows"]]
        log.append(f"exponent of peak vs N: {out['memory_exponent']:.3f}")
    else:
        meas["runs"] = (out["runs"], "")
        if out["error"]:
            meas["error"] = (out["error"], "")
            log.append(out["error"])
    env = {"torch": out.get("torch"), "numpy": out.get("numpy"), "source_sha": a["sha"], "device": device,
           "sandbox": sandbox.level(), "adapter": p.entry,
           "child_sha256": hashlib.sha256(Path(__file__).with_name("teaching_child.py").read_bytes()).hexdigest()}
    return Outcome(measurements=meas, log="\n".join(log), environment=env)


# The PyTorch paths need torch only; the NumPy paths (and gitctrlx's PyTorch scripts, which import numpy and
# einops at the top) need those packages too: one verifier id per requirement, so a machine without NumPy
# skips exactly those checks with the reason and still runs the rest.
@verifier("code.teaching-run", kind="pinned-code", params=TeachingParams,
          requires=Requirements(packages=("torch",), git_source=True), timeout_s=600)
@verifier("code.teaching-run-np", kind="pinned-code", params=TeachingParams,
          requires=Requirements(packages=("torch", "numpy", "einops"), git_source=True), timeout_s=600)
def teaching_run(p: TeachingParams, ctx: Context) -> Outcome:
    """A pinned teaching implementation on the CPU against the fp64 reference: errors, peak memory vs N, or runs."""
    a, tree = _tree(p, ctx)
    child = Path(__file__).with_name("teaching_child.py")
    # Pinned code runs in a fresh interpreter in the sandbox (isolated: no PYTHONPATH, no user site), never here.
    res = sandbox.run([sys.executable, "-I", str(child)], input=_task(p, tree, "cpu"), readable=[child.parent, tree],
                      timeout=560, limits=sandbox.Limits(cpu_s=560, address_space=8 * sandbox.GIB))
    return _outcome(p, a, _answer(res.stdout, res.stderr, res.returncode), "cpu")


# The child runs isolated (-I: PYTHONPATH ignored), but on the H200 some of what it imports exists only on
# PYTHONPATH (CuPy, cuda-pathfinder and einops are staged into /tmp/site). This runs the child unchanged, with
# the folders named after it put first on its sys.path, where PYTHONPATH puts them for this process: the
# child resolves each package as the requirement check here did (a cuda-pathfinder in /tmp/site wins over an
# older one in the interpreter's site-packages, as CuPy needs). The pinned tree still goes first (_load).
BOOT = ("import runpy, sys; child, *extra = sys.argv[1:]; sys.path[:0] = extra; sys.argv = [child]; "
        "runpy.run_path(child, run_name='__main__')")
GPU_RUN_PACKAGES = ("torch", "numpy", "einops", "triton")
CUPY_PACKAGES = ("torch", "numpy", "cupy")


def pythonpath_sites(packages: tuple[str, ...]) -> list[str]:
    """The PYTHONPATH folders that hold `packages` (found as this process finds them): what -I would hide."""
    import importlib.util

    entries = {Path(e).resolve() for e in os.environ.get("PYTHONPATH", "").split(os.pathsep) if e}
    out: list[str] = []
    for name in packages:
        spec = importlib.util.find_spec(name)
        where = list(spec.submodule_search_locations or []) if spec else []
        where = where or ([spec.origin] if spec and spec.origin else [])
        if not where:
            continue
        folder = Path(where[0]).resolve().parent  # a package's folder, or a module's file: its site folder
        if folder in entries and str(folder) not in out:
            out.append(str(folder))
    return out


def _gpu_run(p: TeachingParams, ctx: Context, packages: tuple[str, ...]) -> Outcome:
    a, tree = _tree(p, ctx)
    child = Path(__file__).with_name("teaching_child.py")
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"kb-teach-{os.getpid()}"
    # The child's home and working folder: the sandbox makes it where bubblewrap runs, but without bubblewrap
    # (the H200 host) it must exist before the child starts there.
    work.mkdir(parents=True, exist_ok=True)
    sites = pythonpath_sites(packages)
    cmd, _ = sandbox.command([sys.executable, "-I", "-c", BOOT, str(child), *sites], work=work,
                             readable=[child.parent, tree, *map(Path, sites)], devices=True)
    res = subprocess.run(cmd, input=_task(p, tree, "cuda"), capture_output=True, text=True, timeout=560, cwd=str(work),
                         env=sandbox.clean_env({"HOME": str(work), "TMPDIR": str(work)}, keep_prefixes=True))
    return _outcome(p, a, _answer(res.stdout, res.stderr, res.returncode), "cuda")


@verifier("gpu.teaching-run", kind="gpu-kernel-run", params=TeachingParams,
          requires=Requirements(cuda=True, packages=GPU_RUN_PACKAGES, git_source=True), timeout_s=600)
def teaching_gpu(p: TeachingParams, ctx: Context) -> Outcome:
    """A pinned teaching implementation's torch path on a CUDA device against the fp64 reference (errors or runs)."""
    return _gpu_run(p, ctx, GPU_RUN_PACKAGES)


@verifier("gpu.teaching-cupy", kind="gpu-kernel-run", params=TeachingParams,
          requires=Requirements(cuda=True, packages=CUPY_PACKAGES, git_source=True), timeout_s=600)
def teaching_cupy(p: TeachingParams, ctx: Context) -> Outcome:
    """A pinned CuPy teaching implementation (RawKernel or CuPy ops) on a CUDA device against the fp64 reference."""
    return _gpu_run(p, ctx, CUPY_PACKAGES)
