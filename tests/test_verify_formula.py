"""math.identity: the statement's formula against an independent definition; one changed sign or operand refutes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import claim, kb_subprocess, write_claims

pytest.importorskip("torch", reason="fp64 checks need torch")

BWD = {"vars": {"S": [8, 16], "V": [16, 4], "dO": [8, 4]},
       "let": ["P = softmax(S)", "O = P @ V", "dP = dO @ V.T", "D = rowsum(dO * O)"],
       "rhs": "grad(softmax(S) @ V, S, dO)"}
MERGE = {"vars": {"S": [4, 32], "V": [32, 3]},
         "let": ["m1 = rowmax(S[:, 0:16])", "m2 = rowmax(S[:, 16:32])", "m = max(m1, m2)",
                 "l = exp(m1 - m) * rowsum(exp(S[:, 0:16] - m1)) + exp(m2 - m) * rowsum(exp(S[:, 16:32] - m2))",
                 "u = exp(m1 - m) * (exp(S[:, 0:16] - m1) @ V[0:16]) + exp(m2 - m) * (exp(S[:, 16:32] - m2) @ V[16:32])"],
         "lhs": "u / l", "rhs": "softmax(S) @ V"}
LSE = {"vars": {"S": [6, 40]}, "let": ["m = rowmax(S)"], "lhs": "m + log(rowsum(exp(S - m)))", "rhs": "logsumexp(S)"}


def _c(cid: str, params: dict) -> dict:
    return claim(cid, label="mathematical", statement=f"Formula check {cid}, stated for a test.",
                 checks=[{"verifier": "math.identity", "params": params, "expect": {"max_abs_err": {"at_most": 1e-9}}}])


def test_the_stated_formula_is_what_is_checked(project: Path) -> None:
    write_claims(project, "formula", [
        _c("test.f.ds", {**BWD, "lhs": "P * (dP - D)"}),
        _c("test.f.ds-sign", {**BWD, "lhs": "P * (dP + D)"}),  # dP - D -> dP + D
        _c("test.f.ds-operand", {**BWD, "lhs": "P * (dP - rowsum(dO))"}),  # D without O
        _c("test.f.ds-shape", {**BWD, "lhs": "P * (dP - rowsum(dO * P))"}),  # operands that do not even fit
        _c("test.f.merge", MERGE),
        _c("test.f.merge-flipped", {**MERGE, "let": [s.replace("exp(m1 - m) * rowsum", "exp(m - m1) * rowsum")
                                                  for s in MERGE["let"]]}),
        _c("test.f.lse", LSE),
        _c("test.f.lse-sign", {**LSE, "lhs": "m - log(rowsum(exp(S - m)))"}),
    ])
    summary = json.loads(kb_subprocess(project, "verify", "--json").stdout)
    assert summary["errors"] == []
    refuted = set(summary["refuted"]) - {"test.arith.wrong"}
    assert refuted == {"test.f.ds-sign", "test.f.ds-operand", "test.f.ds-shape", "test.f.merge-flipped",
                       "test.f.lse-sign"}
    rows = {r["id"]: r for r in json.loads(kb_subprocess(project, "claims", "--json").stdout)}
    assert rows["test.f.ds"]["strength"] == "derived"


def test_expressions_are_a_closed_language(project: Path) -> None:
    write_claims(project, "formula", [
        _c("test.f.evil", {"vars": {"S": [2, 2]}, "lhs": "__import__('os').getcwd()", "rhs": "S"}),
        _c("test.f.attr", {"vars": {"S": [2, 2]}, "lhs": "S.numpy()", "rhs": "S"}),
    ])
    summary = json.loads(kb_subprocess(project, "verify", "--json").stdout)
    errors = {e["check"]: e["reason"] for e in summary["errors"]}
    assert set(errors) == {"test.f.evil#0", "test.f.attr#0"}
    assert all("unsupported expression" in r or "unknown name" in r for r in errors.values())
