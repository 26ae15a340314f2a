"""Status: derived from claims, evidence, verifier code and drift; never typed by hand.

A pure function: the same records give the same statuses, in any order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kb.audit.state import entry_text, split_drift
from kb.index import cause as causes
from kb.index.strength import grade, strongest
from kb.records.binding import unbound_numbers
from kb.records.models import Claim, Run, Source, Status
from kb.verify.evidence import CPU_CLASS, latest_runs
from kb.verify.expect import decides_own_verdict, normal_expectation, recorded_expectation, rederive
from kb.verify.registry import VerifierSpec, requirements_for

__all__ = ["ANY_CLASS", "CPU_CLASS", "PRECEDENCE", "derive", "distrusted", "overridden"]

ANY_CLASS = "*"
# Which status wins when several hardware classes disagree, for the overall line.
PRECEDENCE = ["refuted", "stale", "verified", "inconclusive", "needs-hardware", "unverified", "review-only"]


def _stale_reason(claim: Claim, run: Run, spec: VerifierSpec | None, claim_hash: str | None = None) -> str | None:
    if run.claim_hash != (claim_hash or claim.content_hash()):
        return "the claim's statement, scope or checks changed after this evidence"
    if spec is None:
        return f"verifier {run.verifier} no longer exists"
    if run.verifier_hash != spec.code_hash():
        return f"verifier {run.verifier} code changed after this evidence"
    check = claim.checks[run.check_index] if run.check_index < len(claim.checks) else None
    if check is None or check.verifier != run.verifier or check.params != run.params:
        return "the check's parameters changed after this evidence"
    recorded = run.environment.get("check_anchor")
    if recorded is not None and recorded != claim.check_anchor(run.check_index):
        return "the cited lines changed after this evidence"
    return None


def distrusted(claims: Mapping[str, Claim], runs: Iterable[Run], registry: Mapping[str, VerifierSpec]) -> dict[str, str]:
    """Runs whose stored verdict cannot be trusted, by run id, with why; such a run never counts.

    Stored evidence is re-derived, never trusted: each run's verdict is judged again from its
    recorded measurements and its recorded expectation (kb.verify.expect.rederive), and a run
    that names the claim's current content hash must have recorded the check's current
    expectation (a run recorded under an older hash is stale anyway).
    """
    out: dict[str, str] = {}
    hashes: dict[str, str] = {}
    own: dict[str, bool] = {}
    current: dict[tuple[str, int], dict[str, Any]] = {}
    recorded: dict[int, dict[str, Any] | None] = {}  # a recorded expectation's rules (cached) -> normal form
    for run in runs:
        if run.verifier not in own:  # an unknown verifier: only its "supports" can be re-derived
            spec = registry.get(run.verifier)
            own[run.verifier] = decides_own_verdict(spec) if spec is not None else True
        why = rederive(run.verdict, run.measurements, run.expect, own[run.verifier])
        claim = claims.get(run.claim_id)
        if why is None and claim is not None and run.check_index < len(claim.checks) \
                and run.verdict in ("supports", "refutes", "inconclusive"):
            key = (run.claim_id, run.check_index)
            if key not in current:
                current[key] = normal_expectation(claim.checks[run.check_index].expect)
            if run.expect != current[key] and _normal(run.expect, recorded) != current[key]:
                # Different expectations: stale evidence when recorded under another hash (the usual
                # case, said by _stale_reason), an inconsistent record under the current one.
                if run.claim_id not in hashes:
                    hashes[run.claim_id] = claim.content_hash()
                if run.claim_hash == hashes[run.claim_id]:
                    why = ("its recorded expectation differs from the check's, yet it names the claim's current "
                           f"content hash (recorded {_short(run.expect)}, the check says {_short(current[key])})")
        if why is not None:
            out[run.run_id] = why
    return out


def _normal(expect: dict[str, Any], seen: dict[int, dict[str, Any] | None]) -> dict[str, Any] | None:
    """A recorded expectation in normal form (None when invalid); only asked when it differs as written."""
    rules = recorded_expectation(expect)
    if rules is None:
        return None
    if id(rules) not in seen:  # the rules are cached per distinct expectation (kb.verify.expect)
        seen[id(rules)] = normal_expectation(rules)
    return seen[id(rules)]


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 160 else text[:159] + "…"


def overridden(runs: Iterable[Run], distrust: Mapping[str, str]) -> list[Run]:
    """The distrusted runs that would be the latest of their (claim, check, class) if they were trusted."""
    return [r for r in latest_runs(runs).values() if r.run_id in distrust]


def _orphaned(claim: Claim | None, run: Run, registry: Mapping[str, VerifierSpec]) -> bool:
    """A run of a check the claim no longer has, or on a class that can never run the claim's current check
    there (CPU evidence of what is now a GPU check, or the reverse): history, not stale evidence that a re-run
    could refresh."""
    if claim is None:
        return False
    if run.check_index >= len(claim.checks):
        return True  # the check was removed: nothing can re-run it
    spec = registry.get(claim.checks[run.check_index].verifier)
    if spec is None or claim.checks[run.check_index].verifier == run.verifier:
        return False
    return spec.is_gpu != (run.hardware_class != CPU_CLASS)


def _not_counted(run: Run, why: str) -> str:
    return f"not counted: run {run.run_id} (check {run.check_index}, {run.hardware_class}): {why}"


def derive(
    claims: Mapping[str, Claim],
    runs: Iterable[Run],
    registry: Mapping[str, VerifierSpec],
    drift: Mapping[str, list[dict[str, Any]]] | None = None,
    sources: Mapping[str, Source] | None = None,
    distrust: Mapping[str, str] | None = None,
) -> list[Status]:
    """Per claim: one status per hardware class with evidence, plus the overall '*' status.

    `drift` is the committed audit record's entries per claim; `sources` give each
    entry's pin role: drift at a tracking pin (or in the notes) stales the claim,
    drift at a fixed pin is carried as information in `upstream`. A run whose stored
    verdict disagrees with what it measured (`distrusted`; computed here unless given)
    is left out as if absent, and the statuses it would have decided say so.
    """
    drift = drift or {}
    sources = sources or {}

    def role_of(e: Mapping[str, Any]) -> str:
        src = sources.get(e.get("source", ""))
        return src.role(e.get("pin")) if src is not None else "tracking"
    runs = list(runs)
    if distrust is None:
        distrust = distrusted(claims, runs, registry)
    notes: dict[str, list[Run]] = {}
    for run in overridden(runs, distrust) if distrust else []:
        notes.setdefault(run.claim_id, []).append(run)
    trusted = [r for r in runs if r.run_id not in distrust] if distrust else runs
    latest = latest_runs(trusted)
    by_claim: dict[str, list[Run]] = {}
    for (cid, _, _), run in latest.items():
        if _orphaned(claims.get(cid), run, registry):
            continue
        by_claim.setdefault(cid, []).append(run)
    # Every batch on record, per (claim, check, class): benchmark verdicts are decided over all of them.
    batches: dict[tuple[str, int, str], list[Run]] = {}
    for r in trusted:
        if r.verifier in BATCH_VERIFIERS and r.verdict in ("supports", "refutes", "inconclusive"):
            batches.setdefault((r.claim_id, r.check_index, r.hardware_class), []).append(r)
    constants = {sid: src.constants for sid, src in sources.items() if src.kind == "hardware"}
    out: list[Status] = []
    for cid, claim in claims.items():
        if not claim.checks:
            if claim.experiment is not None:
                impl = " ".join(x for x in (claim.scope.implementation, claim.scope.revision) if x)
                running = f" running {impl}" if impl else ""
                out.append(Status(claim_id=cid, hardware_class=ANY_CLASS, status="needs-hardware",
                                  reason=f"needs {claim.experiment.hardware}{running}: {claim.experiment.method}"))
            else:
                out.append(Status(claim_id=cid, hardware_class=ANY_CLASS, status="review-only", reason=claim.review or ""))
            continue
        per_class: dict[str, list[Run]] = {}
        for run in by_claim.get(cid, []):
            per_class.setdefault(run.hardware_class, []).append(run)
        class_status: list[Status] = []
        for hw, hw_runs in sorted(per_class.items()):
            class_status.append(_class_status(claim, hw, hw_runs, registry, batches, constants))
        out += class_status
        ran = {r.check_index for r in by_claim.get(cid, []) if r.verdict != "error"}
        missing = [i for i in range(len(claim.checks)) if i not in ran]
        pending: list[Status] = []
        for i in missing:
            spec = registry.get(claim.checks[i].verifier)
            if spec is not None and spec.is_gpu:
                pending.append(Status(claim_id=cid, hardware_class=ANY_CLASS, status="needs-hardware",
                                      reason=f"check {i} ({spec.id}) needs "
                                      f"{requirements_for(spec, claim.checks[i].params).describe()}"))
            else:
                pending.append(Status(claim_id=cid, hardware_class=ANY_CLASS, status="unverified",
                                      reason=f"check {i} ({claim.checks[i].verifier}) has not run"))
        overall = _overall(cid, class_status, pending)
        if cid in notes:
            flagged = sorted(notes[cid], key=lambda r: (r.check_index, r.hardware_class))
            for j, st in enumerate(class_status):
                mine = [r for r in flagged if r.hardware_class == st.hardware_class]
                if mine:
                    out[len(out) - len(class_status) + j] = st.model_copy(
                        update={"reason": f"{st.reason}; {_not_counted(mine[0], distrust[mine[0].run_id])}"})
            more = f" (+{len(flagged) - 1} more)" if len(flagged) > 1 else ""
            overall = overall.model_copy(update={
                "reason": f"{overall.reason}; {_not_counted(flagged[0], distrust[flagged[0].run_id])}{more}"})
        out.append(overall)
    # Drift reaches every claim that cites the drifted lines, checked or not: what it
    # rests on is no longer what it cited. Per-class statuses keep saying what the
    # evidence said; only the overall status turns stale. A refutation stays visible:
    # it is a finding, and drift elsewhere does not undo it.
    for i, st in enumerate(out):
        if st.hardware_class != ANY_CLASS or not drift.get(st.claim_id):
            continue
        stale, info = split_drift(drift[st.claim_id], role_of)
        upstream = _summary(info, "upstream changed since the pin: ") if info else None
        if not stale:
            out[i] = st.model_copy(update={"upstream": upstream})
        elif st.status == "refuted":
            out[i] = st.model_copy(update={"reason": f"{st.reason}; also {_summary(stale, 'source drift: ')}",
                                           "upstream": upstream})
        elif st.status != "stale":
            out[i] = Status(claim_id=st.claim_id, hardware_class=ANY_CLASS, status="stale",
                            reason=f"{_summary(stale, 'source drift: ')} (was {st.status})", run_ids=st.run_ids,
                            strength=st.strength,  # drift changes the status, not what the evidence was
                            upstream=upstream)
        else:
            out[i] = st.model_copy(update={"upstream": upstream})
    return out


def _strength(claim: Claim, runs: list[Run], registry: Mapping[str, VerifierSpec]) -> str | None:
    """Strongest grade among the given (deciding) runs."""
    return strongest([grade(registry.get(r.verifier), r.expect, r.hardware_class)[0] for r in runs])


def _summary(entries: list[Mapping[str, Any]], prefix: str) -> str:
    more = f" (+{len(entries) - 1} more)" if len(entries) > 1 else ""
    return prefix + entry_text(entries[0]) + more


# Verifiers whose verdict is a measurement of the machine (a rate against a band, a count of distinct results):
# decided over every batch of runs on record, not by the latest one alone.
BATCH_VERIFIERS = frozenset({"gpu.benchmark", "gpu.probe", "gpu.bitwise-repeat", "gpu.ncu-metrics", "gpu.ncu-counters",
                             "gpu.atomic-contention", "gpu.scratch-repeat", "gpu.varlen-rows", "gpu.varlen-balance",
                             "gpu.larged-fwd", "gpu.larged-profile", "gpu.variant-benchmark"})


def current_batches(claim: Claim, run: Run, batches: Mapping[tuple[str, int, str], list[Run]],
                    registry: Mapping[str, VerifierSpec]) -> list[Run]:
    """The batches (runs) on record for the latest run's check and class that are still current: same claim
    content, verifier code, parameters and expectation; newest first."""
    spec = registry.get(run.verifier)
    claim_hash = claim.content_hash()
    same = [r for r in batches.get((claim.id, run.check_index, run.hardware_class), [])
            if _stale_reason(claim, r, spec, claim_hash) is None and r.expect == run.expect]
    return sorted(same, key=lambda r: r.rank, reverse=True)


def _batch_text(r: Run, name: str) -> str:
    m = r.measurements.get(name)
    v = f"{m.value:g}" if m is not None and isinstance(m.value, int | float) and not isinstance(m.value, bool) else "?"
    return f"{r.started[:10]} {name} = {v}"


def _batch_verdict(claim: Claim, run: Run, batches: Mapping[tuple[str, int, str], list[Run]],
                   registry: Mapping[str, VerifierSpec]) -> tuple[str, str] | None:
    """(inconclusive, why) when the current batches of a benchmark check reach different verdicts."""
    if run.verifier not in BATCH_VERIFIERS:
        return None
    same = current_batches(claim, run, batches, registry)
    verdicts = {r.verdict for r in same}
    # Disagreement means one batch supports what another refutes; inconclusive batches beside either leave
    # the latest verdict standing.
    if len(same) < 2 or not {"supports", "refutes"} <= verdicts:
        return None
    name = next(iter(run.expect), "")
    sides = "; ".join(f"{v}: " + ", ".join(_batch_text(r, name) for r in same if r.verdict == v)
                      for v in ("supports", "refutes", "inconclusive") if v in verdicts)
    return "inconclusive", f"check {run.check_index}: the {len(same)} batches on record disagree ({sides})"


def _measured_values(runs: list[Run]) -> set[float]:
    out: set[float] = set()

    def walk(v: Any) -> None:
        if isinstance(v, bool) or v is None:
            return
        if isinstance(v, int | float):
            out.add(float(v))
        elif isinstance(v, list | tuple):
            for x in v[:256]:
                walk(x)
        elif isinstance(v, dict):
            for x in list(v.values())[:256]:
                walk(x)

    for r in runs:
        for m in r.measurements.values():
            walk(m.value)
    return out


def _unreproduced(claim: Claim, runs: list[Run], constants: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Statement numbers bound by no check that no supporting measurement reproduces either (the statement is
    re-read at verify time: an edited number cannot come out verified unnoticed)."""
    loose = unbound_numbers(claim, constants)
    if not loose:
        return []
    measured = _measured_values(runs)
    return [u.text for u in loose if not any(abs(u.value - m) <= 1e-9 * max(1.0, abs(m)) for m in measured)]


def _class_status(claim: Claim, hw: str, runs: list[Run], registry: Mapping[str, VerifierSpec],
                  batches: Mapping[tuple[str, int, str], list[Run]] | None = None,
                  constants: Mapping[str, Mapping[str, Any]] | None = None) -> Status:
    ids = [r.run_id for r in runs]
    claim_hash = claim.content_hash()  # once per claim and class, not once per run
    stale = [s for r in runs if (s := _stale_reason(claim, r, registry.get(r.verifier), claim_hash))]
    split = [b for r in runs if (b := _batch_verdict(claim, r, batches or {}, registry))] if not stale else []
    verdicts = {r.verdict for r in runs}
    refuting = [r for r in runs if r.verdict == "refutes"]
    strength = None
    deciding: list[Run] = []
    if stale:
        status, reason = "stale", stale[0]
    elif split:
        status, reason = split[0]
        deciding = [r for r in runs if r.verifier in BATCH_VERIFIERS]
    elif refuting:
        status, reason = "refuted", f"check {refuting[0].check_index}: {refuting[0].reason}"
        strength = _strength(claim, refuting, registry)
        deciding = refuting
    elif verdicts == {"supports"}:
        status, reason = "verified", "; ".join(f"check {r.check_index}: {r.reason}" for r in runs)
        strength = _strength(claim, runs, registry)
        if loose := _unreproduced(claim, runs, constants or {}):
            status, strength = "inconclusive", None
            reason = (f"the statement's number {loose[0]!r} is bound to no check and no measurement reproduces it "
                      f"(the checks support what they bind: {reason})")
    elif "inconclusive" in verdicts:
        r = next(r for r in runs if r.verdict == "inconclusive")
        status, reason = "inconclusive", f"check {r.check_index}: {r.reason}"
        deciding = [r for r in runs if r.verdict == "inconclusive"]
    else:
        r = next(r for r in runs if r.verdict == "error")
        status, reason = "unverified", f"harness error, not evidence: {r.reason}"
    cause = why = by = None
    if status == "inconclusive" and reason.startswith("the statement's number"):
        cause, why, by = "unbound", reason.split(" (the checks", 1)[0], "rule"
    elif split:
        cause, why, by = "spread", "the batches of runs on record reach different verdicts", "rule"
    elif status in ("refuted", "inconclusive"):
        cause, why, by = causes.derive(claim, status, deciding, hw)
        if status == "refuted" and cause == "tie":
            # The stated rule and the pinned code differ only where float rounding decides an exact tie:
            # not a refutation of the statement, and nothing above it should read "rests on refuted".
            status, strength = "inconclusive", None
            reason = f"differs from the pinned code only at an exact tie ({reason})"
    return Status(claim_id=claim.id, hardware_class=hw, status=status, reason=reason, run_ids=ids, strength=strength,
                  cause=cause, cause_why=why, cause_by=by)


def _overall(cid: str, per_class: list[Status], pending: list[Status]) -> Status:
    candidates = per_class + pending
    best = min(candidates, key=lambda s: PRECEDENCE.index(s.status))
    # A claim verified on one class but with checks never run elsewhere is only partly checked:
    # say so in the reason rather than hiding the pending requirement.
    reason = best.reason
    if best.status == "verified" and pending:
        reason += f" (also pending: {pending[0].reason})"
    hw = best.hardware_class if best.hardware_class != ANY_CLASS else ANY_CLASS
    # The verdict's strength: the strongest grade among the classes that reach the same verdict.
    strength = strongest([s.strength for s in per_class if s.status == best.status and s.strength])
    return Status(claim_id=cid, hardware_class=ANY_CLASS, status=best.status,
                  reason=reason if hw == ANY_CLASS else f"[{hw}] {reason}",
                  run_ids=[i for s in per_class for i in s.run_ids], strength=strength,
                  cause=best.cause, cause_why=best.cause_why, cause_by=best.cause_by)
