"""Builds of the pinned FlashAttention revisions, as shared libraries that GPU checks load with ctypes.

Each revision is its pinned kernel units, compiled unchanged from the tree at
the pin's full SHA (cutlass at the commit the pin records as its submodule),
plus kb's own harness (`verifiers/pinned/harness/<rev>.cu`) that fills the pinned
params struct through one C ABI (`kb_attn_abi.h`) and calls the pinned launch
function. FA1/FA2 units also get kb's ATen stand-ins (`aten_shim`). Builds are
cached by (SHA, units, flags, compiler, harness, shim) under
`.kb/build/pinned/<rev>/<key>/`, with a manifest that every GPU run records:
the source SHA, the cutlass commit, flags, compiler, what kb supplied, and the
ptxas resource lines of every kernel.

Builds are reproducible (verifiers/pinned/repro.py): sources are compiled from
one fixed stage folder, never from the checkout or the cache, so the library's
sha256 in the manifest follows from its key alone, whatever the build directory.

Run on any machine with nvcc (no GPU needed):
`python -m verifiers.pinned.build [--rev fa2-v2.0.0 ...] [-j 2]`; carry the
`.kb/build/pinned` folder to the GPU machine.
`python -m verifiers.pinned.build --check-reproducible REV` rebuilds REV from
scratch in a second directory and compares with the recorded library hash.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The harness sources are part of this module's code hash (the registry reads HASH_FILES).
HERE = Path(__file__).resolve().parent
HASH_FILES = ["harness/kb_attn_abi.h", "harness/fa1_v109.cu", "harness/fa2_v200.cu", "harness/fa3_hopper.cu",
              "harness/probes.cu"]

# Flags of the pinned setup.py for the kernel units (build-pinned.md), shared by all three pins.
_COMMON = ["-O3", "-std=c++17", "--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math",
           "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__",
           "-U__CUDA_NO_BFLOAT16_CONVERSIONS__"]


@dataclass(frozen=True)
class Revision:
    """One pinned revision: where its tree is, which units exist, how they compile."""

    name: str
    pin: str  # pin name in sources/repos.yaml (flash-attention)
    sha: str
    src_dir: str  # folder of the kernel units inside the tree
    cutlass_path: str  # gitlink path of the cutlass submodule
    cutlass_dirs: tuple[str, ...]
    tree_dirs: tuple[str, ...]
    units: dict[str, str]  # "fwd:bf16:128" -> unit file name in src_dir
    default_units: tuple[str, ...]
    gencode: str
    flags: tuple[str, ...]
    harness: str
    aten_shim: bool
    extra_includes: tuple[str, ...] = field(default_factory=tuple)  # tree-relative
    driver_symbols: tuple[str, ...] = ()  # CUDA driver functions the units call (linked against libcuda.so.1)


REVISIONS: dict[str, Revision] = {
    "fa2-v2.0.0": Revision(
        name="fa2-v2.0.0", pin="v2.0.0", sha="4f285b354796fb17df8636485b9a04df3ebbb7dc",
        src_dir="csrc/flash_attn/src", cutlass_path="csrc/cutlass", cutlass_dirs=("include",),
        tree_dirs=("csrc/flash_attn/src",),
        units={f"{ph}:{dt}:{d}": f"flash_{ph}_hdim{d}_{dt}_sm80.cu"
               for ph in ("fwd", "bwd") for dt in ("bf16", "fp16") for d in (64, 128)},
        default_units=("fwd:bf16:128", "fwd:fp16:128", "bwd:bf16:128", "bwd:fp16:128", "fwd:bf16:64", "fwd:fp16:64"),
        # v2.0.0's setup.py adds compute_90/sm_90 when the toolkit is new enough; the units are the sm80 ones.
        gencode="arch=compute_90,code=sm_90", flags=tuple(_COMMON), harness="fa2_v200.cu", aten_shim=True),
    # v1.0.9: one unit per (phase, head_dim) holds fp16 and bf16; the harness links all four units.
    "fa1-v1.0.9": Revision(
        name="fa1-v1.0.9", pin="v1.0.9", sha="6d48e14a6c2f551db96f0badc658a6279a929df3",
        src_dir="csrc/flash_attn/src", cutlass_path="csrc/flash_attn/cutlass", cutlass_dirs=("include",),
        tree_dirs=("csrc/flash_attn",),
        units={f"{ph}:{dt}:{d}": f"fmha_{ph}_hdim{d}.cu" for ph in ("fwd", "bwd") for dt in ("bf16", "fp16")
               for d in (64, 128)},
        default_units=tuple(f"{ph}:{dt}:{d}" for ph in ("fwd", "bwd") for dt in ("bf16", "fp16") for d in (64, 128)),
        gencode="arch=compute_90,code=sm_90", flags=(*_COMMON, "-lineinfo"), harness="fa1_v109.cu", aten_shim=True,
        extra_includes=("csrc/flash_attn",)),
    # hopper/ at 3669b25 (FA3): sm_90a only; no ATen names in the units; the TMA descriptors need the driver.
    "fa3-2024-08": Revision(
        name="fa3-2024-08", pin="fa3-2024-08", sha="3669b25206d5938e3cc74a5f7860e31c38af8204",
        src_dir="hopper", cutlass_path="csrc/cutlass", cutlass_dirs=("include", "tools/util/include"),
        tree_dirs=("hopper",),
        units={**{f"fwd:{dt}:{d}": f"flash_fwd_hdim{d}_{dt}_sm90.cu" for dt in ("bf16", "fp16") for d in (64, 128)},
               **{f"bwd:{dt}:128": f"flash_bwd_hdim128_{dt}_sm90.cu" for dt in ("bf16", "fp16")},
               # The pin's FP8 forward (e4m3 in, fp16 out, no scaling factors at this revision).
               **{f"fwd:e4m3:{d}": f"flash_fwd_hdim{d}_e4m3_sm90.cu" for d in (128, 256)}},
        default_units=("fwd:bf16:128", "fwd:fp16:128", "bwd:bf16:128", "bwd:fp16:128", "fwd:bf16:64", "fwd:fp16:64",
                       "fwd:e4m3:128", "fwd:e4m3:256"),
        gencode="arch=compute_90a,code=sm_90a",
        flags=("-O3", "-std=c++17", "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
               "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
               "-U__CUDA_NO_BFLOAT162_OPERATORS__", "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
               "--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math",
               "--ptxas-options=--verbose,--register-usage-level=10,--warn-on-local-memory-usage", "-lineinfo",
               "-DCUTLASS_DEBUG_TRACE_LEVEL=0", "-DNDEBUG", "--threads", "4"),
        harness="fa3_hopper.cu", aten_shim=False, driver_symbols=("cuTensorMapEncodeTiled",)),
}


def revision(name: str) -> Revision:
    """The named revision, or a clear error listing the known ones."""
    if name not in REVISIONS:
        raise KeyError(f"unknown pinned build {name!r}; known: {', '.join(sorted(REVISIONS))}")
    return REVISIONS[name]


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(hashlib.sha256(p).digest())
    return h.hexdigest()


def harness_digest(rev: Revision) -> str:
    """sha256 over the ABI header and the revision's harness source."""
    return _digest((HERE / "harness/kb_attn_abi.h").read_bytes(), (HERE / "harness" / rev.harness).read_bytes())


def build_root() -> Path:
    """Where builds live: $KB_BUILD_CACHE/pinned, else .kb/build/pinned under the working directory."""
    return Path(os.environ.get("KB_BUILD_CACHE") or Path.cwd() / ".kb" / "build") / "pinned"


def _key(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


_PTXAS_FN = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_PTXAS_REG = re.compile(r"Used (\d+) registers")
_PTXAS_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas(text: str) -> dict[str, dict[str, int | str]]:
    """Registers, spills, stack and static shared memory per mangled kernel from `-Xptxas -v` output."""
    out: dict[str, dict[str, int | str]] = {}
    cur: str | None = None
    for line in text.splitlines():
        m = _PTXAS_FN.search(line)
        if m:
            cur = m.group(1)
            out[cur] = {"arch": m.group(2)}
            continue
        if cur is None:
            continue
        if (m := _PTXAS_SPILL.search(line)):
            out[cur].update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        if (m := _PTXAS_REG.search(line)):
            out[cur]["registers"] = int(m.group(1))
            if (s := _PTXAS_SMEM.search(line)):
                out[cur]["static_smem"] = int(s.group(1))
    return out


def object_keys(rev: Revision, files: list[str], compiler: str, shim: str, cut_commit: str,
                env: dict[str, Any] | None = None) -> dict[str, str]:
    """Cache key of each pinned unit's object: (SHA, cutlass commit, file, flags, compiler, include set, shim).

    `env` is what else the bytes depend on (verifiers.pinned.repro.environment: stage folder,
    reproducibility flags, host compiler, toolkit location).
    """
    base = [rev.sha, cut_commit, rev.gencode, list(rev.flags), compiler, shim, rev.cutlass_dirs, rev.tree_dirs,
            rev.extra_includes, rev.src_dir, env]
    return {f: _key(*base, f) for f in files}


def pinned_clones() -> tuple[str, str]:
    """Local git directories of flash-attention and cutlass: kb.local.toml / KB_CLONE_*, else `kb sources fetch`'s cache."""
    from kb.config import load_config
    from kb.pinned.clones import clone_paths
    from kb.records.loader import load_corpus

    cfg = load_config()
    clones = clone_paths(cfg, load_corpus(cfg.root))
    clone, cut = clones.get("flash-attention"), clones.get("cutlass")
    if not clone or not cut:
        raise FileNotFoundError("needs local clones of flash-attention and cutlass (kb sources fetch, or kb.local.toml)")
    return clone, cut


def build(name: str, units: list[str] | None = None, jobs: int = 2, log: Any = print,
          root: Path | None = None) -> Path:
    """Build (or find cached) the revision's library; returns its folder (libkb.so + manifest.json).

    Each pinned unit's object is cached on its own by (SHA, file, flags, compiler, include set, shim,
    toolchain environment), with the ptxas report and the object's sha256 captured when it was
    compiled, so adding a unit or changing the harness recompiles only what changed. `root` replaces
    build_root() (--check-reproducible builds into a second one).
    """
    from verifiers.pinned import aten_shim, repro
    from verifiers.pinned.compiled import _materialise, _tool_version, gitlink

    rev = revision(name)
    units = sorted(units or rev.default_units)
    for u in units:
        if u not in rev.units:
            raise KeyError(f"{name} has no unit {u!r}; known: {', '.join(sorted(rev.units))}")
    # Only FA2's harness compiles in just the units named (-DKB_UNIT_*); FA1's and FA3's call every default
    # unit's entry point, so a library of fewer units would link with undefined symbols and not load.
    if rev.harness != "fa2_v200.cu" and set(units) != set(rev.default_units):
        raise ValueError(f"{name}'s harness ({rev.harness}) links every default unit; build all of "
                         f"{', '.join(rev.default_units)} (asked for {', '.join(units)})")
    clone, cut = pinned_clones()
    nvcc = "nvcc"
    compiler = _tool_version(nvcc)
    root = root or build_root()
    env = repro.environment(nvcc)
    shim = aten_shim.digest() if rev.aten_shim else ""
    cut_commit = gitlink(clone, rev.sha, rev.cutlass_path)
    files = sorted({rev.units[u] for u in units})  # FA1 units hold both dtypes: compile each file once
    obj_keys = object_keys(rev, files, compiler, shim, cut_commit, env)
    key = _key(rev.name, sorted(obj_keys.values()), units, harness_digest(rev), rev.driver_symbols, "cudart-shared",
               env)
    out = root / name / key
    if (out / "manifest.json").exists():
        log(f"{name}: cached build {key} ({len(units)} units)")
        _point_current(root / name, key)
        return out
    out.mkdir(parents=True, exist_ok=True)
    objects = root / "objects"
    objects.mkdir(parents=True, exist_ok=True)
    # Everything nvcc reads from kb or the pins is staged under the fixed stage folder (repro.py): the
    # paths it embeds (module ids, __FILE__, line tables) are then the same in every build directory.
    stage = repro.stage_root()
    tree = _materialise(clone, rev.sha, list(rev.tree_dirs), stage)
    cut_tree = _materialise(cut, cut_commit, list(rev.cutlass_dirs), stage)
    harness = repro.stage_files("harness", {n: (HERE / "harness" / n).read_bytes()
                                            for n in ("kb_attn_abi.h", rev.harness)})
    incs = [f"-I{harness}", f"-I{tree / rev.src_dir}", *[f"-I{cut_tree / d}" for d in rev.cutlass_dirs],
            *[f"-I{tree / d}" for d in rev.extra_includes]]
    if rev.aten_shim:
        incs.insert(0, f"-I{repro.stage_files('aten-shim', {n: t.encode() for n, t in aten_shim.FILES.items()})}")
    base = ["-gencode", rev.gencode, *rev.flags, "-Xcompiler", "-fPIC", *incs]

    def compile_one(src: Path, obj: Path, extra: list[str]) -> tuple[float, str]:
        return repro.compile_object(nvcc, [*base, *extra], src, obj)

    todo = [f for f in files if not (objects / f"{obj_keys[f]}.json").exists()]
    log(f"{name}: {len(files) - len(todo)} of {len(files)} pinned units cached; compiling {len(todo)} + harness "
        f"with {jobs} jobs ({compiler})")

    def unit_job(f: str) -> None:
        obj = objects / f"{obj_keys[f]}.o"
        secs, text = compile_one(tree / rev.src_dir / f, obj, ["-Xptxas", "-v"])
        meta = {"file": f"{rev.src_dir}/{f}", "seconds": round(secs, 1), "ptxas": parse_ptxas(text),
                "sha256": repro.sha256_file(obj)}
        (objects / f"{obj_keys[f]}.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
        log(f"  {f}: {secs:.0f} s")

    defines = [f"-DKB_UNIT_{u.replace(':', '_')}" for u in units]
    with ThreadPoolExecutor(max_workers=jobs) as ex:
        futs = [ex.submit(unit_job, f) for f in todo]
        futs.append(ex.submit(compile_one, harness / rev.harness, out / "harness.o", defines))
        for fut in futs:
            fut.result()
    seconds, ptxas, object_sha = {}, {}, {}
    for f in files:
        meta = json.loads((objects / f"{obj_keys[f]}.json").read_text())
        seconds[f] = meta["seconds"]
        ptxas.update(meta["ptxas"])
        object_sha[f] = meta["sha256"]
    object_sha[rev.harness] = repro.sha256_file(out / "harness.o")
    lib = out / "libkb.so"
    link = ["--cudart", "shared"]  # one CUDA runtime per process: torch's libcudart.so.13, loaded before this library
    if rev.driver_symbols:
        # No GPU driver here: link against a stand-in that declares the same soname; the driver's
        # libcuda.so.1 provides the real functions at run time. It lives in the stage: nvlink records
        # its -L folders in the library.
        stub = repro.stage_files(
            "cuda-stub", {"cuda_stub.c": "".join(f"int {sym}(void) {{ return 999; }}\n" for sym in rev.driver_symbols).encode()},
            run=["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", "libcuda.so", "cuda_stub.c"])
        link += [f"-L{stub}", "-lcuda"]
    objs = [str(objects / f"{obj_keys[f]}.o") for f in files] + [str(out / "harness.o")]  # a fixed order
    res = subprocess.run([nvcc, "-shared", "-gencode", rev.gencode, "-o", str(lib), *objs, *link, *repro.LINK_FLAGS],
                         capture_output=True, text=True, timeout=600, cwd=stage, env=repro.compile_env())
    if res.returncode != 0:
        raise RuntimeError(f"link failed: {res.stderr[-2000:]}")
    (out / "harness.o").unlink()
    manifest = {
        "revision": name, "source": "flash-attention", "pin": rev.pin, "source_sha": rev.sha,
        "cutlass": {"path": rev.cutlass_path, "commit": cut_commit, "dirs": list(rev.cutlass_dirs)},
        "units": {u: f"{rev.src_dir}/{rev.units[u]}" for u in units},
        "gencode": rev.gencode, "flags": list(rev.flags), "compiler": compiler,
        "harness": {"file": f"verifiers/pinned/harness/{rev.harness}", "sha256": harness_digest(rev)},
        "supplied_by_kb": (["verifiers/pinned/harness/kb_attn_abi.h", f"verifiers/pinned/harness/{rev.harness}"]
                           + ([f"verifiers/pinned/aten_shim.py ({shim})"] if rev.aten_shim else [])
                           + ([f"link-time libcuda.so.1 stand-in for {', '.join(rev.driver_symbols)} (the driver's at run time)"]
                              if rev.driver_symbols else [])),
        "link": link[:2] + (["-lcuda"] if rev.driver_symbols else []) + list(repro.LINK_FLAGS),
        "pinned_sources": "unchanged, compiled from the tree at source_sha",
        "compile_seconds": seconds, "ptxas": ptxas, "key": key, "object_keys": obj_keys,
        "reproducible": env, "object_sha256": object_sha,
        "library_sha256": hashlib.sha256(lib.read_bytes()).hexdigest(),
        "library_bytes": lib.stat().st_size,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    _point_current(root / name, key)
    log(f"{name}: built {key}, {lib.stat().st_size / 2**20:.1f} MiB")
    return out


def _point_current(folder: Path, key: str) -> None:
    (folder / "current").write_text(key + "\n")


# --------------------------------------------------------------------------- loading (GPU side)


class KbAttnArgs(ctypes.Structure):
    """Mirror of `struct KbAttnArgs` in harness/kb_attn_abi.h."""

    _fields_ = [(n, ctypes.c_void_p) for n in ("q", "k", "v", "o", "lse", "dout", "dq", "dk", "dv")] + [
        ("ws", ctypes.c_void_p * 4), ("ws_bytes", ctypes.c_int64 * 4),
        *[(n, ctypes.c_int) for n in ("batch", "heads", "heads_k", "seqlen_q", "seqlen_k", "head_dim",
                                       "is_bf16", "is_causal")],
        ("p_dropout", ctypes.c_float), ("softmax_scale", ctypes.c_float),
        ("seed", ctypes.c_uint64), ("offset", ctypes.c_uint64),
        ("num_splits", ctypes.c_int), ("deterministic", ctypes.c_int), ("is_e4m3", ctypes.c_int)]


@dataclass
class Loaded:
    """A loaded pinned build: the ctypes library and its manifest."""

    lib: Any
    manifest: dict[str, Any]
    path: Path

    def units(self) -> set[str]:
        """The (phase:dtype:head_dim) entries the library holds."""
        return {u for u in self.lib.kb_units().decode().split(";") if u}


_LOADED: dict[str, Loaded] = {}


def load(name: str) -> Loaded:
    """Load the current build of revision `name` (built earlier, possibly on another machine)."""
    if name in _LOADED:
        return _LOADED[name]
    folder = build_root() / name
    cur = folder / "current"
    if not cur.exists():
        raise FileNotFoundError(f"no build of {name} under {folder}: run `python -m verifiers.pinned.build --rev {name}`"
                                " and carry .kb/build/pinned to this machine")
    path = folder / cur.read_text().strip()
    manifest = json.loads((path / "manifest.json").read_text())
    if manifest["source_sha"] != revision(name).sha:
        raise RuntimeError(f"{path}: built from {manifest['source_sha']}, not the pin {revision(name).sha}")
    if manifest["harness"]["sha256"] != harness_digest(revision(name)):
        raise RuntimeError(f"{path}: built with another harness than verifiers/pinned/harness/{revision(name).harness}; rebuild")
    lib = ctypes.CDLL(str(path / "libkb.so"))
    for fn in ("kb_fwd", "kb_bwd"):
        getattr(lib, fn).argtypes = [ctypes.POINTER(KbAttnArgs), ctypes.c_void_p]
        getattr(lib, fn).restype = ctypes.c_int
    lib.kb_workspace.argtypes = [ctypes.POINTER(KbAttnArgs), ctypes.c_int]
    lib.kb_workspace.restype = ctypes.c_int
    lib.kb_philox_increment.argtypes = [ctypes.POINTER(KbAttnArgs), ctypes.c_int]
    lib.kb_philox_increment.restype = ctypes.c_uint64
    lib.kb_units.restype = ctypes.c_char_p
    lib.kb_last_error.restype = ctypes.c_char_p
    _LOADED[name] = Loaded(lib, manifest, path)
    return _LOADED[name]


def provenance(name: str) -> dict[str, Any]:
    """What a GPU run records about the build it used."""
    m = load(name).manifest
    return {k: m[k] for k in ("revision", "pin", "source_sha", "cutlass", "gencode", "flags", "compiler", "harness",
                              "supplied_by_kb", "key", "library_sha256")}


PROBES = "probes"


def build_probes(log: Any = print, root: Path | None = None) -> Path:
    """kb's own GPU micro-probes (harness/probes.cu) as a library, cached by (source, flags, compiler, toolchain).

    Compiled from the stage like the pinned units (verifiers/pinned/repro.py), then linked; `root`
    replaces build_root().
    """
    from verifiers.pinned import repro
    from verifiers.pinned.compiled import _tool_version

    compiler = _tool_version("nvcc")
    src_bytes = (HERE / "harness" / "probes.cu").read_bytes()
    gencode = ["-gencode", "arch=compute_90,code=sm_90"]
    flags = ["-O3", "-std=c++17", *gencode, "-Xcompiler", "-fPIC"]
    link = ["-shared", *gencode, "--cudart", "shared", *repro.LINK_FLAGS]
    env = repro.environment("nvcc")
    root = root or build_root()
    key = _key(hashlib.sha256(src_bytes).hexdigest(), flags, link, compiler, env)
    out = root / PROBES / key
    if (out / "manifest.json").exists():
        log(f"probes: cached build {key}")
        _point_current(root / PROBES, key)
        return out
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    src = repro.stage_files("probes", {"probes.cu": src_bytes}) / "probes.cu"
    repro.compile_object("nvcc", flags, src, out / "probes.o", timeout=900)
    res = subprocess.run(["nvcc", *link, "-o", str(out / "libkb.so"), str(out / "probes.o")], capture_output=True,
                         text=True, timeout=900, cwd=repro.stage_root(), env=repro.compile_env())
    if res.returncode != 0:
        raise RuntimeError(f"link of probes.cu failed:\n{res.stderr[-3000:]}")
    object_sha = {"probes.cu": repro.sha256_file(out / "probes.o")}
    (out / "probes.o").unlink()
    manifest = {"revision": PROBES, "source": "kb (verifiers/pinned/harness/probes.cu)", "source_sha256":
                hashlib.sha256(src_bytes).hexdigest(), "flags": flags, "link": link, "compiler": compiler, "key": key,
                "reproducible": env, "object_sha256": object_sha,
                "library_sha256": repro.sha256_file(out / "libkb.so"), "library_bytes": (out / "libkb.so").stat().st_size,
                "compile_seconds": round(time.time() - t0, 1),
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    _point_current(root / PROBES, key)
    log(f"probes: built {key} in {manifest['compile_seconds']} s")
    return out


def load_probes() -> tuple[Any, dict[str, Any]]:
    """The probes library (ctypes) and its manifest; FileNotFoundError when not built here."""
    folder = build_root() / PROBES
    if not (folder / "current").exists():
        raise FileNotFoundError(f"no probes build under {folder}: run `python -m verifiers.pinned.build --rev probes`")
    path = folder / (folder / "current").read_text().strip()
    manifest = json.loads((path / "manifest.json").read_text())
    if manifest["source_sha256"] != hashlib.sha256((HERE / "harness" / "probes.cu").read_bytes()).hexdigest():
        raise RuntimeError(f"{path}: built from another probes.cu; rebuild")
    return ctypes.CDLL(str(path / "libkb.so")), manifest


def compare_builds(first: Path, second: Path, build_paths: list[str]) -> dict[str, Any]:
    """Compare two build folders (manifest.json + libkb.so): keys, library hashes, objects, sections, paths.

    `reproduced` is true when both have the same key and library sha256 and each library's bytes
    match its manifest. `build_paths_in_library` lists which of `build_paths` occur in the second
    library's bytes.
    """
    from verifiers.pinned import repro

    recorded = json.loads((first / "manifest.json").read_text())
    rebuilt = json.loads((second / "manifest.json").read_text())
    actual = {d: repro.sha256_file(d / "libkb.so") if (d / "libkb.so").exists() else None for d in (first, second)}
    same_key = rebuilt["key"] == recorded["key"]
    same_lib = rebuilt["library_sha256"] == recorded["library_sha256"] == actual[first] == actual[second]
    objs_a, objs_b = recorded.get("object_sha256", {}), rebuilt.get("object_sha256", {})
    report: dict[str, Any] = {
        "revision": recorded["revision"], "recorded": str(first), "rebuilt": str(second),
        "recorded_key": recorded["key"], "rebuilt_key": rebuilt["key"],
        "recorded_library_sha256": recorded["library_sha256"], "rebuilt_library_sha256": rebuilt["library_sha256"],
        "reproduced": same_key and same_lib,
        "objects_differing": sorted(f for f in set(objs_a) | set(objs_b) if objs_a.get(f) != objs_b.get(f)),
        "library_sections_differing": ([] if same_lib or None in actual.values()
                                       else repro.differing_sections(first / "libkb.so", second / "libkb.so")),
        "build_paths_in_library": (repro.paths_found(second / "libkb.so", sorted(set(build_paths)))
                                   if actual[second] else []),
        "stage": rebuilt.get("reproducible", {}).get("stage"),
    }
    if actual[first] != recorded["library_sha256"]:
        report["why"] = f"{first / 'libkb.so'} does not match its own manifest's library_sha256"
    elif not same_key:
        report["why"] = ("the inputs differ from the recorded build's (sources, flags or toolchain changed since): "
                         "the recorded hash cannot be re-derived from this checkout")
    elif not same_lib:
        report["why"] = "same key, different bytes: the build is not reproducible"
    return report


def check_reproducible(name: str, jobs: int = 2, into: Path | None = None, log: Any = print) -> dict[str, Any]:
    """Rebuild the recorded build of `name` from scratch in a second directory; compare with its recorded hash.

    The recorded build is the current one under build_root(). The rebuild compiles every object and
    links again in `into` (a new temporary folder by default; it must not hold a build already), from
    the same fixed stage folder (that is the point: verifiers/pinned/repro.py). Returns a report:
    `reproduced` is true when the rebuild has the recorded key and library sha256; otherwise it says
    which objects and library sections differ. The second folder is removed when the build reproduced
    and kb chose it; kept (and named) otherwise.
    """
    folder = build_root() / name
    if name != PROBES:
        revision(name)
    if not (folder / "current").exists():
        raise FileNotFoundError(f"no recorded build of {name} under {folder}: "
                                f"run `python -m verifiers.pinned.build --rev {name}` first")
    first = folder / (folder / "current").read_text().strip()
    recorded = json.loads((first / "manifest.json").read_text())
    if "reproducible" not in recorded or "library_sha256" not in recorded:
        raise RuntimeError(f"{first}: built before reproducible builds (its manifest records no toolchain "
                           "environment); rebuild it, then check")
    own = into is None
    second = Path(tempfile.mkdtemp(prefix=f"kb-repro-{name}-")) if own else Path(into).resolve()
    if (second / "pinned").exists():
        raise RuntimeError(f"{second / 'pinned'} exists: the rebuild needs a directory without builds")
    if second.resolve() == build_root().parent.resolve():
        raise RuntimeError(f"{second} is the recorded build's own directory")
    log(f"{name}: rebuilding recorded build {recorded['key']} from scratch in {second}")
    if name == PROBES:
        out = build_probes(log=log, root=second / "pinned")
    else:
        out = build(name, sorted(recorded["units"]), jobs, log=log, root=second / "pinned")
    # Build and checkout folders must not be in the bytes; the fixed stage folder may be (device line tables).
    report = compare_builds(first, out, [str(HERE.parents[1]), str(build_root().parent), str(second)])
    if own and report["reproduced"] and not report["build_paths_in_library"]:
        shutil.rmtree(second, ignore_errors=True)
        report["rebuilt"] = "(removed)"
    return report


def library_main(argv: list[str] | None, prog: str, doc: str, name: str, build_fn: Any, check_fn: Any) -> int:
    """The command line of a library built beside the table above (verifiers/pinned/varlen.py, larged.py).

    Without options: `build_fn(jobs)`. With --check-reproducible: `check_fn(jobs)`, a compare_builds report,
    printed as JSON; exit 1 when the rebuild's bytes differ or hold a build path, 2 on a build error.
    """
    ap = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0])
    ap.add_argument("-j", "--jobs", type=int, default=2, help="parallel nvcc processes (default 2)")
    ap.add_argument("--check-reproducible", action="store_true",
                    help="rebuild the current build from scratch in a new temporary directory and compare its library "
                         "sha256 with the recorded one (exit 1 if it differs)")
    args = ap.parse_args(argv)
    try:
        if not args.check_reproducible:
            build_fn(args.jobs)
            return 0
        report = check_fn(args.jobs)
    except (KeyError, FileNotFoundError, RuntimeError) as e:
        print(f"{name}: {e}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=1))
    ok = report["reproduced"] and not report["build_paths_in_library"]
    print(f"{name}: {'REPRODUCED' if ok else 'NOT REPRODUCED'} {report['rebuilt_library_sha256']} "
          f"(recorded {report['recorded_library_sha256']})", file=sys.stderr)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    """Command line: build the named revisions (default: all) with their default units, or check one reproduces."""
    ap = argparse.ArgumentParser(prog="python -m verifiers.pinned.build", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rev", action="append",
                    help=f"revision to build (repeatable); known: {', '.join([*REVISIONS, PROBES])}")
    ap.add_argument("--unit", action="append", help="phase:dtype:head_dim to build instead of the defaults")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="parallel nvcc processes (default 2)")
    ap.add_argument("--check-reproducible", metavar="REV", action="append",
                    help="rebuild REV's recorded build from scratch in a second directory and compare its library "
                         "sha256 with the recorded one (exit 1 if it differs); repeatable")
    ap.add_argument("--into", type=Path, help="with --check-reproducible: the second directory (default: a new "
                                               "temporary one, removed when the build reproduced)")
    args = ap.parse_args(argv)
    if args.check_reproducible:
        if args.into and len(args.check_reproducible) > 1:
            ap.error("--into takes one revision")
        ok = True
        try:
            for name in args.check_reproducible:
                rep = check_reproducible(name, args.jobs, args.into, log=lambda m: print(m, file=sys.stderr))
                print(json.dumps(rep, indent=1))
                print(f"{name}: {'REPRODUCED' if rep['reproduced'] else 'NOT REPRODUCED'} "
                      f"{rep['rebuilt_library_sha256']} (recorded {rep['recorded_library_sha256']})"
                      + (f"; build paths in the library: {rep['build_paths_in_library']}"
                         if rep["build_paths_in_library"] else ""), file=sys.stderr)
                ok = ok and rep["reproduced"] and not rep["build_paths_in_library"]
        except (KeyError, FileNotFoundError, RuntimeError) as e:
            print(f"pinned_build: {e}", file=sys.stderr)
            return 2
        return 0 if ok else 1
    try:
        for name in args.rev or [*REVISIONS, PROBES]:
            if name == PROBES:
                build_probes()
            else:
                build(name, args.unit, args.jobs)
    except (KeyError, FileNotFoundError, RuntimeError) as e:
        print(f"pinned_build: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
