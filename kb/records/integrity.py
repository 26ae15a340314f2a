"""Rules across records: anchors fit their sources, relations resolve, checks bind.

Schema errors belong to `kb.models`; this module checks what no single record
can know about itself.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kb.records.binding import (
    consumed_givens,
    resolve_givens,
    statement_numbers,
    unbound_numbers,
    upstream_inputs,
)
from kb.records.loader import Corpus
from kb.records.models import Claim
from kb.records.yamlfile import Problem, line_of

# The verifier registry, handed in by the caller: id -> spec with `.id` and `.params`
# (a pydantic model). Records sit below the verify stage and never import it.
Registry = Mapping[str, Any]


def _claim_problem(corpus: Corpus, claim: Claim, loc: tuple, message: str) -> Problem:
    at = corpus.claim_at[claim.id]
    data = corpus.claim_data.get(claim.id)
    line = line_of(data, loc) if data is not None else at.line
    field = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in loc).replace(".[", "[")
    return Problem(at.path, line or at.line, message, claim_id=claim.id, field=field or None)


def _anchor_problems(corpus: Corpus, claim: Claim) -> list[Problem]:
    out: list[Problem] = []
    has_note = False
    for i, anchor in enumerate(claim.anchors):
        loc = ("anchors", i)
        src = corpus.sources.get(anchor.source)
        if src is None:
            out.append(_claim_problem(corpus, claim, (*loc, "source"), f"source {anchor.source!r} is not registered in sources/"))
            continue
        if src.kind == "notes":
            has_note = True
            deck = (anchor.path or "").endswith(".html")
            # A note section is named by its heading slug; a slide of a deck by its position.
            for need in ("path", "slide" if deck else "heading", "sha256"):
                if not getattr(anchor, need):
                    out.append(_claim_problem(corpus, claim, loc, f"a {'slide' if deck else 'notes'} anchor needs {need}"))
            if deck and anchor.heading:
                out.append(_claim_problem(corpus, claim, (*loc, "heading"), "a slide anchor names its slide, not a heading"))
            if anchor.slide is not None and not deck:
                out.append(_claim_problem(corpus, claim, (*loc, "slide"), "slide applies only to a deck (an .html path)"))
        elif anchor.slide is not None:
            out.append(_claim_problem(corpus, claim, (*loc, "slide"), f"slide only applies to notes anchors, not {src.kind}"))
        elif src.kind == "repo":
            if not anchor.sha:
                out.append(_claim_problem(corpus, claim, loc, "a repository anchor needs sha (a full commit SHA)"))
            elif anchor.sha not in src.pins.values():
                out.append(_claim_problem(corpus, claim, (*loc, "sha"), f"{anchor.sha} is not one of the pins of source {src.id!r}"))
            if anchor.lines and not anchor.path:
                # A commit-level anchor (sha alone) is fine; a line span needs the file it is in.
                out.append(_claim_problem(corpus, claim, loc, "a repository anchor with lines needs path"))
            if anchor.lines and not anchor.sha256:
                out.append(_claim_problem(corpus, claim, (*loc, "lines"), "a line span needs the sha256 of those lines"))
        elif src.kind == "paper":
            if anchor.paper_locator() is None:
                out.append(_claim_problem(corpus, claim, loc, "a paper anchor needs a section, figure, table, equation or algorithm"))
        if src.kind != "repo" and (anchor.lines or anchor.sha):
            if src.kind != "notes":
                out.append(_claim_problem(corpus, claim, loc, f"lines/sha only apply to repository anchors, not {src.kind}"))
    # Provenance: a note section, or an entry of the notes author's own source list
    # (a private report or web page the notes do not quote).
    listed = any(corpus.sources[a.source].kind in ("private", "web") for a in claim.anchors if a.source in corpus.sources)
    if not has_note and not listed:
        out.append(_claim_problem(corpus, claim, ("anchors",),
                                  "every claim needs a notes anchor (or an anchor to a listed private/web source)"))
    return out


def _executable_pins(spec: Any) -> frozenset:
    """The (source, sha) pairs a pinned-code verifier declares it may execute (`executable_pins()` in its module)."""
    module = sys.modules.get(getattr(getattr(spec, "func", None), "__module__", ""), None)
    pins = getattr(module, "executable_pins", None)
    return frozenset(pins()) if callable(pins) else frozenset()


def _check_problems(corpus: Corpus, claim: Claim, registry: Registry) -> list[Problem]:
    out: list[Problem] = []
    for i, check in enumerate(claim.checks):
        loc = ("checks", i)
        spec = registry.get(check.verifier)
        if spec is None:
            out.append(_claim_problem(corpus, claim, (*loc, "verifier"), f"unknown verifier {check.verifier!r}"))
            continue
        # An input from a dependency is only known when the check is planned: validate with a stand-in number.
        givens = {k: (1 if k in upstream_inputs(claim.givens) else v) for k, v in claim.givens.items()}
        try:
            resolved = resolve_givens(check.params, givens)
        except KeyError as exc:
            out.append(_claim_problem(corpus, claim, (*loc, "params"), f"uses ${exc.args[0]}, which is not in givens"))
            continue
        try:
            params = spec.params.model_validate(resolved)
        except ValidationError as exc:
            for err in exc.errors():
                ploc = (*loc, "params", *err["loc"])
                out.append(_claim_problem(corpus, claim, ploc, err["msg"].removeprefix("Value error, ")))
            continue
        anchor_ix = getattr(params, "anchor", None)
        # Code checks read a file of the pinned tree: their anchor is a repository anchor with a path.
        if spec.id.startswith("code.") and anchor_ix is not None:
            a = claim.anchors[anchor_ix] if 0 <= anchor_ix < len(claim.anchors) else None
            src = corpus.sources.get(a.source) if a else None
            if a is None or src is None or src.kind != "repo" or not a.path or not a.sha:
                out.append(_claim_problem(corpus, claim, (*loc, "params", "anchor"),
                                          f"anchor {anchor_ix} is not a repository anchor with a path at a pinned sha"))
            elif getattr(spec, "kind", None) == "pinned-code" and (a.source, a.sha) not in _executable_pins(spec):
                # Code kb compiles or runs comes only from revisions the verifier package trusts (reviewed as code).
                out.append(_claim_problem(corpus, claim, (*loc, "params", "anchor"),
                                          f"{a.source}@{a.sha[:12]} is not a revision whose code kb may execute: add it to "
                                          "EXECUTABLE_PINS in the verifier package (verifiers/trust.py), a code change, "
                                          "or trust it on this machine only with KB_TRUST_PINS=source@sha"))
        # Only a line check needs a line span; commit-level checks (source.commit) cite a commit.
        if spec.id == "source.lines" and anchor_ix is not None:
            if not 0 <= anchor_ix < len(claim.anchors):
                out.append(_claim_problem(corpus, claim, (*loc, "params", "anchor"), f"anchor index {anchor_ix} is out of range"))
            else:
                a = claim.anchors[anchor_ix]
                src = corpus.sources.get(a.source)
                if src is None or src.kind != "repo" or not a.lines:
                    out.append(_claim_problem(corpus, claim, (*loc, "params", "anchor"),
                                              f"anchor {anchor_ix} is not a repository anchor with a line span"))
    return out


def _binding_problems(corpus: Corpus, claim: Claim, constants: dict) -> list[Problem]:
    """Every statement number of a checked claim is reproduced by a check or a given a check consumes (non-blocking)."""
    return [dataclasses.replace(p, blocking=False) for p in _binding(corpus, claim, constants)]


def _binding(corpus: Corpus, claim: Claim, constants: dict) -> list[Problem]:
    out = [_claim_problem(corpus, claim, ("statement",),
                          f"the number {u.text!r} is bound to no check: reproduce it in an expectation or a check "
                          "parameter, or declare it in givens and consume it as \"$name\"")
           for u in unbound_numbers(claim, constants)]
    written = {t for t, _, _ in statement_numbers(claim.statement)}
    out += [_claim_problem(corpus, claim, ("labels",), f"label {lab!r} is not a number written in the statement")
            for lab in claim.labels if lab not in written]
    for name, (dep, _) in upstream_inputs(claim.givens).items():
        if dep not in claim.depends_on:
            out.append(_claim_problem(corpus, claim, ("givens", name),
                                      f"takes an input from {dep}, which is not in depends_on"))
    unused = sorted(set(claim.givens) - consumed_givens(claim.checks))
    if unused:
        out.append(_claim_problem(corpus, claim, ("givens",), f"given {unused[0]!r} is consumed by no check parameter"))
    return out


def _relation_problems(corpus: Corpus) -> list[Problem]:
    out: list[Problem] = []
    graph: dict[str, list[str]] = {}
    for claim in corpus.claims.values():
        edges = []
        for rel in ("depends_on", "refines", "supersedes", "disagrees_with"):
            for j, target in enumerate(getattr(claim, rel)):
                if target not in corpus.claims:
                    out.append(_claim_problem(corpus, claim, (rel, j), f"points at unknown claim {target!r}"))
                elif target == claim.id:
                    out.append(_claim_problem(corpus, claim, (rel, j), "a claim cannot relate to itself"))
                elif rel != "disagrees_with":  # a disagreement is symmetric, not an order: no cycle check
                    edges.append(target)
        graph[claim.id] = edges
    # Iterative DFS colouring: report each cycle once, at its first member.
    colour: dict[str, int] = {}
    for start in graph:
        if colour.get(start):
            continue
        stack = [(start, iter(graph[start]))]
        path = [start]
        colour[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                colour[node] = 2
                stack.pop()
                path.pop()
            elif colour.get(nxt) == 1:
                cycle = [*path[path.index(nxt):], nxt]
                out.append(_claim_problem(corpus, corpus.claims[nxt], ("depends_on",),
                                          "relations form a cycle: " + " -> ".join(cycle)))
            elif not colour.get(nxt):
                colour[nxt] = 1
                path.append(nxt)
                stack.append((nxt, iter(graph[nxt])))
    return out


def check_integrity(corpus: Corpus, registry: Registry) -> list[Problem]:
    """Every cross-record problem of a loaded corpus, checks bound against `registry`."""
    out: list[Problem] = []
    for src in corpus.sources.values():
        for ref in src.spec_sources:
            if ref not in corpus.sources:
                at = corpus.source_at[src.id]
                out.append(Problem(at.path, at.line, f"source {src.id}: spec source {ref!r} is not registered", field="spec_sources"))
    constants = {sid: s.constants for sid, s in corpus.sources.items() if s.kind == "hardware"}
    for claim in corpus.claims.values():
        out += _anchor_problems(corpus, claim)
        out += _check_problems(corpus, claim, registry)
        out += _binding_problems(corpus, claim, constants)
    out += _relation_problems(corpus)
    return out


def validate(root: Path, registry: Registry) -> Corpus:
    """Load the corpus and add integrity problems to it."""
    from kb.records.loader import load_corpus

    corpus = load_corpus(root)
    corpus.problems += check_integrity(corpus, registry)
    corpus.problems.sort(key=lambda p: (p.path, p.line))
    return corpus
