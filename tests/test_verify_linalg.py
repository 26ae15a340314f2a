"""Negative controls for math.block-identity, math.tile-ownership and source.commit.

Every identity runs twice: once with the expectation the identity makes true
(must not refute) and once with one it makes false (must refute).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import claim, commit_files, git, kb_subprocess, write_claims

torch = pytest.importorskip("torch", reason="CPU checks need torch (pip install torch==2.13.0)")

TIGHT = {"max_abs_err": {"at_most": 1e-9}}
LOOSE = {"max_abs_err": {"at_least": 1.0}}

# (verifier, params, true expectation, false expectation)
CASES = [
    ("qk-column-blocks", {"n": 64, "parts": 4}, {**TIGHT, "foreign_changes": {"equals": 0}},
     {"foreign_changes": {"at_least": 1}}),
    ("pv-split-sum", {"n": 64, "parts": 4}, {**TIGHT, "contributors": {"equals": 4}}, {"contributors": {"equals": 1}}),
    ("d-split-scores", {"d": 64, "block_m": 8, "block_n": 16}, {**TIGHT, "partial_softmax_err": {"at_least": 1e-3}},
     {"partial_softmax_err": {"at_most": 1e-9}}),
    ("output-column-split", {"n": 64, "d": 32}, {**TIGHT, "max_writers_per_element": {"equals": 1}},
     {"partial_p_row_err": {"at_most": 1e-9}}),
    ("split-output-vs-reduction", {"block_m": 16, "block_n": 32, "d": 8},
     {**TIGHT, "output_split_writers": {"equals": 1}, "reduction_split_writers": {"equals": 4}},
     {"reduction_split_writers": {"equals": 1}}),
    ("qk-head-dim-contraction", {"d": 24, "block_m": 8, "block_n": 16}, {**TIGHT, "contracted": {"equals": 24}},
     {"s_shape": {"equals": [8, 24]}}),
    ("tile-shapes", {"n": 64, "d": 24, "block_m": 8, "block_n": 16},
     {"s_tile_shape": {"equals": [8, 16]}, "k_tile_shape": {"equals": [16, 24]}}, {"s_tile_shape": {"equals": [8, 24]}}),
    ("online-state-shapes", {"n": 64, "d": 24, "block_m": 8, "block_n": 16},
     {**TIGHT, "u_shape": {"equals": [8, 24]}, "m_shape": {"equals": [8]}}, {"m_shape": {"equals": [8, 24]}}),
    ("qk-pv-axes", {"d": 48, "d_v": 40, "block_m": 8, "block_n": 16},
     {"qk_contracted": {"equals": 48}, "o_shape": {"equals": [8, 40]}}, {"o_shape": {"equals": [8, 48]}}),
    ("mqa-shared-kv", {"heads": 4, "block_m": 2, "block_n": 16, "d": 48, "d_v": 40},
     {**TIGHT, "score_contracted": {"equals": 48}, "output_columns": {"equals": 40}}, {"truncated_d_err": {"at_most": 1e-9}}),
    ("softmax-count", {"block_m": 8, "block_n": 16, "d_values": [16, 64]},
     {"score_elements": {"equals": 128}, "distinct_counts": {"equals": 1}}, {"distinct_counts": {"equals": 2}}),
    ("unfused-intermediates", {"n_values": [32, 64], "d_values": [8, 16], "d": 8, "block_m": 16, "block_n": 16},
     {"elements_per_n2": {"equals": 2.0}, "tiled_to_unfused_flops": {"equals": 1.0}, "depends_on_d": {"is": False}},
     {"n_exponent": {"equals": 3.0}}),
    ("two-four-prune", {"block_m": 8, "n": 32, "d": 8}, {"rows_denominator_changed": {"equals": 1.0}},
     {"output_diff": {"at_most": 1e-9}}),
    ("gqa-grad-sum", {"n": 16, "d": 8, "heads": 4, "kv_heads": 2}, {**TIGHT, "q_heads_per_kv_grad": {"equals": 2}},
     {"q_heads_per_kv_grad": {"equals": 1}}),
    ("bwd-tile-products", {"n": 64, "d": 16, "block_m": 16, "block_n": 32},
     {**TIGHT, "bwd_products_per_cell": {"equals": 5}, "contract_dk": {"equals": 16}}, {"bwd_products_per_cell": {"equals": 4}}),
    ("bwd-flops-fa1-fa2", {"n": 64, "d": 16, "block_m": 16, "block_n": 16},
     {"fa2_to_fa1_flops": {"equals": 1.0}, "gemms_equivalent": {"equals": 5.0}}, {"gemms_equivalent": {"equals": 4.0}}),
    ("mma-b-fragment", {"lane": 5}, {"k_elements": {"equals": [[1, 2], [1, 3], [1, 10], [1, 11]]}},
     {"k_elements": {"equals": [[0, 0], [0, 1], [0, 8], [0, 9]]}}),
    ("layout-transpose-bytes", {"n": 32, "d": 16, "block_m": 8},
     {**TIGHT, "k_rowmajor_is_kt_colmajor": {"is": True}, "v_rowmajor_is_v_colmajor": {"is": False}},
     {"v_rowmajor_is_v_colmajor": {"is": True}}),
    ("strided-ownership", {"num_splits": 3, "q_tiles": 7, "kv_tiles": 2},
     {"owned": {"equals": [[0, 3, 6], [1, 4], [2, 5]]}, "kv_loads_per_cta": {"equals": [2, 2, 2]}},
     {"owned": {"equals": [[0, 1, 2], [3, 4], [5, 6]]}}),
]

OWNERSHIP = [
    ({"orientation": "kv-owner", "q_tiles": 2, "kv_tiles": 3},
     {**TIGHT, "dq_writers_min": {"equals": 3}, "dk_writers_max": {"equals": 1}}, {"dq_writers_max": {"equals": 1}}),
    ({"orientation": "q-owner", "q_tiles": 3, "kv_tiles": 2},
     {**TIGHT, "dq_writers_max": {"equals": 1}, "dv_writers_min": {"equals": 3}}, {"all_single_owner": {"is": True}}),
    ({"orientation": "kv-owner", "q_tiles": 4, "kv_tiles": 4, "causal": True},
     {**TIGHT, "dq_writers_min": {"equals": 1}, "dq_writers_max": {"equals": 4}}, {"dq_writers_min": {"equals": 4}}),
]


def _check(verifier: str, params: dict, expect: dict) -> list[dict]:
    return [{"verifier": verifier, "params": params, "expect": expect}]


def test_identities_cover_every_literal() -> None:
    from verifiers.cpu.linalg import Identity

    assert {c[0] for c in CASES} == set(Identity.__args__)


def test_block_identity_and_ownership_support_true_refute_false(project: Path) -> None:
    claims = []
    for i, (ident, params, good, bad) in enumerate(CASES):
        p = {"identity": ident, **params}
        claims.append(claim(f"test.pos.b{i}", checks=_check("math.block-identity", p, good)))
        claims.append(claim(f"test.neg.b{i}", checks=_check("math.block-identity", p, bad)))
    for i, (params, good, bad) in enumerate(OWNERSHIP):
        claims.append(claim(f"test.pos.o{i}", checks=_check("math.tile-ownership", params, good)))
        claims.append(claim(f"test.neg.o{i}", checks=_check("math.tile-ownership", params, bad)))
    write_claims(project, "linalg", claims)
    res = kb_subprocess(project, "verify", "--json")
    assert res.stdout, res.stderr
    summary = json.loads(res.stdout)
    assert summary["errors"] == []
    refuted = set(summary["refuted"])
    names = [c[0] for c in CASES] + [f"ownership {o[0]['orientation']}" for o in OWNERSHIP]
    ids = [f"b{i}" for i in range(len(CASES))] + [f"o{i}" for i in range(len(OWNERSHIP))]
    for name, tag in zip(names, ids, strict=True):
        assert f"test.neg.{tag}" in refuted, f"{name}: a false expectation did not refute"
        assert f"test.pos.{tag}" not in refuted, f"{name}: a true expectation was refuted"


def test_unknown_identity_is_a_validation_error(project: Path) -> None:
    write_claims(project, "bad", [claim("test.bad.ident", checks=_check(
        "math.block-identity", {"identity": "no-such-identity"}, TIGHT))])
    res = kb_subprocess(project, "validate")
    assert res.returncode != 0
    assert "identity" in res.stdout + res.stderr


def test_source_commit_supports_refutes_and_skips(project: Path, tmp_path: Path) -> None:
    import os

    repo = tmp_path / "up"
    env = {**os.environ, "GIT_AUTHOR_DATE": "2023-07-17T10:00:00+00:00", "GIT_COMMITTER_DATE": "2023-07-17T10:00:00+00:00"}
    first = commit_files(repo, {"a.txt": "one\n"}, "First release", env=env)
    git(repo, "tag", "v1.0.0")
    second = commit_files(repo, {"a.txt": "two\n"}, "Second", env=env)
    (project / "sources" / "testrepo.yaml").write_text(
        f"sources:\n  - id: testrepo\n    kind: repo\n    url: https://example.invalid/up\n"
        f"    pins:\n      v1: {first}\n      v2: {second}\n")
    base = claim("x.y")["anchors"][0]

    def c(cid: str, sha: str, field: str, value: object, **extra: object) -> dict:
        params = {"anchor": 1, "source": "testrepo", "sha": sha, "field": field, **extra}
        return claim(cid, label="source-backed", anchors=[base, {"source": "testrepo", "sha": sha}],
                     checks=[{"verifier": "source.commit", "params": params, "expect": {"value": {"equals": value}}}])

    write_claims(project, "git", [
        c("test.git.date", first, "date", "2023-07-17"),
        c("test.git.date-neg", first, "date", "2023-07-18"),
        c("test.git.subject", first, "subject", "First release"),
        c("test.git.subject-neg", first, "subject", "Second"),
        c("test.git.author", first, "author", "Ann Author"),
        c("test.git.tag", first, "tag", "v1.0.0"),
        c("test.git.tag-neg", second, "tag", "v1.0.0"),
        c("test.git.parent", second, "parent", first[:8], abbrev=8),
        c("test.git.parent-neg", first, "parent", second[:8], abbrev=8),
    ])
    offline = kb_subprocess(project, "verify", "--plan", "--json")
    rows = {r["check"]: r for r in json.loads(offline.stdout)}
    assert rows["test.git.date#0"]["action"] == "skip"
    assert "KB_CLONE_TESTREPO" in rows["test.git.date#0"]["why"]
    res = kb_subprocess(project, "verify", "--json", env={"KB_CLONE_TESTREPO": str(repo)})
    summary = json.loads(res.stdout)
    assert summary["errors"] == []
    refuted = set(summary["refuted"])
    assert {"test.git.date-neg", "test.git.subject-neg", "test.git.tag-neg", "test.git.parent-neg"} <= refuted
    assert not refuted & {"test.git.date", "test.git.subject", "test.git.author", "test.git.tag", "test.git.parent"}
