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


T = "S[:, j*8:(j+1)*8]"
ONLINE = {"vars": {"S": [4, 32], "V": [32, 3]},
          "let": ["m = rowmax(S) * 0 - inf", "l = zeros_like(m)", "u = zeros_like(S[:, 0:3])",
                  {"for": "j", "range": 4, "do": [f"mn = max(m, rowmax({T}))",
                                                  f"l = exp(m - mn) * l + rowsum(exp({T} - mn))",
                                                  f"u = exp(m - mn) * u + exp({T} - mn) @ V[j*8:(j+1)*8]",
                                                  "m = mn"]}],
          "lhs": "u / l", "rhs": "softmax(S) @ V"}
# dQ of a K/V-outer, Q-inner tiled backward, written back tile by tile into a full-size buffer.
TILED_DQ = {"vars": {"Q": [8, 4], "K": [16, 4], "V": [16, 4], "dO": [8, 4]},
            "let": ["L = logsumexp(Q @ K.T)", "D = rowsum(dO * (softmax(Q @ K.T) @ V))", "dQ = zeros_like(Q)",
                    {"for": "j", "range": 2, "do": [{"for": "i", "range": 2, "do": [
                        "P = exp(Q[i*4:(i+1)*4] @ K[j*8:(j+1)*8].T - L[i*4:(i+1)*4])",
                        "dS = P * (dO[i*4:(i+1)*4] @ V[j*8:(j+1)*8].T - D[i*4:(i+1)*4])",
                        "dQ = add_rows(dQ, i*4, dS @ K[j*8:(j+1)*8])"]}]}],
            "lhs": "dQ", "rhs": "grad(softmax(Q @ K.T) @ V, Q, dO)"}


def _with_loop(params: dict, path: tuple, value: object) -> dict:
    """A copy of params with one loop field (or step) replaced."""
    import copy

    out = copy.deepcopy(params)
    node = out["let"]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


def test_loops_check_the_stated_recurrence(project: Path) -> None:
    """The per-tile recurrence as the statement gives it; a missing rescale or a skipped tile refutes."""
    write_claims(project, "formula", [
        _c("test.f.online", ONLINE),
        _c("test.f.online-no-rescale", _with_loop(ONLINE, (3, "do", 2), f"u = u + exp({T} - mn) @ V[j*8:(j+1)*8]")),
        _c("test.f.online-skips-tile", _with_loop(ONLINE, (3, "range"), 3)),
        _c("test.f.online-stale-max", _with_loop(ONLINE, (3, "do", 1), f"l = l + rowsum(exp({T} - mn))")),
        _c("test.f.tiled-dq", TILED_DQ),
        _c("test.f.tiled-dq-one-kv-tile", _with_loop(TILED_DQ, (3, "range"), 1)),  # dQ from one K/V tile only
        _c("test.f.tiled-dq-sign", _with_loop(TILED_DQ, (3, "do", 0, "do", 1),
                                              "dS = P * (dO[i*4:(i+1)*4] @ V[j*8:(j+1)*8].T + D[i*4:(i+1)*4])")),
        _c("test.f.update-outside-loop", {**ONLINE, "let": [*ONLINE["let"], "u = u * 2"]}),
    ])
    summary = json.loads(kb_subprocess(project, "verify", "--json").stdout)
    assert set(summary["refuted"]) - {"test.arith.wrong"} == {
        "test.f.online-no-rescale", "test.f.online-skips-tile", "test.f.online-stale-max",
        "test.f.tiled-dq-one-kv-tile", "test.f.tiled-dq-sign"}
    errors = {e["check"]: e["reason"] for e in summary["errors"]}
    assert set(errors) == {"test.f.update-outside-loop#0"}  # only a loop may update a name
    assert "must assign a new name" in errors["test.f.update-outside-loop#0"]
