"""The provenance graph as W3C PROV-JSON: claims and sources as entities, runs as activities."""

from __future__ import annotations

import re
from typing import Any

import sqlite_utils

DEFAULT_BASE = "urn:kb:"  # no invented web address: a URN unless the publisher gives its own base


def prov_document(db: sqlite_utils.Database, base: str = DEFAULT_BASE) -> dict[str, Any]:
    """A PROV-JSON document: claim/source entities, run activities, verifier and machine agents.

    `base` is the IRI the identifiers live under (e.g. the published site's URL);
    only runs of claims that still exist are included, so every relation resolves.
    """
    sep = "" if base.endswith(("/", "#", ":")) else "/"
    doc: dict[str, Any] = {
        "prefix": {k: f"{base}{sep}{part}{'/' if base.startswith('http') else ':'}"
                   for k, part in (("kb", "claim"), ("src", "source"), ("run", "run"), ("ver", "verifier"))},
        "entity": {}, "activity": {}, "agent": {}, "wasDerivedFrom": {}, "used": {},
        "wasGeneratedBy": {}, "wasAssociatedWith": {},
    }
    for s in db.query("SELECT id, kind, title FROM sources"):
        doc["entity"][f"src:{s['id']}"] = {"prov:type": f"kb:{s['kind']}", "prov:label": s["title"] or s["id"]}
    n = 0
    for a in db.query("SELECT claim_id, idx, source, sha, path FROM anchors ORDER BY claim_id, idx"):
        n += 1
        attrs = {"prov:entity": f"kb:{a['claim_id']}", "prov:usedEntity": f"src:{a['source']}"}
        if a["sha"]:
            attrs["kb:revision"] = a["sha"]
        doc["wasDerivedFrom"][f"_:d{n}"] = attrs
    sql = ("SELECT c.id, c.statement, c.content_hash, s.status, s.strength, s.cause, s.cause_by, s.grade_note FROM claims c "
           "LEFT JOIN status s ON s.claim_id = c.id AND s.hardware_class = '*'")
    for c in db.query(sql):
        ent = {"prov:type": "kb:claim", "prov:value": c["statement"], "kb:contentHash": c["content_hash"],
               "kb:status": c["status"]}
        if c["strength"]:
            ent["kb:evidenceStrength"] = c["strength"]  # kb/index/strength.py: measured, derived, cited, restated
        if c["grade_note"]:
            ent["kb:gradeNote"] = c["grade_note"]  # kb/index/instance.py: kb-instance or dispatch-seen
        if c["cause"]:
            ent["kb:cause"] = c["cause"]  # kb/index/cause.py: why a verdict is refuted or inconclusive
            ent["kb:causeBy"] = c["cause_by"] or "rule"
        doc["entity"][f"kb:{c['id']}"] = ent
    runs = ("SELECT r.run_id, r.claim_id, r.verifier, r.verdict, r.hardware_class, r.started FROM runs r "
            "JOIN claims c ON c.id = r.claim_id ORDER BY r.run_id")
    for r in db.query(runs):
        rid = f"run:{r['run_id']}"
        doc["activity"][rid] = {"prov:startTime": r["started"], "kb:verdict": r["verdict"],
                                "kb:hardwareClass": r["hardware_class"]}
        doc["agent"][f"ver:{r['verifier']}"] = {"prov:type": "prov:SoftwareAgent"}
        # Runs record the machine's hardware class (no host names): that is the machine agent.
        machine = "kb:machine-" + re.sub(r"[^A-Za-z0-9_.-]+", "-", r["hardware_class"])
        doc["agent"][machine] = {"prov:type": "kb:machine", "kb:hardwareClass": r["hardware_class"]}
        doc["used"][f"_:u{r['run_id']}"] = {"prov:activity": rid, "prov:entity": f"kb:{r['claim_id']}"}
        doc["wasAssociatedWith"][f"_:a{r['run_id']}"] = {"prov:activity": rid, "prov:agent": f"ver:{r['verifier']}"}
        doc["wasAssociatedWith"][f"_:h{r['run_id']}"] = {"prov:activity": rid, "prov:agent": machine}
        doc["entity"][f"kb:evidence-{r['run_id']}"] = {"prov:type": "kb:evidence"}
        doc["wasGeneratedBy"][f"_:g{r['run_id']}"] = {"prov:entity": f"kb:evidence-{r['run_id']}", "prov:activity": rid}
    return doc
