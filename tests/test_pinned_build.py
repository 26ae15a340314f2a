"""kb's builds of the pinned revisions and its GPU probes: what can be checked without a GPU.

The builds themselves run on the GPU machine (tests/test_gpu_negative_controls.py there); here: the
ptxas report is read right, build keys move with what was compiled, the checks are planned for sm_90
only, harness edits stale the GPU verifiers, the probe library builds, the mma layout tables say what
the claims say (and the negative-control perturbations do not), and a benchmark whose spread straddles
its band is inconclusive.
"""

from __future__ import annotations

import shutil
import subprocess
import types
from pathlib import Path

import pytest

from kb.registry import Context, Outcome
from kb.verify.registry import requirements_for
from verifiers.gpu import pinned as gpu_pinned
from verifiers.gpu import probe as gpu_probe
from verifiers.gpu.verdict import judge_spread
from verifiers.pinned import build as pinned_build

PTXAS = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z16flash_fwd_kernelI5TraitsEv' for 'sm_90'
ptxas info    : Function properties for _Z16flash_fwd_kernelI5TraitsEv
    8 bytes stack frame, 12 bytes spill stores, 16 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 41600 bytes smem, 380 bytes cmem[0]
ptxas info    : Compiling entry function '_Z5otherv' for 'sm_90'
ptxas info    : Function properties for _Z5otherv
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 26 registers, used 0 barriers, 380 bytes cmem[0]
"""


def test_ptxas_report_is_read_per_kernel() -> None:
    got = pinned_build.parse_ptxas(PTXAS)
    assert got["_Z16flash_fwd_kernelI5TraitsEv"] == {"arch": "sm_90", "registers": 255, "static_smem": 41600,
                                                      "stack": 8, "spill_stores": 12, "spill_loads": 16}
    assert got["_Z5otherv"]["registers"] == 26 and "static_smem" not in got["_Z5otherv"]


def test_object_keys_move_with_flags_compiler_and_commit() -> None:
    rev = pinned_build.revision("fa2-v2.0.0")
    files = ["flash_fwd_hdim128_bf16_sm80.cu"]
    base = pinned_build.object_keys(rev, files, "nvcc 13.0", "shim1", "c4f6b8c6")
    assert base == pinned_build.object_keys(rev, files, "nvcc 13.0", "shim1", "c4f6b8c6")
    other_flags = types.SimpleNamespace(**{**rev.__dict__, "flags": (*rev.flags, "-G")})
    for changed in (pinned_build.object_keys(rev, files, "nvcc 12.4", "shim1", "c4f6b8c6"),
                    pinned_build.object_keys(rev, files, "nvcc 13.0", "shim2", "c4f6b8c6"),
                    pinned_build.object_keys(rev, files, "nvcc 13.0", "shim1", "319a389f"),
                    pinned_build.object_keys(other_flags, files, "nvcc 13.0", "shim1", "c4f6b8c6")):
        assert changed != base
    with pytest.raises(KeyError, match="unknown pinned build"):
        pinned_build.revision("fa2-v9")


def test_pinned_checks_are_planned_for_sm90_only() -> None:
    from kb.verify.registry import load_verifiers

    reg = load_verifiers(Path(__file__).resolve().parents[1] / "verifiers")
    spec = reg["gpu.profile"]
    req = requirements_for(spec, {"impl": "fa2-v2.0.0"})
    assert (req.min_cc, req.max_cc) == (90, 90)
    assert requirements_for(spec, {"impl": "sdpa-flash"}).max_cc is None
    assert requirements_for(spec, {"impl": "fa2-v2.0.0", "max_cc": 100}).max_cc == 100  # a check may widen it
    from verifiers.gpu.params import PINNED_IMPLS
    from verifiers.pinned import larged, variants

    # Every pinned impl has a build, and no build is unused: the large-d pin's build is driven by gpu.larged-*
    # (its own entry, kb_larged_fwd, takes head_dim_v), kb's variants by gpu.variant-benchmark and
    # gpu.mainloop-trace, not as attention impls.
    assert set(PINNED_IMPLS) == set(pinned_build.REVISIONS) - {larged.NAME} - set(variants.VARIANTS)


def test_missing_build_is_a_skip_reason_not_a_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KB_BUILD_CACHE", str(tmp_path))
    pinned_build._LOADED.clear()
    why = gpu_pinned.available("fa1-v1.0.9")
    assert why and "python -m verifiers.pinned.build --rev fa1-v1.0.9" in why


def test_harness_files_are_part_of_the_gpu_verifiers_code_hash() -> None:
    from kb.verify.codehash import CodeHasher
    from verifiers.gpu import attention

    parts = CodeHasher("verifiers").parts(attention.__name__, "kernel_run")
    assert {"file:kb_attn_abi.h", "file:fa2_v200.cu", "file:fa3_hopper.cu"} <= set(parts)


def test_mma_layout_tables_give_the_claimed_lane0_coordinates() -> None:
    a, b, c = gpu_probe._layout()
    assert a[0] == [(0, 0), (0, 1), (8, 0), (8, 1), (0, 8), (0, 9), (8, 8), (8, 9)]
    assert b[0] == [(0, 0), (1, 0), (8, 0), (9, 0)]
    assert c[0] == [(0, 0), (0, 1), (8, 0), (8, 1)]
    # Every element of each matrix is owned exactly once across the warp.
    assert sorted(x for lane in a for x in lane) == [(r, col) for r in range(16) for col in range(16)]
    assert sorted(x for lane in b for x in lane) == [(k, n) for k in range(16) for n in range(8)]
    assert sorted(x for lane in c for x in lane) == [(r, col) for r in range(16) for col in range(8)]
    # The negative controls really are different layouts.
    assert gpu_probe._layout("swap-a-rows")[0][0] != a[0]
    assert gpu_probe._layout("swap-cd-cols")[2][0] != c[0]


def _ctx(expect: dict) -> Context:
    return Context(claim={}, expect=expect, sources={}, clones={}, hardware={})


@pytest.mark.parametrize(("ends", "verdict"), [((621.0, 639.0), "supports"), ((600.0, 650.0), "inconclusive"),
                                               ((700.0, 710.0), "refutes"), ((630.0, 700.0), "inconclusive")])
def test_benchmark_verdict_that_flips_within_the_spread_is_inconclusive(ends: tuple, verdict: str) -> None:
    median = sum(ends) / 2
    out = Outcome(measurements={"tflops": (median, "TFLOP/s")})
    got = judge_spread(out, {"tflops": ends}, _ctx({"tflops": {"between": [620, 640]}}))
    assert got.verdict == verdict, got.reason


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc (the CUDA toolkit)")
def test_probe_library_builds_and_exports_its_entry_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KB_BUILD_CACHE", str(tmp_path))
    out = pinned_build.build_probes(log=lambda *_: None)
    syms = subprocess.run(["nm", "-D", "--defined-only", str(out / "libkb.so")], capture_output=True, text=True).stdout
    for fn in ("kb_probe_smid", "kb_probe_smid_occupancy", "kb_probe_mma", "kb_probe_atomic"):
        assert f" T {fn}" in syms
    again = pinned_build.build_probes(log=lambda *_: None)
    assert again == out  # cached by (source, flags, compiler)


def test_ctypes_args_match_the_c_abi(tmp_path: Path) -> None:
    """KbAttnArgs in Python has the C struct's size and field offsets (a drift would hand the kernels garbage)."""
    import ctypes

    gxx = shutil.which("g++")
    cuda_inc = Path("/usr/local/cuda/include")
    if gxx is None or not (cuda_inc / "cuda_runtime_api.h").exists():
        pytest.skip("needs g++ and the CUDA headers")
    fields = [name for name, _ in pinned_build.KbAttnArgs._fields_]
    src = tmp_path / "abi.cpp"
    src.write_text('#include <cstddef>\n#include <cstdio>\n#include "kb_attn_abi.h"\nint main() {\n'
                   '  std::printf("size %zu\\n", sizeof(KbAttnArgs));\n'
                   + "".join(f'  std::printf("{f} %zu\\n", offsetof(KbAttnArgs, {f}));\n' for f in fields) + "}\n")
    exe = tmp_path / "abi"
    harness = Path(pinned_build.__file__).parent / "harness"
    subprocess.run([gxx, "-std=c++17", f"-I{harness}", f"-I{cuda_inc}", str(src), "-o", str(exe)], check=True)
    got = dict(line.split() for line in subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines())
    assert int(got["size"]) == ctypes.sizeof(pinned_build.KbAttnArgs)
    for f in fields:
        assert int(got[f]) == getattr(pinned_build.KbAttnArgs, f).offset, f
    assert "is_e4m3" in fields  # the FP8 switch of the FA3 harness


def test_fp8_runs_only_on_the_fa3_pin() -> None:
    """dtype float8_e4m3fn is the FA3 pin's FP8 forward: other implementations refuse it by name, and the build has its units."""
    from verifiers.gpu.params import AttnParams

    p = AttnParams(impl="fa3-2024-08", dtype="float8_e4m3fn", head_dim=256)
    assert (p.min_cc, p.max_cc) == (90, 90)
    for impl in ("sdpa-flash", "fa2-v2.0.0", "fa4"):
        with pytest.raises(ValueError, match="float8_e4m3fn runs only on impl fa3-2024-08"):
            AttnParams(impl=impl, dtype="float8_e4m3fn")
    rev = pinned_build.revision("fa3-2024-08")
    assert {"fwd:e4m3:128", "fwd:e4m3:256"} <= set(rev.default_units)
    assert rev.units["fwd:e4m3:256"] == "flash_fwd_hdim256_e4m3_sm90.cu"


def test_a_unit_subset_is_refused_where_the_harness_links_every_unit() -> None:
    from verifiers.pinned import build as B

    for rev in ("fa1-v1.0.9", "fa3-2024-08"):
        with pytest.raises(ValueError, match="links every default unit"):
            B.build(rev, units=["fwd:bf16:128"], log=lambda *_: None, root=Path("/nonexistent"))
