"""toolchain.sass-loop-local on kb's own fixture: loops found, carried locals found, a false count refutes.

tests/fixtures/sass/kb_loop_local.cu (kb's code) compiled with `nvcc -arch=sm_80 -cubin -O3` (CUDA 13.0)
and listed with cuobjdump 13 (kb_loop_local_sm80.sass): kb_carry_local keeps a dynamically indexed array in
local memory and updates it with an FFMA inside its loop; kb_carry_registers carries its two values in
registers.
"""

from __future__ import annotations

from pathlib import Path

from kb.records.models import Comparison
from kb.verify.expect import judge
from verifiers.pinned import spills as L
from verifiers.pinned.sass import split_functions

FIX = Path(__file__).parent / "fixtures" / "sass" / "kb_loop_local_sm80.sass"


def _result(name: str) -> dict:
    funcs = split_functions(FIX.read_text())
    return L.loop_local(L.instructions(funcs[name]))


def test_local_array_updated_in_the_loop_is_a_carried_round_trip() -> None:
    r = _result("_Z14kb_carry_localPKfPfii")
    assert r["loops"] >= 1 and r["local_in_loops"] == 10
    assert r["round_trips"] and all(t["fp_updated"] and t["writers"] == ["FFMA"] for t in r["round_trips"])


def test_values_carried_in_registers_give_no_round_trip() -> None:
    r = _result("_Z18kb_carry_registersPKfPfi")
    assert r["loops"] >= 1 and r["local_in_loops"] == 0 and r["round_trips"] == []


def test_a_false_count_refutes() -> None:
    trips = len([t for t in _result("_Z14kb_carry_localPKfPfii")["round_trips"] if t["fp_updated"]])
    verdict, _ = judge({"fp_round_trips": trips}, {"fp_round_trips": Comparison(equals=0)})
    assert verdict == "refutes"


def test_backward_branches_only_are_loops() -> None:
    ins = [(0x10, "BRA 0x40"), (0x20, "FADD R1, R2, R3"), (0x30, "@P0 BRA 0x10"), (0x40, "EXIT")]
    assert L.loops(ins) == [(0x10, 0x30)]
