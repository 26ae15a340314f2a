"""Pages for the site's readers: one per note (its sections), one per deck (its slides), errata, a glossary.

A learner with a note section open finds its verdicts on that note's page, under the section's heading;
a deck's page lists its slides the same way. Claims are placed by their anchors alone (a claim that
anchors two sections is under both). Only headings, slide titles, our statements and links are shown,
never the notes' text. Every status word, grade, cause and "rests on" links to the glossary.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

from kb.export.site.data import SiteData, note_urls, safe_url, slide_url
from kb.export.site.outline import Heading, Outline

# The glossary: our own definitions of the words the site uses for verdicts and evidence.
STATUS_TERMS = {
    "verified": "Every check of the claim ran and supports it, on each hardware class it ran on.",
    "refuted": "A check ran and contradicts the claim: the pinned code, a computation or a measurement says "
               "otherwise. The cause says whose error it is.",
    "inconclusive": "The checks ran but cannot decide: the result lies within the run-to-run spread, turns on "
                    "an exact tie, or the statement has a number no check reproduces. The cause says which.",
    "stale": "The evidence was made for something that has changed since: the claim's text or checks, the "
             "verifier's code, or the cited source at a pin that tracks the current implementation.",
    "unverified": "The claim has checks that have not run yet on any machine.",
    "needs-hardware": "The checks need hardware this project has not had (an A100, a B200, ...); the "
                      "requirement is named exactly.",
    "review-only": "Nothing executable can decide the claim (a rationale, a reading of prose); it was checked "
                   "by reading, and the reason is given.",
}
GRADE_TERMS = {
    "measured": "Decided by an experiment on a real GPU.",
    "derived": "Decided by a value computed independently of the note's wording: the pinned code compiled or "
               "run, the compiler's output, or an fp64 computation compared with the statement's number.",
    "cited": "Decided by the pinned text itself: the cited source lines (or git metadata) contain what is "
             "claimed.",
    "restated": "Decided by arithmetic over the statement's own numbers or the project's typed constants, or "
                "by a built-in identity that only bounds an error: the weakest grade.",
    "none": "No check decides the claim (review-only, or not run yet).",
    "kb-instance": "A note on a derived grade: the verdict rests only on compiling a traits instance the project "
                   "typed; the compiler confirms what that instance holds, not that the pinned code picks it for "
                   "the input the statement is about.",
    "dispatch-seen": "A note on a derived grade: the project typed the traits instance, and a launch trace of the "
                     "pinned host code on a virtual device shows the pinned dispatch launching exactly that instance "
                     "(the claim page names the input).",
}
CAUSE_TERMS = {
    "note": "A finding: the note asserts what the evidence contradicts. Listed on the errata page.",
    "deck": "A finding: a slide deck asserts what the evidence contradicts. Listed on the errata page.",
    "not-reproduced": "A figure the source reports for other hardware was not reached here: no finding about "
                      "the source.",
    "tie": "The pinned code and the stated rule differ only at an exact numerical tie, which the code resolves "
           "by its own arithmetic.",
    "band-above": "A measurement lies above the band the claim states.",
    "band-below": "A measurement lies below the band the claim states.",
    "spread": "The verdict flips within the run-to-run or batch-to-batch spread (inconclusive only).",
    "unbound": "The statement states a number that no check binds and no measurement reproduces "
               "(inconclusive only).",
    "unreached": "A check ran and, by its own account, does not reach what the statement asserts: one agreeing "
                 "pair of builds, say, for a statement that builds can differ (inconclusive only).",
    "hypothesis": "The KB's own claim (a measurement no source asserts) was wrong: a fact about the measured "
                  "software and hardware, not a finding about the notes.",
    "extraction": "The claim misstated its source: a defect of this project, not of the notes.",
    "unjudged": "Refuted, but nobody has yet recorded whose error it is.",
}
RESTS_TERMS = {
    "rests on": "What lies beneath a claim: following its depends_on premises to the end, the worst state "
                "found (refuted, then stale, unchecked, review-only, verified) and the nearest claim in that "
                "state. A claim can be verified itself and still rest on a refuted premise.",
    "refuted": "Some premise beneath the claim is refuted.",
    "stale": "Some premise beneath the claim is stale, none refuted.",
    "unchecked": "Some premise is unverified, needs hardware or is inconclusive; none is refuted or stale.",
    "review-only": "Some premise was only reviewed by reading; every other premise is verified.",
    "verified": "Every premise beneath the claim is verified.",
}


def glossary() -> list[dict[str, Any]]:
    """The glossary's groups: (anchor prefix, heading, [(term, anchor id, definition)])."""
    def group(prefix: str, heading: str, terms: dict[str, str]) -> dict[str, Any]:
        return {"heading": heading, "terms": [(t, term_id(prefix, t), d) for t, d in terms.items()]}

    return [group("status", "Status words", STATUS_TERMS), group("grade", "Evidence grades", GRADE_TERMS),
            group("cause", "Causes of a refuted or inconclusive verdict", CAUSE_TERMS),
            group("rests", "Rests on", RESTS_TERMS)]


def term_id(prefix: str, term: str) -> str:
    """The glossary anchor of a term (`status-verified`, `grade-measured`, `rests-rests-on`)."""
    return f"{prefix}-{re.sub(r'[^a-z0-9]+', '-', term.lower()).strip('-')}"


def plain_heading(title: str) -> str:
    """A Markdown heading as plain text: code-span backticks and emphasis markers dropped."""
    return re.sub(r"(\*\*|__|\*|`)", "", title).strip()


def note_href(path: str) -> str:
    """Our page for a note (relative to the site root); another file of the notes repository gets `repo-`."""
    if path.startswith("docs/notes/") and "/" not in path.removeprefix("docs/notes/"):
        return f"notes/{Path(path).stem}.html"
    return "notes/repo-" + re.sub(r"[^A-Za-z0-9._-]+", "-", path.removesuffix(".md")) + ".html"


def deck_href(path: str) -> str:
    """Our page for a deck (relative to the site root)."""
    return f"decks/{Path(path).stem}.html"


def section_id(slug: str) -> str:
    """The id of a note section on our note page."""
    return "sec-" + (slug or "top")


def slide_id(number: int) -> str:
    """The id of a slide on our deck page."""
    return f"slide-{int(number)}"


def _notes_source(data: SiteData) -> dict[str, Any]:
    return next((s for s in data.sources.values() if s.get("kind") == "notes"), {})


def _placed(data: SiteData, src_id: str) -> tuple[dict[tuple[str, str], list[dict[str, Any]]],
                                                    dict[tuple[str, int], list[dict[str, Any]]]]:
    """Claims by (note path, heading slug) and by (deck path, slide), each claim once per place."""
    by_heading: dict[tuple[str, str], list[dict[str, Any]]] = {}
    by_slide: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for c in data.claims:
        for a in c.get("anchors", []):
            if a.get("source") != src_id:
                continue
            if a.get("slide"):
                place = by_slide.setdefault((a.get("path") or "", int(a["slide"])), [])
            elif a.get("heading"):
                place = by_heading.setdefault((a.get("path") or "", a["heading"]), [])
            else:
                continue
            if not place or place[-1] is not c:
                place.append(c)
    return by_heading, by_slide


def _counts(claims: list[dict[str, Any]]) -> Counter[str]:
    return Counter(c["overall"]["status"] for c in {c["id"]: c for c in claims}.values())


def _note_title(path: str, heads: list[Heading]) -> str:
    first = next((h for h in heads if h.level == 1), None)
    return plain_heading(first.title) if first else Path(path).stem


def note_pages(data: SiteData, outline: Outline) -> list[dict[str, Any]]:
    """Per note: its sections in order, each with the claims that anchor it and links to it at the source."""
    src = _notes_source(data)
    by_heading, _ = _placed(data, src.get("id", ""))
    pages = []
    for path, heads in sorted(outline.notes.items()):
        github, site = note_urls(src, path, None, outline.note_ids.get(path))
        sections = []
        for h in heads:
            claims = by_heading.get((path, h.slug), [])
            s_github, s_site = note_urls(src, path, h.slug, h.published)
            sections.append({"title": plain_heading(h.title), "slug": h.slug, "level": h.level, "id": section_id(h.slug),
                             "lines": (h.start, h.end) if h.start else None, "github": s_github, "site": s_site,
                             "claims": claims, "counts": _counts(claims)})
        every = [c for s in sections for c in s["claims"]]
        pages.append({"path": path, "href": note_href(path), "title": _note_title(path, heads), "github": github,
                      "in_notes": path.startswith("docs/notes/"),
                      "site": site, "sections": sections, "counts": _counts(every),
                      "n_claims": len({c["id"] for c in every}), "n_sections": len(sections),
                      "n_with_claims": sum(1 for s in sections if s["claims"])})
    return pages


def deck_pages(data: SiteData, outline: Outline) -> list[dict[str, Any]]:
    """Per deck: its slides in order (number and title), each with its claims and a link that opens it (#N)."""
    src = _notes_source(data)
    _, by_slide = _placed(data, src.get("id", ""))
    commit, repo = src.get("commit", ""), safe_url(src.get("repo"))
    pages = []
    for path, heads in sorted(outline.decks.items()):
        slides = []
        for s in heads:
            claims = by_slide.get((path, s.number), [])
            source = f"{repo.rstrip('/')}/blob/{commit}/{path}" + (f"#L{s.line}" if s.line else "") if repo else None
            slides.append({"number": s.number, "title": s.title, "section": s.section, "id": slide_id(s.number),
                           "url": slide_url(src, path, s.number), "github": source, "claims": claims,
                           "counts": _counts(claims)})
        every = [c for s in slides for c in s["claims"]]
        title = heads[0].title if heads else Path(path).stem
        pages.append({"path": path, "href": deck_href(path), "title": title, "slides": slides,
                      "url": slide_url(src, path, 1), "github": f"{repo.rstrip('/')}/blob/{commit}/{path}" if repo else None,
                      "counts": _counts(every), "n_claims": len({c["id"] for c in every}),
                      "n_with_claims": sum(1 for s in slides if s["claims"])})
    return pages


def claim_locations(c: dict[str, Any], data: SiteData, outline: Outline) -> list[dict[str, Any]]:
    """Where a claim sits in the notes: each note section or deck slide it anchors, with our page and theirs."""
    src = _notes_source(data)
    titles = {(p, h.slug): (plain_heading(h.title), h.published) for p, hs in outline.notes.items() for h in hs}
    slide_titles = {(p, s.number): s.title for p, ss in outline.decks.items() for s in ss}
    out = []
    for a in c.get("anchors", []):
        if a.get("source") != src.get("id"):
            continue
        path = a.get("path") or ""
        if a.get("slide"):
            n = int(a["slide"])
            out.append({"kind": "slide", "text": f"{Path(path).name} slide {n}", "title": slide_titles.get((path, n), ""),
                        "href": f"{deck_href(path)}#{slide_id(n)}", "external": slide_url(src, path, n),
                        "external_text": f"open slide {n}"})
        elif a.get("heading"):
            title, published = titles.get((path, a["heading"]), (a["heading"], None))
            github, site = note_urls(src, path, a["heading"], published)
            out.append({"kind": "section", "text": f"{Path(path).name} §", "title": title,
                        "href": f"{note_href(path)}#{section_id(a['heading'])}", "external": site or github,
                        "external_text": "on the notes' site" if site else "on GitHub at the pin"})
    return out


def errata_page(errata: dict[str, Any], data: SiteData, outline: Outline) -> dict[str, Any]:
    """kb errata's findings (kb.export.errata.collect) with section titles and links to our pages and theirs."""
    src = _notes_source(data)
    heads = {(p, h.slug): h for p, hs in outline.notes.items() for h in hs}
    slide_titles = {(p, s.number): s.title for p, ss in outline.decks.items() for s in ss}

    def finding(f: dict[str, Any]) -> dict[str, Any]:
        c = data.by_id.get(f["claim"])
        return {**f, "c": c, "fixes": [{**t, "c": data.by_id.get(t["claim"])} for t in f["true_instead"]]}

    notes = []
    for note in errata["notes"]:
        path = note["file"]
        sections = []
        for sec in note["sections"]:
            h = heads.get((path, sec["heading"]))
            github, site = note_urls(src, path, sec["heading"], h.published if h else None)
            sections.append({"title": plain_heading(h.title) if h else sec["heading"], "slug": sec["heading"],
                             "href": f"{note_href(path)}#{section_id(sec['heading'])}", "github": github, "site": site,
                             "lines": (h.start, h.end) if h and h.start else None,
                             "findings": [finding(f) for f in sec["findings"]]})
        # In the order of the note (kb errata lists them in the order of the claim files).
        order = {h.slug: i for i, h in enumerate(outline.notes.get(path, []))}
        sections.sort(key=lambda s: order.get(s["slug"], len(order)))
        notes.append({"path": path, "href": note_href(path), "sections": sections})
    decks = []
    for deck in errata["decks"]:
        path = deck["file"]
        decks.append({"path": path, "href": deck_href(path), "slides": [
            {"number": sl["slide"], "title": slide_titles.get((path, sl["slide"]), ""),
             "href": f"{deck_href(path)}#{slide_id(sl['slide'])}", "url": slide_url(src, path, sl["slide"]),
             "findings": [finding(f) for f in sl["findings"]]} for sl in deck["slides"]]})
    return {"count": errata["count"], "commit": errata["commit"], "repo": errata["repo"], "notes": notes, "decks": decks}


def upstream_notice(c: dict[str, Any], sources: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The upstream-drift information of a claim, worded for the role of the pin it is about.

    `upstream` (kb.index.status) carries drift that does not stale the claim: any change at a fixed pin
    (a historical revision: what it contains cannot change), or a move or rename at a tracking pin (the
    current implementation: the cited text is unchanged, only where it sits). The role of each pin the
    summary names is looked up in sources/; a summary of several entries adds the roles of the claim's
    other repository anchors.
    """
    text = c["overall"].get("upstream")
    if not text:
        return None
    roles = set()
    for sid, prefix in re.findall(r"([A-Za-z0-9][\w.-]*)@([0-9a-f]{7,40})\b", text):
        roles.add(_role(sources.get(sid) or {}, prefix))
    if "(+" in text or not roles:
        roles |= {_role(sources.get(a["source"]) or {}, a["sha"]) for a in c.get("anchors", []) if a.get("sha")}
    roles.discard(None)
    return {"text": text, "fixed": "fixed" in roles, "tracking": "tracking" in roles}


def _role(src: dict[str, Any], sha_prefix: str) -> str | None:
    if src.get("kind") != "repo":
        return None
    name = next((n for n, sha in (src.get("pins") or {}).items() if sha.startswith(sha_prefix)), None)
    if name is None:
        return None
    return "tracking" if name in (src.get("tracking") or []) else "fixed"
