"""code.build-sass: HGMMA operand forms, in-flight exponentials, local memory and spills read exactly; mutations refute.

Fixtures are kb's own tests/fixtures/sass/kb_regs.cu compiled with `nvcc -arch=sm_90a -cubin -O3
--use_fast_math -Xptxas -v` (CUDA 13.0) and read with cuobjdump 13 (`-sass` -> kb_regs_sm90a.sass,
`-res-usage` -> kb_regs_sm90a.res; ptxas's report -> kb_regs_sm90a.ptxas; nvdisasm `--life-range-mode count`
-> kb_regs_sm90a.lr: at most 13 and 17 general registers live at one instruction). kb_wgmma_chain: three HGMMA
(the first from zero, two accumulating into the same registers, one with A from registers), the exponential
that ptxas placed after the `WARPGROUP.DEPBAR.LE gsb0, 0x0` wait, no local memory, 34 registers.
kb_local_array: a dynamically indexed 1 KiB array in local memory (69 STL, 6 LDL) with no spills, 30 registers.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from kb.records.models import Comparison
from kb.verify.expect import judge
from kb.verify.hw import find_tool
from verifiers.pinned import build as pinned_build
from verifiers.pinned import build_sass as B

FIX = Path(__file__).parent / "fixtures" / "sass"
CHAIN = "_Z14kb_wgmma_chainPfPKfjjjjmm"
LOCAL = "_Z14kb_local_arrayPfPKii"
NAMES = {CHAIN: "kb_wgmma_chain(float*, float const*, unsigned int, unsigned int, unsigned int, unsigned int, "
                "unsigned long, unsigned long)", LOCAL: "kb_local_array(float*, int const*, int)"}


def _ptxas() -> dict:
    return pinned_build.parse_ptxas((FIX / "kb_regs_sm90a.ptxas").read_text())


def _measure(listing: str | None = None, kernel_filter: str = "", ptxas: dict | None = None) -> dict:
    listing = (FIX / "kb_regs_sm90a.sass").read_text() if listing is None else listing
    values, _ = B.measure(listing, (FIX / "kb_regs_sm90a.res").read_text(), _ptxas() if ptxas is None else ptxas,
                          NAMES, kernel_filter, ["HGMMA", "MUFU.EX2", "WARPGROUP.DEPBAR"])
    return values


def test_wgmma_kernel_read_exactly() -> None:
    m = _measure(kernel_filter="^kb_wgmma_chain")
    assert (m["kernels"], m["registers"], m["local_loads"], m["local_stores"]) == (1, 34, 0, 0)
    assert (m["hgmma"], m["hgmma_accumulate"], m["hgmma_zero_init"], m["hgmma_a_registers"], m["hgmma_a_smem"]) \
        == (3, 2, 1, 1, 2)
    assert (m["count_MUFU.EX2"], m["mufu_ex2_in_flight"], m["count_WARPGROUP.DEPBAR"]) == (1, 0, 1)
    assert (m["spill_stores"], m["spill_loads"], m["stack_bytes"]) == (0, 0, 0)


def test_local_array_is_local_memory_not_spill() -> None:
    m = _measure(kernel_filter="^kb_local_array")
    assert (m["registers"], m["local_stores"], m["local_loads"], m["hgmma"]) == (30, 69, 6, 0)
    assert (m["spill_stores"], m["spill_loads"], m["stack_bytes"]) == (0, 0, 1024)
    both = _measure()
    assert (both["kernels"], both["registers"], both["registers_min"], both["local_stores"]) == (2, 34, 30, 69)


def test_mutated_listing_refutes() -> None:
    text = (FIX / "kb_regs_sm90a.sass").read_text()
    expect = {"hgmma_accumulate": Comparison(equals=2), "local_stores": Comparison(equals=0),
              "mufu_ex2_in_flight": Comparison(equals=0)}
    assert judge(_measure(text, "^kb_wgmma_chain"), expect)[0] == "supports"
    # The accumulating HGMMA made to start from zero: one fewer accumulating instruction.
    broken = text.replace("gdesc[UR8], R24, gsb0", "gdesc[UR8], RZ, gsb0", 1)
    verdict, reason = judge(_measure(broken, "^kb_wgmma_chain"), expect)
    assert verdict == "refutes" and "hgmma_accumulate = 1" in reason
    # The wait relaxed to leave one group outstanding: the exponential now overlaps the WGMMA.
    relaxed = text.replace("WARPGROUP.DEPBAR.LE gsb0, 0x0", "WARPGROUP.DEPBAR.LE gsb0, 0x1", 1)
    verdict, reason = judge(_measure(relaxed, "^kb_wgmma_chain"), expect)
    assert verdict == "refutes" and "mufu_ex2_in_flight = 1" in reason
    # A spill store placed in the kernel: local memory traffic appears.
    spilled = text.replace("MUFU.EX2 R0, R0 ;", "STL [R1], R0 ;", 1)
    verdict, reason = judge(_measure(spilled, "^kb_wgmma_chain"), expect)
    assert verdict == "refutes" and "local_stores = 1" in reason


def test_register_and_spill_expectations_refute() -> None:
    expect = {"registers": Comparison(equals=34), "spill_stores": Comparison(equals=0)}
    assert judge(_measure(kernel_filter="^kb_wgmma_chain"), expect)[0] == "supports"
    ptx = _ptxas()
    ptx[CHAIN] = {**ptx[CHAIN], "spill_stores": 8}
    verdict, reason = judge(_measure(kernel_filter="^kb_wgmma_chain", ptxas=ptx), expect)
    assert verdict == "refutes" and "spill_stores = 8" in reason
    res = (FIX / "kb_regs_sm90a.res").read_text().replace("REG:34", "REG:40")
    values, _ = B.measure((FIX / "kb_regs_sm90a.sass").read_text(), res, _ptxas(), NAMES, "^kb_wgmma_chain", [])
    assert judge(values, expect)[0] == "refutes"


def test_live_register_counts_and_a_mutation() -> None:
    text = (FIX / "kb_regs_sm90a.lr").read_text()
    live = B.live_registers(text)
    assert live == {CHAIN: 13, LOCAL: 17}
    values, _ = B.measure((FIX / "kb_regs_sm90a.sass").read_text(), (FIX / "kb_regs_sm90a.res").read_text(), _ptxas(),
                          NAMES, "", [], live)
    assert (values["max_live_registers"], values["max_live_registers_min"]) == (17, 13)
    expect = {"max_live_registers": Comparison(at_most=17)}
    assert judge(values, expect)[0] == "supports"
    # One instruction of the chain kernel made to hold 40 live registers: the expectation refutes.
    first = next(ln for ln in text.splitlines() if "HGMMA" in ln)
    mutated = text.replace(first, first.replace("|   8   |", "|  40   |"), 1)
    assert B.live_registers(mutated)[CHAIN] == 40
    values, _ = B.measure((FIX / "kb_regs_sm90a.sass").read_text(), (FIX / "kb_regs_sm90a.res").read_text(), _ptxas(),
                          NAMES, "", [], B.live_registers(mutated))
    verdict, reason = judge(values, expect)
    assert verdict == "refutes" and "max_live_registers = 40" in reason
    with pytest.raises(RuntimeError, match="live ranges lack"):
        B.measure((FIX / "kb_regs_sm90a.sass").read_text(), (FIX / "kb_regs_sm90a.res").read_text(), _ptxas(), NAMES,
                  "", [], {CHAIN: 13})


def test_missing_ptxas_entry_and_no_match_are_errors() -> None:
    with pytest.raises(RuntimeError, match="ptxas report lacks"):
        _measure(kernel_filter="^kb_wgmma_chain", ptxas={})
    with pytest.raises(RuntimeError, match="no kernel matches"):
        _measure(kernel_filter="^flash")


def test_params_are_names_and_patterns() -> None:
    assert B.BuildSassParams(revision="fa3-2024-08", counts=["HGMMA", "MUFU.EX2"]).kernel_filter == ""
    with pytest.raises(ValueError):
        B.BuildSassParams(revision="fa3-2024-09")
    with pytest.raises(ValueError):
        B.BuildSassParams(revision="fa3-2024-08", counts=["LDL R1"])
    with pytest.raises(ValueError):
        B.BuildSassParams(revision="fa3-2024-08", kernel_filter="compute_attn_ws<(")


def test_verifier_reads_a_build_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end on a stand-in build: the fixture compiled into a shared library, with a manifest as build.py writes."""
    nvcc, cuobjdump = shutil.which("nvcc"), find_tool("cuobjdump")
    if not nvcc or not cuobjdump:
        pytest.skip("needs nvcc and cuobjdump")
    rev = pinned_build.revision("fa3-2024-08")
    monkeypatch.setenv("KB_BUILD_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", f"{Path(cuobjdump).parent}:{Path(nvcc).parent}:/usr/bin:/bin")
    ctx = None  # the verifier reads nothing from the context
    assert B.build_sass(B.BuildSassParams(revision="fa3-2024-08"), ctx).verdict == "skipped"
    out = tmp_path / "pinned" / "fa3-2024-08" / "k1"
    out.mkdir(parents=True)
    cmd = [nvcc, "-shared", "-Xcompiler", "-fPIC", "-gencode", "arch=compute_90a,code=sm_90a", "-O3", "--use_fast_math",
           "-Xptxas", "-v", "-o", str(out / "libkb.so"), str(FIX / "kb_regs.cu")]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-800:]
    (out / "manifest.json").write_text(json.dumps({
        "source_sha": rev.sha, "harness": {"sha256": pinned_build.harness_digest(rev)}, "key": "k1",
        "gencode": "arch=compute_90a,code=sm_90a", "compiler": "nvcc", "ptxas": pinned_build.parse_ptxas(res.stderr)}))
    (out.parent / "current").write_text("k1\n")
    got = B.build_sass(B.BuildSassParams(revision="fa3-2024-08", kernel_filter="^kb_wgmma_chain", counts=["HGMMA"]), ctx)
    m = {k: v for k, (v, _) in got.measurements.items()}
    assert (m["hgmma"], m["hgmma_accumulate"], m["local_stores"], m["count_HGMMA"], m["spill_stores"]) == (3, 2, 0, 3, 0)
    assert len(list(out.glob("cuobjdump-*.json"))) == 1  # the listing is kept for the next check on this build
    again = B.build_sass(B.BuildSassParams(revision="fa3-2024-08", kernel_filter="^kb_local_array", live_ranges=True), ctx)
    assert again.measurements["local_stores"][0] == 69 and again.measurements["max_live_registers"][0] == 17
    (out / "manifest.json").write_text(json.dumps({"source_sha": "0" * 40, "harness": {}}))
    assert B.build_sass(B.BuildSassParams(revision="fa3-2024-08"), ctx).verdict == "skipped"
