"""`kb audit`: check every pinned source for drift and mark affected claims stale.

Repositories and notes are compared pin by pin against one head per source
(git backend: a local clone; http backend: GitHub's REST API for repositories),
papers against arXiv's newest version, web pages against their recorded
content hash. Each anchor gets a finding (kb.audit_model); a claim whose cited
content changed becomes stale through `evidence/audit/latest.json`, which
kb.audit_state hands to the status derivation.

Nothing is reported unchanged that was not checked: what could not be checked
is listed as unchecked with the reason, and makes the exit code 3 unless the
reason is only --offline. Drift found by an earlier audit is carried over for
anchors that could not be re-checked now, so going offline never freshens a
claim.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlite_utils

from kb.audit.arxiv import newest_versions
from kb.audit.classify import PendingSymbol, classify_notes, classify_repo_deferred, settle_symbols
from kb.audit.git import SPAWNED, GitSource
from kb.audit.github import GitHubSource, api_base
from kb.audit.http import HttpClient
from kb.audit.model import AnchorRef, Finding, Unchecked
from kb.audit.state import drift_path, full_path
from kb.audit.web import check_page
from kb.config import Config
from kb.records.models import Anchor, Source


@dataclass
class AuditReport:
    """Everything one audit found."""

    checked_at: str
    offline: bool
    backend: str
    ref: str | None
    findings: list[Finding] = field(default_factory=list)
    pins: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    git_processes: int = 0
    http: dict[str, int] = field(default_factory=dict)


def load_anchors(db: sqlite_utils.Database) -> tuple[dict[str, Source], dict[str, list[AnchorRef]]]:
    """Sources by id and every claim anchor grouped by source id, read from the index.

    Anchors come from the claim JSON rather than the anchors table, which does
    not keep `symbol`.
    """
    sources = {r["id"]: Source.model_validate_json(r["json"]) for r in db["sources"].rows}
    by_source: dict[str, list[AnchorRef]] = defaultdict(list)
    for row in db.query("SELECT id, json FROM claims ORDER BY id"):
        for i, a in enumerate(json.loads(row["json"]).get("anchors", [])):
            anchor = Anchor.model_validate(a)
            by_source[anchor.source].append(AnchorRef(row["id"], i, anchor))
    return sources, dict(by_source)


def audit(cfg: Config, db: sqlite_utils.Database, *, offline: bool = False, backend: str = "git",
          ref: str | None = None) -> AuditReport:
    """Run every check and return the findings (writes nothing)."""
    start = time.perf_counter()
    spawned0 = SPAWNED["count"]
    report = AuditReport(datetime.now(UTC).isoformat(timespec="seconds"), offline, backend, ref)
    sources, by_source = load_anchors(db)
    client = None if offline else HttpClient(cfg.root / ".kb" / "http-cache", auth_base=api_base())
    papers: list[Source] = []
    web_status: dict[str, tuple[str, str, bool]] = {}
    for sid in sorted(by_source):
        src, refs = sources.get(sid), by_source[sid]
        if src is None:
            report.findings += [r.finding("?", "unchecked", f"source {sid!r} is not registered") for r in refs]
        elif src.kind in ("repo", "notes"):
            _audit_pinned(cfg, src, refs, report, client, offline=offline, backend=backend, ref=ref)
        elif src.kind == "paper":
            papers.append(src)
        elif src.kind == "web":
            web_status[sid] = _web(src, client)
            status, detail, off = web_status[sid]
            report.findings += [r.finding("web", status, detail, offline=off) for r in refs]
            report.pins.append(_row(src, src.content_sha256 or "(not pinned)", "", report.findings[-len(refs):], [], "web"))
        elif src.kind == "private":
            report.findings += [r.finding("private", "not-auditable", src.why_uncheckable or "private source") for r in refs]
        else:  # hardware: audited through its spec pages
            for sp in src.spec_sources:
                if sp not in web_status and sp in sources:
                    web_status[sp] = _web(sources[sp], client)
            report.findings += [_hardware(r, src, web_status) for r in refs]
    _audit_papers(papers, by_source, report, client)
    report.seconds = time.perf_counter() - start
    report.git_processes = SPAWNED["count"] - spawned0
    report.http = dict(client.stats) if client else {}
    return report


def _row(src: Source, pin: str, head: str, found: list[Finding], notes: list[str], kind: str,
         pin_name: str = "", head_ref: str = "") -> dict[str, Any]:
    counts: dict[str, int] = defaultdict(int)
    for f in found:
        counts[f.status] += 1
    return {"source": src.id, "kind": kind, "pin": pin, "pin_name": pin_name, "head": head, "head_ref": head_ref,
            "anchors": len(found), "counts": dict(counts), "notes": notes}


def _audit_pinned(cfg: Config, src: Source, refs: list[AnchorRef], report: AuditReport, client: HttpClient | None,
                  *, offline: bool, backend: str, ref: str | None) -> None:
    """Repositories and notes: one view of the source, one diff per pin."""
    kind = src.kind
    names = {sha: name for name, sha in src.pins.items()}
    by_pin: dict[str, list[AnchorRef]] = defaultdict(list)
    for r in refs:
        by_pin[r.anchor.sha or src.commit or ""].append(r)
    if backend == "http" and kind == "repo":
        view: GitSource | GitHubSource = GitHubSource(src, client, offline=offline, ref=ref)  # type: ignore[arg-type]
    else:
        view = GitSource(src, cfg, offline=offline, ref=ref)
    try:
        try:
            view.open()
        except Unchecked as exc:
            for pin, group in sorted(by_pin.items()):
                found = [r.finding(kind, "unchecked", exc.reason, pin=pin or None, offline=exc.offline) for r in group]
                report.findings += found
                report.pins.append(_row(src, pin, "", found, [exc.reason], kind, names.get(pin, "")))
            return
        done: list[tuple[str, list[Finding], list[str]]] = []
        pending: list[PendingSymbol] = []
        for pin, group in sorted(by_pin.items(), key=lambda kv: names.get(kv[0], kv[0])):
            notes: list[str] = []
            if not pin:
                found = [r.finding(kind, "unchecked", "the anchor names no pin") for r in group]
            else:
                try:
                    diff = view.diff(pin)
                    notes = diff.notes
                    if kind == "repo":
                        found, waiting = classify_repo_deferred(group, diff, view)
                        pending += waiting
                    else:
                        found = classify_notes(group, diff, view)
                except Unchecked as exc:
                    found = [r.finding(kind, "unchecked", exc.reason, pin=pin, head=view.head, offline=exc.offline)
                             for r in group]
            done.append((pin, found, notes))
        # Every pin is compared with the same head: one symbol search serves them all.
        settle_symbols(pending, view, view.head)
        for pin, found, notes in done:
            if view.stale_head:
                # Online, but the fetch failed: "unchanged" is only against an old local head.
                notes = [*notes, view.stale_head]
                for f in found:
                    if f.status == "unchanged":
                        f.status = "unchecked"
                        f.detail = f"unchanged against the local head {view.head[:12]} only; {view.stale_head}"
            report.findings += found
            report.pins.append(_row(src, pin, view.head, found, notes, kind, names.get(pin, ""), view.head_ref))
        if view.notes:
            report.pins[-1]["notes"] += view.notes
    finally:
        view.close()


def _web(src: Source, client: HttpClient | None) -> tuple[str, str, bool]:
    try:
        status, detail = check_page(src, client)
        return status, detail, False
    except Unchecked as exc:
        return "unchecked", exc.reason, exc.offline


def _hardware(r: AnchorRef, src: Source, web: dict[str, tuple[str, str, bool]]) -> Finding:
    got = [(sp, *web[sp]) for sp in src.spec_sources if sp in web]
    bad = [g for g in got if g[1] in ("changed", "deleted")]
    if bad:
        return r.finding("hardware", "changed", "spec page changed: " + ", ".join(f"{g[0]} ({g[2]})" for g in bad))
    open_ = [g for g in got if g[1] == "unchecked"]
    if open_ or not got:
        why = "; ".join(f"{g[0]}: {g[2]}" for g in open_) or "no spec pages listed"
        return r.finding("hardware", "unchecked", f"spec pages not checked: {why}", offline=bool(open_) and all(g[3] for g in open_))
    return r.finding("hardware", "unchanged", "all spec pages unchanged")


def _audit_papers(papers: list[Source], by_source: dict[str, list[AnchorRef]], report: AuditReport,
                  client: HttpClient | None) -> None:
    results = newest_versions([p.arxiv or "" for p in papers], client) if client else {}
    for p in papers:
        refs = by_source[p.id]
        pin = f"v{p.version}"
        res = results.get(p.arxiv or "")
        if client is None:
            found = [r.finding("paper", "unchecked", "offline: arXiv not queried", pin=pin, offline=True) for r in refs]
        elif res is None or res.newest is None:
            why = res.error if res else "not queried"
            found = [r.finding("paper", "unchecked", why or "unknown", pin=pin) for r in refs]
        elif res.newest > (p.version or 0):
            found = [r.finding("paper", "new-version", f"arXiv:{p.arxiv} has v{res.newest}; pinned {pin}",
                               pin=pin, head=f"v{res.newest}") for r in refs]
        elif res.newest == p.version:
            found = [r.finding("paper", "unchanged", f"{pin} is the newest version", pin=pin, head=pin) for r in refs]
        else:
            found = [r.finding("paper", "invalid", f"pinned {pin} but arXiv's newest is v{res.newest}",
                               pin=pin, head=f"v{res.newest}") for r in refs]
        report.findings += found
        report.pins.append(_row(p, f"arXiv:{p.arxiv}{pin}", found[0].head or "", found, [], "paper"))


def carry_over(report: AuditReport, previous: dict[str, Any]) -> int:
    """Keep an earlier audit's drift for anchors that could not be re-checked now; returns how many."""
    old = {}
    for data in previous.get("findings", []):
        if data.get("claim_id") is not None and data.get("drifted"):
            f = Finding.from_json(data)
            old[(f.claim_id, f.anchor, f.source, f.pin, f.path, tuple(f.lines or ()), f.heading)] = f
    n = 0
    for i, f in enumerate(report.findings):
        key = (f.claim_id, f.anchor, f.source, f.pin, f.path, tuple(f.lines or ()), f.heading)
        if f.status == "unchecked" and key in old:
            prev = old[key]
            prev.carried_from = prev.carried_from or previous.get("checked_at")
            prev.offline = f.offline
            prev.extra = {**prev.extra, "not_rechecked": f.detail}
            report.findings[i] = prev
            n += 1
    return n


def claim_states(findings: list[Finding]) -> dict[str, dict[str, Any]]:
    """claim id -> {state, reasons}: stale > drifted > unchecked > not-auditable > unchanged."""
    per: dict[str, list[Finding]] = defaultdict(list)
    for f in findings:
        if f.claim_id:
            per[f.claim_id].append(f)
    out = {}
    for cid, fs in sorted(per.items()):
        for state, pick in (("stale", lambda f: f.stale), ("drifted", lambda f: f.drifted),
                            ("unchecked", lambda f: f.status == "unchecked" or "not_rechecked" in f.extra),
                            ("not-auditable", lambda f: f.status == "not-auditable")):
            hits = [f for f in fs if pick(f)]
            if hits:
                out[cid] = {"state": state, "reasons": [f"{f.where()}: {f.status}: {f.detail}" for f in hits]}
                break
        else:
            out[cid] = {"state": "unchanged", "reasons": []}
    return out


def exit_code(report: AuditReport) -> int:
    """3 when something could not be checked (beyond what --offline accepted), else 1 on drift, else 0."""
    unaccepted = [f for f in report.findings if (f.status == "unchecked" or "not_rechecked" in f.extra)
                  and not (report.offline and f.offline)]
    if unaccepted:
        return 3
    return 1 if any(f.drifted for f in report.findings) else 0


def _write_summary(path: Path, doc: dict[str, Any]) -> None:
    """The committed part of an audit: what went stale and per-pin counts, no diffs."""
    counts: dict[str, dict[str, int]] = {}
    for f in doc["findings"]:
        key = f"{f.get('source')}@{(f.get('pin') or f.get('sha') or '')[:12]}"
        counts.setdefault(key, {})
        counts[key][f.get("status", "?")] = counts[key].get(f.get("status", "?"), 0) + 1
    summary = {"checked_at": doc["checked_at"], "offline": doc["offline"], "backend": doc["backend"],
               "ref": doc["ref"], "stale_claims": doc["stale_claims"],
               "counts": dict(sorted(counts.items()))}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


def run_audit(cfg: Config, db: sqlite_utils.Database, *, offline: bool = False, backend: str = "git",
              ref: str | None = None, as_json: bool = False) -> int:
    """`kb audit`: audit, write evidence/audit/latest.json and the full findings, print the report."""
    from kb.audit.report import print_report, stale_claims

    report = audit(cfg, db, offline=offline, backend=backend, ref=ref)
    path = full_path(cfg.root)
    previous: dict[str, Any] = {}
    if path.exists():
        try:
            previous = json.loads(path.read_text())
        except (OSError, ValueError):
            previous = {}
    carried = carry_over(report, previous)
    code = exit_code(report)
    stale = stale_claims(report.findings)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"checked_at": report.checked_at, "offline": offline, "backend": backend, "ref": ref,
           "stale_claims": stale, "findings": [f.to_json() for f in report.findings]}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)
    _write_summary(drift_path(cfg.root), doc)
    print_report(report, claim_states(report.findings), stale, code, carried, as_json)
    return code
