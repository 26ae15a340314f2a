"""code.mma-partition on a small real git repository: a toy TiledMma with CuTe's interface, held in halves
(supports) and interleaved between warpgroups (the mutated structure, refutes), and the summary arithmetic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kb.verify.hw import find_tool
from tests.conftest import claim, kb_subprocess, superproject_with_submodule, trusting, write_claims
from verifiers.pinned.partition import summarise

pytest.importorskip("torch", reason="the worker imports torch-free verifiers, but kb verify tests share this gate")

# The slice of CuTe's interface the harness calls, written for this test (not CuTe's code): 256 threads in
# two warpgroups; cell j of a warpgroup's share is held by thread j % 128 of it.
TOY_CUTE = """#pragma once
namespace cute {
template <int V> struct Int { static constexpr int value = V; };
template <class M, class N> struct Shape2 {};
template <class M, class N> Shape2<M, N> make_shape(M, N) { return {}; }
template <class M, class N> struct IdTensor {};
template <class M, class N> IdTensor<M, N> make_identity_tensor(Shape2<M, N>) { return {}; }
struct Coord { int r, c; };
template <int I> int get(Coord const& x) { return I == 0 ? x.r : x.c; }
template <class T> int size(T const& x) { return x.size(); }
template <bool Interleaved> struct Part {
  int t, m, n;
  int size() const { return m * n / 256; }
  Coord operator()(int i) const {
    int g = t / 128, j = t % 128 + 128 * i;
    int row = Interleaved ? 2 * (j / n) + g : g * (m / 2) + j / n;
    return {row, j % n};
  }
};
template <bool Interleaved> struct ToyMma {
  int size() const { return 256; }
  struct Slice {
    int t;
    template <class M, class N> Part<Interleaved> partition_C(IdTensor<M, N>) const { return {t, M::value, N::value}; }
  };
  Slice get_thread_slice(int t) const { return {t}; }
};
}  // namespace cute
"""

TRAITS = """#pragma once
template <int kBlockM_> struct Traits {
    static constexpr int kBlockM = kBlockM_;
    using TiledMma1 = cute::ToyMma<false>;      // each warpgroup holds one half of the rows
    using TiledMmaMixed = cute::ToyMma<true>;   // rows alternate between the warpgroups
};
"""

HALVES = {"threads": {"equals": 256}, "wg0_row_min": {"equals": 0}, "wg0_row_max": {"equals": 63},
          "wg1_row_min": {"equals": 64}, "wg1_row_max": {"equals": 127}, "rows_in_two_warpgroups": {"equals": 0},
          "cells_uncovered": {"equals": 0}, "cells_held_twice": {"equals": 0}}


def test_partition_supports_the_halves_and_refutes_the_interleaved_layout(project: Path, tmp_path: Path) -> None:
    if find_tool("nvcc") is None:
        pytest.skip("needs nvcc")
    up, sha, _ = superproject_with_submodule(project, tmp_path, {"src/traits.h": TRAITS},
                                             {"include/cute/tensor.hpp": TOY_CUTE})
    note = claim("x")["anchors"][0]
    anchor = {"source": "testrepo", "sha": sha, "path": "src/traits.h"}
    base = {"anchor": 1, "include": ["src/traits.h"], "submodules": {"third/sub": ["include"]},
            "prelude": "using T = Traits<128>;", "tile_m": 128, "tile_n": 128, "arch": "sm_90a"}

    def c(cid: str, mma: str, expect: dict) -> dict:
        return claim(cid, label="source-backed", anchors=[note, anchor],
                     checks=[{"verifier": "code.mma-partition", "params": {**base, "mma": mma}, "expect": expect}])

    write_claims(project, "partition", [
        c("test.part.halves", "T::TiledMma1", HALVES),
        c("test.part.mutated", "T::TiledMmaMixed", HALVES),  # the mutated structure: same expectation
        c("test.part.neg", "T::TiledMma1", {**HALVES, "wg1_row_min": {"equals": 0}}),
    ])
    env = trusting("testrepo", sha, KB_CLONE_TESTREPO=str(up), KB_CLONE_SUB=str(tmp_path / "sub"),
                   KB_BUILD_CACHE=str(tmp_path / "build"))
    res = kb_subprocess(project, "verify", "--json", env=env)
    assert res.stdout, res.stderr
    summary = json.loads(res.stdout)
    assert summary["errors"] == [], summary["errors"]
    refuted = set(summary["refuted"])
    assert {"test.part.mutated", "test.part.neg"} <= refuted and "test.part.halves" not in refuted
    mixed = json.loads(kb_subprocess(project, "show", "test.part.mutated", "--json").stdout)["runs"][0]
    m = {k: v["value"] for k, v in mixed["measurements"].items()}
    # interleaved rows: still disjoint (even rows and odd rows), but each warpgroup spans the whole tile
    assert (m["wg0_row_min"], m["wg0_row_max"], m["wg1_row_min"], m["wg1_row_max"]) == (0, 126, 1, 127)
    assert m["rows_in_two_warpgroups"] == 0 and m["wg0_rows"] == 64
    assert m["cells_uncovered"] == 0 and m["cells_held_twice"] == 0


def test_summary_counts_gaps_and_double_holders() -> None:
    # two threads of warpgroup 0 hold cell (0, 0); thread 128 (warpgroup 1) holds row 0 too; cell (1, 1) is free
    triples = [(0, 0, 0), (1, 0, 0), (1, 0, 1), (128, 0, 1), (129, 1, 0)]
    m = {k: v for k, (v, _) in summarise(triples, 2, 2).items()}
    assert m["cells_held_twice"] == 2 and m["cells_uncovered"] == 1
    assert m["rows_in_two_warpgroups"] == 1 and m["threads"] == 4 and m["values_per_thread"] == 2
    assert (m["wg1_row_min"], m["wg1_row_max"], m["wg1_rows"], m["warp4_rows"]) == (0, 1, 2, 2)
