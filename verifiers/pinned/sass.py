"""SASS of the pins' kernel units, built here for one architecture: toolchain.sass.

A claim names a pinned build (`revision`: the recipes of verifiers/pinned/build.py, imported, not
copied: the tree, the cutlass submodule at the commit the pin records, include folders, flags, the
ATen stand-ins), one of its units (`fwd:bf16:128`), an architecture (sm_80, sm_90, sm_90a) and the SASS
mnemonics to count. The unit is compiled unchanged to a cubin with nvcc in the sandbox and read with
cuobjdump (`-sass` for the listing, `-res-usage` for registers per kernel). No GPU is needed.

Counts are static: an instruction is counted once where it stands in a kernel's code, not per
execution. A unit takes minutes on two cores, so cubins are cached under `.kb/build/sass/` by (pin SHA,
cutlass commit, unit, architecture, flags, compiler, shim).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import field_validator

from kb.hw import find_tool
from kb.registry import Context, Outcome, Params, Requirements, verifier
from kb.verify import sandbox
from verifiers.pinned import build
from verifiers.pinned.compiled import _anchor, _cache_root, _materialise, _tool_version, gitlink
from verifiers.pinned.fa4_compile import count_prefix, sass_mnemonics
from verifiers.trust import executable_pins  # noqa: F401 - read by kb's validation: what these verifiers may execute


class SassParams(Params):
    """A pinned unit, the target, the kernels to read and the mnemonics to count."""

    anchor: int = 0  # a repository anchor at the revision's SHA (the revision whose code is compiled)
    revision: Literal[tuple(build.REVISIONS)]  # type: ignore[valid-type]
    unit: str  # a unit of that revision, e.g. fwd:bf16:128
    arch: Literal["sm_80", "sm_90", "sm_90a"] = "sm_80"
    kernel_filter: str = ""  # regex over demangled kernel names; every kernel when empty
    counts: list[str] = []  # SASS mnemonic prefixes, counted as `count_<NAME>` (MUFU.EX2, LDG, STS, UTMALDG, RED, ATOM)

    _counts = field_validator("counts")(lambda v: [_mnemonic(x) for x in v])


def _mnemonic(name: str) -> str:
    if not re.fullmatch(r"[A-Z][A-Z0-9_]*(\.[A-Z0-9_]+)*", name):
        raise ValueError(f"{name!r} is not a SASS mnemonic such as LDG or MUFU.EX2")
    return name


_FUNC = re.compile(r"^\s+Function : (\S+)\s*$", re.M)


def split_functions(listing: str) -> dict[str, str]:
    """cuobjdump -sass output: mangled function name -> its listing."""
    marks = list(_FUNC.finditer(listing))
    return {m.group(1): listing[m.end():(marks[i + 1].start() if i + 1 < len(marks) else len(listing))]
            for i, m in enumerate(marks)}


def registers(res_usage: str) -> dict[str, int]:
    """cuobjdump -res-usage: mangled function name -> REG."""
    out, name = {}, None
    for line in res_usage.splitlines():
        if m := re.match(r"\s*Function (\S+):", line):
            name = m.group(1)
        elif name and (m := re.search(r"REG:(\d+)", line)):
            out[name] = int(m.group(1))
            name = None
    return out


def compile_unit(rev: build.Revision, unit: str, arch: str, clone: str, cut_clone: str, root: Path) -> tuple[Path, dict]:
    """The unit's cubin for `arch` (compiled once per key); returns (cubin, manifest)."""
    from verifiers.pinned import aten_shim

    if unit not in rev.units:
        raise ValueError(f"{rev.name} has no unit {unit!r}; known: {', '.join(sorted(rev.units))}")
    nvcc = find_tool("nvcc") or "nvcc"
    compiler = _tool_version(nvcc)
    cut_commit = gitlink(clone, rev.sha, rev.cutlass_path)
    shim = aten_shim.digest() if rev.aten_shim else ""
    num = arch.removeprefix("sm_")
    gencode = f"arch=compute_{num},code={arch}"
    # build.py's flags, less the ones that only steer its own object builds (threads, ptxas verbosity).
    flags = [f for f in rev.flags if not f.startswith("--threads") and f != "4" and not f.startswith("--ptxas-options")]
    key = hashlib.sha256(json.dumps([rev.sha, cut_commit, rev.units[unit], gencode, flags, compiler, shim,
                                     rev.cutlass_dirs, rev.tree_dirs, rev.extra_includes]).encode()).hexdigest()[:20]
    out = root / "sass" / key
    if (out / "manifest.json").exists():
        return out / "unit.cubin", {**json.loads((out / "manifest.json").read_text()), "cached": True}
    tree = _materialise(clone, rev.sha, list(rev.tree_dirs), root)
    cut_tree = _materialise(cut_clone, cut_commit, list(rev.cutlass_dirs), root)
    incs = [f"-I{tree / rev.src_dir}", *[f"-I{cut_tree / d}" for d in rev.cutlass_dirs],
            *[f"-I{tree / d}" for d in rev.extra_includes]]
    if rev.aten_shim:
        incs.insert(0, f"-I{aten_shim.write(root)}")
    out.mkdir(parents=True, exist_ok=True)
    tag = f"{os.getpid()}-{os.urandom(4).hex()}"
    start = time.perf_counter()
    res = sandbox.run([nvcc, "-gencode", gencode, *flags, *incs, "-cubin", "-o", str(out / f"unit.{tag}.cubin"),
                       str(tree / rev.src_dir / rev.units[unit])], work=out, readable=[root], timeout=3000,
                      limits=sandbox.Limits(cpu_s=3000))
    if res.returncode != 0:
        raise RuntimeError(f"nvcc failed on {rev.units[unit]} for {arch}: {res.stderr[-1500:]}")
    os.replace(out / f"unit.{tag}.cubin", out / "unit.cubin")
    manifest = {"revision": rev.name, "sha": rev.sha, "cutlass": cut_commit, "unit": f"{rev.src_dir}/{rev.units[unit]}",
                "gencode": gencode, "flags": flags, "compiler": compiler, "shim": shim,
                "compile_seconds": round(time.perf_counter() - start, 1)}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return out / "unit.cubin", {**manifest, "cached": False}


@dataclass(frozen=True)
class UnitSass:
    """A pinned unit compiled for one architecture (toolchain.sass's cache) and its SASS, function by function."""

    rev: Any
    cubin: Path
    manifest: dict[str, Any]
    listing: str
    funcs: dict[str, str]  # mangled name -> its SASS listing
    names: dict[str, str]  # mangled -> demangled


def unit_sass(p: SassParams, ctx: Context) -> UnitSass | Outcome:
    """Compile (or reuse) the check's pinned unit and list its SASS; a skipped Outcome without a cutlass clone."""
    rev = build.revision(p.revision)
    a, clone = _anchor(p, ctx)
    if a["sha"] != rev.sha:
        raise ValueError(f"anchor {p.anchor} is at {a['sha'][:12]}, not the {rev.name} revision {rev.sha[:12]}")
    cut_clone = ctx.clones.get("cutlass")
    if not cut_clone:
        return Outcome(verdict="skipped", reason="needs a local clone of cutlass (the pin's submodule)")
    cubin, manifest = compile_unit(rev, p.unit, p.arch, clone, cut_clone, _cache_root(ctx))
    tool = find_tool("cuobjdump") or "cuobjdump"
    listing = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, timeout=600).stdout
    funcs = split_functions(listing)
    names = dict(zip(funcs, subprocess.run(["c++filt"], input="\n".join(funcs), capture_output=True, text=True,
                                           timeout=60).stdout.splitlines(), strict=False))
    return UnitSass(rev, cubin, manifest, listing, funcs, names)


@verifier("toolchain.sass", kind="pinned-code", params=SassParams,
          requires=Requirements(tools=("nvcc", "cuobjdump"), git_source=True), timeout_s=3600)
def pinned_sass(p: SassParams, ctx: Context) -> Outcome:
    """Compile a pinned unit for one architecture; static SASS mnemonic counts and registers per matched kernel."""
    u = unit_sass(p, ctx)
    if isinstance(u, Outcome):
        return u
    rev, manifest, funcs, names = u.rev, u.manifest, u.funcs, u.names
    tool = find_tool("cuobjdump") or "cuobjdump"
    usage = registers(subprocess.run([tool, "-res-usage", str(u.cubin)], capture_output=True, text=True, timeout=600).stdout)
    chosen = [f for f in funcs if re.search(p.kernel_filter, names.get(f, f))]
    if not chosen:
        raise RuntimeError(f"no kernel matches {p.kernel_filter!r} among {len(funcs)} in {manifest['unit']}")
    ms = [m for f in chosen for m in sass_mnemonics(funcs[f])]
    values: dict[str, Any] = {"kernels": len(chosen), "instructions": len(ms),
                              "registers": max(usage.get(f, 0) for f in chosen),
                              "local_loads": count_prefix(ms, "LDL"), "local_stores": count_prefix(ms, "STL")}
    for c in p.counts:
        values[f"count_{c}"] = count_prefix(ms, c)
    meas = {k: (v, "static count" if k.startswith("count_") or k in ("instructions", "local_loads", "local_stores") else "")
            for k, v in values.items()}
    log = (f"{rev.name} {manifest['unit']} @ {rev.sha} (cutlass {manifest['cutlass'][:12]}) for {p.arch}; "
           f"{manifest['compiler']}; " + ("cached" if manifest["cached"] else f"compiled in {manifest['compile_seconds']} s")
           + f"\n{len(chosen)} of {len(funcs)} kernels match {p.kernel_filter!r}; counts are static (once per "
           "instruction in the code, not per execution)\n"
           + "\n".join(f"{k} = {v}" for k, v in values.items())
           + "\n" + "\n".join(f"  {usage.get(f, '?')} regs  {names.get(f, f)[:150]}" for f in chosen[:12]))
    return Outcome(measurements=meas, log=log,
                   environment={"compiler": manifest["compiler"], "gencode": manifest["gencode"], "flags": manifest["flags"],
                                "source_sha": rev.sha, "cutlass": manifest["cutlass"], "unit": manifest["unit"],
                                "sandbox": sandbox.level(), "compile_seconds": manifest["compile_seconds"],
                                "cached": manifest["cached"]})
