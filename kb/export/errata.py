"""Errata for the notes' author: every finding, by note file and section and by deck and slide.

A finding is a refuted claim whose cause is `note` or `deck` (kb.index.cause): the notes or a deck assert
what the evidence contradicts. Each entry gives what the source asserts (the claim's statement, in our
words), where (note section or deck slide, with links at the pinned notes commit), what is true instead
(the claims that supersede it or that it disagrees with, with their statuses), the evidence in one
sentence (the cause's reason) and the pinned code lines the checks read. The notes' text is never quoted:
headings are named by their slugs, statements are ours.
"""

from __future__ import annotations

import json
from typing import Any

import sqlite_utils

from kb.index.cause import FINDINGS


def _claims(db: sqlite_utils.Database) -> dict[str, dict[str, Any]]:
    return {r["id"]: {**json.loads(r["json"]), "file": r["file"], "line": r["line"]}
            for r in db.query("SELECT id, json, file, line FROM claims")}


def _overall(db: sqlite_utils.Database) -> dict[str, dict[str, Any]]:
    return {r["claim_id"]: r for r in db.query("SELECT * FROM status WHERE hardware_class = '*'")}


def collect(db: sqlite_utils.Database) -> dict[str, Any]:
    """The findings, grouped: {"notes": [{file, sections: [{heading, findings}]}], "decks": [...], "count": n}."""
    claims, overall = _claims(db), _overall(db)
    sources = {r["id"]: json.loads(r["json"]) for r in db.query("SELECT id, json FROM sources")}
    notes_src = next((s for s in sources.values() if s.get("kind") == "notes"), {})
    repo, commit = (notes_src.get("repo") or "").rstrip("/"), notes_src.get("commit") or ""
    supersede: dict[str, list[str]] = {}
    for cid, c in claims.items():
        for old in c.get("supersedes") or []:
            supersede.setdefault(old, []).append(cid)
    notes: dict[str, dict[str, list[dict[str, Any]]]] = {}
    decks: dict[str, dict[int, list[dict[str, Any]]]] = {}
    count = 0
    for cid, st in sorted(overall.items(), key=lambda kv: (claims.get(kv[0], {}).get("file", ""),
                                                          claims.get(kv[0], {}).get("line", 0))):
        if st["status"] != "refuted" or st.get("cause") not in FINDINGS or cid not in claims:
            continue
        c = claims[cid]
        fixes = [*supersede.get(cid, []), *[d for d in c.get("disagrees_with") or [] if d in claims]]
        entry = {
            "claim": cid, "cause": st["cause"], "asserts": c["statement"], "evidence": st.get("cause_why") or st["reason"],
            "reason": st["reason"],
            "true_instead": [{"claim": f, "statement": claims[f]["statement"],
                              "status": (overall.get(f) or {}).get("status")} for f in dict.fromkeys(fixes)],
            "code": [{"source": a["source"], "path": a["path"], "sha": a["sha"], "lines": a.get("lines"),
                      "link": _code_link(sources.get(a["source"], {}), a)}
                     for a in c.get("anchors", []) if a.get("sha") and a.get("path")],
            "kb": f"{c['file']}:{c['line']}",
        }
        count += 1
        for a in c.get("anchors", []):
            path = a.get("path") or ""
            if a.get("source") != notes_src.get("id"):
                continue
            # A deck finding is listed under its slides, a note finding under its sections (each is about that text).
            if a.get("slide") and st["cause"] == "deck":
                # The slide itself where the notes publish their decks (`slides/<deck>.html#N`, which the decks
                # number as kb does), and the deck's source at the pin.
                site = (notes_src.get("site") or "").rstrip("/")
                slide = f"{site}/{path.removeprefix('docs/')}#{int(a['slide'])}" \
                    if site.startswith("https://") and path.startswith("docs/") else None
                decks.setdefault(path, {}).setdefault(a["slide"], []).append(
                    {**entry, "where": f"{path}, slide {a['slide']}", "link": slide or f"{repo}/blob/{commit}/{path}",
                     "source_link": f"{repo}/blob/{commit}/{path}"})
            elif a.get("heading") and st["cause"] == "note":
                notes.setdefault(path, {}).setdefault(a["heading"], []).append(
                    {**entry, "where": f"{path}#{a['heading']}", "link": f"{repo}/blob/{commit}/{path}#{a['heading']}"})
    return {
        "commit": commit, "repo": repo, "count": count,
        "notes": [{"file": f, "sections": [{"heading": h, "findings": fs} for h, fs in secs.items()]}
                  for f, secs in notes.items()],
        "decks": [{"file": f, "slides": [{"slide": n, "findings": fs} for n, fs in sorted(sl.items())]}
                  for f, sl in sorted(decks.items())],
    }


def _code_link(src: dict[str, Any], a: dict[str, Any]) -> str | None:
    url = (src.get("url") or "").rstrip("/")
    if not url.startswith("https://github.com/"):
        return None
    lines = a.get("lines")
    return f"{url}/blob/{a['sha']}/{a['path']}" + (f"#L{lines[0]}-L{lines[1]}" if lines else "")


def render_markdown(data: dict[str, Any]) -> str:
    """Errata as Markdown, fit to paste as an issue on the notes' repository."""
    out = [f"# Errata for {data['repo'].removeprefix('https://github.com/')} at {data['commit'][:12]}", "",
           f"{data['count']} finding(s): statements of the notes or decks that the pinned code or a measurement "
           "contradicts, each checked by kb. The assertions are restated in kb's words.", ""]

    def finding(f: dict[str, Any]) -> list[str]:
        lines = [f"- **Asserts** ({f['cause']}): {f['asserts']}",
                 f"  - **Evidence:** {f['evidence']}"]
        for t in f["true_instead"]:
            lines.append(f"  - **True instead** (`{t['claim']}`, {t['status']}): {t['statement']}")
        if not f["true_instead"]:
            lines.append("  - **True instead:** see the evidence (kb has no separate correcting claim yet)")
        for c in f["code"]:
            span = f":{c['lines'][0]}-{c['lines'][1]}" if c.get("lines") else ""
            ref = f"[{c['path']}{span} @ {c['sha'][:12]}]({c['link']})" if c.get("link") else f"{c['path']}{span}"
            lines.append(f"  - **Pinned code:** {ref}")
        lines.append(f"  - kb claim `{f['claim']}` ({f['kb']})")
        return lines

    for note in data["notes"]:
        out += [f"## {note['file']}", ""]
        for sec in note["sections"]:
            link = sec["findings"][0]["link"]
            out += [f"### [{sec['heading']}]({link})", ""]
            for f in sec["findings"]:
                out += finding(f)
            out.append("")
    for deck in data["decks"]:
        out += [f"## {deck['file']}", ""]
        for sl in deck["slides"]:
            out += [f"### [slide {sl['slide']}]({sl['findings'][0]['link']})", ""]
            for f in sl["findings"]:
                out += finding(f)
            out.append("")
    if not data["count"]:
        out.append("No findings.")
    return "\n".join(out).rstrip() + "\n"
