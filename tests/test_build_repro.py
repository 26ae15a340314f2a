"""Reproducible pinned builds (verifiers/pinned/repro.py): the recorded library hash follows from the key.

A toy revision stands in for a pin: a git repository with a unit and a header under `csrc/toy/src`
and a cutlass gitlink to a second repository, built by the real `build()` with FA1's flags
(`-lineinfo`, asserts on), kb's ATen stand-ins, FA3's link-time libcuda stand-in and a harness-like
unit of kb's own that includes `kb_attn_abi.h`. Every nvcc call is real. Two checkouts at different
paths build into two caches from two working directories; the libraries must be byte-identical and
hold neither path. Controls: a changed flag or a changed pinned source changes the hash, the naive
compile (what build.py did before) differs between the two checkouts, and a tampered record is
reported as not reproduced.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from verifiers.pinned import build as pinned_build
from verifiers.pinned import repro

needs_nvcc = pytest.mark.skipif(not shutil.which("nvcc") or not shutil.which("git"), reason="needs nvcc and git")

TOY_H = """#pragma once
#include <cassert>
#include <cuda_fp16.h>
#include "toy_cutlass.h"
#ifndef KB_TOY_SCALE
#define KB_TOY_SCALE 2
#endif
static __device__ __noinline__ float toy_twice(float x) { return 2.f * x; }  // internal linkage: a module-id name
template <int D> __global__ void toy_fwd_kernel(const __half* q, __half* o, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  assert(n >= 0);  // a device assert: __FILE__ of the pinned tree in the cubin
  if (i < n) o[i] = __float2half(toy_twice(toy_cutlass::scale<D>(__half2float(q[i]))) * KB_TOY_SCALE);
}
template <int D> void run_toy_fwd_(const void* q, void* o, int n, cudaStream_t stream);
"""

# Like every FA3 kernel unit, only an explicit instantiation: no external non-template function for
# nvcc's module id to end in, so without -frandom-seed it ends in a hash and the pid.
TOY_UNIT = """#include <ATen/cuda/CUDAContext.h>  // kb's stand-in, as the FA1/FA2 units include it
#include "toy.h"
template <int D> void run_toy_fwd_(const void* q, void* o, int n, cudaStream_t stream) {
  assert(n < (1 << 30));  // a host assert: __FILE__ in the host object
  toy_fwd_kernel<D><<<(n + 127) / 128, 128, 0, stream>>>(static_cast<const __half*>(q), static_cast<__half*>(o), n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
template void run_toy_fwd_<64>(const void*, void*, int, cudaStream_t);
"""

TOY_CUTLASS = """#pragma once
#include <cassert>
namespace toy_cutlass {
template <int D> __host__ __device__ inline float scale(float x) { assert(D > 0); return x / D; }
}  // namespace toy_cutlass
"""

TOY_HARNESS = """// A harness-like unit of kb's own: the ABI header, the pinned header, one entry point.
#include <cstdio>
#include "toy.h"
#include "kb_attn_abi.h"
namespace at { namespace cuda {
cudaDeviceProp* getCurrentDeviceProperties() { static cudaDeviceProp p; return &p; }
}}  // namespace at::cuda
extern "C" {
int kb_fwd(KbAttnArgs* a, cudaStream_t s) {
  if (!a) { std::fprintf(stderr, "%s: no arguments\\n", __FILE__); return 1; }
  run_toy_fwd_<64>(a->q, a->o, a->batch, s);
  return 0;
}
const char* kb_units() {
#ifdef KB_UNIT_fwd_fp16_64
  return "fwd:fp16:64";
#else
  return "";
#endif
}
}
"""


def _git(cwd: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "kb", "GIT_AUTHOR_EMAIL": "kb@example.org", "GIT_COMMITTER_NAME": "kb",
           "GIT_COMMITTER_EMAIL": "kb@example.org", "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z", "PATH": "/usr/bin:/bin:/usr/local/bin"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def _commit(repo: Path, files: dict[str, str], gitlinks: dict[str, str] | None = None) -> str:
    repo.mkdir(parents=True, exist_ok=True)
    if not (repo / ".git").exists():
        _git(repo, "init", "-q")
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
        _git(repo, "add", name)
    for path, sha in (gitlinks or {}).items():
        _git(repo, "update-index", "--add", "--cacheinfo", f"160000,{sha},{path}")
    _git(repo, "commit", "-q", "-m", "toy")
    return _git(repo, "rev-parse", "HEAD")


def _checkout(where: Path) -> Path:
    """A kb checkout's harness folder at `where`: the real ABI header and the toy harness."""
    here = where / "verifiers" / "pinned"
    (here / "harness").mkdir(parents=True)
    shutil.copy(Path(pinned_build.__file__).parent / "harness" / "kb_attn_abi.h", here / "harness")
    (here / "harness" / "toy_harness.cu").write_text(TOY_HARNESS)
    return here


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A toy pin (two git repositories), registered as revision `toy`; the stage folder private to the test."""
    cut_sha = _commit(tmp_path / "repos" / "cutlass", {"include/toy_cutlass.h": TOY_CUTLASS})
    fa = tmp_path / "repos" / "flash-attention"
    sha = _commit(fa, {"csrc/toy/src/toy.h": TOY_H, "csrc/toy/src/toy_fwd.cu": TOY_UNIT}, {"csrc/cutlass": cut_sha})
    rev = pinned_build.Revision(
        name="toy", pin="toy", sha=sha, src_dir="csrc/toy/src", cutlass_path="csrc/cutlass", cutlass_dirs=("include",),
        tree_dirs=("csrc/toy",), units={"fwd:fp16:64": "toy_fwd.cu"}, default_units=("fwd:fp16:64",),
        gencode="arch=compute_90,code=sm_90", flags=pinned_build.REVISIONS["fa1-v1.0.9"].flags,  # -lineinfo, asserts on
        harness="toy_harness.cu", aten_shim=True,
        driver_symbols=("cuToyDriverCall",))  # the link-time libcuda stand-in, as FA3's: nvlink records its -L folder
    monkeypatch.setitem(pinned_build.REVISIONS, "toy", rev)
    monkeypatch.setattr(pinned_build, "pinned_clones", lambda: (str(fa), str(tmp_path / "repos" / "cutlass")))
    monkeypatch.setenv(repro.STAGE_ENV, str(tmp_path / "stage"))
    return {"rev": rev, "fa": fa, "tmp": tmp_path}


def _build_in(monkeypatch: pytest.MonkeyPatch, checkout: Path, cache: Path, **kw: Any) -> Path:
    """Build `toy` as a checkout at `checkout` would, into the cache `cache`, from inside the checkout."""
    here = checkout / "verifiers" / "pinned"
    if not here.exists():
        _checkout(checkout)
    monkeypatch.setattr(pinned_build, "HERE", here)
    monkeypatch.setenv("KB_BUILD_CACHE", str(cache))
    monkeypatch.chdir(checkout)
    return pinned_build.build("toy", log=lambda *_: None, **kw)


@needs_nvcc
def test_two_directories_give_the_same_library_and_changes_do_not(toy: dict[str, Any],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    tmp = toy["tmp"]
    a = _build_in(monkeypatch, tmp / "a", tmp / "a" / ".kb" / "build")
    man_a = json.loads((a / "manifest.json").read_text())
    lib_a = (a / "libkb.so").read_bytes()
    assert man_a["library_sha256"] == repro.sha256_file(a / "libkb.so")
    assert b" T kb_fwd" in subprocess.run(["nm", "-D", "--defined-only", str(a / "libkb.so")], capture_output=True).stdout

    # A second checkout at another path, its own cache, its own working directory: --check-reproducible's rebuild.
    checkout_b = tmp / "elsewhere" / "much" / "deeper" / "b"
    _checkout(checkout_b)
    monkeypatch.setattr(pinned_build, "HERE", checkout_b / "verifiers" / "pinned")
    monkeypatch.chdir(checkout_b)
    report = pinned_build.check_reproducible("toy", into=tmp / "cache-b", log=lambda *_: None)
    assert report["reproduced"], report
    assert report["recorded_library_sha256"] == report["rebuilt_library_sha256"] == man_a["library_sha256"]
    assert report["objects_differing"] == [] and report["build_paths_in_library"] == []
    b = Path(report["rebuilt"])
    assert b != a and (b / "libkb.so").read_bytes() == lib_a
    # Neither checkout, cache nor clone is named in the bytes (the stage folder is, by design).
    for path in (tmp / "a", checkout_b, tmp / "cache-b", toy["fa"]):
        assert str(path).encode() not in lib_a, path

    # Negative controls: a changed flag and a changed pinned source each give another library.
    flagged = pinned_build.Revision(**{**toy["rev"].__dict__, "flags": (*toy["rev"].flags, "-DKB_TOY_SCALE=3")})
    monkeypatch.setitem(pinned_build.REVISIONS, "toy", flagged)
    c = _build_in(monkeypatch, tmp / "a", tmp / "cache-c")
    assert (c / "libkb.so").read_bytes() != lib_a
    assert json.loads((c / "manifest.json").read_text())["key"] != man_a["key"]

    sha = _commit(toy["fa"], {"csrc/toy/src/toy.h": TOY_H.replace("#define KB_TOY_SCALE 2", "#define KB_TOY_SCALE 5")})
    monkeypatch.setitem(pinned_build.REVISIONS, "toy", pinned_build.Revision(**{**toy["rev"].__dict__, "sha": sha}))
    d = _build_in(monkeypatch, tmp / "a", tmp / "cache-d")
    assert (d / "libkb.so").read_bytes() not in (lib_a, (c / "libkb.so").read_bytes())


@needs_nvcc
def test_the_naive_compile_is_not_reproducible(toy: dict[str, Any]) -> None:
    """What build.py did before: nvcc -c from the checkout into a pid-named object. The bytes differ."""
    tmp = toy["tmp"]
    objs = []
    for where in (tmp / "a", tmp / "b" / "deeper"):
        here = _checkout(where)
        (here / "harness" / "toy.h").write_text(TOY_H)
        (here / "harness" / "toy_cutlass.h").write_text(TOY_CUTLASS)
        obj = where / "harness.1234.tmp.o"
        subprocess.run(["nvcc", "-gencode", "arch=compute_90,code=sm_90", *toy["rev"].flags, "-Xcompiler", "-fPIC",
                        f"-I{here / 'harness'}", "-c", str(here / "harness" / "toy_harness.cu"), "-o", str(obj)],
                       check=True, capture_output=True, timeout=600)
        objs.append(obj)
    assert objs[0].read_bytes() != objs[1].read_bytes()
    assert str(tmp / "a").encode() in objs[0].read_bytes()  # the checkout's path is in the object
    assert repro.differing_sections(objs[0], objs[1])  # and the sections say where


def test_a_record_that_does_not_match_is_reported(tmp_path: Path) -> None:
    """compare_builds on two folders: equal ones reproduce; a flipped byte or another key does not."""
    lib = _tiny_elf(tmp_path / "lib.so")
    first, second = tmp_path / "first", tmp_path / "second"
    for d in (first, second):
        d.mkdir()
        shutil.copy(lib, d / "libkb.so")
        man = {"revision": "toy", "key": "k1", "library_sha256": repro.sha256_file(lib), "object_sha256": {"u.cu": "x"},
               "reproducible": {"stage": "/tmp/kb-pinned-src"}}
        (d / "manifest.json").write_text(json.dumps(man))
    ok = pinned_build.compare_builds(first, second, [str(tmp_path)])
    assert ok["reproduced"] and ok["library_sections_differing"] == [] and "why" not in ok

    data = bytearray((second / "libkb.so").read_bytes())
    text = _text_section(second / "libkb.so")
    data[text] ^= 0xFF
    (second / "libkb.so").write_bytes(bytes(data))
    man = json.loads((second / "manifest.json").read_text())
    man.update(library_sha256=repro.sha256_file(second / "libkb.so"), object_sha256={"u.cu": "y"})
    (second / "manifest.json").write_text(json.dumps(man))
    bad = pinned_build.compare_builds(first, second, [str(tmp_path)])
    assert not bad["reproduced"] and bad["why"].startswith("same key, different bytes")
    assert ".text" in bad["library_sections_differing"] and bad["objects_differing"] == ["u.cu"]

    man["key"] = "k2"
    (second / "manifest.json").write_text(json.dumps(man))
    other = pinned_build.compare_builds(first, second, [str(tmp_path)])
    assert not other["reproduced"] and "inputs differ" in other["why"]


def test_a_path_in_the_bytes_is_found(tmp_path: Path) -> None:
    lib = _tiny_elf(tmp_path / "lib.so", f'const char* where = "{tmp_path}/src/x.c";')
    assert repro.paths_found(lib, [str(tmp_path), "/nowhere/else"]) == [str(tmp_path)]


def test_staged_files_are_content_addressed_with_a_fixed_mtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(repro.STAGE_ENV, str(tmp_path / "stage"))
    one = repro.stage_files("harness", {"a.h": b"x", "sub/b.cu": b"y"})
    assert one == repro.stage_files("harness", {"sub/b.cu": b"y", "a.h": b"x"})  # same bytes, same folder
    assert one != repro.stage_files("harness", {"a.h": b"x", "sub/b.cu": b"z"})
    assert {int((one / n).stat().st_mtime) for n in ("a.h", "sub/b.cu")} == {repro.EPOCH}
    with pytest.raises(ValueError, match="leaves its folder"):
        repro.stage_files("harness", {"../evil.h": b""})
    built = repro.stage_files("tool", {"in.txt": b"abc"}, run=["cp", "in.txt", "out.txt"])
    assert (built / "out.txt").read_bytes() == b"abc" and built.name != one.name
    with pytest.raises(RuntimeError, match="staging tool"):
        repro.stage_files("tool", {"in.txt": b"abc"}, run=["false"])
    monkeypatch.setenv(repro.STAGE_ENV, "relative/stage")
    with pytest.raises(ValueError, match="absolute path"):
        repro.stage_root()


def _tiny_elf(out: Path, code: str = "int kb_answer(void) { return 42; }") -> Path:
    gcc = shutil.which("gcc")
    if not gcc:
        pytest.skip("needs gcc")
    src = out.with_suffix(".c")
    src.write_text(code + "\n")
    subprocess.run([gcc, "-shared", "-fPIC", "-o", str(out), str(src)], check=True, capture_output=True, timeout=120)
    return out


def _text_section(path: Path) -> int:
    """File offset of the first byte of .text."""
    out = subprocess.run(["readelf", "-S", "-W", str(path)], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        parts = line.replace("[ ", "[").split()
        if len(parts) > 5 and parts[1] == ".text":
            return int(parts[4], 16)
    raise AssertionError("no .text section")
