"""`kb audit`: check every pinned source for drift and mark affected claims stale.

Repositories and notes are compared pin by pin against one head per source
(git backend: a local clone; http backend: GitHub's REST API for repositories),
papers against arXiv's newest version, web pages against their recorded
content hash. Each anchor gets a finding (kb.audit_model); a claim whose cited
content changed becomes stale through `evidence/audit/latest.json`, which
kb.audit_state hands to the status derivation.

Nothing is reported unchanged that was not checked: what could not be checked
is listed as unchecked with the reason. Offline is the default: what only the
network could check is listed and does not fail the audit; with --online,
anything left unchecked makes the exit code 3. Drift found by an earlier audit is carried over for
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
from kb.audit.model import AnchorRef, Finding, Unchecked
from kb.audit.state import drift_path, full_path
from kb.audit.web import check_page
from kb.config import Config
from kb.http import HttpClient, cache_dir
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
          refs: dict[str, str] | None = None) -> AuditReport:
    """Run every check and return the findings (writes nothing). `refs`: source id (or "*") -> ref to compare with."""
    refs = refs or {}
    start = time.perf_counter()
    spawned0 = SPAWNED["count"]
    report = AuditReport(datetime.now(UTC).isoformat(timespec="seconds"), offline, backend, refs or None)
    sources, by_source = load_anchors(db)
    client = None if offline else HttpClient(cache_dir(cfg.root), auth_base=api_base())
    papers: list[Source] = []
    web_status: dict[str, tuple[str, str, bool]] = {}
    for sid in sorted(by_source):
        src, refs_ = sources.get(sid), by_source[sid]
        if src is None:
            report.findings += [r.finding("?", "unchecked", f"source {sid!r} is not registered") for r in refs_]
        elif src.kind in ("repo", "notes"):
            _audit_pinned(cfg, src, refs_, report, client, offline=offline, backend=backend,
                          ref=refs.get(sid, refs.get("*")))
        elif src.kind == "paper":
            papers.append(src)
        elif src.kind == "web":
            web_status[sid] = _web(src, client)
            status, detail, off = web_status[sid]
            report.findings += [r.finding("web", status, detail, offline=off) for r in refs_]
            report.pins.append(_row(src, src.content_sha256 or "(not pinned)", "", report.findings[-len(refs_):], [], "web"))
        elif src.kind == "private":
            report.findings += [r.finding("private", "not-auditable", src.why_uncheckable or "private source") for r in refs_]
        else:  # hardware: audited through its spec pages
            for sp in src.spec_sources:
                if sp not in web_status and sp in sources:
                    web_status[sp] = _web(sources[sp], client)
            report.findings += [_hardware(r, src, web_status) for r in refs_]
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
    if got and all(g[1] == "unpinned" for g in got):
        return r.finding("hardware", "unpinned", "spec pages carry no content hash: " + ", ".join(g[0] for g in got))
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


def _previous_findings(record: dict[str, Any]) -> list[Finding]:
    """The committed record's drift entries as findings (what carry-over compares against)."""
    out = []
    for cid, entries in (record.get("drift") or {}).items():
        for e in entries:
            if "status" not in e or "source" not in e:
                continue
            f = Finding(source=e["source"], kind=e.get("kind", "repo"), status=e["status"], detail=e.get("detail", ""),
                        claim_id=cid, anchor=e.get("anchor"), pin=e.get("pin"), head=e.get("head"), path=e.get("path"),
                        lines=e.get("lines"), heading=e.get("heading"),
                        carried_from=e.get("carried_from") or e.get("found_at") or record.get("checked_at"))
            out.append(f)
    return out


def carry_over(report: AuditReport, previous: list[Finding]) -> int:
    """Keep earlier drift for anchors that could not be re-checked now (marked with its age and why); returns how many.

    Going offline, a network fault or a rate limit never makes a claim fresher:
    the anchor keeps its last known verdict, and the exit code says the audit was partial.
    """
    old = {(f.claim_id, f.anchor, f.source, f.pin, f.path, tuple(f.lines or ()), f.heading): f for f in previous}
    n = 0
    for i, f in enumerate(report.findings):
        key = (f.claim_id, f.anchor, f.source, f.pin, f.path, tuple(f.lines or ()), f.heading)
        if f.status == "unchecked" and key in old:
            prev = old[key]
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
                            ("not-auditable", lambda f: f.status in ("not-auditable", "unpinned"))):
            hits = [f for f in fs if pick(f)]
            if hits:
                out[cid] = {"state": state, "reasons": [f"{f.where()}: {f.status}: {f.detail}" for f in hits]}
                break
        else:
            out[cid] = {"state": "unchanged", "reasons": []}
    return out


def missed(f: Finding, offline: bool) -> bool:
    """True when this finding makes the audit partial (exit 3).

    Offline (the default), what only the network could check (no clone fetched, arXiv, web pages) is
    listed as not checked but is the choice made, not a failure; a fault in local data (a clone that
    lacks a pin, a git error) still is. Online, anything not checked is.
    """
    if not (f.status == "unchecked" or "not_rechecked" in f.extra):
        return False
    return not (offline and f.offline)


def exit_code(report: AuditReport) -> int:
    """3 when something could not be checked that should have been (see `missed`), else 1 on drift, else 0."""
    if any(missed(f, report.offline) for f in report.findings):
        return 3
    return 1 if any(f.drifted for f in report.findings) else 0


def _entry(f: Finding, checked_at: str) -> dict[str, Any]:
    e: dict[str, Any] = {"source": f.source, "kind": f.kind, "status": f.status, "pin": f.pin, "anchor": f.anchor,
                         "head": f.head, "path": f.path, "lines": f.lines, "heading": f.heading,
                         "detail": (f.detail or "")[:200]}
    if f.carried_from:
        e["carried_from"] = f.carried_from
        e["not_rechecked"] = f.extra.get("not_rechecked", "")
    else:
        e["found_at"] = checked_at
    return {k: v for k, v in e.items() if v is not None and v != ""}


def build_record(report: AuditReport, previous: dict[str, Any]) -> dict[str, Any]:
    """The committed record (format 2): drift per claim, per-source state, per-pin counts; no diffs."""
    drift: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for f in report.findings:
        if f.claim_id and f.drifted:
            drift[f.claim_id].append(_entry(f, report.checked_at))
    counts: dict[str, dict[str, int]] = {}
    for f in report.findings:
        key = f"{f.source}@{(f.pin or '')[:12]}"
        counts.setdefault(key, {})
        counts[key][f.status] = counts[key].get(f.status, 0) + 1
    sources: dict[str, dict[str, Any]] = {}
    old_sources = previous.get("sources") or {}
    by_source: dict[str, list[Finding]] = defaultdict(list)
    for f in report.findings:
        by_source[f.source].append(f)
    heads = {p["source"]: (p.get("head"), p.get("head_ref")) for p in report.pins if p.get("head")}
    for sid, fs in sorted(by_source.items()):
        missed = [f for f in fs if f.status == "unchecked" or "not_rechecked" in f.extra]
        if missed and len(missed) == len(fs):
            prev = dict(old_sources.get(sid) or {})
            why = missed[0].extra.get("not_rechecked") or missed[0].detail
            sources[sid] = {**prev, "unchecked": {"at": report.checked_at, "why": (why or "")[:200]}}
        else:
            head, head_ref = heads.get(sid, (None, None))
            entry = {"checked_at": report.checked_at}
            if head:
                entry.update({"head": head, "head_ref": head_ref})
            if missed:
                entry["partly_unchecked"] = len(missed)
            sources[sid] = entry
    return {"format": 2, "checked_at": report.checked_at, "offline": report.offline, "backend": report.backend,
            "refs": report.ref, "sources": sources, "drift": dict(sorted(drift.items())),
            "counts": dict(sorted(counts.items()))}


def _write_record(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


def stale_by_role(findings: list[Finding], sources: dict[str, Source]) -> tuple[dict[str, str], dict[str, str]]:
    """(claims stale through a tracking pin or the notes, claims whose fixed pin changed upstream): id -> first reason."""
    stale: dict[str, list[Finding]] = defaultdict(list)
    info: dict[str, list[Finding]] = defaultdict(list)
    for f in findings:
        if not (f.claim_id and f.stale):
            continue
        src = sources.get(f.source)
        role = src.role(f.pin) if src is not None else "tracking"
        (stale if role == "tracking" else info)[f.claim_id].append(f)

    def text(per: dict[str, list[Finding]]) -> dict[str, str]:
        return {cid: f"{fs[0].where()} {fs[0].status} at {(fs[0].head or 'head')[:12]}"
                + (f" (+{len(fs) - 1} more)" if len(fs) > 1 else "") for cid, fs in sorted(per.items())}

    return text(stale), text(info)


def run_audit(cfg: Config, db: sqlite_utils.Database, *, offline: bool = False, backend: str = "git",
              refs: dict[str, str] | None = None, write: bool | None = None, as_json: bool = False) -> int:
    """`kb audit`: audit, carry the committed state forward, write it (unless a what-if), print the report.

    `refs` maps a source id (or "*" for all) to the ref to compare with; such a
    what-if audit writes the committed record only with `write=True`.
    """
    from kb.audit.report import print_report
    from kb.audit.state import read_record

    report = audit(cfg, db, offline=offline, backend=backend, refs=refs)
    previous = read_record(cfg.root)
    previous.pop("_text", None)
    carried = carry_over(report, _previous_findings(previous))
    code = exit_code(report)
    sources, _ = load_anchors(db)
    stale, upstream = stale_by_role(report.findings, sources)
    record = build_record(report, previous)
    full = {**record, "stale_claims": stale, "upstream_changed": upstream,
            "findings": [f.to_json() for f in report.findings]}
    path = full_path(cfg.root)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(full, indent=1) + "\n")
    tmp.replace(path)
    wrote = write if write is not None else not refs
    if wrote:
        _write_record(drift_path(cfg.root), record)
    print_report(report, claim_states(report.findings), stale, code, carried, as_json, upstream=upstream, wrote=wrote)
    return code
