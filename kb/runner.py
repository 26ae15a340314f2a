"""Plan and run checks: hardware-aware selection, worker processes, timeouts, evidence.

The plan says for every selected check whether it runs, is cached, or is
skipped and why. Execution hands tasks to worker processes (`kb.worker`);
a timeout, crash or CUDA fault becomes a harness `error` for that task and
a fresh worker takes the next one. Finished runs are written as evidence
even when the user interrupts, so the files and the index stay consistent.
"""

from __future__ import annotations

import importlib.util
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kb.config import Config
from kb.hw import find_tool, gpu_class, gpus, machine
from kb.loader import Corpus
from kb.models import Claim, Measurement, Run
from kb.registry import VerifierSpec, requirements_for
from kb.status import CPU_CLASS


@dataclass
class Task:
    """One check of one claim, to run on this machine."""

    claim: Claim
    index: int
    spec: VerifierSpec
    hardware_class: str
    cached: Run | None = None

    @property
    def key(self) -> str:
        """Readable task name."""
        return f"{self.claim.id}#{self.index}"


@dataclass
class Plan:
    """What `kb verify` will do."""

    tasks: list[Task] = field(default_factory=list)
    skipped: list[tuple[str, int, str, str]] = field(default_factory=list)  # claim, check, verifier, reason

    @property
    def to_run(self) -> list[Task]:
        """Tasks not satisfied by cached evidence."""
        return [t for t in self.tasks if t.cached is None]


def clone_paths(cfg: Config, corpus: Corpus) -> dict[str, str]:
    """Local git directories per repository source: configured, else the clone cache."""
    out = dict(cfg.clones)
    for sid, src in corpus.sources.items():
        if sid in out or src.kind not in ("repo", "notes"):
            continue
        for cand in (cfg.clone_cache / sid, cfg.clone_cache / f"{sid}.git"):
            if cand.exists():
                out[sid] = str(cand)
                break
    return out


def _unmet(spec: VerifierSpec, claim: Claim, check_params: dict[str, Any], clones: dict[str, str],
           sources: dict[str, Any]) -> str | None:
    req = requirements_for(spec, check_params)
    if req.cuda:
        g = gpus()
        if not g:
            return f"needs {req.describe()}; this machine has no GPU"
        cc = g[0]["compute_capability"]
        if (req.min_cc and cc < req.min_cc) or (req.max_cc and cc > req.max_cc):
            return f"needs {req.describe()}; this machine's GPU is sm_{cc}"
        if g[0]["memory_mib"] / 1024 < req.min_gpu_memory_gb:
            return f"needs {req.min_gpu_memory_gb} GB of GPU memory"
    for tool in req.tools:
        if find_tool(tool) is None:
            return f"needs the tool {tool} (CUDA toolkit or the nvidia-cuda-{tool} wheel), which is not installed"
    for pkg in req.packages:
        if importlib.util.find_spec(pkg) is None:
            return f"needs the Python package {pkg}, which is not installed"
    if req.git_source:
        ix = check_params.get("anchor", 0)
        src = claim.anchors[ix].source if ix < len(claim.anchors) else "?"
        s = sources.get(src)
        url = (s.url or s.repo or "") if s else ""
        github = url.startswith("https://github.com/")
        online_ok = req.online_fallback and github and bool(os.environ.get("KB_ONLINE"))
        if src not in clones and not online_ok:
            var = "KB_CLONE_" + src.upper().replace("-", "_")
            hint = ", or `kb verify --online`" if req.online_fallback and github else ""
            return f"needs a local clone of {src} (set [clones] in kb.local.toml or {var}{hint})"
    return None


def make_plan(corpus: Corpus, claim_ids: list[str], registry: dict[str, VerifierSpec],
              latest: dict[tuple[str, int, str], Run], clones: dict[str, str], force: bool,
              kinds: set[str] | None = None) -> Plan:
    """Decide, for every check of the selected claims, run / cached / skipped-with-reason."""
    plan = Plan()
    gclass = gpu_class()
    for cid in claim_ids:
        claim = corpus.claims[cid]
        for i, check in enumerate(claim.checks):
            spec = registry[check.verifier]
            if kinds and spec.kind not in kinds:
                continue
            why = _unmet(spec, claim, check.params, clones, corpus.sources)
            if why:
                plan.skipped.append((cid, i, spec.id, why))
                continue
            hw = gclass if spec.is_gpu else CPU_CLASS
            task = Task(claim, i, spec, hw)  # type: ignore[arg-type]
            prev = latest.get((cid, i, hw))
            if (not force and prev is not None and prev.verdict in ("supports", "refutes", "inconclusive")
                    and prev.claim_hash == claim.content_hash() and prev.verifier_hash == spec.code_hash()
                    and prev.params == check.params):
                task.cached = prev
            plan.tasks.append(task)
    return plan


class _Worker:
    """One worker subprocess with a line reader thread."""

    def __init__(self, root: Path) -> None:
        self.err = tempfile.TemporaryFile()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kb.worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self.err, text=True, cwd=root, env=env, start_new_session=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def ask(self, task: dict[str, Any], timeout: float) -> dict[str, Any]:
        assert self.proc.stdin
        try:
            self.proc.stdin.write(json.dumps(task) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            return self._died()
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            return {"verdict": "error", "reason": f"timed out after {timeout:g} s (harness fault, not evidence)",
                    "measurements": {}, "log": self._stderr_tail(), "duration_s": timeout}
        if line is None:
            return self._died()
        return json.loads(line)

    def _died(self) -> dict[str, Any]:
        code = self.proc.wait(timeout=10)
        tail = self._stderr_tail()
        why = "killed (out of memory?)" if code in (-9, 137) else f"exited with code {code}"
        return {"verdict": "error", "reason": f"worker {why} (harness fault, not evidence)",
                "measurements": {}, "log": tail, "duration_s": 0.0}

    def _stderr_tail(self) -> str:
        self.err.seek(0)
        return self.err.read().decode("utf-8", "replace")[-3000:]

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait(timeout=10)

    def close(self) -> None:
        if self.alive:
            assert self.proc.stdin
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


def _task_payload(t: Task, n: int, corpus: Corpus, clones: dict[str, str], hardware: dict[str, Any]) -> dict[str, Any]:
    check = t.claim.checks[t.index]
    return {
        "task_id": n, "verifier": t.spec.id, "params": check.params,
        "expect": {k: v.model_dump(by_alias=True, exclude_none=True) for k, v in check.expect.items()},
        "claim": t.claim.model_dump(mode="json", by_alias=True),
        "sources": {a.source: corpus.sources[a.source].model_dump(mode="json") for a in t.claim.anchors},
        "clones": clones, "hardware": hardware, "needs_env": t.spec.is_gpu,
    }


def execute(plan: Plan, corpus: Corpus, cfg: Config, clones: dict[str, str], jobs: int,
            timeout: float | None, on_done: Callable[[Task, Run], None] | None = None,
            runs: list[Run] | None = None) -> list[Run]:
    """Run the plan's pending tasks, appending each finished run to `runs` as it lands.

    On Ctrl-C the finished runs are already in `runs`, so the caller can still
    write them as evidence before re-raising.
    """
    hardware = {sid: s.constants for sid, s in corpus.sources.items() if s.kind == "hardware"}
    base_env = machine()
    todo = plan.to_run
    # GPU tasks share one device: run them on one worker, after the CPU ones are queued.
    lanes: list[list[Task]] = [[] for _ in range(max(1, jobs))]
    gpu_lane: list[Task] = []
    for n, t in enumerate(t for t in todo if not t.spec.is_gpu):
        lanes[n % len(lanes)].append(t)
    gpu_lane = [t for t in todo if t.spec.is_gpu]
    if gpu_lane:
        lanes.append(gpu_lane)
    runs = runs if runs is not None else []
    lock = threading.Lock()
    stop = threading.Event()

    def lane_main(tasks: list[Task]) -> None:
        worker: _Worker | None = None
        try:
            for n, t in enumerate(tasks):
                if stop.is_set():
                    return
                if worker is None or not worker.alive:
                    worker = _Worker(cfg.root)
                started = datetime.now(UTC).isoformat(timespec="seconds")
                limit = timeout or t.spec.timeout_s
                res = worker.ask(_task_payload(t, n, corpus, clones, hardware), limit)
                if res["verdict"] == "skipped":
                    with lock:
                        plan.skipped.append((t.claim.id, t.index, t.spec.id, res["reason"]))
                    continue
                check = t.claim.checks[t.index]
                run = Run(
                    claim_id=t.claim.id, claim_hash=t.claim.content_hash(), check_index=t.index,
                    verifier=t.spec.id, verifier_hash=t.spec.code_hash(), params=check.params,
                    expect={k: v.model_dump(by_alias=True, exclude_none=True) for k, v in check.expect.items()},
                    verdict=res["verdict"], reason=res["reason"],
                    measurements={k: Measurement(**m) for k, m in res.get("measurements", {}).items()},
                    hardware_class=t.hardware_class,
                    environment=res.get("environment") or base_env,
                    started=started, duration_s=res.get("duration_s", 0.0), log=res.get("log", ""),
                )
                with lock:
                    runs.append(run)
                if on_done:
                    on_done(t, run)
        finally:
            if worker is not None:
                worker.close()

    threads = [threading.Thread(target=lane_main, args=(lane,), daemon=True) for lane in lanes if lane]
    for th in threads:
        th.start()
    try:
        while any(th.is_alive() for th in threads):
            time.sleep(0.05)
    except KeyboardInterrupt:
        stop.set()
        for th in threads:
            th.join(timeout=5)
        raise
    return runs
