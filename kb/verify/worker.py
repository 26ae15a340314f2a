"""The worker process: runs verifiers one task at a time, isolated from the CLI.

Reads one JSON task per line on stdin and answers one JSON result per line on
the protocol stream. Verifiers' own prints go to stderr so they cannot break
the protocol. A crash or hang here costs the task, never the suite: the
runner sees the process die or time out, records a harness error, and starts
a fresh worker.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any


def _jsonable(value: Any) -> Any:
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else str(value)
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    try:
        return _jsonable(value.item())  # numpy / torch scalars
    except AttributeError:
        return str(value)


def run_task(task: dict[str, Any]) -> dict[str, Any]:
    """Run one verifier task and return its result record."""
    from kb.records.models import Comparison
    from kb.verify.expect import judge
    from kb.verify.registry import Context, load_verifiers

    start = time.perf_counter()
    where = task.get("verifiers_dir")
    spec = load_verifiers(Path(where) if where else None)[task["verifier"]]
    ctx = Context(claim=task["claim"], expect=task["expect"], sources=task["sources"],
                  clones=task["clones"], hardware=task["hardware"])
    restart = False
    try:
        params = spec.params.model_validate(task["params"])
        outcome = spec.func(params, ctx)
        measurements = {k: v[0] for k, v in outcome.measurements.items()}
        if outcome.verdict is not None:
            verdict, reason = outcome.verdict, outcome.reason or ""
            if verdict not in ("supports", "refutes", "inconclusive", "skipped", "error"):
                verdict, reason = "error", f"verifier returned an unknown verdict {str(verdict)[:40]!r} (harness fault)"
            elif verdict == "supports" and task["expect"]:
                # A verifier that decides its own verdict (a source check, a spread-aware benchmark) may turn a
                # result inconclusive or refuting, but it never supports what the expectation does not: the
                # expectation always applies.
                expect = {k: Comparison.model_validate(v) for k, v in task["expect"].items()}
                judged, why = judge(measurements, expect)
                if judged != "supports":
                    verdict, reason = judged, f"{why} (the expectation; the verifier alone found: {reason})"
        else:
            expect = {k: Comparison.model_validate(v) for k, v in task["expect"].items()}
            verdict, reason = judge(measurements, expect)
            if outcome.reason:
                reason = f"{reason}; {outcome.reason}"
        result = {
            "verdict": verdict, "reason": reason,
            "measurements": {k: {"value": _jsonable(v), "unit": u} for k, (v, u) in outcome.measurements.items()},
            "log": outcome.log[-4000:], "environment": _jsonable(outcome.environment),
        }
    except Exception as exc:
        text = "".join(traceback.format_exception(exc))
        restart = "CUDA" in text or "cuda" in type(exc).__name__.lower()
        result = {"verdict": "error", "reason": f"{type(exc).__name__}: {str(exc)[:300]}",
                  "measurements": {}, "log": text[-4000:], "environment": {}}
    result["duration_s"] = round(time.perf_counter() - start, 4)
    result["restart"] = restart
    return result


def main() -> None:
    """Serve tasks until stdin closes."""
    # cuBLAS reads this once per handle: set it before any verifier touches CUDA, so a
    # deterministic-mode check can never fail for want of it.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    # Die with kb even when it is killed with SIGKILL (the runner also sets this before exec).
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    # Results go to the pipe the runner handed over (KB_PROTO_FD); stdout and stderr are only logs.
    fd = os.environ.get("KB_PROTO_FD")
    proto = os.fdopen(int(fd), "w", buffering=1) if fd else os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout = sys.stderr
    from kb.verify.hw import full_fingerprint

    env = None
    for line in sys.stdin:
        task = json.loads(line)
        if task.get("needs_env") and env is None:
            env = _jsonable(full_fingerprint())
        # The worker enforces its task's limits itself, so a spinning check stops even if kb is gone:
        # CPU time by rlimit (SIGXCPU), wall time by a watchdog that ends the process.
        limit = float(task.get("timeout_s") or 3600)
        watchdog = threading.Timer(limit + 30, os._exit, args=(70,))
        watchdog.daemon = True
        watchdog.start()
        with contextlib.suppress(ValueError, OSError):
            used = resource.getrusage(resource.RUSAGE_SELF)
            _, hard = resource.getrlimit(resource.RLIMIT_CPU)
            want = int(used.ru_utime + used.ru_stime + limit + 60)
            resource.setrlimit(resource.RLIMIT_CPU, (want if hard == resource.RLIM_INFINITY else min(want, hard), hard))
        try:
            result = run_task(task)
        finally:
            watchdog.cancel()
        result.setdefault("environment", {})
        if isinstance(result["environment"], dict):
            result["environment"]["sandbox"] = os.environ.get("KB_SANDBOX_LEVEL", "none")
        result["task_id"] = task["task_id"]
        if env is not None:
            result["environment"] = {**env, **result["environment"]}
        proto.write(json.dumps(result) + "\n")
        if result["restart"]:
            break  # a CUDA error poisons the context; let the runner start a fresh worker


if __name__ == "__main__":
    main()
