"""A pinned kernel template instantiated with traits the KB types, compiled for one architecture: code.instance-resources.

code.resources compiles a pinned translation unit unchanged, so it can only report the instances the pin
itself makes. Some claims are about an instance the pin does not make: "B_c = 256 at d = 128 would cost
registers", say. This verifier writes a one-line translation unit of kb's own that includes the pinned
launch header and explicitly instantiates one pinned launch template (named from ENTRIES, never code from
claims data) for a type alias the claim gives (`using T = FMHA_kernel_traits<256, 128, ...>;`, checked by
verifiers/trust.py as for code.constexpr), compiles it with the pinned include folders, cutlass at the
submodule commit and kb's ATen stand-ins, and reads ptxas' report per kernel, as code.resources does. The
evidence says the instance is kb's (grade note kb-instance), not one the pin compiles.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import field_validator

from kb.hw import find_tool
from kb.registry import Context, Outcome, Params, Requirements, verifier
from kb.verify import sandbox
from verifiers import trust
from verifiers.pinned.compiled import (
    DEFAULT_CUDA_FLAGS,
    _anchor,
    _cache_root,
    _check_arch,
    _materialise,
    _tool_version,
    gitlink,
    parse_ptxas,
)
from verifiers.trust import executable_pins  # noqa: F401 - read by kb's validation: what these verifiers may execute

# name -> the explicit instantiation kb writes after the pinned header (T is the claim's alias).
ENTRIES = {
    # FA1 v1.0.9 fmha_fwd_launch_template.h: the forward launcher, which instantiates fmha_fwd_loop_kernel
    # for every (dropout, causal, return-softmax) combination, as the pinned fmha_fwd_hdim*.cu units do.
    "fa1-fwd-loop": "template void run_fmha_fwd_loop<T>(Launch_params<FMHA_fprop_params> &);",
}


class InstanceParams(Params):
    """The pinned header (anchor), the instance (type alias and entry), and how to compile it."""

    anchor: int = 0  # a repository anchor whose `path` is the pinned header defining the entry
    entry: Literal[tuple(ENTRIES)]  # type: ignore[valid-type]
    prelude: str  # type aliases only: `using T = Traits<...>;`
    dirs: list[str] = []
    submodules: dict[str, list[str]] = {}
    aten_shim: bool = False
    arch: str = "sm_80"
    flags: list[str] = [*DEFAULT_CUDA_FLAGS, "-O3"]
    kernel_filter: str = ""

    _prelude = field_validator("prelude")(lambda v: _aliases_only(v))
    _paths = field_validator("dirs")(lambda v: [trust.check_repo_path(x) for x in v])
    _subs = field_validator("submodules")(
        lambda v: {trust.check_repo_path(k): [trust.check_repo_path(x) for x in fs] for k, fs in v.items()})
    _flags = field_validator("flags")(lambda v: trust.check_flags(v))
    _arch = field_validator("arch")(lambda v: _check_arch(v))


def _aliases_only(prelude: str) -> str:
    if not prelude.strip() or trust.is_snippet_name(prelude):
        raise ValueError("prelude: give the instance as a type alias (`using T = Traits<...>;`)")
    return trust.check_aliases(prelude)


def unit_text(header: str, prelude: str, entry: str) -> str:
    """kb's translation unit: the pinned header, the alias, one explicit instantiation."""
    return f'#include "{Path(header).name}"\n\n{prelude.strip()}\n\n{ENTRIES[entry]}\n'


@verifier("code.instance-resources", kind="pinned-code", params=InstanceParams,
          requires=Requirements(tools=("nvcc",), git_source=True), timeout_s=1800)
def instance_resources(p: InstanceParams, ctx: Context) -> Outcome:
    """Compile kb's instance of a pinned launch template; registers, spills, stack and static smem per kernel."""
    from verifiers.pinned import aten_shim

    a, clone = _anchor(p, ctx)
    root = _cache_root(ctx)
    header_dir = str(Path(a["path"]).parent)
    dirs = p.dirs or [header_dir]
    tree = _materialise(clone, a["sha"], sorted({*dirs, header_dir}), root)
    incs = [f"-I{tree / d}" for d in dirs]
    subs_used = {}
    for sub, folders in p.submodules.items():
        commit = gitlink(clone, a["sha"], sub)
        sub_clone = ctx.clones.get(Path(sub).name)
        if not sub_clone:
            return Outcome(verdict="skipped", reason=f"needs a local clone of {Path(sub).name} (submodule {sub} @ {commit})")
        incs += [f"-I{_materialise(sub_clone, commit, folders, root) / f}" for f in folders]
        subs_used[sub] = commit
    if p.aten_shim:
        incs.insert(0, f"-I{aten_shim.write(root)}")
    text = unit_text(a["path"], p.prelude, p.entry)
    nvcc = find_tool("nvcc") or "nvcc"
    version = _tool_version(nvcc)
    flags = [f"-arch=sm_{p.arch.removeprefix('sm_')}", *p.flags, "-Xptxas", "-v"]
    key = hashlib.sha256(json.dumps([a["sha"], a["path"], text, flags, version, subs_used, dirs,
                                     aten_shim.digest() if p.aten_shim else None]).encode()).hexdigest()[:20]
    out = root / "instances" / key
    log_file = out / "ptxas.log"
    cached = log_file.exists()
    start = time.perf_counter()
    if not cached:
        out.mkdir(parents=True, exist_ok=True)
        tag = f"{os.getpid()}-{os.urandom(4).hex()}"  # every sandboxed worker is pid 2: a private folder each
        work = out / f".work-{tag}"
        work.mkdir()
        try:
            (work / "instance.cu").write_text(text)
            res = sandbox.run([nvcc, *flags, *incs, "-cubin", "-o", str(work / "unit.cubin"), str(work / "instance.cu")],
                              work=work, readable=[root], timeout=1700, limits=sandbox.Limits(cpu_s=1800))
            if res.returncode != 0:
                raise RuntimeError(f"nvcc failed on kb's instance: {res.stderr[-1500:]}")
            (out / "instance.cu").write_text(text)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        (out / f"ptxas.{tag}.log").write_text(res.stderr)
        os.replace(out / f"ptxas.{tag}.log", log_file)
    seconds = time.perf_counter() - start
    kernels = parse_ptxas(log_file.read_text())
    names = subprocess.run(["c++filt"], input="\n".join(k["mangled"] for k in kernels), capture_output=True,
                           text=True, timeout=60).stdout.splitlines()
    for k, n in zip(kernels, names, strict=False):
        k["name"] = n
    chosen = [k for k in kernels if re.search(p.kernel_filter, k.get("name", k["mangled"]))]
    if not chosen:
        raise RuntimeError(f"no kernel matches {p.kernel_filter!r} among {len(kernels)}")
    meas: dict[str, tuple[Any, str]] = {
        "kernels": (len(chosen), "entries"),
        "registers": (max(k["registers"] for k in chosen), "per thread (max over matched kernels)"),
        "registers_min": (min(k["registers"] for k in chosen), "per thread"),
        "spill_stores": (max(k["spill_stores"] for k in chosen), "bytes"),
        "spill_loads": (max(k["spill_loads"] for k in chosen), "bytes"),
        "stack_bytes": (max(k["stack"] for k in chosen), "bytes"),
        "static_smem": (max(k["smem"] for k in chosen), "bytes"),
    }
    log = [f"kb's instance of {a['path']} @ {a['sha']} ({p.entry}): {p.prelude.strip()}",
           f"compiler: {version}; flags: {' '.join(flags)}; build {key}"
           + (" (cached)" if cached else f" (compiled in {seconds:.0f} s)"),
           f"ATen names supplied by kb's shim {aten_shim.digest()}" if p.aten_shim else "no shim"]
    log += [f"{k['registers']:4d} regs {k['spill_stores']:6d} B spill-st {k['spill_loads']:6d} B spill-ld "
            f"{k['smem']:6d} B smem  {k.get('name', k['mangled'])[:160]}" for k in chosen[:20]]
    return Outcome(measurements=meas, log="\n".join(log),
                   environment={"compiler": version, "flags": flags, "source_sha": a["sha"], "submodules": subs_used,
                                "aten_shim": aten_shim.digest() if p.aten_shim else None, "sandbox": sandbox.level(),
                                "instance": p.prelude.strip(), "entry": p.entry, "compile_seconds": round(seconds, 1),
                                "cached": cached, "kb_instance": True})
