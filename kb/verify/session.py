"""`kb verify` as a library call: plan, execute, record evidence, hand the runs to the index.

The index is handed in (anything with the `IndexHandle` methods): the session
reads the corpus and the known runs from it once, and records the new runs
through it at the end. It never opens, re-opens or rebuilds an index itself,
and it imports nothing from the index package.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kb.config import Config
from kb.pinned.clones import clone_paths
from kb.records.binding import upstream_inputs
from kb.records.loader import Corpus
from kb.records.models import Run
from kb.verify.evidence import Journal, latest_runs, write_batch
from kb.verify.online import Prefetch, prefetch
from kb.verify.plan import Plan, Task, make_plan
from kb.verify.registry import VerifierSpec, load_verifiers
from kb.verify.runner import execute


class IndexHandle(Protocol):
    """What verification needs of an open index."""

    def corpus(self) -> Corpus:
        """Claims and sources as validated records."""

    def runs(self) -> list[Run]:
        """Every known run."""

    def record_runs(self, runs: list[Run], files: list[Path], registry: dict[str, VerifierSpec]) -> None:
        """Add runs already written to `files` and re-derive what they touch."""

    def status_counts(self) -> dict[str, int]:
        """Claims per overall status."""


class UnknownClaim(ValueError):
    """A claim id given on the command line is not in the corpus."""


def select_claims(corpus: Corpus, claim_ids: Iterable[str] = (), generation: str | Iterable[str] | None = None,
                  topic: str | Iterable[str] | None = None) -> list[str]:
    """Claim ids matching the filters, in corpus order; raises UnknownClaim for an unknown id.

    A filter given several values matches any of them (repeated -g / -t combine, as in `kb claims`).
    """
    wanted = set(claim_ids)
    gens = {generation} if isinstance(generation, str) else set(generation or ())
    tops = {topic} if isinstance(topic, str) else set(topic or ())
    unknown = [c for c in claim_ids if c not in corpus.claims]
    if unknown:
        raise UnknownClaim(f"no claim with id {unknown[0]!r}")
    return [cid for cid, c in corpus.claims.items()
            if (not wanted or cid in wanted)
            and (not gens or c.generation in gens)
            and (not tops or tops & set(c.topics))]


@dataclass
class VerifyResult:
    """What a verification session did."""

    plan: Plan
    new: list[Run] = field(default_factory=list)
    interrupted: bool = False
    signal: int | None = None
    seconds: float = 0.0
    status_counts: dict[str, int] = field(default_factory=dict)
    prefetch: Prefetch | None = None  # `--online`: the cited files kb fetched before the checks ran
    # The latest run on record of each skipped check, per hardware class (GPU checks measured elsewhere).
    recorded_elsewhere: list[Run] = field(default_factory=list)

    @property
    def cached(self) -> list[Run]:
        """Runs reused from earlier evidence."""
        return [t.cached for t in self.plan.tasks if t.cached is not None]

    def summary(self) -> dict[str, Any]:
        """The JSON summary `kb verify --json` prints."""
        all_runs = self.new + self.cached
        return {
            "ran": len(self.new), "cached": len(self.cached), "skipped": len(self.plan.skipped),
            "verdicts": dict(Counter(r.verdict for r in all_runs)), "seconds": round(self.seconds, 2),
            "claims_supported": len({r.claim_id for r in all_runs if r.verdict == "supports"}),
            "refuted": sorted({r.claim_id for r in all_runs if r.verdict == "refutes"}),
            "errors": [{"check": f"{r.claim_id}#{r.check_index}", "reason": r.reason}
                       for r in all_runs if r.verdict == "error"],
            "skips": [{"check": f"{c}#{i}", "verifier": v, "why": w} for c, i, v, w in self.plan.skipped],
            "skipped_by_reason": self.skipped_by_reason(),
            "cached_from": self.cached_from(),
            "skipped_recorded_elsewhere": self.skipped_recorded(),
            "ran_on": sorted({r.hardware_class for r in self.new}),
        }

    def skipped_by_reason(self) -> list[dict[str, Any]]:
        """Every reason a check was skipped, with how many checks it kept from running (most first)."""
        counts = Counter(w for *_, w in self.plan.skipped)
        return [{"why": why, "checks": n} for why, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]

    def cached_from(self) -> list[dict[str, Any]]:
        """Where reused results were recorded: per hardware class, how many and the dates they span.

        On a fresh clone every result can be reused from committed evidence made
        on other machines; saying so keeps "verified" from reading as "ran here".
        """
        return _origins(self.cached)

    def skipped_recorded(self) -> list[dict[str, Any]]:
        """Skipped checks that have results on record from other machines: per hardware class, count and dates."""
        return _origins(self.recorded_elsewhere)

    @property
    def exit_code(self) -> int:
        """130 interrupted (143 by SIGTERM), 3 harness errors, 1 something refuted, else 0."""
        if self.interrupted:
            return 128 + int(self.signal or signal.SIGINT)
        s = self.summary()
        if s["errors"]:
            return 3
        return 1 if s["refuted"] else 0


def _origins(runs: list[Run]) -> list[dict[str, Any]]:
    groups: dict[str, list[str]] = {}
    for r in runs:
        groups.setdefault(r.hardware_class, []).append(r.started)
    return [{"hardware_class": hc, "runs": len(ds), "first": min(ds)[:10], "last": max(ds)[:10]}
            for hc, ds in sorted(groups.items())]


def _install(handlers: dict[Any, Any]) -> dict[Any, Any]:
    """Install signal handlers (main thread only); returns the ones they replace."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, h) for sig, h in handlers.items()}


def verify(cfg: Config, index: IndexHandle, claim_ids: Iterable[str] = (),
           generation: str | Iterable[str] | None = None, topic: str | Iterable[str] | None = None,
           kinds: set[str] | None = None, plan_only: bool = False, force: bool = False,
           jobs: int = 2, timeout: float | None = None,
           progress: Callable[[int], Callable[[Task, Run], None]] | None = None) -> VerifyResult:
    """Plan the selected checks and, unless `plan_only`, run them and record the evidence.

    `progress`, given the number of checks about to run, returns the callback
    called as each finishes. With KB_ONLINE set (`kb verify --online`; the plan and the workers
    read it too), cited files of sources without a clone are first fetched by kb's HTTP client.
    Finished runs are written even when interrupted (Ctrl-C): the evidence files and the index stay
    consistent, and the result says so.
    """
    start = time.perf_counter()
    corpus = index.corpus()
    registry = load_verifiers(cfg.verifiers_dir)
    selected = select_claims(corpus, claim_ids, generation, topic)
    clones = clone_paths(cfg, corpus)
    latest = latest_runs(index.runs())
    plan = make_plan(corpus, selected, registry, latest, clones, force, kinds)
    skipped = {(c, i) for c, i, *_ in plan.skipped}
    result = VerifyResult(plan=plan, recorded_elsewhere=[r for (c, i, _), r in latest.items() if (c, i) in skipped])
    if plan_only:
        return result
    if os.environ.get("KB_ONLINE"):
        result.prefetch = prefetch(cfg, plan.to_run, corpus, clones)
    tick = progress(len(plan.to_run)) if progress else None
    journal = Journal(cfg.root)
    lock = threading.Lock()

    def on_done(task: Task, run: Run) -> None:
        with lock:  # lanes finish concurrently; each finished run is on disk before the next one lands
            journal.append(run)
        if tick:
            tick(task, run)

    caught: dict[str, int] = {}

    def on_term(signum: int, frame: Any) -> None:
        caught["signal"] = signum
        raise KeyboardInterrupt  # SIGTERM stops the run the way Ctrl-C does

    # Remember SIGINT's handler too: the write phase below ignores it, and a library caller (or a test
    # process) must get its Ctrl-C back afterwards, not inherit SIG_IGN (children would inherit it as well).
    sigint = signal.getsignal(signal.SIGINT)
    previous = {**({signal.SIGINT: sigint} if sigint is not None else {}), **_install({signal.SIGTERM: on_term})}
    try:
        execute(plan, corpus, cfg, clones, jobs, timeout, on_done, runs=result.new)
        # Checks that take an input from a claim they depend on run again once that claim has new results,
        # so a change upstream reaches what rests on it in the same session (a few rounds at most: no cycles).
        for _ in range(3):
            waiting = [cid for cid in selected if upstream_inputs(corpus.claims[cid].givens)]
            if not waiting or not result.new:
                break
            again = make_plan(corpus, waiting, registry, latest_runs([*index.runs(), *result.new]), clones, force=False,
                              kinds=kinds)
            if not again.to_run:
                break
            plan.tasks = [t for t in plan.tasks if t.claim.id not in set(waiting)] + again.tasks
            plan.skipped = [s for s in plan.skipped if s[0] not in set(waiting)] + again.skipped
            execute(again, corpus, cfg, clones, jobs, timeout, on_done, runs=result.new)
    except KeyboardInterrupt:
        result.interrupted = True
        result.signal = caught.get("signal", signal.SIGINT)
    finally:
        # A second Ctrl-C or SIGTERM while the finished runs are written must not cut that short.
        _install({signal.SIGINT: signal.SIG_IGN, signal.SIGTERM: signal.SIG_IGN})
    try:
        by_class: dict[str, list[Run]] = {}
        for r in result.new:
            by_class.setdefault(r.hardware_class, []).append(r)
        files = [p for runs in by_class.values() if (p := write_batch(cfg.root, runs)) is not None]
        journal.close(remove=True)  # every run it held is now in an evidence file
        index.record_runs(result.new, files, registry)
    finally:
        _install(previous)
    result.seconds = time.perf_counter() - start
    result.status_counts = index.status_counts()
    return result
