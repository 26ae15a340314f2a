"""code.fa4-sm100: the SASS/PTX reading counts exactly, a mutated count refutes, and (slow) the pinned compile.

The fixture tests/fixtures/sass/kb_ex2_sm100a.sass is kb's own snippet (kb_ex2.cu beside it) compiled with
`nvcc -arch=sm_100a -cubin --use_fast_math -O3` (CUDA 13.0) and disassembled with nvdisasm: 21 instructions
and 11 NOP padding, two MUFU.EX2, one global atomic (ATOMG), one MEMBAR.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import yaml

from kb.records.models import Comparison
from kb.verify.expect import judge
from verifiers.pinned import fa4_compile as F

FIXTURE = Path(__file__).parent / "fixtures" / "sass" / "kb_ex2_sm100a.sass"
FA4_PIN = "849f660f73b176e5ad5670e7f822c7fa9f3eaf8b"

# kb's own PTX text: an allocation whose column count is a register set by mov, and register budgets.
PTX = """
	mov.b32 	%r7, 256;
	mov.b32 	%r9, 512;
	tcgen05.alloc.cta_group::2.sync.aligned.shared::cta.b32 	[%r3+16], %r9;
	setmaxnreg.inc.sync.aligned.u32 	240;
	setmaxnreg.dec.sync.aligned.u32 	40;
	setmaxnreg.dec.sync.aligned.u32 	40;
"""


def test_fixture_counts_exactly() -> None:
    ms = F.sass_mnemonics(FIXTURE.read_text())
    assert len(ms) == 32
    assert ms.count("NOP") == 11
    assert ms[:3] == ["LDC", "S2R", "LDC.64"]
    m = F.measure(FIXTURE.read_text(), "")
    assert (m["mufu_ex2"], m["global_atomics"], m["membar"], m["ffma2"], m["tcgen05_mma"]) == (2, 1, 1, 0, 0)
    assert m["ex2_emulated"] == 0 and m["ex2_emulated_fraction"] == 0.0


def test_prefix_counts_whole_mnemonic_parts() -> None:
    ms = ["ATOMG.E.ADD", "ATOMS.OR", "ATOM", "REDUX", "REDG.E.ADD", "RED.E.ADD"]
    assert F.count_prefix(ms, "ATOM") == 1  # not ATOMG / ATOMS
    assert F.count_prefix(ms, "RED") == 1  # not REDUX / REDG
    assert F.count_prefix(ms, "ATOMG") == 1


def test_mutated_instruction_count_refutes() -> None:
    text = FIXTURE.read_text()
    expect = {"mufu_ex2": Comparison(equals=2), "global_atomics": Comparison(equals=1)}
    assert judge(F.measure(text, ""), expect)[0] == "supports"
    mutated = text.replace("MUFU.EX2 R8, R8", "FMUL R8, R8, R8", 1)
    verdict, reason = judge(F.measure(mutated, ""), expect)
    assert verdict == "refutes" and "mufu_ex2 = 1" in reason


def test_ptx_budgets_and_tmem_columns() -> None:
    m = F.measure("", PTX)
    assert m["tmem_alloc_columns"] == 512 and m["cta_group"] == 2 and m["tmem_alloc_sites"] == 1
    assert (m["setmaxnreg_inc"], m["setmaxnreg_dec"], m["regs_max"], m["regs_min"]) == ([240], [40], 240, 40)
    assert judge(F.measure("", PTX.replace("%r9;", "%r7;")), {"tmem_alloc_columns": Comparison(equals=512)})[0] == "refutes"


def test_unresolved_column_register_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="not a constant"):
        F.tmem_allocations("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r1], %r2;")


def test_params_take_names_only() -> None:
    with pytest.raises(ValueError):
        F.Fa4Params(variant="fwd-d128; import os")
    with pytest.raises(ValueError):
        F.Fa4Params(variant="fwd-d128", counts=["MUFU.EX2 R1"])


def _clone() -> str | None:
    """The flash-attention clone: $KB_CLONE_FLASH_ATTENTION, else kb.local.toml's [clones]."""
    import tomllib

    if os.environ.get("KB_CLONE_FLASH_ATTENTION"):
        return os.environ["KB_CLONE_FLASH_ATTENTION"]
    local = Path(__file__).resolve().parent.parent / "kb.local.toml"
    return tomllib.loads(local.read_text()).get("clones", {}).get("flash-attention") if local.exists() else None


@pytest.mark.skipif(not os.environ.get("KB_SLOW"), reason="compiles the pinned FA4 forward (minutes on 2 cores); set KB_SLOW=1")
def test_pinned_forward_compile_matches_the_tuning_table(tmp_path: Path) -> None:
    """The causal d128 forward's budgets are the pinned table's 192/72 and 512 - 2*192 - 72 = 56, and its
    static emulation fraction is freq 16, res 4 on 2 of 4 fragments: 16 of 128 exp2 per row."""
    clone = _clone() or pytest.skip("no flash-attention clone")
    root = Path(os.environ.get("KB_BUILD_CACHE") or Path.cwd() / ".kb" / "build")
    t = time.perf_counter()
    sheets = yaml.safe_load((Path(__file__).resolve().parent.parent / "sources" / "hardware.yaml").read_text())["sources"]
    hw = {h["id"]: h for h in sheets}
    folder, manifest = F.compile_variant(clone, FA4_PIN, "fwd-d128-causal", root, int(hw["B200"]["constants"]["sm_count"]))
    print(f"fwd-d128-causal: {time.perf_counter() - t:.0f} s ({'cached' if manifest['cached'] else 'cold'})")
    sass = "".join((folder / f).read_text() for f in manifest["files"] if f.endswith(".sass") and "ForwardSm100" in f)
    ptx = "".join((folder / f).read_text() for f in manifest["files"] if f.endswith(".ptx") and "ForwardSm100" in f)
    m = F.measure(sass, ptx)
    assert (m["setmaxnreg_inc"], m["setmaxnreg_dec"]) == ([192], [56, 72])
    assert m["tmem_alloc_columns"] == 512 and m["tcgen05_mma_2cta"] == 0
    assert m["ex2_emulated"] * 7 == m["mufu_ex2"] - 2  # 16 emulated : 112 on MUFU per softmax step; 2 MUFU elsewhere


def test_mma_a_operand_source() -> None:
    """kb's own listing lines: A from TMEM (the P@V form) vs A from an SMEM descriptor; a predicate is skipped."""
    sass = ("        /*0100*/                   UTCHMMA tmem[UR4], gdesc[UR6], tmem[UR8], tmem[UR10], idesc[UR11], UPT ;\n"
            "        /*0110*/              @P0   UTCHMMA.2CTA gdesc[UR12], gdesc[UR14], tmem[UR8], tmem[UR10], idesc[UR11], !UPT ;\n")
    m = F.measure(sass, "")
    assert (m["tcgen05_mma"], m["tcgen05_mma_2cta"], m["tcgen05_mma_a_tmem"], m["tcgen05_mma_a_smem"]) == (2, 1, 1, 1)


def _listing(*lines: str) -> str:
    return "".join(f"        /*{16 * i:04x}*/                   {line} ;\n" for i, line in enumerate(lines))


def test_gemm_groups_split_at_commits() -> None:
    """kb's own listing: three MMA groups (two A-from-TMEM, one A-from-SMEM) closed by commits, one mixed group."""
    mma_t = "UTCHMMA tmem[UR4], gdesc[UR6], tmem[UR8], tmem[UR10], idesc[UR11], UPT"
    mma_s = "UTCHMMA gdesc[UR12], gdesc[UR14], tmem[UR8], tmem[UR10], idesc[UR11], !UPT"
    sass = _listing(mma_t, mma_t, "UTCBAR [UR66], URZ", "FADD R1, R2, R3", mma_s, mma_s, "UTCBAR [UR66], URZ",
                    mma_t, "UTCBAR [UR9], URZ", "UTCBAR [UR8], URZ", mma_s, mma_t)
    assert F.mma_groups(sass) == [("tmem", "tmem"), ("gdesc", "gdesc"), ("tmem",), ("gdesc", "tmem")]
    m = F.measure(sass, "")
    assert (m["tcgen05_gemm_groups"], m["tcgen05_gemm_groups_a_tmem"], m["tcgen05_gemm_groups_a_mixed"]) == (4, 2, 1)
    assert m["tcgen05_gemm_groups_a_tmem_share"] == 0.5 and m["tcgen05_mma_b_tmem"] == 0
    # The same listing with one B operand moved to TMEM: counted, and the 2-of-5 expectation would now fail.
    m2 = F.measure(sass.replace("UTCHMMA tmem[UR4], gdesc[UR6]", "UTCHMMA tmem[UR4], tmem[UR6]", 1), "")
    assert m2["tcgen05_mma_b_tmem"] == 1
    assert judge(m, {"tcgen05_gemm_groups_a_tmem_share": Comparison(equals=0.4)})[0] == "refutes"


def test_reqntid_is_the_thread_product() -> None:
    """PTX .reqntid: one to three dimensions multiply; a kernel without it reports None."""
    assert F.reqntid(".visible .entry k()\n.reqntid 512, 1, 1\n.minnctapersm 1\n{") == 512
    assert F.reqntid(".reqntid 128, 2\n") == 256
    assert F.reqntid(".maxntid 1024, 1, 1\n") is None
    assert F.measure("", ".reqntid 384, 1, 1\n")["ptx_reqntid"] == 384
