"""The CPU side of gpu.ncu-counters, gpu.carveout-residency and gpu.scratch-repeat: parsing, ratios, models, params.

The GPU side runs on the H200 (tests/test_gpu_negative_controls.py holds a false expectation per verifier).
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from verifiers.gpu import counters, memsys
from verifiers.gpu.params import AttnParams
from verifiers.gpu.scratch import ScratchParams

CSV = "\n".join([
    '"ID","Kernel Name","l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",'
    '"l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum","dram__bytes_write.sum","lts__t_sectors_op_red.sum"',
    '"","","request","Ksector","Mbyte","sector"',
    '"0","fmha_dgrad_kernel","1,000","16","2","250,000"',
    '"1","convert","10","0.16","0.5","0"',
    "==PROF== Disconnected",
])
NAMES = ["global_ld_requests", "global_ld_sectors", "dram_write_bytes", "l2_red_sectors"]


def test_parse_rows_scales_and_totals_derive_ratios() -> None:
    rows = counters.parse_rows(CSV, [counters.COUNTERS[n] for n in NAMES])
    assert [r["name"] for r in rows] == ["fmha_dgrad_kernel", "convert"]
    named = [{"name": r["name"], **{n: r[counters.COUNTERS[n]] for n in NAMES}} for r in rows]
    t = counters.totals(named, NAMES)
    assert t["global_ld_sectors"] == pytest.approx(16_160)  # Ksector -> sectors, summed over both kernels
    assert t["sectors_per_ld_request"] == pytest.approx(16_160 / 1_010)
    assert t["dram_write_bytes"] == pytest.approx(2.5e6)
    assert t["red_bytes_over_dram_write"] == pytest.approx(32 * 250_000 / 2.5e6)


def test_a_counter_ncu_does_not_report_is_an_error_not_a_zero() -> None:
    rows = [{"name": "k", "dram_read_bytes": None}]
    with pytest.raises(RuntimeError, match=r"dram__bytes_read\.sum"):
        counters.totals(rows, ["dram_read_bytes"])


def test_other_gives_ratios_and_deltas_in_kv_bytes() -> None:
    p = AttnParams(batch=1, heads=1, seqlen_q=128, head_dim=64)  # K+V = 32 KiB
    kv = counters.tensor_bytes(p)["kv"]
    this = {"l2_read_sectors": kv / 32, "gpu_time_ns": 100.0}
    other = {"l2_read_sectors": 4 * kv / 32, "gpu_time_ns": 250.0}
    m = counters.measurements(this, other, counters.tensor_bytes(p))
    assert m["l2_read_over_kv"][0] == pytest.approx(1.0) and m["other_l2_read_over_kv"][0] == pytest.approx(4.0)
    assert m["l2_read_sectors_delta_over_kv"][0] == pytest.approx(3.0)
    assert m["ratio_gpu_time_ns"][0] == pytest.approx(2.5)
    assert "gpu_time_ns_delta_over_kv" not in m  # time is not traffic


def test_counter_names_are_a_closed_list() -> None:
    with pytest.raises(ValidationError, match="unknown"):
        counters.CounterParams(counters=["dram__bytes_read.sum"])  # ncu's own name is not accepted as data


def test_residency_models_tell_discrete_from_continuous() -> None:
    # 9 KiB + 1 KiB reserved per CTA on sm_90: 10 KiB per CTA.
    supported, most = memsys.SUPPORTED_KB[90], memsys.MAX_CTAS_PER_SM[90]
    discrete, continuous = memsys.residency_models(9216, 1024, 233_472, supported, most, 10)
    assert discrete == {1, 3, 6, 10, 13, 16, 19, 22}
    assert continuous == 2  # 10 % of 228 KiB = 22.8 KiB: two CTAs, a count no supported capacity gives
    assert memsys.residency_models(9216, 1024, 233_472, supported, most, 100)[1] == 22


def test_scratch_params_name_the_pins_workspaces() -> None:
    assert ScratchParams(impl="fa2-v2.0.0", tensors=["dq_accum", "softmax_d"]).min_cc == 90
    with pytest.raises(ValidationError, match="dq_accum"):
        ScratchParams(impl="fa1-v1.0.9", tensors=["dq_accum"])  # FA1's accumulator is dq_tmp
    with pytest.raises(ValidationError, match="kv_heads_group"):
        ScratchParams(impl="fa1-v1.0.9", kv_heads_group=2)
    with pytest.raises(ValidationError, match="reads the workspaces"):
        ScratchParams(impl="sdpa-flash")
