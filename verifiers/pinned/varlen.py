"""FA1 v1.0.9's packed variable-length forward as a library of its own: the pinned units plus kb's packed entry.

kb's dense harness (harness/fa1_v109.cu) writes equal-length cu_seqlens itself, so the pinned varlen path is
reached only with every sequence the same length. `harness/fa1_v109_varlen.cu` adds an entry that takes the
caller's cu_seqlens and max lengths, as the pinned `mha_fwd` does for a packed batch. It is linked with the
same cached objects of the pinned units as the dense library (`build.build("fa1-v1.0.9")` makes or finds them),
into `.kb/build/pinned/fa1-v1.0.9-varlen/<key>/libkb.so`, so the dense library, its key and the checks that
load it stay as they are. Builds are reproducible like the dense ones (compiled from the fixed stage folder).

`python -m verifiers.pinned.varlen` builds it (any machine with nvcc and the clones; the dense build's unit
objects are compiled first when missing); `--check-reproducible` rebuilds it from scratch in a second folder and
compares the library's sha256 with the recorded one.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from verifiers.pinned import build as pinned_build

HERE = Path(__file__).resolve().parent
# The packed entry includes the dense harness: both are part of this module's code hash.
HASH_FILES = ["harness/kb_attn_abi.h", "harness/fa1_v109.cu", "harness/fa1_v109_varlen.cu"]
BASE = "fa1-v1.0.9"
NAME = "fa1-v1.0.9-varlen"
_SOURCES = ("kb_attn_abi.h", "fa1_v109.cu", "fa1_v109_varlen.cu")


def harness_digest() -> str:
    """sha256 over the ABI header, the dense harness and the packed entry."""
    h = hashlib.sha256()
    for n in _SOURCES:
        h.update(hashlib.sha256((HERE / "harness" / n).read_bytes()).digest())
    return h.hexdigest()


def compile_entry(obj: Path, defines: list[str] | None = None) -> None:
    """Compile the packed entry (with the dense harness it includes) to `obj`, from the fixed stage folder.

    The flags and include set are the dense build's: the pin's tree and cutlass at its submodule commit, kb's
    ATen stand-ins, the harness sources.
    """
    from verifiers.pinned import aten_shim, repro
    from verifiers.pinned.compiled import _materialise, gitlink

    clone, cut = pinned_build.pinned_clones()
    rev = pinned_build.revision(BASE)
    stage = repro.stage_root()
    tree = _materialise(clone, rev.sha, list(rev.tree_dirs), stage)
    cut_tree = _materialise(cut, gitlink(clone, rev.sha, rev.cutlass_path), list(rev.cutlass_dirs), stage)
    harness = repro.stage_files("harness", {n: (HERE / "harness" / n).read_bytes() for n in _SOURCES})
    shim = repro.stage_files("aten-shim", {n: t.encode() for n, t in aten_shim.FILES.items()})
    incs = [f"-I{shim}", f"-I{harness}", f"-I{tree / rev.src_dir}", *[f"-I{cut_tree / d}" for d in rev.cutlass_dirs],
            *[f"-I{tree / d}" for d in rev.extra_includes]]
    repro.compile_object("nvcc", ["-gencode", rev.gencode, *rev.flags, "-Xcompiler", "-fPIC", *incs, *(defines or [])],
                         harness / "fa1_v109_varlen.cu", obj)


def build(jobs: int = 2, log: Any = print, root: Path | None = None) -> Path:
    """Build (or find cached) the packed-entry library; returns its folder (libkb.so + manifest.json)."""
    from verifiers.pinned import aten_shim, repro

    root = root or pinned_build.build_root()
    rev = pinned_build.revision(BASE)
    dense = pinned_build.build(BASE, jobs=jobs, log=log, root=root)  # the unit objects, cached by their own keys
    dm = json.loads((dense / "manifest.json").read_text())
    files = sorted(dm["object_keys"])
    key = pinned_build._key(NAME, dm["key"], harness_digest())
    out = root / NAME / key
    if (out / "manifest.json").exists():
        log(f"{NAME}: cached build {key}")
        pinned_build._point_current(root / NAME, key)
        return out
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    compile_entry(out / "harness.o", [f"-DKB_UNIT_{u.replace(':', '_')}" for u in sorted(dm["units"])])
    objects = root / "objects"
    objs = [str(objects / f"{dm['object_keys'][f]}.o") for f in files] + [str(out / "harness.o")]
    lib = out / "libkb.so"
    res = subprocess.run(["nvcc", "-shared", "-gencode", rev.gencode, "-o", str(lib), *objs, "--cudart", "shared",
                          *repro.LINK_FLAGS], capture_output=True, text=True, timeout=600, cwd=repro.stage_root(),
                         env=repro.compile_env())
    if res.returncode != 0:
        raise RuntimeError(f"link of the packed-entry library failed: {res.stderr[-2000:]}")
    harness_sha = repro.sha256_file(out / "harness.o")
    (out / "harness.o").unlink()
    manifest = {
        **{k: dm[k] for k in ("source", "pin", "source_sha", "cutlass", "units", "gencode", "flags", "compiler",
                              "ptxas", "object_keys", "reproducible")},
        "revision": NAME, "dense_build": dm["key"],
        "harness": {"file": "verifiers/pinned/harness/fa1_v109_varlen.cu", "includes": "fa1_v109.cu",
                    "sha256": harness_digest()},
        "supplied_by_kb": [f"verifiers/pinned/harness/{n}" for n in _SOURCES]
                          + [f"verifiers/pinned/aten_shim.py ({aten_shim.digest()})"],
        "pinned_sources": "unchanged, the dense build's cached unit objects",
        "object_sha256": {**{f: s for f, s in dm["object_sha256"].items() if f in files},
                          "fa1_v109_varlen.cu": harness_sha},
        "key": key, "harness_seconds": round(time.time() - t0, 1),
        "library_sha256": repro.sha256_file(lib), "library_bytes": lib.stat().st_size,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    pinned_build._point_current(root / NAME, key)
    log(f"{NAME}: built {key} ({manifest['harness_seconds']} s for the entry and the link)")
    return out


_LOADED: dict[str, pinned_build.Loaded] = {}


def load() -> pinned_build.Loaded:
    """Load the current packed-entry build (made earlier, possibly on another machine)."""
    if NAME in _LOADED:
        return _LOADED[NAME]
    folder = pinned_build.build_root() / NAME
    if not (folder / "current").exists():
        raise FileNotFoundError(f"no build of {NAME} under {folder}: run `python -m verifiers.pinned.varlen` "
                                "and carry .kb/build/pinned to this machine")
    path = folder / (folder / "current").read_text().strip()
    manifest = json.loads((path / "manifest.json").read_text())
    if manifest["source_sha"] != pinned_build.revision(BASE).sha:
        raise RuntimeError(f"{path}: built from {manifest['source_sha']}, not the pin {pinned_build.revision(BASE).sha}")
    if manifest["harness"]["sha256"] != harness_digest():
        raise RuntimeError(f"{path}: built with another harness than verifiers/pinned/harness/fa1_v109_varlen.cu; "
                           "rebuild")
    lib = ctypes.CDLL(str(path / "libkb.so"))
    args = ctypes.POINTER(pinned_build.KbAttnArgs)
    lib.kb_varlen_workspace.argtypes = [args, ctypes.c_int64]
    lib.kb_varlen_workspace.restype = ctypes.c_int
    lib.kb_varlen_fwd.argtypes = [args, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
    lib.kb_varlen_fwd.restype = ctypes.c_int
    lib.kb_fwd.argtypes = [args, ctypes.c_void_p]
    lib.kb_fwd.restype = ctypes.c_int
    lib.kb_workspace.argtypes = [args, ctypes.c_int]
    lib.kb_workspace.restype = ctypes.c_int
    lib.kb_last_error.restype = ctypes.c_char_p
    lib.kb_units.restype = ctypes.c_char_p
    _LOADED[NAME] = pinned_build.Loaded(lib, manifest, path)
    return _LOADED[NAME]


def provenance() -> dict[str, Any]:
    """What a GPU run records about the packed-entry build it used."""
    m = load().manifest
    return {k: m[k] for k in ("revision", "pin", "source_sha", "cutlass", "gencode", "flags", "compiler", "harness",
                              "supplied_by_kb", "dense_build", "key", "library_sha256")}


def main(argv: list[str] | None = None) -> int:
    """Command line: build the packed-entry library (and the dense build's unit objects first when missing)."""
    return pinned_build.library_main(argv, "python -m verifiers.pinned.varlen", __doc__, NAME, build, check_reproducible)


def check_reproducible(jobs: int = 2) -> dict[str, Any]:
    """Rebuild the recorded packed-entry build (and its dense build's objects) in a new folder; compare bytes."""
    import shutil
    import tempfile

    folder = pinned_build.build_root() / NAME
    if not (folder / "current").exists():
        raise FileNotFoundError(f"no recorded build of {NAME} under {folder}: run `python -m verifiers.pinned.varlen`")
    first = folder / (folder / "current").read_text().strip()
    second = Path(tempfile.mkdtemp(prefix="kb-repro-varlen-"))
    out = build(jobs, log=lambda m: print(m, file=sys.stderr), root=second / "pinned")
    report = pinned_build.compare_builds(first, out, [str(HERE.parents[1]), str(pinned_build.build_root().parent),
                                                      str(second)])
    if report["reproduced"] and not report["build_paths_in_library"]:
        shutil.rmtree(second, ignore_errors=True)
        report["rebuilt"] = "(removed)"
    return report


if __name__ == "__main__":
    raise SystemExit(main())
