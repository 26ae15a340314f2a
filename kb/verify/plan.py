"""The plan: for every selected check, run it, reuse cached evidence, or skip it with the reason.

Hardware-aware: a check whose verifier needs a GPU, a tool, a package or a
local clone that this machine lacks is skipped with the exact requirement.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from typing import Any

from kb.records.binding import upstream_inputs
from kb.records.loader import Corpus
from kb.records.models import Claim, Run
from kb.verify.evidence import CPU_CLASS
from kb.verify.hw import find_tool, gpu_class, gpus
from kb.verify.registry import VerifierSpec, requirements_for


@dataclass
class Task:
    """One check of one claim, to run on this machine."""

    claim: Claim
    index: int
    spec: VerifierSpec
    hardware_class: str
    cached: Run | None = None
    inputs: dict[str, Any] = field(default_factory=dict)  # givens resolved from dependencies' results

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


def resolve_upstream(claim: Claim, latest: dict[tuple[str, int, str], Run]) -> tuple[dict[str, Any], str | None]:
    """Values of the claim's givens that read a dependency's measurement; or why one is not available yet."""
    wanted = upstream_inputs(claim.givens)
    out: dict[str, Any] = {}
    for name, (dep, measure) in sorted(wanted.items()):
        found = [r for (cid, _, _), r in latest.items()
                 if cid == dep and r.verdict == "supports" and measure in r.measurements]
        if not found:
            return {}, f"needs {measure} from {dep}, which has no supporting run yet (verify it first)"
        out[name] = max(found, key=lambda r: r.rank).measurements[measure].value
    return out, None


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
            # `kinds` holds verifier kinds and verifier ids (`kb verify --kind` / `--verifier`).
            if kinds and spec.kind not in kinds and spec.id not in kinds:
                continue
            why = _unmet(spec, claim, check.params, clones, corpus.sources)
            if why:
                plan.skipped.append((cid, i, spec.id, why))
                continue
            hw = gclass if spec.is_gpu else CPU_CLASS
            inputs, missing = resolve_upstream(claim, latest)
            if missing:
                plan.skipped.append((cid, i, spec.id, missing))
                continue
            task = Task(claim, i, spec, hw, inputs=inputs)  # type: ignore[arg-type]
            prev = latest.get((cid, i, hw))
            if (not force and prev is not None and prev.verdict in ("supports", "refutes", "inconclusive")
                    and prev.claim_hash == claim.content_hash() and prev.verifier_hash == spec.code_hash()
                    and prev.params == check.params
                    and prev.environment.get("check_anchor") == claim.check_anchor(i)
                    # An input taken from a dependency changed: what rests on it runs again.
                    and prev.environment.get("inputs", {}) == inputs):
                task.cached = prev
            plan.tasks.append(task)
    return plan
