"""GPU negative controls: a false expectation must come out `refutes` for every GPU verifier kind.

Runs only where a CUDA GPU is present (the H200 run); on a CPU machine it is
skipped with the reason, and the plan test below checks that the same claims
are reported as needing hardware instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kb.verify.hw import gpus

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "gpu-negative" / "claims"


def _project(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    shutil.copytree(ROOT / "sources", proj / "sources")
    shutil.copytree(FIXTURE, proj / "claims")
    shutil.copytree(ROOT / "verifiers", proj / "verifiers")
    return proj


def _kb(proj: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # The pinned builds and probes are found in the repository's build cache (python -m verifiers.pinned.build).
    env = {"KB_BUILD_CACHE": str(ROOT / ".kb" / "build"), **os.environ, "KB_ROOT": str(proj),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "kb", *args], capture_output=True, text=True, env=env, timeout=900)


@pytest.mark.skipif(not gpus(), reason="needs a CUDA GPU (nvidia-smi reports none)")
def test_false_expectations_refute_on_gpu(tmp_path: Path) -> None:
    proj = _project(tmp_path)
    res = _kb(proj, "verify", "--json")
    summary = json.loads(res.stdout)
    kinds = {"neg.gpu.bitwise-repeat", "neg.gpu.profile", "neg.gpu.kernel-run", "neg.gpu.benchmark",
             "neg.gpu.pinned-profile", "neg.gpu.probe-mma", "neg.gpu.probe-smid",
             # gpu.ncu-metrics, one per kind of expectation: bytes written over O, DRAM over L2 reads,
             # L2 reads over K/V, an occupancy limit, and the global-load delta between two configurations
             "neg.gpu.ncu-dram-write", "neg.gpu.ncu-dram-over-l2", "neg.gpu.ncu-l2-over-kv",
             "neg.gpu.ncu-occupancy", "neg.gpu.ncu-load-delta",
             # gpu.head-independence on the FA1 pin; the FP8 forward's error guard in gpu.benchmark
             "neg.gpu.head-independence", "neg.gpu.fp8-error",
             # gpu.ncu-counters (sectors per request), gpu.atomic-contention (a layout against itself) and
             # gpu.carveout-residency (the continuous model at every sweep point)
             "neg.gpu.ncu-counters", "neg.gpu.atomic-contention", "neg.gpu.carveout-residency",
             # gpu.ncu-counters' per-SM spread and part shares: an even grid, and two small launches
             "neg.gpu.ncu-counters-spread",
             # gpu.scratch-repeat: a workspace that repeats, expected to give two results
             "neg.gpu.scratch-repeat",
             # gpu.prefix-plans: two sequence lengths that launch different plans, expected to launch one
             "neg.gpu.prefix-plans",
             # gpu.varlen-rows (single runs on rotated inputs) and gpu.varlen-balance (an even packed batch)
             "neg.gpu.varlen-rows", "neg.gpu.varlen-balance",
             # gpu.larged-fwd (a reference without one K/V tile) and gpu.larged-profile (P kept out of SMEM)
             "neg.gpu.larged-fwd", "neg.gpu.larged-profile",
             # gpu.device-props: a memory bound no lent card meets; gpu.variant-benchmark: a 1.5x pingpong gain
             "neg.gpu.device-props", "neg.gpu.variant-benchmark",
             # gpu.mainloop-trace: alternation at most one half, on the traced pin (the barrier enforces it),
             # and a mutated structure: full alternation expected of the traced pin without the barrier
             "neg.gpu.mainloop-trace", "neg.gpu.mainloop-trace-nosched",
             # gpu.tile-owners: a Q tile finished by two work items
             "neg.gpu.tile-owners"}
    # gpu.toolkit-bits needs builds by a second toolkit, which a machine names in $KB_ALT_BUILD_CACHE
    kinds |= {"neg.gpu.toolkit-bits"} if os.environ.get("KB_ALT_BUILD_CACHE") else set()
    assert set(summary["refuted"]) == kinds, (summary["refuted"], summary.get("skips"), res.stderr[-3000:])
    assert summary["errors"] == []


def test_gpu_claims_skip_with_reason_without_gpu(tmp_path: Path) -> None:
    proj = _project(tmp_path)
    env_no_gpu = {"KB_FAKE_NO_GPU": "1"}
    os.environ.update(env_no_gpu)
    try:
        res = _kb(proj, "verify", "--plan", "--json")
    finally:
        os.environ.pop("KB_FAKE_NO_GPU")
    rows = json.loads(res.stdout)
    assert len(rows) == 31
    assert all(r["action"] == "skip" and "this machine has no GPU" in r["why"] for r in rows), rows


@pytest.mark.skipif(not gpus() or not os.environ.get("KB_ALT_BUILD_CACHE"),
                    reason="needs a CUDA GPU and builds by a second toolkit ($KB_ALT_BUILD_CACHE)")
def test_toolkit_bits_control_refutes(tmp_path: Path) -> None:
    proj = _project(tmp_path)
    res = _kb(proj, "verify", "--claim", "neg.gpu.toolkit-bits", "--json")
    summary = json.loads(res.stdout)
    assert summary["refuted"] == ["neg.gpu.toolkit-bits"], (summary, res.stderr[-3000:])
