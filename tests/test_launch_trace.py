"""code.launch-trace: host code traced against kb's virtual-device CUDA runtime (verifiers/pinned/launch.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from kb.records.models import Comparison
from kb.verify.expect import judge
from verifiers.pinned import launch

ROOT = Path(__file__).resolve().parents[1]
HW = {
    "A100": {"compute_capability": 80, "sm_count": 108, "smem_per_block_max_bytes": 166912, "smem_per_sm_bytes": 167936,
             "regs_per_sm": 65536, "max_threads_per_sm": 2048, "max_blocks_per_sm": 32, "l2_bytes": 41943040},
    # A device with 99 KiB of opt-in shared memory per block (as an sm_86 part has): the other branch.
    "SMALL": {"compute_capability": 86, "sm_count": 84, "smem_per_block_max_bytes": 101376, "smem_per_sm_bytes": 102400,
              "regs_per_sm": 65536, "max_threads_per_sm": 1536, "max_blocks_per_sm": 16},
}

pytestmark = pytest.mark.skipif(not shutil.which("nvcc") or not shutil.which("g++"), reason="needs nvcc and g++")


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """kb's toy library with the attention ABI, built with the real nvcc (--cudart shared, as the pinned builds)."""
    out = tmp_path_factory.mktemp("toy")
    lib = out / "libtoy.so"
    subprocess.run(["nvcc", "-shared", "-Xcompiler", "-fPIC", "--cudart", "shared", "-gencode", "arch=compute_90,code=sm_90",
                    f"-I{ROOT / 'verifiers/pinned/harness'}", "-o", str(lib), str(ROOT / "tests/fixtures/vdev/toy_abi.cu")],
                   check=True, capture_output=True, timeout=300)
    return lib


def _trace(lib: Path, device: str, tmp: Path, **kw: object) -> dict:
    p = launch.LaunchParams(impl="fa2-v2.0.0", device=device, **kw)  # type: ignore[arg-type]
    got = launch.trace_library(lib, "fwd", launch._abi_args(p), launch.vdev_spec(device, HW), tmp)
    return {k: v for k, (v, _unit) in launch.measure(p, got["events"], got["answer"]).items()}


def test_the_host_code_picks_its_instance_from_the_virtual_device(toy: Path, tmp_path: Path) -> None:
    big = _trace(toy, "A100", tmp_path, seqlen_q=1000, batch=2, heads=16)
    assert big["traits"] == "Toy_kernel_traits<128, 8, true>"
    assert (big["traits_arg0"], big["traits_arg1"], big["traits_arg2"]) == (128, 8, True)
    assert big["grid"] == [8, 2, 16] and big["block_threads"] == 256 and big["dynamic_smem"] == 147456
    assert big["max_dynamic_smem_attribute"] == 147456 and big["launches"] == 1
    small = _trace(toy, "SMALL", tmp_path, seqlen_q=1000, batch=2, heads=16)
    assert small["traits"] == "Toy_kernel_traits<64, 4, false>" and small["grid"] == [16, 2, 16]
    assert "max_dynamic_smem_attribute" not in small


def test_the_occupancy_api_answers_by_the_calculator_rules_or_as_the_claim_supposes(toy: Path, tmp_path: Path) -> None:
    p = launch.LaunchParams(impl="fa2-v2.0.0", device="A100")
    first = launch.trace_library(toy, "fwd", launch._abi_args(p), launch.vdev_spec("A100", HW), tmp_path)
    mangled = next(e["kernel"] for e in first["events"] if e["event"] == "launch")
    # Without a ptxas report the API fails rather than guess.
    assert [e["value"] for e in first["events"] if e["event"] == "occupancy"] == [-1]
    # 128 registers x 256 threads allow 2 CTAs by registers; 147456 + 1024 bytes of shared memory allow 1.
    got = launch.trace_library(toy, "fwd", launch._abi_args(p), launch.vdev_spec("A100", HW), tmp_path,
                               resources={mangled: {"registers": 128, "static_smem": 0}})
    assert launch.measure(p, got["events"], got["answer"])["occupancy_answered"][0] == 1
    # 64 registers and a small block: the register file no longer binds, shared memory still does (1).
    got = launch.trace_library(toy, "fwd", launch._abi_args(p), launch.vdev_spec("H100", {**HW, "H100": {
        **HW["A100"], "smem_per_sm_bytes": 2 * (147456 + 1024)}}), tmp_path, resources={mangled: {"registers": 64}})
    assert launch.measure(p, got["events"], got["answer"])["occupancy_answered"][0] == 2
    got = launch.trace_library(toy, "fwd", launch._abi_args(p), launch.vdev_spec("A100", HW), tmp_path, occupancy=3)
    assert launch.measure(p, got["events"], got["answer"])["occupancy_answered"][0] == 3


def test_a_claim_about_the_other_device_refutes(toy: Path, tmp_path: Path) -> None:
    # The negative control: the A100 instance, expected of a device that lacks the shared memory, refutes.
    expect = {"traits_arg0": Comparison(equals=128), "block_threads": Comparison(equals=256)}
    assert judge(_trace(toy, "A100", tmp_path), expect)[0] == "supports"
    verdict, reason = judge(_trace(toy, "SMALL", tmp_path), expect)
    assert verdict == "refutes" and "traits_arg0" in reason


def test_an_unknown_device_or_an_incomplete_sheet_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown device 'B300'"):
        launch.vdev_spec("B300", HW)
    with pytest.raises(ValueError, match="lacks sm_count"):
        launch.vdev_spec("X", {"X": {"compute_capability": 80}})


def test_template_arguments_are_split_at_the_top_level() -> None:
    name = "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::half_t, " \
           "Flash_kernel_traits<128, 128, 64, 4, cutlass::half_t> >, false, true>(Flash_fwd_params)"
    assert launch.template_args(name, "Flash_fwd_kernel_traits") == [
        "128", "128", "64", "4", "false", "false", "cutlass::half_t", "Flash_kernel_traits<128, 128, 64, 4, cutlass::half_t>"]


@pytest.mark.skipif(not (ROOT / ".kb/build/pinned/fa2-v2.0.0/current").exists(), reason="needs kb's build of fa2-v2.0.0")
def test_the_pinned_fa2_backward_dispatch_on_an_a100() -> None:
    from kb.pinned.clones import clone_paths  # noqa: F401 - the build's loader reads the corpus config
    p = launch.LaunchParams(impl="fa2-v2.0.0", device="A100", phase="bwd", batch=1, heads=32, seqlen_q=8192)
    try:
        got = launch.trace(p, HW)
    except LookupError as e:
        pytest.skip(str(e))
    m = {k: v for k, (v, _u) in launch.measure(p, got["events"], got["answer"]).items()}
    assert m["harness_rc"] == 0, m
    assert [m[f"traits_arg{i}"] for i in range(9)] == [128, 64, 128, 8, 2, 4, 2, False, False]
