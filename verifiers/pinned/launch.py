"""code.launch-trace: what the pinned host code launches on a given GPU, traced on a CPU.

kb's build of a pinned revision (verifiers/pinned/build.py: the pinned units unchanged, plus kb's harness
that fills the pinned params struct as the pinned API does) is loaded against kb's stand-in CUDA runtime
(harness/vdev_cudart.cpp, built here as libcudart.so.13). The stand-in reports a device whose properties
come from the hardware sheets in sources/hardware.yaml (A100, H100, H200, ...) and records every kernel
launch: the kernel (demangled, so its template arguments - the traits the pinned dispatch picked - are
visible), grid, block, dynamic shared memory, cluster shape, and the function attributes set before it.

So a statement about what the pinned code picks for an input on a device is decided by the pinned
dispatch itself, not by traits kb types. What the trace cannot say: anything that happens on the device.
The child process runs in the sandbox (kb.verify.sandbox); no kernel is executed.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Literal

from kb.registry import Context, Outcome, Params, Requirements, verifier
from kb.verify import sandbox
from verifiers.pinned import build as pinned_build

HASH_FILES = ["harness/vdev_cudart.cpp", "launch_child.py"]
HERE = Path(__file__).resolve().parent

# The device fields the stand-in reports, from a hardware sheet's constants (sources/hardware.yaml).
_VDEV_FIELDS = ("sm_count", "smem_per_block_max_bytes", "smem_per_sm_bytes", "regs_per_sm", "max_threads_per_sm",
                "max_blocks_per_sm")


class LaunchParams(Params):
    """Which pinned build, which virtual device, which input; which launch the expectation reads."""

    impl: Literal["fa1-v1.0.9", "fa2-v2.0.0", "fa3-2024-08"]
    device: str  # a hardware source id: A100, H100, H200 (its constants define the virtual device)
    phase: Literal["fwd", "bwd"] = "fwd"
    dtype: Literal["bfloat16", "float16"] = "float16"
    batch: int = 2
    heads: int = 16
    heads_k: int | None = None
    seqlen_q: int = 1024
    seqlen_k: int | None = None
    head_dim: int = 128
    causal: bool = False
    dropout_p: float = 0.0
    num_splits: int = 0
    deterministic: bool = False
    # What the occupancy API answers: None computes it from the build's ptxas report and the device sheet
    # (the occupancy calculator's rules); a number stands for a claim's "if the occupancy API reports N".
    occupancy: int | None = None
    # The launch the measurements describe: the first whose demangled kernel name contains this text
    # (a plain substring, not code), else the longest-named (the main kernel, not a helper) when empty.
    kernel: str = ""


def _stub_dir(cache: Path) -> Path:
    """The stand-in runtime (and a driver stand-in for FA3's TMA descriptors), built once per source hash.

    Built in a private folder and renamed into place, so workers that need it at the same time never see
    a half-built library (the loser of the rename race uses the winner's).
    """
    src = (HERE / "harness" / "vdev_cudart.cpp").read_bytes()
    key = hashlib.sha256(src + "\n".join(_driver_symbols()).encode()).hexdigest()[:16]
    out = cache / f"vdev-{key}"
    if (out / "libcudart.so.13").exists() and (out / "libcuda.so.1").exists():
        return out
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"vdev-{key}.", dir=cache))
    try:
        (tmp / "cudart.map").write_text("libcudart.so.13 { global: *; };\n")
        res = subprocess.run(["g++", "-shared", "-fPIC", "-O1", "-std=c++17", f"-I{_cuda_include()}",
                              "-Wl,-soname,libcudart.so.13", f"-Wl,--version-script={tmp / 'cudart.map'}",
                              "-o", str(tmp / "libcudart.so.13"), str(HERE / "harness" / "vdev_cudart.cpp")],
                             capture_output=True, text=True, timeout=120)
        if res.returncode != 0:
            raise RuntimeError(f"building the virtual-device runtime failed: {res.stderr[-1500:]}")
        # The driver calls the pinned FA3 host code makes (TMA descriptor encoding) succeed without a device.
        (tmp / "cuda_stub.c").write_text("".join(f"int {s}(void) {{ return 0; }}\n" for s in _driver_symbols()))
        res = subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(tmp / "libcuda.so.1"),
                              str(tmp / "cuda_stub.c")], capture_output=True, text=True, timeout=120)
        if res.returncode != 0:
            raise RuntimeError(f"building the driver stand-in failed: {res.stderr[-1500:]}")
        try:
            tmp.rename(out)
        except OSError:  # another worker got there first: its copy is complete
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _driver_symbols() -> list[str]:
    return sorted({s for rev in pinned_build.REVISIONS.values() for s in rev.driver_symbols})


def _cuda_include() -> str:
    from kb.hw import find_tool

    nvcc = find_tool("nvcc")
    if nvcc is None:
        raise RuntimeError("needs the CUDA headers (nvcc's include folder) to build the virtual-device runtime")
    for base in (Path(nvcc).resolve().parent.parent, Path("/usr/local/cuda")):
        if (base / "include" / "cuda_runtime_api.h").exists():
            return str(base / "include")
    raise RuntimeError("cuda_runtime_api.h not found beside nvcc")


def vdev_spec(device: str, hw: dict[str, dict[str, float]]) -> str:
    """KB_VDEV for a hardware sheet (name, cc, SMs, shared memory, registers, threads, blocks, L2, memory)."""
    if device not in hw:
        raise ValueError(f"unknown device {device!r}; hardware sheets: {', '.join(sorted(hw))}")
    c = hw[device]
    missing = [f for f in ("compute_capability", *_VDEV_FIELDS) if f not in c]
    if missing:
        raise ValueError(f"hardware sheet {device} lacks {', '.join(missing)}")
    cc = int(c["compute_capability"])
    return ",".join(str(x) for x in (
        device, cc // 10, cc % 10, int(c["sm_count"]), 49152, int(c["smem_per_block_max_bytes"]),
        int(c["smem_per_sm_bytes"]), int(c["regs_per_sm"]), int(c["max_threads_per_sm"]), int(c["max_blocks_per_sm"]),
        int(c.get("l2_bytes", 0)), int(c.get("hbm_bytes", 80 * 2**30)), int(c.get("smem_reserved_per_block_bytes", 0))))


_DEMANGLE_CACHE: dict[str, str] = {}


def demangle(names: list[str]) -> dict[str, str]:
    """Mangled -> demangled kernel names (c++filt)."""
    todo = [n for n in names if n not in _DEMANGLE_CACHE]
    if todo:
        res = subprocess.run(["c++filt"], input="\n".join(todo), capture_output=True, text=True, timeout=60)
        for n, d in zip(todo, res.stdout.splitlines(), strict=False):
            _DEMANGLE_CACHE[n] = d
    return {n: _DEMANGLE_CACHE.get(n, n) for n in names}


def template_args(demangled: str, template: str) -> list[str]:
    """The top-level template arguments of the first `template<...>` in a demangled name."""
    i = demangled.find(template + "<")
    if i < 0:
        return []
    i += len(template) + 1
    depth, cur, out = 1, "", []
    while i < len(demangled) and depth:
        ch = demangled[i]
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        if depth == 1 and ch == ",":
            out.append(cur.strip())
            cur = ""
        elif depth:
            cur += ch
        i += 1
    out.append(cur.strip())
    return out


def _traits_name(demangled: str) -> str:
    m = re.search(r"(\w*[Tt]raits\w*)<", demangled)
    return m.group(1) if m else ""


def _abi_args(p: LaunchParams) -> dict[str, Any]:
    return {"batch": p.batch, "heads": p.heads, "heads_k": p.heads_k or p.heads, "seqlen_q": p.seqlen_q,
            "seqlen_k": p.seqlen_k or p.seqlen_q, "head_dim": p.head_dim, "is_bf16": int(p.dtype == "bfloat16"),
            "is_causal": int(p.causal), "p_dropout": p.dropout_p, "softmax_scale": p.head_dim ** -0.5,
            "seed": 0, "offset": 0, "num_splits": p.num_splits, "deterministic": int(p.deterministic)}


def trace_library(library: Path, phase: str, args: dict[str, Any], vdev: str, cache: Path,
                  resources: dict[str, dict[str, Any]] | None = None, occupancy: int | None = None) -> dict[str, Any]:
    """Run a library with kb's ABI (kb_attn_abi.h) once against the virtual device `vdev` (KB_VDEV text).

    `resources` (mangled kernel name -> ptxas report) lets the occupancy API answer by the calculator's rules.
    """
    stub = _stub_dir(cache)
    task = json.dumps({"library": str(library), "phase": phase, "args": args})
    root = HERE.parent.parent
    work = Path(tempfile.mkdtemp(prefix="kb-vdev-"))
    try:
        env = {"LD_LIBRARY_PATH": str(stub), "KB_VDEV": vdev, "KB_VDEV_TRACE": str(work / "trace.jsonl")}
        if resources:
            env["KB_VDEV_RESOURCES"] = ";".join(f"{k}:{int(r.get('registers', 0))}:{int(r.get('static_smem', 0))}"
                                                for k, r in sorted(resources.items()))
        if occupancy is not None:
            env["KB_VDEV_OCCUPANCY"] = str(occupancy)
        res = sandbox.run([sys.executable, "-I", "-S", str(HERE / "launch_child.py"), str(root)], input=task, work=work,
                          readable=[root, stub, library.parent], timeout=100, env=env,
                          limits=sandbox.Limits(cpu_s=100, address_space=8 * sandbox.GIB))
        if res.returncode != 0:
            raise RuntimeError(f"host code failed on the virtual device (exit {res.returncode}): {res.stderr[-800:]}")
        answer = json.loads(res.stdout.strip().splitlines()[-1])
        events = [json.loads(ln) for ln in (work / "trace.jsonl").read_text().splitlines()] \
            if (work / "trace.jsonl").exists() else []
    finally:
        shutil.rmtree(work, ignore_errors=True)
    names = demangle(sorted({e["kernel"] for e in events if "kernel" in e}))
    for e in events:
        if "kernel" in e:
            e["demangled"] = names[e["kernel"]]
    return {"answer": answer, "events": events}


def trace(p: LaunchParams, hw: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Run the pinned host code once on the virtual device; the launches and attributes it made."""
    loaded = pinned_build.load(p.impl)
    unit = f"{p.phase}:{'bf16' if p.dtype == 'bfloat16' else 'fp16'}:{p.head_dim}"
    units = loaded.units()
    if unit not in units:
        raise LookupError(f"kb's build of {p.impl} here holds {sorted(units)}, not {unit}: "
                          f"python -m verifiers.pinned.build --rev {p.impl} --unit {unit}")
    got = trace_library(loaded.path / "libkb.so", p.phase, _abi_args(p), vdev_spec(p.device, hw),
                        pinned_build.build_root().parent, resources=loaded.manifest.get("ptxas"), occupancy=p.occupancy)
    return {**got, "build": pinned_build.provenance(p.impl)}


def measure(p: LaunchParams, events: list[dict[str, Any]], answer: dict[str, Any]) -> dict[str, tuple[Any, str]]:
    """The measurements of one trace: every launch's kernel names, and the chosen launch in detail."""
    launches = [e for e in events if e["event"] == "launch"]
    attrs = [e for e in events if e["event"] == "attribute"]
    occ = [e for e in events if e["event"] == "occupancy"]
    meas: dict[str, tuple[Any, str]] = {
        "harness_rc": (answer["rc"], ""),
        "launches": (len(launches), "kernels"),
        "kernels": (";".join(e["demangled"].split("(")[0] for e in launches), ""),
    }
    if answer["rc"] != 0:
        meas["error"] = (answer["error"], "")
    if occ:
        meas["occupancy_answered"] = (occ[-1]["value"], "CTAs per SM")
    chosen = [e for e in launches if p.kernel in e["demangled"]] if p.kernel \
        else sorted(launches, key=lambda e: -len(e["demangled"]))[:1]
    if not chosen:
        return meas
    e = chosen[0]
    traits = _traits_name(e["demangled"])
    targs = template_args(e["demangled"], traits) if traits else []
    meas.update({
        "kernel": (e["demangled"].split("<")[0].split("(")[0].replace("void ", ""), ""),
        "traits": (f"{traits}<{', '.join(targs)}>" if traits else "", ""),
        "grid": (e["grid"], "blocks"), "grid_x": (e["grid"][0], "blocks"), "grid_y": (e["grid"][1], "blocks"),
        "grid_z": (e["grid"][2], "blocks"), "grid_blocks": (e["grid"][0] * e["grid"][1] * e["grid"][2], "blocks"),
        "block_threads": (e["block"][0] * e["block"][1] * e["block"][2], "threads"),
        "dynamic_smem": (e["smem"], "bytes"), "cluster": (e["cluster"], ""),
    })
    for i, a in enumerate(targs[:12]):
        if re.fullmatch(r"-?\d+u?", a):
            meas[f"traits_arg{i}"] = (int(a.rstrip("u")), "")
        elif a in ("true", "false"):
            meas[f"traits_arg{i}"] = (a == "true", "")
    for a in attrs:
        if a["kernel"] == e["kernel"] and a["attribute"] == 8:  # cudaFuncAttributeMaxDynamicSharedMemorySize
            meas["max_dynamic_smem_attribute"] = (a["value"], "bytes")
    return meas


# No clone is needed: the build is the pinned code (its manifest names the source SHA it was made from).
@verifier("code.launch-trace", kind="pinned-code", params=LaunchParams,
          requires=Requirements(tools=("nvcc",)), timeout_s=150)
def launch_trace(p: LaunchParams, ctx: Context) -> Outcome:
    """Launches the pinned host code makes for an input on a virtual device (kernel, traits, grid, block, smem)."""
    try:
        pinned_build.load(p.impl)
    except (FileNotFoundError, RuntimeError, OSError, KeyError) as e:
        return Outcome(verdict="skipped", reason=f"needs kb's build of {p.impl} here: {e}")
    try:
        got = trace(p, ctx.hardware)
    except LookupError as e:
        return Outcome(verdict="skipped", reason=str(e))
    meas = measure(p, got["events"], got["answer"])
    launches = [e for e in got["events"] if e["event"] == "launch"]
    b = got["build"]
    log = [f"{p.impl} build {b['key']} ({b['source_sha'][:12]}), virtual {p.device}; {len(launches)} launch(es)"]
    log += [f"  {e['demangled'][:300]} grid={e['grid']} block={e['block']} smem={e['smem']} cluster={e['cluster']}"
            for e in launches]
    return Outcome(measurements=meas, log="\n".join(log),
                   environment={"build_key": b["key"], "library_sha256": b["library_sha256"], "source_sha": b["source_sha"],
                                "device": p.device, "sandbox": sandbox.level()})
