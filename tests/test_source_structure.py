"""source.structure on real pinned files: every query kind supports a true statement and refutes a mutated one.

The pinned files are read from the local flash-attention clone (kb.local.toml or the clone cache) at their
pins and committed, unchanged or mutated, into a temporary git repository that the verifier reads as it reads
any pinned source. Nothing of the pinned text is stored in this repository: the mutations are edits named here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kb.config import load_config
from kb.index.strength import grade
from kb.pinned.git import GitRepo
from kb.pinned.notes import lines_sha256
from kb.verify.registry import Context, load_verifiers
from tests.conftest import commit_files
from verifiers.source import structure as S

ROOT = Path(__file__).resolve().parents[1]
FA2 = "4f285b354796fb17df8636485b9a04df3ebbb7dc"  # v2.0.0
FWD = "csrc/flash_attn/src/flash_fwd_kernel.h"
FA4 = "849f660f73b176e5ad5670e7f822c7fa9f3eaf8b"
FWD100 = "flash_attn/cute/flash_fwd_sm100.py"


def _clone() -> str:
    cfg = load_config(ROOT)
    for cand in (cfg.clones.get("flash-attention"),
                 *(str(cfg.clone_cache / n) for n in ("flash-attention", "flash-attention.git") if cfg.clone_cache)):
        if cand and Path(cand).exists():
            return cand
    pytest.skip("no local clone of flash-attention (kb sources fetch)")


@pytest.fixture(scope="module")
def pinned() -> Any:
    """Bytes of a file at a pin, from the local clone."""
    repo = GitRepo(_clone())

    def read(sha: str, path: str) -> bytes:
        blob = repo.read(sha, path)
        if blob is None:
            pytest.skip(f"{path} at {sha[:12]} is not in the local clone")
        return blob

    yield read
    repo.close()


def _line_of(text: str, marker: str, after: int = 0) -> int:
    for i, line in enumerate(text.split("\n")[after:], start=after + 1):
        if marker in line:
            return i
    raise AssertionError(f"marker {marker!r} not found")


def _mutate(blob: bytes, old: str, new: str) -> bytes:
    text = blob.decode()
    assert text.count(old) >= 1, f"the edit's anchor text {old!r} is not in the pinned file"
    return text.replace(old, new, 1).encode()


def _run(tmp_path: Path, path: str, blob: bytes, span: tuple[int, int] | None, verifier: str = "source.structure",
         **params: Any) -> Any:
    """Commit `blob` at `path` into a fresh repository, anchor `span`, and run one check of `verifier`."""
    repo = tmp_path / f"r{len(list(tmp_path.iterdir()))}"
    repo.mkdir()
    (repo / Path(path).parent).mkdir(parents=True, exist_ok=True)
    (repo / path).write_bytes(blob)
    sha = commit_files(repo, {}, "pinned file")
    anchor: dict[str, Any] = {"source": "up", "sha": sha, "path": path}
    if span:
        anchor |= {"lines": list(span), "sha256": lines_sha256(blob, *span)[0]}
    ctx = Context(claim={"anchors": [{"source": "fa-notes"}, anchor]}, expect={}, sources={"up": {}},
                  clones={"up": str(repo)}, hardware={})
    spec = load_verifiers(ROOT / "verifiers")[verifier]
    return spec.func(spec.params.model_validate({"anchor": 1, **params}), ctx)


def _masking_loop(blob: bytes) -> tuple[int, int]:
    """The span of v2.0.0's masking-step loop of the forward kernel (first line .. the line before the next loop)."""
    text = blob.decode()
    start = _line_of(text, "for (int masking_step = 0;")
    return start, _line_of(text, "for (; n_block >= 0; --n_block)", start) - 1


# ------------------------------------------------------------------ each query kind: true statement, mutated structure


def test_inside_a_branch_arm_supports_and_a_call_moved_out_refutes(pinned: Any, tmp_path: Path) -> None:
    blob = pinned(FA2, FWD)
    # The loop issues two fences (one after the V copy, one in the branch that advances gK): the second.
    q = {"query": "inside", "target": {"call": "cp_async_fence"}, "nth": 1,
         "within": [{"loop": "masking_step"}, {"then": "n_block > 0"}]}
    ok = _run(tmp_path, FWD, blob, _masking_loop(blob), **q)
    assert ok.verdict == "supports", ok.reason
    # The negative control: the fence moved after the if block (the pinned comment says it must stay inside).
    moved = _mutate(blob, "            cute::cp_async_fence();\n        }\n\n        // TODO",
                    "        }\n            cute::cp_async_fence();\n\n        // TODO")
    bad = _run(tmp_path, FWD, moved, _masking_loop(moved), **q)
    assert bad.verdict == "refutes" and "is not within" in bad.reason, bad.reason


def test_inside_a_loop_and_outside(pinned: Any, tmp_path: Path) -> None:
    blob = pinned(FA2, FWD)
    text = blob.decode()
    # The prologue copy of K before the loops: outside every loop over n_block, and moved into the loop it is not.
    lo = _line_of(text, "int n_block = n_block_max - 1;")
    span = (lo, _line_of(text, "cute::cp_async_fence();", lo))
    q = {"query": "outside", "target": {"call": "cp_async_fence"}, "within": [{"loop": "n_block"}]}
    assert _run(tmp_path, FWD, blob, span, **q).verdict == "supports"
    assert _run(tmp_path, FWD, blob, span, **{**q, "query": "inside"}).verdict == "refutes"
    # Whole masking loop: flash::apply_mask sits in the loop, in the then-branch of `!Is_causal`.
    span = _masking_loop(blob)
    q = {"query": "inside", "target": {"call": "flash::apply_mask"}, "within": [{"loop": "masking_step"}, {"then": "!Is_causal"}]}
    assert _run(tmp_path, FWD, blob, span, **q).verdict == "supports"
    # `Is_causal` alone is not the condition `!Is_causal`: the negation is part of the condition.
    q2 = {**q, "within": [{"then": "Is_causal"}]}
    assert _run(tmp_path, FWD, blob, span, **q2).verdict == "refutes"


def test_order_supports_and_swapped_calls_refute(pinned: Any, tmp_path: Path) -> None:
    blob = pinned(FA2, FWD)
    q = {"query": "order", "before": {"call": "flash::gemm_A_in_regs"}, "after": {"name": "n_masking_steps"},
         "within": [{"loop": "masking_step"}]}
    span = _masking_loop(blob)
    assert _run(tmp_path, FWD, blob, span, **q).verdict == "supports"
    q = {"query": "order", "before": {"call": "softmax_rescale_o"}, "after": {"call": "flash::convert_type"}}
    assert _run(tmp_path, FWD, blob, span, **q).verdict == "supports"
    swapped = _mutate(blob, "        Tensor rP = flash::convert_type<Element>(scores);\n", "")
    swapped = _mutate(swapped, "        // TODO: when we have key_padding_mask",
                      "        Tensor rP = flash::convert_type<Element>(scores);\n        // TODO: when we have key_padding_mask")
    bad = _run(tmp_path, FWD, swapped, _masking_loop(swapped), **q)
    assert bad.verdict == "refutes" and "after the first" in bad.reason, bad.reason


def test_condition_of_the_innermost_branch_and_of_a_branch_in_the_lines(pinned: Any, tmp_path: Path) -> None:
    blob = pinned(FA2, FWD)
    span = _masking_loop(blob)
    q = {"query": "condition", "target": {"call": "flash::write_softmax_to_gmem"}, "condition": "Return_softmax", "exact": True}
    assert _run(tmp_path, FWD, blob, span, **q).verdict == "supports"
    flipped = _mutate(blob, "        if (Return_softmax) {", "        if (Is_dropout) {")
    assert _run(tmp_path, FWD, flipped, _masking_loop(flipped), **q).verdict == "refutes"
    q = {"query": "condition", "condition": "n_masking_steps > 1 && n_block <= 0"}
    assert _run(tmp_path, FWD, blob, span, **q).verdict == "supports"
    q = {"query": "condition", "of": "loop", "condition": "masking_step < n_masking_steps"}
    assert _run(tmp_path, FWD, blob, span, **q).verdict == "supports"


def test_template_argument_value_skips_comments_and_a_changed_value_refutes(pinned: Any, tmp_path: Path) -> None:
    blob = pinned(FA2, FWD)
    span = _masking_loop(blob)
    # softmax_rescale_o</*Is_first=*/true, ...>: the comment inside the argument list is not part of the value.
    q = {"query": "argument", "target": {"call": "softmax_rescale_o"}, "arg": 0, "template": True, "value": "true", "nth": 0}
    assert _run(tmp_path, FWD, blob, span, **q).verdict == "supports"
    assert _run(tmp_path, FWD, blob, span, **{**q, "nth": 1}).verdict == "refutes"
    q = {"query": "argument", "target": {"call": "cp_async_wait"}, "arg": 0, "template": True, "value": "0"}
    assert _run(tmp_path, FWD, blob, span, **q).verdict == "supports"
    changed = _mutate(blob, "        flash::cp_async_wait<0>();\n        __syncthreads();\n        if (n_block > 0)",
                      "        flash::cp_async_wait<1>();\n        __syncthreads();\n        if (n_block > 0)")
    bad = _run(tmp_path, FWD, changed, _masking_loop(changed), **q)
    assert bad.verdict == "refutes" and "'1'" in bad.reason, bad.reason
    q = {"query": "argument", "target": {"call": "flash::apply_dropout"}, "arg": 6, "value": "kNWarps"}
    assert _run(tmp_path, FWD, blob, span, **q).verdict == "supports"


def test_result_used_or_discarded(pinned: Any, tmp_path: Path) -> None:
    blob = pinned(FA2, FWD)
    span = _masking_loop(blob)
    q = {"query": "result", "target": {"call": "flash::convert_type"}, "used": True}
    assert _run(tmp_path, FWD, blob, span, **q).verdict == "supports"
    q = {"query": "result", "target": {"call": "flash::gemm_A_in_regs"}, "used": False}
    assert _run(tmp_path, FWD, blob, span, **q).verdict == "supports"
    kept = _mutate(blob, "        flash::gemm_A_in_regs(acc_o,", "        auto kept = flash::gemm_A_in_regs(acc_o,")
    bad = _run(tmp_path, FWD, kept, _masking_loop(kept), **q)
    assert bad.verdict == "refutes" and "is used" in bad.reason, bad.reason


def test_count_within_a_loop(pinned: Any, tmp_path: Path) -> None:
    blob = pinned(FA2, FWD)
    span = _masking_loop(blob)
    q = {"query": "count", "target": {"call": "__syncthreads"}, "within": [{"loop": "masking_step", "innermost": True}],
         "count": 2}
    out = _run(tmp_path, FWD, blob, span, **q)
    assert out.verdict == "supports" and out.measurements["count"][0] == 2, out.reason
    fewer = _mutate(blob, "        flash::cp_async_wait<0>();\n        __syncthreads();\n        if (n_block > 0)",
                    "        flash::cp_async_wait<0>();\n        if (n_block > 0)")
    assert _run(tmp_path, FWD, fewer, _masking_loop(fewer), **q).verdict == "refutes"


# ------------------------------------------------------------------ comments, strings and parse errors


def test_a_token_found_only_in_a_comment_is_not_code(pinned: Any, tmp_path: Path) -> None:
    blob = pinned(FA2, FWD)
    text = blob.decode()
    # The pinned prologue holds a commented-out `flash::cp_async_wait<0>();` just before the Share_Q_K_smem block.
    lo = _line_of(text, "// // Copy rmem to smem")
    span = (lo, lo + 3)
    assert "cp_async_wait" in "\n".join(text.split("\n")[lo - 1:lo + 3])
    lines = _run(tmp_path, FWD, blob, span, verifier="source.lines", tokens=["cp_async_wait<0>"])
    assert lines.verdict == "supports"  # the token check is fooled by the comment
    out = _run(tmp_path, FWD, blob, span, query="count", target={"call": "cp_async_wait"}, count=1)
    assert out.verdict == "refutes" and "only in comments or strings" in out.reason, out.reason
    out = _run(tmp_path, FWD, blob, span, query="count", target={"call": "cp_async_wait"}, count=0)
    assert out.verdict == "supports"


def test_a_target_in_a_parse_error_region_is_inconclusive(pinned: Any, tmp_path: Path) -> None:
    blob = pinned(FA2, FWD)
    # An unbalanced brace in the loop body: the tree around it can no longer say what the loop holds.
    broken = _mutate(blob, "        if (Return_softmax) {", "        if (Return_softmax) { { ) (")
    q = {"query": "inside", "target": {"call": "flash::gemm_A_in_regs"}, "within": [{"loop": "masking_step"}]}
    out = _run(tmp_path, FWD, broken, _masking_loop(broken), **q)
    assert out.verdict == "inconclusive" and ("parse error" in out.reason or "missing" in out.reason), out.reason
    # The same query on the pinned file decides.
    assert _run(tmp_path, FWD, blob, _masking_loop(blob), **q).verdict == "supports"


def test_the_pinned_cuda_sources_parse_with_few_errors_once_macros_are_blanked(pinned: Any) -> None:
    blob = pinned(FA2, FWD)
    tree = S.parse_cpp(blob)
    assert tree.parser == "tree-sitter-cuda"
    assert not tree.errors  # 14 error nodes without the macro and `typename` blanking
    src = b"CUTLASS_DEVICE void f() __launch_bounds__(128, 1) {}\n"
    want = src.replace(b"CUTLASS_DEVICE", b" " * 14).replace(b"__launch_bounds__(128, 1)", b" " * 25)
    assert S.blank_macros(src) == want and len(want) == len(src)


# ------------------------------------------------------------------ Python (FA4's CuTe DSL) through ast


def test_python_queries_on_fa4(pinned: Any, tmp_path: Path) -> None:
    src = "def f(xs, flag):\n    acc = 0\n    for x in range(xs):\n        # g(x) in a comment\n        if flag:\n" \
          "            acc += g(x)\n        else:\n            h(x)\n    s = 'g(x) in a string'\n    return acc\n"
    span = (1, 10)
    path = "k.py"
    blob = src.encode()
    assert _run(tmp_path, path, blob, span, query="inside", target={"call": "g"},
                within=[{"function": "f"}, {"loop": "range"}, {"then": "flag"}]).verdict == "supports"
    assert _run(tmp_path, path, blob, span, query="inside", target={"call": "h"}, within=[{"then": "flag"}]).verdict == "refutes"
    assert _run(tmp_path, path, blob, span, query="count", target={"call": "g"}, count=1).verdict == "supports"
    assert _run(tmp_path, path, blob, span, query="result", target={"call": "h"}, used=False).verdict == "supports"
    assert _run(tmp_path, path, blob, span, query="result", target={"call": "g"}, used=False).verdict == "refutes"
    bad = _run(tmp_path, path, b"def f(:\n    pass\n", (1, 2), query="count", target={"call": "g"}, count=0)
    assert bad.verdict == "inconclusive"
    # The pinned FA4 SM100 forward parses and its calls are found.
    real = pinned(FA4, FWD100)
    tree = S.parse_py(real)
    assert not tree.errors and len(tree.calls) > 100


# ------------------------------------------------------------------ the trial: breaking and meaning-preserving edits


def test_trial_structure_catches_breaking_edits_and_ignores_meaning_preserving_ones(pinned: Any, tmp_path: Path) -> None:
    """Each claim has a token check (as the corpus wrote them) and a structure check; each edit re-anchors the span."""
    blob = pinned(FA2, FWD)
    claims = {
        # "The fence is issued inside the `n_block > 0` branch of the masking loop."
        "fence-in-branch": ({"tokens": ["if (n_block > 0)", "cp_async_fence"]},
                            {"query": "inside", "target": {"call": "cp_async_fence"}, "nth": 1,
                             "within": [{"then": "n_block > 0"}]}),
        # "The softmax rescale comes before the conversion of the scores to fp16/bf16."
        "rescale-then-convert": ({"tokens": ["softmax_rescale_o", "flash::convert_type"], "ordered": True},
                                 {"query": "order", "before": {"call": "softmax_rescale_o"},
                                  "after": {"call": "flash::convert_type"}}),
        # "The P @ V product's return value is discarded: it accumulates into acc_o."
        "pv-discarded": ({"tokens": ["flash::gemm_A_in_regs(acc_o"]},
                         {"query": "result", "target": {"call": "flash::gemm_A_in_regs"}, "used": False}),
        # "The loop waits for all outstanding cp.async groups (cp_async_wait<0>) before the rescale."
        "wait-all": ({"tokens": ["cp_async_wait<0>"]},
                     {"query": "argument", "target": {"call": "cp_async_wait"}, "arg": 0, "template": True, "value": "0"}),
        # "Dropout is applied only in the Is_dropout branch."
        "dropout-branch": ({"tokens": ["if (Is_dropout)", "flash::apply_dropout(tOrP"]},
                           {"query": "condition", "target": {"call": "flash::apply_dropout"}, "condition": "Is_dropout",
                            "nth": 1}),
        # "write_softmax_to_gmem is called once per masking iteration, in the Return_softmax branch."
        "softmax-once": ({"tokens": ["write_softmax_to_gmem"]},
                         {"query": "count", "target": {"call": "flash::write_softmax_to_gmem"},
                          "within": [{"then": "Return_softmax"}], "count": 1}),
    }
    breaking = {
        "fence-in-branch": ("            cute::cp_async_fence();\n        }\n", "        }\n            cute::cp_async_fence();\n"),
        # The conversion moved before the rescale; the old line left behind as a comment.
        "rescale-then-convert": ("        // TODO: when we have key_padding_mask",
                                 "        Tensor rP0 = flash::convert_type<Element>(scores);\n        // TODO: when"
                                 " we have key_padding_mask"),
        "pv-discarded": ("        flash::gemm_A_in_regs(acc_o,", "        auto r = flash::gemm_A_in_regs(acc_o,"),
        # The wait now allows one group in flight; the old call kept in a comment.
        "wait-all": ("        flash::cp_async_wait<0>();\n        __syncthreads();\n        if (n_block > 0)",
                     "        // flash::cp_async_wait<0>();\n        flash::cp_async_wait<1>();\n        __syncthreads();\n"
                     "        if (n_block > 0)"),
        "dropout-branch": ("        if (Is_dropout) {\n            flash::apply_dropout(",
                           "        if (Return_softmax) {\n            flash::apply_dropout("),
        "softmax-once": ("            flash::write_softmax_to_gmem(tOrP_copy, tPgP, gmem_thr_copy_P);\n",
                         "            flash::write_softmax_to_gmem(tOrP_copy, tPgP, gmem_thr_copy_P);\n"
                         "            flash::write_softmax_to_gmem(tOrP_copy, tPgP, gmem_thr_copy_P);\n"),
    }
    preserving = {
        # Reformatting: the condition's spacing and a call split over two lines.
        "reformat": [("        if (n_block > 0) {\n", "        if (n_block>0) {\n"),
                     ("        flash::cp_async_wait<0>();\n        __syncthreads();\n        if (n_block",
                      "        flash::cp_async_wait< 0 >();\n        __syncthreads();\n        if (n_block"),
                     ("        flash::gemm_A_in_regs(acc_o,", "        flash::gemm_A_in_regs(\n            acc_o,")],
        # Renaming a local: tOrP -> tOrP_frag in the loop.
        "rename": [("tOrP", "tOrP_frag")] * 12,
        # Adding comments.
        "comment": [("        if (Is_dropout) {\n", "        // Dropout on P before the P @ V product.\n        if (Is_dropout) {\n"),
                    ("        if (Return_softmax) {\n", "        if (Return_softmax) {  // debugging output\n")],
    }
    caught = {"lines": 0, "structure": 0}
    for name, (tok, struct) in claims.items():
        span = _masking_loop(blob)
        assert _run(tmp_path, FWD, blob, span, verifier="source.lines", **tok).verdict == "supports", name
        assert _run(tmp_path, FWD, blob, span, **struct).verdict == "supports", name
        edited = _mutate(blob, *breaking[name])
        span = _masking_loop(edited)
        caught["lines"] += _run(tmp_path, FWD, edited, span, verifier="source.lines", **tok).verdict == "refutes"
        out = _run(tmp_path, FWD, edited, span, **struct)
        assert out.verdict == "refutes", (name, out.reason)
        caught["structure"] += 1
    assert caught == {"lines": 1, "structure": 6}, caught  # token checks catch 1 of the 6 breaking edits
    alarms = {"lines": 0, "structure": 0}
    for edits in preserving.values():
        edited = blob
        for old, new in edits:
            edited = _mutate(edited, old, new)
        span = _masking_loop(edited)
        for name, (tok, struct) in claims.items():
            alarms["lines"] += _run(tmp_path, FWD, edited, span, verifier="source.lines", **tok).verdict != "supports"
            out = _run(tmp_path, FWD, edited, span, **struct)
            assert out.verdict == "supports", (name, out.reason)
    assert alarms == {"lines": 2, "structure": 0}, alarms  # the token checks raise false alarms the structure queries do not


# ------------------------------------------------------------------ parameters are data, validated with clear errors


@pytest.mark.parametrize("params, message", [
    ({"query": "inside", "target": {"call": "f"}}, "needs within"),
    ({"query": "inside", "target": {"call": "f", "name": "g"}, "within": [{"loop": ""}]}, "exactly one of call or name"),
    ({"query": "inside", "target": {"call": "f(x); system()"}, "within": [{"loop": ""}]}, "a target is a name"),
    ({"query": "inside", "target": {"call": "f"}, "within": [{"loop": "i", "then": "x"}]}, "exactly one of loop"),
    ({"query": "argument", "target": {"name": "f"}, "arg": 0, "value": "1"}, "needs target.call"),
    ({"query": "argument", "target": {"call": "f"}, "value": "1"}, "exactly one of arg"),
    ({"query": "count", "target": {"call": "f"}}, "needs count"),
    ({"query": "order", "before": {"call": "f"}}, "needs after"),
    ({"query": "nearby", "target": {"call": "f"}}, "Input should be"),
    ({"query": "count", "target": {"call": "f"}, "count": 1, "code": "x"}, "Extra inputs"),
])
def test_bad_params_are_clear_errors(params: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        S.StructureParams.model_validate({"anchor": 1, **params})


def test_a_structure_query_grades_derived() -> None:
    spec = load_verifiers(ROOT / "verifiers")["source.structure"]
    assert grade(spec, {}, "cpu")[0] == "derived"
    assert grade(load_verifiers(ROOT / "verifiers")["source.lines"], {}, "cpu")[0] == "cited"
