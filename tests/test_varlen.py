"""FA1's packed variable-length entry: what can be checked without a GPU.

The runs themselves are on the H200 (the claims fa1.varlen.no-extra-writer and fa1.causal.residual-imbalance,
and the negative controls neg.gpu.varlen-rows / neg.gpu.varlen-balance in tests/test_gpu_negative_controls.py).
Here: parameters are bounded, the checks are planned for sm_90 only, the harness sources stale their evidence
and not the dense library's, a missing build is a skip with the command that makes it, and the entry compiles
against the pinned headers and exports what the loader binds.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from kb.verify.codehash import CodeHasher
from kb.verify.registry import load_verifiers, requirements_for
from verifiers.gpu import varlen as gpu_varlen
from verifiers.pinned import build as pinned_build
from verifiers.pinned import varlen as pinned_varlen

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("lengths", [[], [0], [-3, 5], [gpu_varlen.MAX_TOTAL, 1]])
def test_lengths_are_positive_and_bounded(lengths: list[int]) -> None:
    with pytest.raises(ValueError, match="lengths"):
        gpu_varlen.VarlenParams(lengths=lengths)


def test_other_lengths_and_sizes_are_checked() -> None:
    with pytest.raises(ValueError, match="other_lengths"):
        gpu_varlen.BalanceParams(lengths=[16], other_lengths=[0])
    with pytest.raises(ValueError, match="heads"):
        gpu_varlen.VarlenParams(lengths=[16], heads=0)
    with pytest.raises(ValueError):
        gpu_varlen.VarlenParams(lengths=[16], head_dim=96)  # the build holds the d 64 and d 128 units only
    assert gpu_varlen.BalanceParams(lengths=[16]).other_lengths == []


def test_checks_are_planned_for_sm90_only() -> None:
    reg = load_verifiers(ROOT / "verifiers")
    for name in ("gpu.varlen-rows", "gpu.varlen-balance"):
        req = requirements_for(reg[name], {"lengths": [16]})
        assert (req.cuda, req.min_cc, req.max_cc) == (True, 90, 90), name


def test_the_entry_and_the_dense_harness_are_in_the_code_hash_of_these_checks_only() -> None:
    hasher = CodeHasher("verifiers")
    for fn in ("varlen_rows", "varlen_balance"):
        parts = set(hasher.parts(gpu_varlen.__name__, fn))
        assert {"file:fa1_v109_varlen.cu", "file:fa1_v109.cu", "file:kb_attn_abi.h"} <= parts, fn
    from verifiers.gpu import attention

    # The dense GPU checks do not depend on the packed entry: adding it left their evidence current.
    assert "file:fa1_v109_varlen.cu" not in set(hasher.parts(attention.__name__, "kernel_run"))


def test_harness_digest_moves_with_each_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = pinned_varlen.harness_digest()
    fake = tmp_path / "harness"
    shutil.copytree(pinned_varlen.HERE / "harness", fake)
    monkeypatch.setattr(pinned_varlen, "HERE", tmp_path)
    assert pinned_varlen.harness_digest() == before
    for name in pinned_varlen._SOURCES:
        original = (fake / name).read_bytes()
        (fake / name).write_bytes(original + b"\n// edit\n")
        assert pinned_varlen.harness_digest() != before, name
        (fake / name).write_bytes(original)


def test_missing_build_is_a_skip_reason_naming_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KB_BUILD_CACHE", str(tmp_path))
    pinned_varlen._LOADED.clear()
    why = gpu_varlen._unavailable()
    assert why and "python -m verifiers.pinned.varlen" in why


def _clones() -> tuple[str, str] | None:
    try:
        return pinned_build.pinned_clones()
    except FileNotFoundError:
        return None


@pytest.mark.skipif(not shutil.which("nvcc") or _clones() is None,
                    reason="needs nvcc and the flash-attention and cutlass clones (kb sources fetch)")
def test_the_packed_entry_compiles_against_the_pinned_headers(tmp_path: Path) -> None:
    obj = tmp_path / "entry.o"
    pinned_varlen.compile_entry(obj)
    syms = subprocess.run(["nm", str(obj)], capture_output=True, text=True, check=True).stdout
    for fn in ("kb_varlen_fwd", "kb_varlen_workspace", "kb_fwd", "kb_last_error"):
        assert f" T {fn}\n" in syms, fn
    # The pinned launchers come from the unit objects at link time, never from kb's code.
    assert " U _Z20run_fmha_fwd_hdim128R13Launch_paramsI17FMHA_fprop_paramsE\n" in syms


@pytest.mark.parametrize(("value", "verdict"), [(2.3, "supports"), (1.1, "inconclusive")])
def test_an_existential_balance_check_never_refutes(value: float, verdict: str) -> None:
    from kb.registry import Context, Outcome

    ctx = Context(claim={}, expect={"sm_active_max_over_avg": {"at_least": 1.25}}, sources={}, clones={}, hardware={})
    out = gpu_varlen.judge_existential(Outcome(measurements={"sm_active_max_over_avg": (value, "x")}), ctx)
    assert out.verdict == verdict, out.reason
    if verdict == "inconclusive":
        assert "not reached at this shape" in out.reason
