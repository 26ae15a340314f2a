"""code.host-exec and code.constexpr on small real git repositories: support, refute, disagreement, cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kb.verify.hw import find_tool
from tests.conftest import claim, commit_files, git, kb_subprocess, superproject_with_submodule, trusting, write_claims

pytest.importorskip("torch", reason="the worker imports torch-free verifiers, but kb verify tests share this gate")

HEUR = """#pragma once
// A split rule in the style of the pinned launchers (not copied from them).
inline int pick_splits(int work, int sms, int cap) {
    // "}" inside a comment and a string must not end the body: "}"
    int best = 1;
    for (int s = 1; s <= cap; ++s) {
        if ((work * s) % sms == 0) { best = s; break; }
    }
    return best;
}

int pick_splits(int work, int sms, int cap);  // a declaration, not the definition
"""

TRAITS = """#pragma once
#include "base.h"
template <int kHeadDim_, int kBlockM_, int kNWarps_>
struct Traits {
    static constexpr int kNThreads = kNWarps_ * 32;
#if defined(__CUDA_ARCH__)
    static constexpr int kBytes = kElemBytes;
#else
    static constexpr int kBytes = 1;  // the host pass differs: the device pass must be what is read
#endif
    static constexpr int kSmemSize = kBlockM_ * kHeadDim_ * kBytes;
};
"""


def _project_with(project: Path, tmp_path: Path) -> tuple[Path, str, str]:
    return superproject_with_submodule(project, tmp_path, {"src/heur.h": HEUR, "src/traits.h": TRAITS},
                                       {"include/base.h": "#pragma once\nconstexpr int kElemBytes = 2;\n"})


def _claims(sha: str) -> list[dict]:
    note = claim("x")["anchors"][0]
    heur = {"source": "testrepo", "sha": sha, "path": "src/heur.h"}
    traits = {"source": "testrepo", "sha": sha, "path": "src/traits.h"}
    host = {"functions": ["pick_splits"], "call": "pick_splits(work, sms, cap)",
            "grid": {"work": list(range(1, 40)), "sms": [8, 12], "cap": [1, 4]}, "point": {"work": 6, "sms": 12, "cap": 4}}
    cx = {"submodules": {"third/sub": ["include"]}, "prelude": "using T = Traits<64, 128, 4>;",
          "values": {"kSmemSize": "T::kSmemSize", "kNThreads": "T::kNThreads"}}

    def c(cid: str, verifier: str, params: dict, expect: dict, anchor: dict) -> dict:
        return claim(cid, label="source-backed", anchors=[note, anchor],
                     checks=[{"verifier": verifier, "params": {"anchor": 1, **params}, "expect": expect}])

    # "always 1" as a claim might state it: exact when cap is 1, wrong for some inputs when cap is 4.
    return [
        c("test.host.point", "code.host-exec", host, {"value": {"equals": 2}}, heur),
        c("test.host.point-neg", "code.host-exec", host, {"value": {"equals": 3}}, heur),
        c("test.host.rule-true", "code.host-exec", {**host, "grid": {**host["grid"], "cap": [1]}, "rule": "1"},
          {"disagreements": {"equals": 0}}, heur),
        c("test.host.rule-false", "code.host-exec", {**host, "rule": "1"}, {"disagreements": {"equals": 0}}, heur),
        c("test.cx.true", "code.constexpr", cx, {"kSmemSize": {"equals": 16384}, "kNThreads": {"equals": 128}}, traits),
        c("test.cx.neg", "code.constexpr", cx, {"kSmemSize": {"equals": 8192}}, traits),
    ]


def test_host_exec_and_constexpr_support_refute_and_find_the_disagreement(project: Path, tmp_path: Path) -> None:
    if find_tool("g++") is None or find_tool("nvcc") is None:
        pytest.skip("needs g++ and nvcc")
    up, sha, _ = _project_with(project, tmp_path)
    write_claims(project, "compiled", _claims(sha))
    env = trusting("testrepo", sha, KB_CLONE_TESTREPO=str(up), KB_CLONE_SUB=str(tmp_path / "sub"),
                   KB_BUILD_CACHE=str(tmp_path / "build"))
    res = kb_subprocess(project, "verify", "--json", env=env)
    assert res.stdout, res.stderr
    summary = json.loads(res.stdout)
    assert summary["errors"] == [], summary["errors"]
    refuted = set(summary["refuted"])
    assert {"test.host.point-neg", "test.host.rule-false", "test.cx.neg"} <= refuted
    assert not {"test.host.point", "test.host.rule-true", "test.cx.true"} & refuted
    show = json.loads(kb_subprocess(project, "show", "test.host.rule-false", "--json").stdout)
    run = show["runs"][0]
    first = run["measurements"]["first_disagreement"]["value"]
    assert first["pinned_code"] != first["rule"] and set(first["input"]) == {"work", "sms", "cap"}
    cx = json.loads(kb_subprocess(project, "show", "test.cx.true", "--json").stdout)["runs"][0]
    # The device pass was read (kBytes = 2), the submodule commit and the compiler are recorded.
    assert cx["measurements"]["kSmemSize"]["value"] == 64 * 128 * 2
    assert "nvcc" in cx["environment"]["compiler"] or "cuda" in cx["environment"]["compiler"]
    assert list(cx["environment"]["submodules"].values()) == [git(tmp_path / "sub", "rev-parse", "HEAD")]
    # Second run: nothing to compile (the build cache answers), same verdicts.
    again = json.loads(kb_subprocess(project, "verify", "--json", "--force", env=env).stdout)
    assert set(again["refuted"]) == set(summary["refuted"])
    logs = json.loads(kb_subprocess(project, "show", "test.cx.true", "--json").stdout)["runs"][0]["log"]
    assert "(cached)" in logs


def test_without_the_submodule_clone_the_check_is_skipped_with_the_reason(project: Path, tmp_path: Path) -> None:
    if find_tool("nvcc") is None:
        pytest.skip("needs nvcc")
    up, sha, sub_sha = _project_with(project, tmp_path)
    write_claims(project, "compiled", [c for c in _claims(sha) if c["id"] == "test.cx.true"])
    res = kb_subprocess(project, "verify", "--json", env=trusting("testrepo", sha, KB_CLONE_TESTREPO=str(up),
                                                                  KB_BUILD_CACHE=str(tmp_path / "build")))
    summary = json.loads(res.stdout)
    skip = [s for s in summary["skips"] if s["check"] == "test.cx.true#0"]
    assert skip and sub_sha in skip[0]["why"] and "sub" in skip[0]["why"]


def test_extract_function_takes_the_definition_with_its_template_header() -> None:
    from verifiers.pinned.compiled import extract_function

    body = extract_function(HEUR, "pick_splits")
    assert body.startswith("inline int pick_splits(") and body.rstrip().endswith("}")
    assert "return best;" in body and "declaration" not in body
    src = "namespace x {\ntemplate <typename T>\nT twice(T v) {\n    return v + v;\n}\n}\n"
    assert extract_function(src, "twice").startswith("template <typename T>\nT twice(")
    with pytest.raises(ValueError):
        extract_function(HEUR, "no_such_function")


def test_rule_evaluation_is_arithmetic_only() -> None:
    from verifiers.pinned.compiled import eval_rule

    assert eval_rule("ceil_div(a, b) if a > 0 else 0", {"a": 7, "b": 2}) == 4
    assert eval_rule("min(a, 30)", {"a": 40}) == 30
    for bad in ("__import__('os')", "a.real", "[x for x in b]", "{'k': a}"):
        with pytest.raises(ValueError):
            eval_rule(bad, {"a": 1})


PYHEUR = '''from dataclasses import dataclass


@dataclass(frozen=True)
class Cfg:
    tile_m: int
    tile_n: int


def pick(d, causal):
    if d <= 64:
        return Cfg(192, 128)
    return Cfg(128, 96 if causal else 128)
'''


def test_py_exec_runs_pinned_python_and_finds_the_disagreement(project: Path, tmp_path: Path) -> None:
    up = tmp_path / "pyup"
    sha = commit_files(up, {"pkg/iface.py": PYHEUR}, "py")
    (project / "sources" / "testrepo.yaml").write_text(
        f"sources:\n  - id: testrepo\n    kind: repo\n    url: https://example.invalid/up\n    pins:\n      main: {sha}\n")
    note = claim("x")["anchors"][0]
    anchor = {"source": "testrepo", "sha": sha, "path": "pkg/iface.py"}
    base = {"anchor": 1, "functions": ["Cfg", "pick"], "prelude": "test-dataclass",
            "call": "pick(d, causal)", "grid": {"d": [64, 128, 256], "causal": [False, True]}, "point": {"d": 128, "causal": False}}

    def c(cid: str, params: dict, expect: dict) -> dict:
        return claim(cid, label="source-backed", anchors=[note, anchor],
                     checks=[{"verifier": "code.py-exec", "params": {**base, **params}, "expect": expect}])

    write_claims(project, "py", [
        c("test.py.point", {}, {"value": {"equals": [128, 128]}}),
        c("test.py.point-neg", {}, {"value": {"equals": [128, 96]}}),
        c("test.py.rule", {"rule": "[192, 128] if d <= 64 else [128, 96 if causal else 128]"}, {"disagreements": {"equals": 0}}),
        # The note's rule forgets the causal case: the sweep must find it.
        c("test.py.rule-neg", {"rule": "[192, 128] if d <= 64 else [128, 128]"}, {"disagreements": {"equals": 0}}),
    ])
    summary = json.loads(kb_subprocess(project, "verify", "--json",
                                       env=trusting("testrepo", sha, KB_CLONE_TESTREPO=str(up))).stdout)
    assert summary["errors"] == []
    assert {"test.py.point-neg", "test.py.rule-neg"} <= set(summary["refuted"])
    assert not {"test.py.point", "test.py.rule"} & set(summary["refuted"])
    run = json.loads(kb_subprocess(project, "show", "test.py.rule-neg", "--json").stdout)["runs"][0]
    first = run["measurements"]["first_disagreement"]["value"]
    assert first["input"]["causal"] is True and first["pinned_code"] == [128, 96] and first["rule"] == [128, 128]


KERNEL = """__global__ void scale(float* x, int n) {
    __shared__ float stage[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    stage[threadIdx.x] = i < n ? x[i] : 0.f;
    __syncthreads();
    if (i < n) x[i] = stage[(threadIdx.x + 1) % 256] * 2.f;
}
"""


def test_resources_read_ptxas_and_derive_occupancy(project: Path, tmp_path: Path) -> None:
    if find_tool("nvcc") is None:
        pytest.skip("needs nvcc")
    up = tmp_path / "cu"
    sha = commit_files(up, {"src/k.cu": KERNEL}, "kernel")
    (project / "sources" / "testrepo.yaml").write_text(
        f"sources:\n  - id: testrepo\n    kind: repo\n    url: https://example.invalid/up\n    pins:\n      main: {sha}\n")
    note = claim("x")["anchors"][0]
    anchor = {"source": "testrepo", "sha": sha, "path": "src/k.cu"}
    base = {"anchor": 1, "arch": "sm_80", "flags": ["-O3"], "kernel_filter": "scale", "block_threads": 256, "sku": "A100"}

    def c(cid: str, expect: dict) -> dict:
        return claim(cid, label="source-backed", anchors=[note, anchor],
                     checks=[{"verifier": "code.resources", "params": base, "expect": expect}])

    write_claims(project, "res", [
        c("test.res.smem", {"static_smem": {"equals": 1024}, "spill_stores": {"equals": 0}, "kernels": {"equals": 1}}),
        c("test.res.smem-neg", {"static_smem": {"equals": 2048}}),
        # 256 threads, few registers, 1 KiB static + 1 KiB reserved: the 2048-thread (64-warp) limit gives 8 CTAs.
        c("test.res.occ", {"ctas_per_sm": {"equals": 8}, "occupancy_limiter": {"equals": "warps"}}),
    ])
    env = trusting("testrepo", sha, KB_CLONE_TESTREPO=str(up), KB_BUILD_CACHE=str(tmp_path / "build"))
    summary = json.loads(kb_subprocess(project, "verify", "--json", env=env).stdout)
    assert summary["errors"] == []
    assert "test.res.smem-neg" in summary["refuted"]
    assert not {"test.res.smem", "test.res.occ"} & set(summary["refuted"])
    run = json.loads(kb_subprocess(project, "show", "test.res.smem", "--json").stdout)["runs"][0]
    assert 0 < run["measurements"]["registers"]["value"] <= 255
    assert "-Xptxas -v" in " ".join(run["environment"]["flags"]) and run["environment"]["compiler"]


def test_occupancy_rules_on_the_a100() -> None:
    from verifiers.pinned.compiled import occupancy

    a100 = {"regs_per_sm": 65536, "reg_alloc_unit_per_warp": 256, "smem_per_sm_bytes": 167936,
            "smem_reserved_per_block_bytes": 1024, "smem_per_block_max_bytes": 166912,
            "max_warps_per_sm": 64, "max_blocks_per_sm": 32}
    # 255 registers round up to 8192 per warp: 8 warps fit, i.e. two 4-warp CTAs; smem alone would allow 3.
    assert occupancy(255, 128, 49152, a100) == (2, "registers")
    # A 147456-byte CTA (plus the 1 KiB reservation) fits once in 164 KiB.
    assert occupancy(128, 256, 147456, a100) == (1, "shared memory")
    assert occupancy(32, 128, 200_000, a100)[0] == 0


def test_parse_ptxas_reads_each_entry() -> None:
    from verifiers.pinned.compiled import parse_ptxas

    log = ("ptxas info    : Compiling entry function '_Z1kPf' for 'sm_80'\n"
           "ptxas info    : Function properties for _Z1kPf\n"
           "    16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
           "ptxas info    : Used 96 registers, used 1 barriers, 2048 bytes smem, 360 bytes cmem[0]\n"
           "ptxas info    : Compiling entry function '_Z1gv' for 'sm_80'\n"
           "ptxas info    : Used 8 registers, 352 bytes cmem[0]\n")
    a, b = parse_ptxas(log)
    assert (a["registers"], a["smem"], a["stack"], a["spill_stores"], a["spill_loads"]) == (96, 2048, 16, 8, 12)
    assert (b["registers"], b["smem"], b["spill_stores"]) == (8, 0, 0)
