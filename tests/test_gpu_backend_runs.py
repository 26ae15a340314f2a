"""gpu.backend-runs: a refusal is a result. Negative control on a GPU; on a CPU the check is planned as needs-hardware."""

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
FIXTURE = ROOT / "tests" / "fixtures" / "gpu-backend-runs" / "claims"


def _kb(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    proj = tmp_path / "proj"
    if not proj.exists():
        shutil.copytree(ROOT / "sources", proj / "sources")
        shutil.copytree(FIXTURE, proj / "claims")
        shutil.copytree(ROOT / "verifiers", proj / "verifiers", ignore=shutil.ignore_patterns("__pycache__"))
    full = {**os.environ, "KB_ROOT": str(proj), **env,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "kb", *args], capture_output=True, text=True, env=full, timeout=600)


@pytest.mark.skipif(not gpus(), reason="needs a CUDA GPU (nvidia-smi reports none)")
def test_expecting_a_refusal_of_a_backend_that_runs_refutes(tmp_path: Path) -> None:
    res = _kb(tmp_path, "verify", "--json")
    summary = json.loads(res.stdout)
    assert summary["refuted"] == ["neg.gpu.backend-runs"], (summary, res.stderr[-2000:])
    assert summary["errors"] == []


def test_without_a_gpu_the_check_is_planned_as_needing_hardware(tmp_path: Path) -> None:
    res = _kb(tmp_path, "verify", "--plan", "--json", KB_FAKE_NO_GPU="1")
    rows = json.loads(res.stdout)
    assert [r["action"] for r in rows] == ["skip"] and "this machine has no GPU" in rows[0]["why"], rows
