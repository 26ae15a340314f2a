"""What this machine is: the environment fingerprint stored with every run.

`machine()` is cheap and imports no torch (nvidia-smi and package metadata);
`full_fingerprint()` runs inside the worker, where torch is imported anyway,
and adds what only the CUDA runtime knows (SM count, CUDA version).
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import shutil
import subprocess
from typing import Any

PACKAGES = ("torch", "triton", "flash-attn", "flash-attn-4", "nvidia-cutlass-dsl", "pydantic", "sqlite-utils")


def _version(pkg: str) -> str | None:
    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def gpus() -> list[dict[str, Any]]:
    """GPUs nvidia-smi reports: name, compute capability, memory, driver (empty without one)."""
    if os.environ.get("KB_FAKE_NO_GPU") or not shutil.which("nvidia-smi"):
        return []
    try:
        res = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,compute_cap,memory.total,driver_version", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    out = []
    for line in res.stdout.strip().splitlines():
        name, cc, mem, driver = [x.strip() for x in line.split(",")]
        major, _, minor = cc.partition(".")
        out.append({"name": name, "compute_capability": int(major) * 10 + int(minor or 0),
                    "memory_mib": int(float(mem)), "driver": driver})
    return out


def machine() -> dict[str, Any]:
    """The fingerprint available without importing torch."""
    return {
        "host": platform.node(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "os": f"{platform.system()} {platform.release()}",
        "gpus": gpus(),
        "packages": {p: v for p in PACKAGES if (v := _version(p))},
    }


def gpu_class() -> str | None:
    """Hardware class of this machine's first GPU, e.g. 'NVIDIA H200 sm_90', or None."""
    g = gpus()
    if not g:
        return None
    return f"{g[0]['name']} sm_{g[0]['compute_capability']}"


def full_fingerprint() -> dict[str, Any]:
    """machine() plus CUDA runtime facts; imports torch, so only workers call it."""
    env = machine()
    try:
        import torch
    except ImportError:
        return env
    env["torch_cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env["gpu"] = {
            "name": props.name, "sm_count": props.multi_processor_count,
            "compute_capability": props.major * 10 + props.minor,
            "memory_bytes": props.total_memory,
        }
        env["cudnn"] = torch.backends.cudnn.version()
        env["clocks"] = clocks()
    return env


def clocks() -> dict[str, Any]:
    """SM and memory clocks (current and maximum, MHz) as nvidia-smi reads them now.

    Recorded with every GPU run: the H200 is used with clock control off, so a
    timing is only comparable with the clocks it ran at.
    """
    try:
        res = subprocess.run(
            ["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.draw,temperature.gpu",
             "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=20)
        vals = [v.strip() for v in res.stdout.strip().splitlines()[0].split(",")]
    except (OSError, subprocess.TimeoutExpired, IndexError):
        return {}
    keys = ["sm_mhz", "mem_mhz", "max_sm_mhz", "max_mem_mhz", "power_w", "temperature_c"]
    return dict(zip(keys, vals, strict=False))


def probe() -> dict:
    """machine(), plus CUDA facts from a child process when a GPU is present.

    The child imports torch so that `kb hw` itself never does: SM count and the
    CUDA runtime version are only known to the CUDA runtime.
    """
    import json
    import sys

    from kb.verify import sandbox

    env = machine()
    env["sandbox"] = sandbox.describe()
    if not env["gpus"]:
        return env
    code = "import json; from kb.hw import full_fingerprint; print(json.dumps(full_fingerprint(), default=str))"
    try:
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        env.update(json.loads(res.stdout.strip().splitlines()[-1]))
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        env["probe_error"] = "could not query the CUDA runtime (torch missing or CUDA unusable)"
    return env


def find_tool(name: str) -> str | None:
    """Path of a CUDA tool: on PATH, in this Python's nvidia-* wheels, or under /usr/local/cuda."""
    import sys
    from pathlib import Path

    found = shutil.which(name)
    if found:
        return found
    for base in (Path(sys.prefix) / "lib", Path(sys.prefix) / "Lib"):
        for cand in base.glob(f"python*/site-packages/nvidia/cu*/bin/{name}"):
            return str(cand)
    cand = Path("/usr/local/cuda/bin") / name
    return str(cand) if cand.exists() else None


def capabilities(env: dict[str, Any], registry: dict[str, Any]) -> dict[str, bool]:
    """Per verifier kind: whether this machine (as `probe` saw it) can run verifiers of that kind."""
    from kb.records.vocab import VERIFIER_KINDS

    can = {}
    for kind in VERIFIER_KINDS:
        specs = [s for s in registry.values() if s.kind == kind]
        gpu = any(s.is_gpu for s in specs)
        can[kind] = bool(specs) and (not gpu or bool(env["gpus"]))
    return can
