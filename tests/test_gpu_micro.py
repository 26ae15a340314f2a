"""kb's CUDA microbenchmarks and tool probes (verifiers/gpu/micro.py, workspace.py, verifiers/pinned/trajectory.py).

On this CPU machine: the compile half (nvcc builds each CUDA source; the SASS holds the instructions each
figure is counted in), the trajectory verifier and its negative control, the pure helpers, and the plan
(every GPU check of the fixture is skipped for want of a GPU). On a GPU: every false expectation refutes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kb.hw import find_tool
from kb.verify.hw import gpus

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "gpu-micro-negative" / "claims"
HAVE_NVCC = find_tool("nvcc") is not None and find_tool("cuobjdump") is not None
GPU_NEGATIVES = {"neg.gpu.micro-mufu", "neg.gpu.micro-wgmma", "neg.gpu.micro-smem", "neg.gpu.micro-occupancy",
                 "neg.gpu.sanitizer", "neg.gpu.image-select", "neg.gpu.det-workspace"}


def _project(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    shutil.copytree(ROOT / "sources", proj / "sources")
    shutil.copytree(FIXTURE, proj / "claims")
    shutil.copytree(ROOT / "verifiers", proj / "verifiers")
    return proj


def _kb(proj: Path, *args: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KB_ROOT": str(proj), **(extra_env or {}),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "kb", *args], capture_output=True, text=True, env=env, timeout=900)


def test_follow_chains_files_and_catches_a_break() -> None:
    from verifiers.pinned.trajectory import dryrun_stages, follow

    plan = "\n".join([
        '#$ _HERE_=/usr/local/cuda/bin',
        '#$ "$CICC_PATH/cicc" --c++17 -arch compute_80 -o "/t/a.compute_80.ptx"',
        '#$ ptxas -arch=sm_80 -m64 "/t/a.compute_80.ptx" -o "/t/a.compute_80.cubin"',
        '#$ "$CICC_PATH/cicc" --c++17 -arch compute_86 -o "/t/a.compute_86.ptx"',
        '#$ fatbinary -64 "--image3=kind=elf,sm=80,file=/t/a.compute_80.cubin" '
        '"--image3=kind=ptx,sm=86,file=/t/a.compute_86.ptx"',
    ])
    facts = follow(dryrun_stages(plan))
    assert facts["every_file_chained"] is True
    assert facts["ptxas_arches"] == ["sm_80"]
    assert facts["fatbinary_images"] == ["elf:sm_80", "ptx:compute_86"]
    # ptxas reading a PTX file no cicc wrote breaks the chain
    broken = plan.replace('ptxas -arch=sm_80 -m64 "/t/a.compute_80.ptx"', 'ptxas -arch=sm_80 -m64 "/t/other.ptx"')
    assert follow(dryrun_stages(broken))["every_file_chained"] is False
    # a fatbinary image from a file no stage wrote, too
    assert follow(dryrun_stages(plan.replace("file=/t/a.compute_80.cubin", "file=/t/b.cubin")))["every_file_chained"] is False


def test_per_sm_rates_use_each_sms_own_window() -> None:
    from verifiers.gpu.micro import per_sm_rates

    # SM 0 ran two CTAs over cycles 100..1100 (1000 ops each): 2 ops/cycle; SM 1 one CTA over 500 cycles.
    rec = [[0, 100, 1000, 500], [0, 200, 1100, 450], [1, 5_000_000, 5_000_500, 250]]
    rates, mhz = per_sm_rates(rec, 1000)
    assert sorted(rates) == [2.0, 2.0]
    assert mhz[0] == pytest.approx(1800.0)  # 900 cycles over 500 ns
    with pytest.raises(RuntimeError):
        per_sm_rates([[0, 10, 10, 1]], 1.0)


def test_sanitizer_error_counts() -> None:
    from verifiers.gpu.micro import sanitizer_errors

    assert sanitizer_errors("========= ERROR SUMMARY: 3 errors") == 3
    assert sanitizer_errors("========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)") == 1
    assert sanitizer_errors("========= ERROR SUMMARY: 0 errors") == 0
    assert sanitizer_errors("no summary") is None


@pytest.mark.skipif(not HAVE_NVCC, reason="needs nvcc and cuobjdump")
def test_micro_sources_compile_with_the_instructions_they_count(tmp_path: Path) -> None:
    from verifiers.gpu.micro import PROBES
    from verifiers.pinned.trajectory import build, sass_counts

    so, report = build("micro_tput.cu", tmp_path / "libmicro.so", ("arch=compute_90a,code=sm_90a",), kind="so")
    counts = sass_counts(so)
    for spec in PROBES.values():
        kernel = next(v for k, v in counts.items() if spec["kernel"] in k)
        assert sum(n for op, n in kernel.items() if op.startswith(spec["sass"])) >= spec["per_iter"], spec["kernel"]
    # the capped occupancy build spills (local stores), the uncapped one does not
    capped = next(v for k, v in counts.items() if "kb_regheavy_kernelILi8E" in k)
    uncapped = next(v for k, v in counts.items() if "kb_regheavy_kernelILi1E" in k)
    assert sum(n for op, n in capped.items() if op.startswith("STL")) > 0
    assert sum(n for op, n in uncapped.items() if op.startswith("STL")) == 0
    assert "wgmma" not in report.lower() or "serializ" not in report.lower(), report  # no serialised WGMMA
    build("sanitizer_bugs.cu", tmp_path / "bugs", ("arch=compute_90,code=sm_90",), extra=("-lineinfo",))


@pytest.mark.skipif(not HAVE_NVCC, reason="needs nvcc and cuobjdump")
def test_trajectory_check_and_its_negative_control(tmp_path: Path) -> None:
    proj = _project(tmp_path)
    res = _kb(proj, "verify", "--claim", "neg.toolchain.nvcc-trajectory", "--json")
    summary = json.loads(res.stdout)
    assert summary["refuted"] == ["neg.toolchain.nvcc-trajectory"], (summary, res.stderr[-2000:])


def test_gpu_checks_skip_with_reason_without_gpu(tmp_path: Path) -> None:
    proj = _project(tmp_path)
    res = _kb(proj, "verify", "--plan", "--json", extra_env={"KB_FAKE_NO_GPU": "1"})
    rows = json.loads(res.stdout)
    gpu_rows = [r for r in rows if r["check"].split("#")[0] in GPU_NEGATIVES]
    assert len(gpu_rows) == len(GPU_NEGATIVES), (rows, res.stderr[-2000:])
    assert all(r["action"] == "skip" and "this machine has no GPU" in r["why"] for r in gpu_rows), gpu_rows


@pytest.mark.skipif(not gpus(), reason="needs a CUDA GPU (nvidia-smi reports none)")
def test_false_expectations_refute_on_gpu(tmp_path: Path) -> None:
    proj = _project(tmp_path)
    res = _kb(proj, "verify", "--json")
    summary = json.loads(res.stdout)
    assert set(summary["refuted"]) >= GPU_NEGATIVES, (summary["refuted"], summary.get("skips"), res.stderr[-3000:])
    assert summary["errors"] == []
