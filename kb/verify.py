"""`kb verify`: plan, execute, record evidence, re-index, summarise."""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable

import click
import sqlite_utils

from kb.config import Config
from kb.evidence import write_batch
from kb.loader import Corpus
from kb.models import Run
from kb.registry import load_all
from kb.render import emit_json, table
from kb.runner import Task, clone_paths, execute, make_plan
from kb.status import _latest


def _progress(total: int) -> Callable[[Task, Run], None]:
    done = Counter()
    tty = sys.stderr.isatty()

    def tick(task: Task, run: Run) -> None:
        done["n"] += 1
        done[run.verdict] += 1
        if tty:
            width = 30
            fill = int(width * done["n"] / max(total, 1))
            sys.stderr.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {done['n']}/{total} "
                             f"supports {done['supports']} refutes {done['refutes']} errors {done['error']}  ")
            sys.stderr.flush()
        elif run.verdict in ("refutes", "error"):
            sys.stderr.write(f"{run.verdict}: {task.key} {run.reason[:120]}\n")

    return tick


def run_verify(cfg: Config, db: sqlite_utils.Database, select: Callable[[Corpus], list[str]],
               kinds: set[str] | None, plan_only: bool, force: bool, jobs: int, timeout: float | None,
               as_json: bool) -> int:
    """Run `kb verify`; returns the exit code."""
    from kb.store import corpus_from_index, open_index

    start = time.perf_counter()
    corpus = corpus_from_index(db)
    registry = load_all()
    runs = [Run.model_validate_json(r["json"]) for r in db.query("SELECT json FROM runs")]
    clones = clone_paths(cfg, corpus)
    plan = make_plan(corpus, select(corpus), registry, _latest(runs), clones, force, kinds)
    if plan_only:
        rows = [(t.key, t.spec.id, "cached" if t.cached else "run", t.hardware_class) for t in plan.tasks]
        rows += [(f"{c}#{i}", v, "skip", why) for c, i, v, why in plan.skipped]
        if as_json:
            emit_json([dict(zip(("check", "verifier", "action", "why"), r, strict=True)) for r in rows])
        else:
            click.echo(table(rows, ["check", "verifier", "action", "why / hardware class"]))
            click.echo(f"{len(plan.to_run)} to run, {len(plan.tasks) - len(plan.to_run)} cached, "
                       f"{len(plan.skipped)} skipped", err=True)
        return 0
    new: list[Run] = []
    interrupted = False
    try:
        execute(plan, corpus, cfg, clones, jobs, timeout, _progress(len(plan.to_run)), runs=new)
    except KeyboardInterrupt:
        interrupted = True
    if sys.stderr.isatty() and plan.to_run:
        sys.stderr.write("\n")
    by_class: dict[str, list[Run]] = {}
    for r in new:
        by_class.setdefault(r.hardware_class, []).append(r)
    for class_runs in by_class.values():
        write_batch(cfg.root, class_runs)
    index = open_index(cfg)
    if interrupted:
        click.echo(f"interrupted: {len(new)} finished run(s) recorded; the rest did not run", err=True)
        return 130
    cached = [t.cached for t in plan.tasks if t.cached is not None]
    all_runs = new + cached
    verdicts = Counter(r.verdict for r in all_runs)
    elapsed = time.perf_counter() - start
    summary = {
        "ran": len(new), "cached": len(cached), "skipped": len(plan.skipped),
        "verdicts": dict(verdicts), "seconds": round(elapsed, 2),
        "claims_supported": len({r.claim_id for r in all_runs if r.verdict == "supports"}),
        "refuted": sorted({r.claim_id for r in all_runs if r.verdict == "refutes"}),
        "errors": [{"check": f"{r.claim_id}#{r.check_index}", "reason": r.reason} for r in all_runs if r.verdict == "error"],
        "skips": [{"check": f"{c}#{i}", "verifier": v, "why": w} for c, i, v, w in plan.skipped],
    }
    if as_json:
        emit_json(summary)
    else:
        counts = Counter(r["status"] for r in index.db.query("SELECT status FROM status WHERE hardware_class='*'"))
        click.echo(table([(k, v) for k, v in sorted(counts.items())], ["status", "claims"]))
        click.echo(f"ran {len(new)}, cached {len(cached)}, skipped {len(plan.skipped)}; "
                   + ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items())) + f"; {elapsed:.1f} s", err=True)
        for cid in summary["refuted"]:
            click.echo(f"refuted: {cid}", err=True)
        skip_reasons = Counter(w for *_, w in plan.skipped)
        for why, n in skip_reasons.most_common(5):
            click.echo(f"skipped {n}: {why}", err=True)
    if summary["errors"]:
        return 3
    return 1 if summary["refuted"] else 0


