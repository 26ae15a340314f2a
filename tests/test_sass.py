"""toolchain.sass: cuobjdump listings read exactly, a mutated count refutes, parameters are names only.

Fixtures are kb's own snippet tests/fixtures/sass/kb_ex2.cu compiled with `nvcc -arch=sm_80 -cubin
--use_fast_math -O3` (CUDA 13.0) and read with cuobjdump 13 (`-sass` -> kb_ex2_sm80.sass, `-res-usage` ->
kb_ex2_sm80.res): one kernel, 20 instructions and 12 NOP, two MUFU.EX2, the unused-result atomicAdd
lowered to a RED (no ATOM), 14 registers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kb.records.models import Comparison
from kb.verify.expect import judge
from verifiers.pinned import sass as S
from verifiers.pinned.fa4_compile import count_prefix, sass_mnemonics

FIX = Path(__file__).parent / "fixtures" / "sass"
KERNEL = "_Z6kb_ex2PKfPfS1_"


def _counts(listing: str) -> dict[str, int]:
    ms = [m for body in S.split_functions(listing).values() for m in sass_mnemonics(body)]
    return {"instructions": len(ms), **{f"count_{p}": count_prefix(ms, p) for p in ("MUFU.EX2", "RED", "ATOM", "NOP", "LDG")}}


def test_listing_counts_exactly() -> None:
    funcs = S.split_functions((FIX / "kb_ex2_sm80.sass").read_text())
    assert list(funcs) == [KERNEL]
    ms = sass_mnemonics(funcs[KERNEL])
    assert ms[:3] == ["MOV", "S2R", "HFMA2.MMA"] and ms[-1] == "NOP"
    assert _counts((FIX / "kb_ex2_sm80.sass").read_text()) == {
        "instructions": 32, "count_MUFU.EX2": 2, "count_RED": 1, "count_ATOM": 0, "count_NOP": 12, "count_LDG": 2}


def test_registers_from_res_usage() -> None:
    assert S.registers((FIX / "kb_ex2_sm80.res").read_text()) == {KERNEL: 14}


def test_mutated_count_refutes() -> None:
    text = (FIX / "kb_ex2_sm80.sass").read_text()
    expect = {"count_RED": Comparison(equals=1), "count_ATOM": Comparison(equals=0)}
    assert judge(_counts(text), expect)[0] == "supports"
    mutated = text.replace("RED.E.ADD.F32.FTZ.RN.STRONG.GPU", "ATOM.E.ADD.F32.FTZ.RN.STRONG.GPU", 1)
    verdict, reason = judge(_counts(mutated), expect)
    assert verdict == "refutes" and "count_RED = 0" in reason and "count_ATOM = 1" in reason


def test_params_are_names_only() -> None:
    assert S.SassParams(revision="fa1-v1.0.9", unit="fwd:fp16:128", counts=["LDG", "UTMALDG"]).arch == "sm_80"
    with pytest.raises(ValueError):
        S.SassParams(revision="fa1-v1.0.9; rm", unit="fwd:fp16:128")
    with pytest.raises(ValueError):
        S.SassParams(revision="fa1-v1.0.9", unit="fwd:fp16:128", arch="sm_75")
    with pytest.raises(ValueError):
        S.SassParams(revision="fa1-v1.0.9", unit="fwd:fp16:128", counts=["LDG R1"])
