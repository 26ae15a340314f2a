"""toolchain.sass-deps: control words decoded exactly, the LDG -> STS wait found, a cleared wait refutes.

The fixture is kb's own tests/fixtures/sass/kb_ldg_sts.cu compiled with `nvcc -gencode
arch=compute_80,code=sm_80 -cubin -O3` (CUDA 13.0) and read with cuobjdump 13 -sass: one LDG.E.128 into
R8..R11 that sets scoreboard 2, an FFMA that does not wait, then the STS.128 of R8 that waits on scoreboard 2.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kb.records.models import Comparison
from kb.verify.expect import judge
from verifiers.pinned import sass_deps as D
from verifiers.pinned.sass import split_functions

FIX = Path(__file__).parent / "fixtures" / "sass" / "kb_ldg_sts_sm80.sass"
KERNEL = "_Z10kb_ldg_stsPK6float4Pff"
EXPECT = {"ldg_sts_pairs": Comparison(at_least=1), "ldg_sts_unwaited": Comparison(equals=0),
          "ldg_sts_independent": Comparison(at_least=1)}


def _measure(text: str) -> dict[str, int]:
    return D.measure(text, {KERNEL: "kb_ldg_sts(float4 const*, float*, float)"}, "^kb_ldg_sts")[0]


def test_control_words_decoded() -> None:
    insns = D.instructions(split_functions(FIX.read_text())[KERNEL])
    ldg = next(i for i in insns if i.op.startswith("LDG"))
    sts = next(i for i in insns if i.op.startswith("STS"))
    assert (ldg.op, ldg.operands[0], ldg.write_barrier) == ("LDG.E.128", "R8", 2)
    assert sts.wait_mask & (1 << 2) and sts.operands[-1] == "R8"
    ffma = next(i for i in insns if i.op == "FFMA")
    assert ffma.wait_mask == 0  # independent work issues while the load is outstanding


def test_fixture_supports_and_a_cleared_wait_refutes() -> None:
    text = FIX.read_text()
    m = _measure(text)
    assert m == {"kernels": 1, "ldg_sts_pairs": 1, "ldg_sts_waited": 1, "ldg_sts_unwaited": 0, "ldg_sts_independent": 1,
                 "hmma": 0, "hmma_scoreboarded": 0}
    assert judge(m, EXPECT)[0] == "supports"
    # The STS's control word with its wait mask cleared (bits 116..121): the store no longer waits for the load.
    word = "0x004fe8000000cc00"
    assert word in text
    cleared = f"0x{int(word, 16) & ~(0x3F << 52):016x}"
    verdict, reason = judge(_measure(text.replace(word, cleared, 1)), EXPECT)
    assert verdict == "refutes" and "ldg_sts_unwaited = 1" in reason


def test_store_of_other_registers_is_no_pair() -> None:
    text = FIX.read_text().replace("STS.128 [R12.X16], R8 ;", "STS.128 [R12.X16], R4 ;", 1)
    assert _measure(text)["ldg_sts_pairs"] == 0


def test_not_a_listing_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="no kernel matches"):
        D.measure(FIX.read_text(), {}, "^flash")


def test_mma_scoreboard_read_from_the_control_word() -> None:
    # The fixture's FFMA (fixed latency, no scoreboard) renamed HMMA.16816.F32, then given write scoreboard 3.
    text = FIX.read_text().replace("FFMA R0, R0, R0, 1 ;", "HMMA.16816.F32 R0, R0, R0, 1 ;", 1)
    m = _measure(text)
    assert (m["hmma"], m["hmma_scoreboarded"]) == (1, 0)
    word = "0x000fc80000000000"  # the FFMA's control word: write barrier 7 (none)
    assert word in text
    set3 = f"0x{(int(word, 16) & ~(7 << 46)) | (3 << 46):016x}"
    verdict, reason = judge(_measure(text.replace(word, set3, 1)), {"hmma_scoreboarded": Comparison(equals=0)})
    assert verdict == "refutes" and "hmma_scoreboarded = 1" in reason
