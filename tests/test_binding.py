"""Binding: a statement's numbers are tied to its checks, so editing one number is caught by kb validate."""

from __future__ import annotations

import random
from pathlib import Path

import yaml

from kb.records.binding import NUMBER, statement_numbers, unbound_numbers
from kb.records.loader import load_corpus
from tests.conftest import REPO, claim, write_claims

SEED = 20261130


def _constants(corpus) -> dict:
    return {sid: s.constants for sid, s in corpus.sources.items() if s.kind == "hardware"}


def test_changing_one_number_in_a_statement_is_caught() -> None:
    """Seeded sample of real checked claims: change one number, nothing else; validate must reject >= 95%."""
    corpus = load_corpus(REPO)
    constants = _constants(corpus)
    pool = [c for c in corpus.claims.values()
            if c.checks and statement_numbers(c.statement) and not unbound_numbers(c, constants)]
    rng = random.Random(SEED)
    sample = rng.sample(pool, min(300, len(pool)))
    caught, missed = 0, []
    for c in sample:
        m = rng.choice(list(NUMBER.finditer(c.statement)))  # one occurrence, changed where it stands
        value = float(m.group(1).replace(",", ""))
        new = str(int(value) * 2 + 3) if value.is_integer() else f"{value * 2 + 0.3:g}"
        digits = m.group(1)
        mutated = c.model_copy(update={"statement": c.statement[:m.start(1)] + new + c.statement[m.end(1):]})
        if unbound_numbers(mutated, constants):
            caught += 1
        else:
            missed.append((c.id, digits, new))
    rate = caught / len(sample)
    print(f"statement-edit test: {caught}/{len(sample)} caught ({rate:.1%}); missed: {missed[:10]}")
    assert len(sample) >= 200
    assert rate >= 0.95, missed[:20]


def test_validate_names_the_unbound_number_and_givens_must_be_consumed(project: Path, run_kb) -> None:
    write_claims(project, "bind", [
        claim("test.bind.ok", statement="Two plus two equals 4, stated for a test."),
        claim("test.bind.edited", statement="Two plus two equals 5 here, stated for a test.",
              checks=[{"verifier": "arith.eval", "params": {"expr": "2 + 2"}, "expect": {"value": {"equals": 4}}}]),
        claim("test.bind.given", statement="With 7 lanes the sum is 14, stated for a test.", givens={"lanes": 7},
              checks=[{"verifier": "arith.eval", "params": {"expr": "7 * 2"}, "expect": {"value": {"equals": 14}}}]),
        claim("test.bind.consumed", statement="With 9 lanes the sum is 18, stated for a test.", givens={"n": 9},
              checks=[{"verifier": "arith.eval", "params": {"expr": "2 * x", "vars": {"x": "$n"}},
                       "expect": {"value": {"equals": 18}}}]),
        claim("test.bind.label", statement="Step 13 of the note adds 2 and 2 into 4, stated for a test.", labels=["13"]),
    ])
    res = run_kb("validate")
    assert res.exit_code == 2
    out = res.output
    line = next(n for n, t in enumerate((project / "claims" / "bind.yaml").read_text().splitlines(), 1)
                if "equals 5 here" in t)
    assert f"claims/bind.yaml:{line}: claim test.bind.edited field statement: the number '5'" in out
    assert "test.bind.given field givens: given 'lanes' is consumed by no check parameter" in out
    assert "test.bind.consumed" not in out and "test.bind.ok" not in out and "test.bind.label" not in out


def test_a_consumed_given_reaches_the_verifier(project: Path) -> None:
    import json

    import pytest

    pytest.importorskip("torch", reason="kb verify runs workers")
    from tests.conftest import kb_subprocess

    write_claims(project, "bind", [
        claim("test.bind.consumed", statement="With 9 lanes the sum is 18, stated for a test.", givens={"n": 9},
              checks=[{"verifier": "arith.eval", "params": {"expr": "2 * x", "vars": {"x": "$n"}},
                       "expect": {"value": {"equals": 18}}}])])
    summary = json.loads(kb_subprocess(project, "verify", "--json").stdout)
    assert "test.bind.consumed" not in summary["refuted"] and not summary["errors"]
    data = yaml.safe_load((project / "claims" / "bind.yaml").read_text())
    data["claims"][0]["givens"] = {"n": 10}  # the condition changes: the check must see it, and refute
    data["claims"][0]["statement"] = "With 10 lanes the sum is 18, stated for a test."
    (project / "claims" / "bind.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    summary = json.loads(kb_subprocess(project, "verify", "--json").stdout)
    assert "test.bind.consumed" in summary["refuted"]


def test_a_percentage_range_binds_both_ends() -> None:
    from kb.records.binding import statement_numbers

    got = {(text, unit) for text, _, unit in statement_numbers("GEMM kernels reach 80-90% of peak; 36 SMs")}
    assert ("80", "%") in got and ("90%", "%") in got and ("36", None) in got
