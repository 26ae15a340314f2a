"""Benchmark `kb export site`: the real corpus, then a synthetic project of 10,000 claims.

Run: .venv/bin/python bench/bench_site.py [--claims N] [--keep DIR]

Prints, for each corpus, the seconds to index and to build the site, the page
count, and the sizes of index.html, claims.html and claims.json. Targets: the
real corpus (~1,000 claims) builds in <= 5 s, 10,000 claims in <= 60 s, and
index.html stays under 1 MiB.

The real corpus is indexed into a temporary database (the project's own
.kb/kb.db is not touched). If some claim files do not validate (someone is
mid-edit), those files are left out and the bench says which.
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kb.config import load_config  # noqa: E402
from kb.export.site.build import build_site  # noqa: E402
from kb.index.store import IndexError_, open_index  # noqa: E402
from kb.records.models import Claim, Run  # noqa: E402
from kb.records.vocab import GENERATIONS, LABELS, PHASES, TOPICS  # noqa: E402
from kb.verify.registry import load_verifiers  # noqa: E402

WORDS = ("tile", "softmax", "atomic", "warp", "register", "pipeline", "barrier", "causal", "split", "cluster",
         "tensor", "memory", "dQ", "dK", "rescale", "exp2", "TMA", "WGMMA", "occupancy", "shuffle")
CLASSES = ("NVIDIA H200 sm_90", "NVIDIA A100-SXM4-80GB sm_80", "cpu")
ARCHS = ("sm_90 (H200)", "sm_80", "sm_90a", "sm_100", "sm_80/sm_90")  # the list page's architecture filter


def _size(path: Path) -> str:
    return f"{path.stat().st_size / 1024:.1f} KiB"


def _build(root: Path, out: Path, label: str) -> None:
    """Index `root` into a temp database, build the site into `out`, print the figures."""
    cfg = load_config(root=root, db=str(out.parent / f"{out.name}.db"))
    t0 = time.perf_counter()
    db = open_index(cfg, force=True).db
    t1 = time.perf_counter()
    pages = build_site(db, cfg, out)
    t2 = time.perf_counter()
    claims = db.execute("SELECT count(*) FROM claims").fetchone()[0]
    runs = db.execute("SELECT count(*) FROM runs").fetchone()[0]
    print(f"{label}: {claims} claims, {runs} runs")
    print(f"  index (validate + SQLite): {t1 - t0:7.2f} s")
    print(f"  site build:                {t2 - t1:7.2f} s  ({pages} pages)")
    print(f"  index.html {_size(out / 'index.html')}, claims.html {_size(out / 'claims.html')}, "
          f"claims.json {_size(out / 'claims.json')}")


def _clean_copy(tmp: Path) -> Path:
    """A copy of the project with only the claim files that index cleanly (others may be mid-edit)."""
    proj = tmp / "real"
    shutil.copytree(ROOT / "sources", proj / "sources")
    shutil.copytree(ROOT / "claims", proj / "claims")
    if (ROOT / "evidence").is_dir():
        shutil.copytree(ROOT / "evidence", proj / "evidence")
    dropped: list[str] = []
    for _ in range(20):
        try:
            open_index(load_config(root=proj, db=str(tmp / "probe.db")), force=True)
            break
        except IndexError_ as exc:
            bad = {p.path for p in exc.problems if p.path.startswith("claims/")}
            if not bad:
                raise
            for rel in sorted(bad):
                (proj / rel).unlink(missing_ok=True)
                dropped.append(rel)
    if dropped:
        print(f"(real corpus: left out {len(dropped)} claim file(s) with problems: {', '.join(dropped)})")
    return proj


def _letters(i: int) -> str:
    """0 -> 'a', 25 -> 'z', 26 -> 'ba': a unique word without digits."""
    out = ""
    while True:
        out = chr(ord("a") + i % 26) + out
        i //= 26
        if not i:
            return out


def _synthetic_claims(n: int) -> list[dict[str, Any]]:
    """n valid claims: the anchor and check of a real H200 claim, varied text, vocabulary and relations."""
    data = yaml.safe_load((ROOT / "claims" / "gpu-h200.yaml").read_text())
    base = next(c for c in data["claims"] if c["id"] == "h200.fa2.fwd.bitwise-repeatable")
    out = []
    for i in range(n):
        words = " ".join(WORDS[(i * k) % len(WORDS)] for k in (1, 3, 7, 11))
        c: dict[str, Any] = {
            # The claim's number spelled in letters: a digit in a statement would have to be bound to a check.
            "id": f"syn.c{i:05d}.claim", "statement": f"Synthetic claim {_letters(i)}: the {words} path behaves as the notes say.",
            "generation": GENERATIONS[i % len(GENERATIONS)], "phase": PHASES[i % len(PHASES)],
            "topics": [TOPICS[i % len(TOPICS)], TOPICS[(i * 7 + 3) % len(TOPICS)]] if i % 5 else [TOPICS[i % len(TOPICS)]],
            "label": LABELS[i % len(LABELS)], "scope": {**copy.deepcopy(base["scope"]), "arch": ARCHS[i % len(ARCHS)]},
            "anchors": copy.deepcopy(base["anchors"]),
        }
        c["topics"] = sorted(set(c["topics"]))
        if i % 3:
            c["checks"] = copy.deepcopy(base["checks"])
        else:
            c["checks"], c["review"] = [], "reading task: synthetic"
        if i % 4 == 1 and i > 1:
            c["depends_on"] = [f"syn.c{i - 1:05d}.claim"]
        out.append(c)
    return out


def _synthetic_runs(claims: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Current evidence for most checked claims: supports on H200, some refutes on A100, an old error."""
    registry = load_verifiers(ROOT / "verifiers")
    runs = []
    for i, c in enumerate(claims):
        if not c["checks"] or i % 7 == 0:
            continue
        model = Claim.model_validate(c)
        check = model.checks[0]
        common = {
            "claim_id": model.id, "claim_hash": model.content_hash(), "check_index": 0, "verifier": check.verifier,
            "verifier_hash": registry[check.verifier].code_hash(), "params": check.params,
            "expect": {k: v.model_dump(by_alias=True, exclude_none=True) for k, v in check.expect.items()},
            "environment": {"gpu": {"name": "NVIDIA H200"}, "torch": "2.11.0+cu130", "cuda": "13.0",
                            "kernels": ["flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>"]},
            "duration_s": 2.5, "log": "20 repeats, 1 distinct O",
        }
        plan = [("supports", CLASSES[0], "2026-11-29T10:00:00+00:00"), ("error", CLASSES[0], "2026-11-28T10:00:00+00:00")]
        if i % 11 == 0:
            plan.append(("refutes", CLASSES[1], "2026-11-29T11:00:00+00:00"))
        for verdict, hw, started in plan:
            run = Run(**common, verdict=verdict, reason=f"synthetic {verdict}", hardware_class=hw, started=started,
                      measurements={"distinct_o": {"value": 1 if verdict == "supports" else 2, "unit": "tensors"},
                                    "ms_per_call": {"value": 1.234 + i / 1000, "unit": "ms"}})
            run.run_id = run.compute_id()
            runs.append(run.model_dump(mode="json"))
    return runs


def synthetic_project(tmp: Path, n: int) -> Path:
    """A project of n synthetic claims (real sources) with evidence files."""
    proj = tmp / f"synthetic-{n}"
    shutil.copytree(ROOT / "sources", proj / "sources")
    (proj / "claims").mkdir(parents=True)
    claims = _synthetic_claims(n)
    per_file = 1000
    for k in range(0, n, per_file):
        text = yaml.safe_dump({"claims": claims[k:k + per_file]}, sort_keys=False)
        (proj / "claims" / f"synthetic-{k // per_file:03d}.yaml").write_text(text)
    (proj / "evidence" / "synthetic").mkdir(parents=True)
    body = {"format": 1, "runs": _synthetic_runs(claims)}
    (proj / "evidence" / "synthetic" / "runs.json").write_text(json.dumps(body))
    return proj


def main() -> None:
    """Build both sites and print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--claims", type=int, default=10_000, help="synthetic claims (default 10000)")
    ap.add_argument("--keep", type=Path, default=None, help="keep the built sites under this folder")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kb-bench-") as t:
        tmp = Path(t)
        outdir = args.keep or tmp
        outdir.mkdir(parents=True, exist_ok=True)
        _build(_clean_copy(tmp), outdir / "site-real", "real corpus")
        start = time.perf_counter()
        proj = synthetic_project(tmp, args.claims)
        print(f"(synthetic project written in {time.perf_counter() - start:.1f} s)")
        _build(proj, outdir / f"site-synthetic-{args.claims}", f"synthetic corpus ({args.claims} claims)")


if __name__ == "__main__":
    main()
