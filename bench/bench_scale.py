"""Benchmark `kb validate` and a cold index build at 10,000 claims (issue #16: <= 10 s each).

Run: .venv/bin/python bench/bench_scale.py [--claims N] [--profile] [--top K]

Writes the synthetic project of bench_site.py (N claims with evidence, default 10,000) and prints:

  kb validate (CLI)     the console command in a fresh process, as a user runs it
  check_files           the same validation in-process (no interpreter start-up, no imports)
  cold index build      open_index(force=True) into a new SQLite file: validate, derive statuses, write

With --profile, each in-process step runs again under cProfile and the K functions with the most
own time (and the K with the most cumulative time, kb's own code only) are printed: the hot spots.
This script only measures; it changes nothing in kb.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_site import synthetic_project  # noqa: E402

from kb.config import load_config  # noqa: E402
from kb.index.store import check_files, open_index  # noqa: E402


def _cli_validate(proj: Path, db: Path) -> tuple[float, str]:
    env = {**os.environ, "KB_DB": str(db)}
    start = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "kb", "--root", str(proj), "validate"], capture_output=True, text=True,
                         env=env, cwd=proj)
    took = time.perf_counter() - start
    return took, (res.stderr.strip().splitlines() or ["(no output)"])[-1]


def _profile(label: str, fn, top: int) -> None:
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    for key, title in (("tottime", "own time"), ("cumulative", "cumulative, kb only")):
        buf = io.StringIO()
        stats = pstats.Stats(prof, stream=buf).sort_stats(key)
        stats.print_stats(r"/kb/" if key == "cumulative" else "", top)
        lines = [ln for ln in buf.getvalue().splitlines() if ln.strip() and (ln.lstrip()[:1].isdigit() or "ncalls" in ln)]
        print(f"\n[{label}] top {top} by {title}:")
        for ln in lines[: top + 1]:
            print("  " + ln.replace(str(ROOT) + "/", ""))


def main() -> None:
    """Write the synthetic corpus, time validate and a cold index build, optionally profile them."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--claims", type=int, default=10_000)
    ap.add_argument("--profile", action="store_true", help="also profile each step (cProfile)")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kb-bench-scale-") as t:
        tmp = Path(t)
        start = time.perf_counter()
        proj = synthetic_project(tmp, args.claims)
        n_runs = sum(1 for _ in (proj / "evidence").rglob("*.json"))
        print(f"synthetic project: {args.claims} claims, {n_runs} evidence file(s), written in {time.perf_counter() - start:.1f} s")
        cfg = load_config(root=proj, db=str(tmp / "kb.db"))

        took, last = _cli_validate(proj, tmp / "cli.db")
        print(f"kb validate (CLI):   {took:6.2f} s   ({last})")
        start = time.perf_counter()
        corpus, runs, _, problems = check_files(cfg)
        print(f"check_files:         {time.perf_counter() - start:6.2f} s   ({len(corpus.claims)} claims, {len(runs)} runs, "
              f"{len(problems)} problem(s))")
        start = time.perf_counter()
        open_index(cfg, force=True)
        print(f"cold index build:    {time.perf_counter() - start:6.2f} s   (validate + statuses + SQLite)")
        target = 10.0
        print(f"target: <= {target:.0f} s each")
        if args.profile:
            _profile("check_files", lambda: check_files(cfg), args.top)
            cold = load_config(root=proj, db=str(tmp / "kb-profile.db"))
            _profile("cold index build", lambda: open_index(cold, force=True), args.top)


if __name__ == "__main__":
    main()
