"""How an audit is shown: a table per pinned source, the claims it affects, short diffs; or JSON."""

from __future__ import annotations

from collections import Counter
from typing import Any

import click

from kb.audit.model import Finding
from kb.render import emit_json, table

COLUMNS = ["unchanged", "moved", "renamed", "edited", "deleted", "symbol-elsewhere", "invalid", "unchecked"]
# How many distinct edited spans text mode prints diffs for (all are in --json).
MAX_DIFFS = 20


def stale_claims(findings: list[Finding]) -> dict[str, str]:
    """claim id -> reason, for evidence/audit/latest.json: the first stale finding, plus how many more."""
    per: dict[str, list[Finding]] = {}
    for f in findings:
        if f.claim_id and f.stale:
            per.setdefault(f.claim_id, []).append(f)
    out = {}
    for cid, fs in sorted(per.items()):
        first = fs[0]
        reason = f"{first.where()} {first.status} at {first.head[:12] if first.head else 'head'}"
        if first.carried_from:
            reason += f" (found {first.carried_from}; not re-checked)"
        if len(fs) > 1:
            reason += f" (+{len(fs) - 1} more)"
        out[cid] = reason
    return out


def _state(counts: dict[str, int]) -> str:
    if counts.get("unchecked"):
        return "partly unchecked" if sum(counts.values()) > counts["unchecked"] else "unchecked"
    if any(k not in ("unchanged", "unpinned", "not-auditable") for k in counts):
        return "drifted"
    if counts.get("unpinned"):
        return "unpinned (information: no content hash)"
    return "clean"


def summary(findings: list[Finding], states: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Counts for the headline and the JSON document."""
    return {
        "anchors": len(findings),
        "by_status": dict(Counter(f.status for f in findings)),
        "claims": len(states),
        "claims_by_state": dict(Counter(s["state"] for s in states.values())),
    }


def print_report(report: Any, states: dict[str, dict[str, Any]], stale: dict[str, str], code: int,
                 carried: int, as_json: bool, upstream: dict[str, str] | None = None, wrote: bool = True) -> None:
    """Data to stdout (table or JSON), the headline and what could not be checked to stderr."""
    unchecked = Counter((f.source, f.detail) for f in report.findings if f.status == "unchecked")
    if as_json:
        emit_json({
            "checked_at": report.checked_at, "offline": report.offline, "backend": report.backend, "ref": report.ref,
            "exit_code": code, "seconds": round(report.seconds, 3), "git_processes": report.git_processes,
            "http": report.http, "summary": summary(report.findings, states), "pins": report.pins,
            "claims": states, "stale_claims": stale, "upstream_changed": upstream or {}, "wrote_record": wrote,
            "unchecked": [{"source": s, "reason": r, "anchors": n} for (s, r), n in sorted(unchecked.items())],
            "findings": [f.to_json() for f in report.findings],
        })
    else:
        rows = []
        for p in report.pins:
            c = p["counts"]
            pin = p["pin_name"] or (p["pin"][:12] if p["kind"] in ("repo", "notes") else p["pin"])
            other = sum(v for k, v in c.items() if k not in COLUMNS)
            rows.append([p["source"], pin, (p["head"] or "")[:12], p["anchors"], *[c.get(k, 0) for k in COLUMNS], other,
                         _state(c) + ("; " + "; ".join(p["notes"]) if p["notes"] else "")])
        click.echo(table(rows, ["source", "pin", "head", "anchors", "unch", "moved", "renamed", "edited", "deleted",
                                "symbol", "invalid", "unchecked", "other", "state"]))
        affected = [(cid, s["state"], s["reasons"][0] + (f" (+{len(s['reasons']) - 1})" if len(s["reasons"]) > 1 else ""))
                    for cid, s in states.items() if s["state"] in ("stale", "drifted", "unchecked")]
        if affected:
            click.echo("")
            click.echo(table(affected, ["claim", "state", "first reason"]))
        _print_diffs(report.findings)
    n_stale = len(stale)
    drifted = sum(1 for f in report.findings if f.drifted)
    click.echo(f"audited {len(report.findings)} anchors of {len(states)} claims in {report.seconds:.2f} s "
               f"({report.git_processes} git processes, {report.http.get('requests', 0)} HTTP requests): "
               f"{drifted} drifted, {n_stale} claims stale (tracking pins and notes), "
               f"{len(upstream or {})} claims with upstream changes since their fixed pin (information)"
               + (f" ({carried} findings carried over from the last audit, not re-checked)" if carried else ""), err=True)
    if not wrote:
        click.echo("what-if audit: evidence/audit/latest.json left unchanged (pass --write to record it)", err=True)
    for (src, reason), n in sorted(unchecked.items()):
        click.echo(f"could not check {n} anchor(s) of {src}: {reason}", err=True)
    if code == 3:
        click.echo("exit 3: partial audit, some checks could not run (listed above); their earlier verdicts are kept, "
                   "nothing unchecked is reported unchanged", err=True)
    elif report.offline and any(f.offline for f in report.findings if f.status == "unchecked"):
        click.echo("offline audit (the default): what needs the network is listed above as not checked, its earlier "
                   "verdicts kept; `kb audit --online` checks it (exit 3 if it cannot)", err=True)


def _print_diffs(findings: list[Finding]) -> None:
    seen: set[tuple] = set()
    shown = 0
    for f in findings:
        if not f.diff:
            continue
        key = (f.source, f.pin, f.path, tuple(f.lines or ()), f.heading)
        if key in seen:
            continue
        seen.add(key)
        if shown < MAX_DIFFS:
            click.echo(f"\n{f.where()}: {f.status}: {f.detail}")
            click.echo(f.diff)
        shown += 1
    if shown > MAX_DIFFS:
        click.echo(f"\n... {shown - MAX_DIFFS} more diffs in `kb audit --json`")
