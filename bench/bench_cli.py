"""Engine speed figures: CLI start-up, warm queries, cold index build, cached verify.

Run: .venv/bin/python bench/bench_cli.py
Targets (issue #2/#3): `kb --help` and `kb claims --json` <= 0.5 s (median of 5);
cold index of 1,000 synthetic claims <= 2 s; a warm query does no rebuild;
`kb verify` with nothing changed <= 2 s.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
KB = [sys.executable, "-m", "kb"]


def timed(cmd: list[str], cwd: Path, n: int = 5) -> float:
    """Median wall seconds of n runs."""
    times = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(cmd, cwd=cwd, capture_output=True, check=False)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def synthetic_project(n: int) -> Path:
    """A project with n valid claims (copies of one real note anchor), in a temp folder."""
    root = Path(tempfile.mkdtemp(prefix="kb-bench-"))
    shutil.copytree(ROOT / "sources", root / "sources")
    shutil.copytree(ROOT / "verifiers", root / "verifiers")
    anchor = yaml.safe_load((ROOT / "claims" / "gpu-h200.yaml").read_text())["claims"][0]["anchors"][0]
    claims = [{
        "id": f"bench.c{i}", "statement": f"Synthetic claim number {i} about tile {i % 128}.",
        "generation": "FA2", "phase": "forward", "topics": ["tiling"], "label": "mathematical",
        "anchors": [anchor],
        "checks": [{"verifier": "arith.eval", "params": {"expr": f"{i} * 2"}, "expect": {"value": {"equals": 2 * i}}}],
    } for i in range(n)]
    (root / "claims").mkdir()
    (root / "claims" / "bench.yaml").write_text(yaml.safe_dump({"claims": claims}, sort_keys=False))
    return root


def main() -> None:
    """Print the figures."""
    sys.path.insert(0, str(ROOT))
    from kb.config import load_config
    from kb.index.store import open_index

    subprocess.run([*KB, "claims", "--json"], cwd=ROOT, capture_output=True, check=False)  # warm the index
    print(f"kb --help            median of 5: {timed([*KB, '--help'], ROOT):.3f} s (target <= 0.5)")
    print(f"kb claims --json     median of 5: {timed([*KB, 'claims', '--json'], ROOT):.3f} s (target <= 0.5)")
    subprocess.run([*KB, "verify"], cwd=ROOT, capture_output=True, check=False)
    print(f"kb verify (cached)   median of 5: {timed([*KB, 'verify'], ROOT):.3f} s (target <= 2)")

    proj = synthetic_project(1000)
    cfg = load_config(proj, str(proj / ".kb" / "kb.db"))
    t = time.perf_counter()
    first = open_index(cfg)
    cold = time.perf_counter() - t
    t = time.perf_counter()
    second = open_index(cfg)
    warm = time.perf_counter() - t
    print(f"cold index, 1,000 synthetic claims: {cold:.3f} s (target <= 2); rebuilt={first.rebuilt}")
    print(f"warm open, nothing changed:         {warm:.3f} s; rebuilt={second.rebuilt} (must be False)")
    shutil.rmtree(proj)


if __name__ == "__main__":
    main()
