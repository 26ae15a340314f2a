"""Execute a plan: worker lanes, timeouts, crash handling.

Execution hands tasks to worker processes (`kb.verify.worker`); a timeout,
crash or CUDA fault becomes a harness `error` for that task and a fresh
worker takes the next one. Finished runs are handed back as they land, so
the caller can record them even when the user interrupts.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kb.config import Config
from kb.records.binding import resolve_givens
from kb.records.loader import Corpus
from kb.records.models import Measurement, Run
from kb.verify import sandbox
from kb.verify.hw import machine
from kb.verify.plan import Plan, Task


class _Worker:
    """One worker subprocess with a line reader thread."""

    def __init__(self, root: Path, gpu: bool = False) -> None:
        self.err = tempfile.TemporaryFile()
        # Results come back on a pipe of their own, not on stdout: whatever a verifier (or a child
        # process it starts) prints lands in the log, and can never be taken for a result.
        read_fd, write_fd = os.pipe()
        # The worker runs verifiers, and GPU verifiers load kb's builds of pinned code into it: it is
        # sandboxed as a whole (no network unless --online, the project read-only, writable only its own
        # temporary folder and the build cache), with a clean environment, and it dies with kb.
        self.tmp = Path(tempfile.mkdtemp(prefix="kb-worker-"))
        caches = [Path(os.environ.get("KB_BUILD_CACHE") or root / ".kb" / "build"),
                  (root / os.environ.get("KB_HTTP_CACHE", ".kb/http-cache")).resolve()]  # source.lines --online
        # The operator may grant more (the test suite's marker folders): an environment setting, never data.
        caches += [Path(p) for p in os.environ.get("KB_SANDBOX_WRITABLE", "").split(os.pathsep) if p]
        cmd, self.sandbox = sandbox.command([sys.executable, "-m", "kb.verify.worker"], work=self.tmp,
                                            writable=caches, readable=[root], devices=gpu,
                                            network=bool(os.environ.get("KB_ONLINE")), hide_tmp=False,
                                            scratch_home=True)
        env = sandbox.clean_env({"PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
                                 "KB_PROTO_FD": str(write_fd), "TMPDIR": str(self.tmp), "KB_SANDBOX_LEVEL": self.sandbox,
                                 **({"HOME": os.environ["HOME"]} if "HOME" in os.environ else {})},
                                keep_prefixes=True)
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=self.err, stderr=self.err, text=True, cwd=root, env=env,
            start_new_session=True, pass_fds=(write_fd,), preexec_fn=sandbox.worker_preexec(gpu),
        )
        os.close(write_fd)
        self.proto = os.fdopen(read_fd, "r", encoding="utf-8")
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proto:
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
        try:
            res = json.loads(line)
        except json.JSONDecodeError:
            self.kill()
            return {"verdict": "error", "reason": "worker answered something that is not a result (harness fault)",
                    "measurements": {}, "log": self._stderr_tail(), "duration_s": 0.0}
        if not isinstance(res, dict) or res.get("verdict") not in ("supports", "refutes", "inconclusive", "error", "skipped"):
            return {"verdict": "error", "reason": f"verifier returned an unknown verdict {str(res.get('verdict'))[:40]!r}"
                    " (harness fault, not evidence)" if isinstance(res, dict) else "malformed result",
                    "measurements": {}, "log": self._stderr_tail(), "duration_s": 0.0}
        return res

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
        shutil.rmtree(self.tmp, ignore_errors=True)

    def close(self) -> None:
        if self.alive:
            assert self.proc.stdin
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        shutil.rmtree(self.tmp, ignore_errors=True)


def _task_payload(t: Task, n: int, corpus: Corpus, clones: dict[str, str], hardware: dict[str, Any],
                  verifiers_dir: Path | None, timeout: float) -> dict[str, Any]:
    check = t.claim.checks[t.index]
    return {
        "task_id": n, "verifier": t.spec.id, "params": resolve_givens(check.params, {**t.claim.givens, **t.inputs}),
        "expect": {k: v.model_dump(by_alias=True, exclude_none=True) for k, v in check.expect.items()},
        "claim": t.claim.model_dump(mode="json", by_alias=True),
        "sources": {a.source: corpus.sources[a.source].model_dump(mode="json") for a in t.claim.anchors},
        "clones": clones, "hardware": hardware, "needs_env": t.spec.is_gpu, "timeout_s": timeout,
        "verifiers_dir": str(verifiers_dir) if verifiers_dir else None,
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
                    worker = _Worker(cfg.root, gpu=t.spec.is_gpu)
                started = datetime.now(UTC).isoformat(timespec="seconds")
                limit = timeout or t.spec.timeout_s
                res = worker.ask(_task_payload(t, n, corpus, clones, hardware, cfg.verifiers_dir, limit), limit)
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
                    environment={**(res.get("environment") or base_env),
                                 **({"check_anchor": a} if (a := t.claim.check_anchor(t.index)) else {}),
                                 **({"inputs": t.inputs} if t.inputs else {})},
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
