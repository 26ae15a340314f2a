"""Claims that rest on claims: propagation through depends_on, the blast radius of a refutation, the graph export."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import claim, kb_subprocess, write_claims

pytest.importorskip("torch", reason="kb verify runs workers")


def _arith(cid: str, expect: int, **kw: object) -> dict:
    return claim(cid, checks=[{"verifier": "arith.eval", "params": {"expr": "2 + 2"}, "expect": {"value": {"equals": expect}}}],
                 **kw)


def _chain(project: Path, base_expect: int) -> None:
    # top -> mid -> base (depends_on), side refines mid, and a review-only premise under other.
    write_claims(project, "chain", [
        _arith("t.base", base_expect),
        _arith("t.mid", 4, depends_on=["t.base"]),
        _arith("t.top", 4, depends_on=["t.mid"]),
        _arith("t.side", 4, refines=["t.mid"]),
        _arith("t.other", 4, depends_on=["test.review.only"]),
    ])


def _rows(project: Path) -> dict[str, dict]:
    return {r["id"]: r for r in json.loads(kb_subprocess(project, "claims", "--json").stdout)}


def test_a_refutation_changes_the_state_of_everything_above_it(project: Path) -> None:
    _chain(project, 4)
    kb_subprocess(project, "verify")
    rows = _rows(project)
    assert rows["t.top"]["rests_on"] == "verified" and rows["t.mid"]["rests_on"] == "verified"
    assert rows["t.base"]["rests_on"] is None and rows["t.side"]["rests_on"] is None  # refines is not a premise
    assert rows["t.other"]["rests_on"] == "review-only" and rows["t.other"]["rests_via"] == "test.review.only"
    # The premise turns out false: everything built on it now says so, two levels up, with the chain.
    _chain(project, 5)
    kb_subprocess(project, "verify")
    rows = _rows(project)
    assert rows["t.base"]["status"] == "refuted"
    assert rows["t.top"]["status"] == "verified"  # its own check still passes...
    assert (rows["t.top"]["rests_on"], rows["t.top"]["rests_via"]) == ("refuted", "t.base")  # ...but its premise failed
    assert (rows["t.mid"]["rests_on"], rows["t.mid"]["rests_via"]) == ("refuted", "t.base")
    radius = json.loads(kb_subprocess(project, "claims", "--rests-on", "refuted", "--json").stdout)
    assert sorted(r["id"] for r in radius) == ["t.mid", "t.top"]
    show = kb_subprocess(project, "show", "t.top").stdout
    assert "rests on: refuted, nearest t.base: t.top -> t.mid (verified) -> t.base (refuted)" in show
    assert "used by: t.top (depends on), t.side (refines)" in kb_subprocess(project, "show", "t.mid").stdout
    kb_subprocess(project, "export", "status")
    status = (project / "STATUS.md").read_text()
    assert "## Conclusions built on refuted or unchecked claims" in status
    # Claim ids are links (to the site, or to the claim's YAML line): match the ids, not the targets.
    assert re.search(r"^- \[`t\.base`\]\([^)]*\) \(2\): \[`t\.mid`\]\([^)]*\), \[`t\.top`\]\([^)]*\)$", status, re.M), status


def test_graph_export_loads_in_networkx_with_the_same_edges(project: Path) -> None:
    nx = pytest.importorskip("networkx")
    _chain(project, 4)
    data = json.loads(kb_subprocess(project, "graph", "--format", "json").stdout)
    g = nx.node_link_graph(data, edges="edges")
    got = {(a, b, k) for a, b, k in g.edges(keys=True)}
    assert got == {("t.mid", "t.base", "depends_on"), ("t.top", "t.mid", "depends_on"), ("t.side", "t.mid", "refines"),
                   ("t.other", "test.review.only", "depends_on"), ("test.review.only", "test.arith.four", "depends_on")}
    assert nx.is_directed_acyclic_graph(g)
    hood = json.loads(kb_subprocess(project, "graph", "t.top", "--depth", "1", "--format", "json").stdout)
    assert {n["id"] for n in hood["nodes"]} == {"t.top", "t.mid"}
    dot = kb_subprocess(project, "graph", "t.top", "--format", "dot").stdout
    assert dot.startswith("digraph kb {") and '"t.top" -> "t.mid"' in dot and '"t.side" -> "t.mid" [style=dashed' in dot
    svg = kb_subprocess(project, "graph", "--format", "svg").stdout
    assert svg.startswith("<svg") and svg.count('class="node ') == 7 and 'href' not in svg.split("<defs>")[0]
    assert kb_subprocess(project, "graph", "no.such.claim").returncode == 2


def test_a_check_can_take_its_input_from_a_claim_it_depends_on(project: Path) -> None:
    """A change upstream re-runs what depends on it, in the same `kb verify`, with the new value."""

    def write(base: int) -> None:
        write_claims(project, "chain", [
            claim("t.up", statement=f"The base value is {base}, stated for a test.",
                  checks=[{"verifier": "arith.eval", "params": {"expr": f"{base} + 0"},
                           "expect": {"value": {"equals": base}}}]),
            claim("t.down", statement="Twice the base value is 8, stated for a test.", depends_on=["t.up"],
                  givens={"x": "@t.up#value"},
                  checks=[{"verifier": "arith.eval", "params": {"expr": "v * 2", "vars": {"v": "$x"}},
                           "expect": {"value": {"equals": 8}}}]),
        ])

    write(4)
    first = json.loads(kb_subprocess(project, "verify", "--json").stdout)
    assert first["errors"] == [] and "t.down" not in first["refuted"]
    run = json.loads(kb_subprocess(project, "show", "t.down", "--json").stdout)["runs"][0]
    assert run["environment"]["inputs"] == {"x": 4}
    again = json.loads(kb_subprocess(project, "verify", "--json").stdout)
    assert again["ran"] == 0  # nothing changed upstream: cached
    write(5)  # the premise changes; t.down's own text and check do not
    after = json.loads(kb_subprocess(project, "verify", "--json").stdout)
    assert "t.down" in after["refuted"]  # re-run with x = 5: 10, not 8
    run = json.loads(kb_subprocess(project, "show", "t.down", "--json").stdout)["runs"][0]
    assert run["environment"]["inputs"] == {"x": 5}


def test_an_input_must_come_from_a_declared_dependency(project: Path, run_kb) -> None:
    write_claims(project, "chain", [
        claim("t.up", statement="The base value is 4, stated for a test."),
        claim("t.down", statement="Twice the base value is 8, stated for a test.", givens={"x": "@t.up#value"},
              checks=[{"verifier": "arith.eval", "params": {"expr": "v * 2", "vars": {"v": "$x"}},
                       "expect": {"value": {"equals": 8}}}]),
    ])
    res = run_kb("validate")
    assert res.exit_code == 2 and "takes an input from t.up, which is not in depends_on" in res.output
