"""The graph's own layout (kb/export/graph.py): no edge segment crosses a node box, long edges go through
dummy nodes, and every node names itself in full and can take the keyboard focus."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from kb.export.graph import NODE_H, NODE_W, Graph, by_note, label_lines, layout, load_graph, neighbourhood, to_svg

ROOT = Path(__file__).resolve().parent.parent


def _node(n: str, section: str = "s", status: str = "verified") -> dict:
    return {"id": n, "status": status, "rests_on": None, "statement": f"statement of {n}", "section": section,
            "note": "docs/notes/x.md"}


def sample() -> Graph:
    """Long edges over several rows, edges between sections (groups), and enough sections to wrap into
    several rows of groups, so every kind of route is drawn."""
    g = Graph()
    for s in range(9):  # nine sections of a chain of four, wrapped into rows of groups at ~1400 px
        ids = [f"s{s}.c{i}.a-rather-long-claim-identifier-x{i}" for i in range(4)]
        for i, n in enumerate(ids):
            g.nodes[n] = _node(n, f"section-{s}")
            if i:
                g.edges.append((n, ids[i - 1], "depends_on"))
        g.edges.append((ids[3], ids[0], "refines"))  # spans two rows of its own group: needs two dummies
        g.nodes[f"s{s}.side"] = _node(f"s{s}.side", f"section-{s}")
        g.edges.append((ids[2], f"s{s}.side", "depends_on"))
    for s in range(8):  # across sections, into the next row of groups, and from the last row back to the first
        g.edges.append((f"s{s}.c3.a-rather-long-claim-identifier-x3", f"s{s + 1}.c0.a-rather-long-claim-identifier-x0",
                        "depends_on"))
    g.edges.append(("s8.c2.a-rather-long-claim-identifier-x2", "s0.side", "supersedes"))
    g.edges.append(("s0.c3.a-rather-long-claim-identifier-x3", "s8.side", "depends_on"))
    return g


def crossings(g: Graph, pos: dict[str, tuple[float, float]], routes: list[list[tuple[float, float]]]) -> list[str]:
    """Every (edge, node) where a segment of the edge enters the inside of the node's box."""
    bad = []
    for (a, b, _), pts in zip(g.edges, routes, strict=True):
        for (x1, y1), (x2, y2) in itertools.pairwise(pts):
            for n, (x, y) in pos.items():
                # The inside, less half a pixel: an edge may end on the border of its own nodes.
                left, right, top, bottom = x + 0.5, x + NODE_W - 0.5, y + 0.5, y + NODE_H - 0.5
                if max(x1, x2) > left and min(x1, x2) < right and max(y1, y2) > top and min(y1, y2) < bottom:
                    bad.append(f"{a} -> {b}: segment ({x1:.0f},{y1:.0f})-({x2:.0f},{y2:.0f}) crosses {n}")
    return bad


def _check(g: Graph, group_by: str | None) -> None:
    lay = layout(g, group_by)
    assert set(lay.pos) == set(g.nodes)
    for pts in lay.routes:
        assert all(x1 == x2 or y1 == y2 for (x1, y1), (x2, y2) in itertools.pairwise(pts)), pts
        assert all(0 <= x <= lay.width and 0 <= y <= lay.height for x, y in pts), pts
    assert crossings(g, lay.pos, lay.routes) == []
    boxes = sorted(lay.pos.values())
    for (x1, y1), (x2, y2) in itertools.pairwise(boxes):  # and no two nodes overlap
        assert not (abs(x1 - x2) < NODE_W and abs(y1 - y2) < NODE_H)


def test_no_edge_segment_crosses_a_node_box_in_a_sample_graph() -> None:
    g = sample()
    lay = layout(g, "section")
    assert len({y for _, y in lay.pos.values()}) > 5, "the sample must wrap into several rows of groups"
    _check(g, "section")
    _check(g, None)


def test_the_check_can_fail_a_straight_edge_through_a_node() -> None:
    """Negative control: the old straight centre-to-centre edge of a long edge runs through the claim between."""
    g = Graph({n: _node(n) for n in ("top", "mid", "low", "x1", "x2")},
              [("top", "mid", "depends_on"), ("mid", "low", "depends_on"), ("top", "low", "refines"),
               ("top", "x1", "depends_on"), ("x2", "low", "depends_on")])
    lay = layout(g)
    straight = [[(lay.pos[a][0] + NODE_W / 2, lay.pos[a][1] + NODE_H), (lay.pos[b][0] + NODE_W / 2, lay.pos[b][1])]
                for a, b, _ in g.edges]
    if not crossings(g, lay.pos, straight):  # the long edge must have been placed beside mid, not through it
        pytest.fail("sample too easy: no straight edge crosses a node, so the test would prove nothing")
    assert crossings(g, lay.pos, lay.routes) == []
    # The long edge crosses mid's row through a dummy slot: a vertical segment a column away from mid.
    long_route = lay.routes[2]
    xs_in_mid_row = {x for (x, y1), (_, y2) in itertools.pairwise(long_route)
                     if min(y1, y2) <= lay.pos["mid"][1] and max(y1, y2) >= lay.pos["mid"][1] + NODE_H}
    assert xs_in_mid_row and all(abs(x - (lay.pos["mid"][0] + NODE_W / 2)) >= NODE_W / 2 for x in xs_in_mid_row)


def test_labels_are_whole_and_nodes_focusable() -> None:
    n = "fa2.bwd.design.cross-cta-dq-order-unsolved-and-more"  # 52 characters, the corpus's longest length
    lines = label_lines(n)
    assert len(lines) == 2 and "".join(lines) == n and all(len(x) <= 31 for x in lines)
    assert label_lines("fa1.short") == ["fa1.short"]
    g = Graph({m: _node(m) for m in (n, "fa1.short")}, [(n, "fa1.short", "depends_on")])
    linked = str(to_svg(g, href=lambda cid: f"claims/{cid}.html"))
    assert f'aria-label="{n}: verified' in linked and f"<title>{n}: verified" in linked
    assert "…" not in linked  # nothing cut
    assert len(re.findall(r'<a href="claims/', linked)) == 2
    plain = str(to_svg(g))
    assert plain.count('tabindex="0"') == 2  # without links the nodes still take the focus
    heading = "a-section-heading-far-too-long-for-the-one-column-its-group-has"
    grouped = str(to_svg(Graph({m: _node(m, heading) for m in g.nodes}, g.edges), group_by="section"))
    assert f"<title>{heading}</title>" in grouped and "…</text>" in grouped  # cut on the drawing, whole on hover


@pytest.fixture(scope="module")
def corpus_graph(tmp_path_factory: pytest.TempPathFactory) -> Graph:
    from kb.config import load_config
    from kb.index.store import open_index

    path = tmp_path_factory.mktemp("idx") / "kb.db"
    return load_graph(open_index(load_config(ROOT, str(path))).db)


def test_no_crossing_in_any_note_graph_or_neighbourhood_of_the_corpus(corpus_graph: Graph) -> None:
    notes = sorted({d["note"] for d in corpus_graph.nodes.values() if d.get("note")})
    drawn = 0
    for note in notes:
        sub = by_note(corpus_graph, note)
        if sub.edges:
            _check(sub, "section")
            drawn += 1
    assert drawn >= 5
    linked = sorted({n for a, b, _ in corpus_graph.edges for n in (a, b)})
    for cid in linked[:: max(1, len(linked) // 60)]:  # a spread of claim pages' neighbourhoods
        _check(neighbourhood(corpus_graph, cid, 2), None)
