"""The provenance graph as W3C PROV-JSON: claims and sources as entities, runs as activities."""

from __future__ import annotations

import json
from typing import Any

import sqlite_utils


def prov_document(db: sqlite_utils.Database) -> dict[str, Any]:
    """A PROV-JSON document: claim/source entities, run activities, verifier and host agents."""
    doc: dict[str, Any] = {
        "prefix": {"kb": "https://github.com/kb/claims#", "src": "https://github.com/kb/sources#",
                   "run": "https://github.com/kb/runs#", "ver": "https://github.com/kb/verifiers#"},
        "entity": {}, "activity": {}, "agent": {}, "wasDerivedFrom": {}, "used": {},
        "wasGeneratedBy": {}, "wasAssociatedWith": {},
    }
    for s in db.query("SELECT id, kind, title FROM sources"):
        doc["entity"][f"src:{s['id']}"] = {"prov:type": f"kb:{s['kind']}", "prov:label": s["title"] or s["id"]}
    n = 0
    for a in db.query("SELECT claim_id, idx, source, sha, path FROM anchors"):
        n += 1
        attrs = {"prov:entity": f"kb:{a['claim_id']}", "prov:usedEntity": f"src:{a['source']}"}
        if a["sha"]:
            attrs["kb:revision"] = a["sha"]
        doc["wasDerivedFrom"][f"_:d{n}"] = attrs
    sql = ("SELECT c.id, c.statement, c.content_hash, s.status, s.strength FROM claims c "
           "LEFT JOIN status s ON s.claim_id = c.id AND s.hardware_class = '*'")
    for c in db.query(sql):
        ent = {"prov:type": "kb:claim", "prov:value": c["statement"], "kb:contentHash": c["content_hash"],
               "kb:status": c["status"]}
        if c["strength"]:
            ent["kb:evidenceStrength"] = c["strength"]  # kb/index/strength.py: measured, derived, cited, restated
        doc["entity"][f"kb:{c['id']}"] = ent
    for r in db.query("SELECT run_id, claim_id, verifier, verdict, hardware_class, started, json FROM runs"):
        rid = f"run:{r['run_id']}"
        doc["activity"][rid] = {"prov:startTime": r["started"], "kb:verdict": r["verdict"],
                                "kb:hardwareClass": r["hardware_class"]}
        doc["agent"][f"ver:{r['verifier']}"] = {"prov:type": "prov:SoftwareAgent"}
        host = json.loads(r["json"]).get("environment", {}).get("host", "unknown")
        doc["agent"][f"kb:host-{host}"] = {"prov:type": "kb:machine"}
        doc["used"][f"_:u{r['run_id']}"] = {"prov:activity": rid, "prov:entity": f"kb:{r['claim_id']}"}
        doc["wasAssociatedWith"][f"_:a{r['run_id']}"] = {"prov:activity": rid, "prov:agent": f"ver:{r['verifier']}"}
        doc["wasAssociatedWith"][f"_:h{r['run_id']}"] = {"prov:activity": rid, "prov:agent": f"kb:host-{host}"}
        doc["entity"][f"kb:evidence-{r['run_id']}"] = {"prov:type": "kb:evidence"}
        doc["wasGeneratedBy"][f"_:g{r['run_id']}"] = {"prov:entity": f"kb:evidence-{r['run_id']}", "prov:activity": rid}
    return doc
