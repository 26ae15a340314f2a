"""Bad input: each kind of mistake gives its own clear message with file and line, exit 2, database untouched."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.conftest import claim, write_claims


def _db_digest(project: Path) -> str:
    # The database's content, not its bytes: in WAL mode a checkpoint rewrites pages without changing any row.
    import sqlite3

    con = sqlite3.connect(project / ".kb" / "kb.db")
    try:
        return hashlib.sha256("\n".join(con.iterdump()).encode()).hexdigest()
    finally:
        con.close()


def test_good_project_validates(run_kb) -> None:
    res = run_kb("validate")
    assert res.exit_code == 0, res.output
    assert "ok: 3 claims" in res.output


CASES = {
    "malformed-yaml": ("claims:\n  - id: test.x\n    statement: [unclosed\n", "at line 3", 4),
    "empty-file": ("", "is empty", 1),
    "wrong-type": (None, "generation", None),
    "unknown-field": (None, "is not a known field", None),
    "duplicate-id": (None, "duplicate claim id 'test.arith.four'", None),
    "dangling-source": (None, "source 'no-such-paper' is not registered", None),
    "short-sha": (None, "not a full 40-hex commit SHA", None),
    "inverted-span": (None, "ends before it starts", None),
    "unknown-topic": (None, "unknown topic 'gossip'", None),
    "relation-cycle": (None, "relations form a cycle", None),
}


def _bad_claims(case: str) -> list[dict]:
    repo_anchor = {"source": "flash-attention", "sha": "4f285b354796fb17df8636485b9a04df3ebbb7dc",
                   "path": "csrc/flash_attn/flash_api.cpp", "lines": [10, 12], "sha256": "0" * 64}
    return {
        "wrong-type": [claim("test.bad.type", generation=5)],
        "unknown-field": [claim("test.bad.field", colour="blue")],
        "duplicate-id": [claim("test.arith.four")],
        "dangling-source": [claim("test.bad.src", anchors=[claim("x.y")["anchors"][0], {"source": "no-such-paper", "section": "1"}])],
        "short-sha": [claim("test.bad.sha", anchors=[claim("x.y")["anchors"][0], {**repo_anchor, "sha": "4f285b35"}])],
        "inverted-span": [claim("test.bad.span", anchors=[claim("x.y")["anchors"][0], {**repo_anchor, "lines": [20, 10]}])],
        "unknown-topic": [claim("test.bad.topic", topics=["gossip"])],
        "relation-cycle": [claim("test.cyc.a", depends_on=["test.cyc.b"]), claim("test.cyc.b", refines=["test.cyc.a"])],
    }[case]


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_reported_and_database_untouched(project: Path, run_kb, case: str) -> None:
    assert run_kb("claims", "--json").exit_code == 0  # build the index from good input
    before = _db_digest(project)
    text, expected, line = CASES[case]
    path = project / "claims" / "bad.yaml"
    if text is not None:
        path.write_text(text)
    else:
        write_claims(project, "bad", _bad_claims(case))
    res = run_kb("validate")
    assert res.exit_code == 2
    assert expected in res.output, res.output
    assert "claims/bad.yaml:" in res.output or "claims/good.yaml:" in res.output
    if line is not None:
        assert f"claims/bad.yaml:{line}:" in res.output, res.output
    # Queries refuse to index bad input, and leave the database exactly as it was.
    q = run_kb("claims", "--json")
    assert q.exit_code == 2
    assert "left unchanged" in q.output
    assert _db_digest(project) == before


def test_non_utf8_file(project: Path, run_kb) -> None:
    (project / "claims" / "bad.yaml").write_bytes(b"claims:\n  - id: test.x\n    statement: caf\xe9\n")
    res = run_kb("validate")
    assert res.exit_code == 2
    assert "claims/bad.yaml:3: is not UTF-8 text" in res.output


def test_field_errors_name_line_claim_and_field(project: Path, run_kb) -> None:
    write_claims(project, "bad", [claim("test.bad.field", colour="blue")])
    res = run_kb("validate")
    line = next(n for n, t in enumerate((project / "claims" / "bad.yaml").read_text().splitlines(), 1) if "colour" in t)
    assert f"claims/bad.yaml:{line}: claim test.bad.field field colour: is not a known field" in res.output


def test_all_problems_reported_in_one_pass(project: Path, run_kb) -> None:
    write_claims(project, "bad", [claim("test.bad.a", topics=["gossip"]), claim("test.bad.b", generation="FA9")])
    (project / "claims" / "bad2.yaml").write_text("")
    res = run_kb("validate")
    assert "gossip" in res.output and "FA9" not in res.output.split("generation")[0] and "is empty" in res.output
    assert "3 problem(s)" in res.output


def test_unknown_verifier_and_bad_params(project: Path, run_kb) -> None:
    write_claims(project, "bad", [
        claim("test.bad.ver", checks=[{"verifier": "no.such", "params": {}}]),
        claim("test.bad.par", checks=[{"verifier": "arith.eval", "params": {"exp": "1"}, "expect": {"value": {"equals": 1}}}]),
    ])
    res = run_kb("validate")
    assert "unknown verifier 'no.such'" in res.output
    assert "field checks[0].params.expr" in res.output
