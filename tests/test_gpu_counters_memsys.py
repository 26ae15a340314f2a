"""The CPU side of gpu.ncu-counters, gpu.carveout-residency and gpu.scratch-repeat: parsing, ratios, models, params.

The GPU side runs on the H200 (tests/test_gpu_negative_controls.py holds a false expectation per verifier).
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from verifiers.gpu import counters, memsys, ncu
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
    rows = ncu.parse_rows(CSV, [counters.COUNTERS[n] for n in NAMES])
    assert [r["name"] for r in rows] == ["fmha_dgrad_kernel", "convert"]
    named = [{"name": r["name"], **{n: r[counters.COUNTERS[n]] for n in NAMES}} for r in rows]
    t = counters.totals(named, NAMES)
    assert t["global_ld_sectors"] == pytest.approx(16_160)  # Ksector -> sectors, summed over both kernels
    assert t["sectors_per_ld_request"] == pytest.approx(16_160 / 1_010)
    assert t["dram_write_bytes"] == pytest.approx(2.5e6)
    assert t["red_bytes_over_dram_write"] == pytest.approx(32 * 250_000 / 2.5e6)


def test_per_sm_spread_needs_one_kernel_and_part_shares_add_up() -> None:
    one = [{"name": "flash_fwd_kernel", "sm_active_cycles_max": 300.0, "sm_active_cycles_avg": 150.0}]
    t = counters.totals(one, ["sm_active_cycles_max", "sm_active_cycles_avg"])
    assert t["sm_active_max_over_avg"] == pytest.approx(2.0)
    two = [{"name": "a", "sm_active_cycles_max": 1.0}, {"name": "b", "sm_active_cycles_max": 2.0}]
    with pytest.raises(RuntimeError, match="one kernel"):  # a max summed over kernels means nothing
        counters.totals(two, ["sm_active_cycles_max"])
    rows = [{"name": "flash_bwd_dot_do_o_kernel", "gpu_time_ns": 10.0},
            {"name": "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel", "gpu_time_ns": 85.0},
            {"name": "flash_bwd_convert_dq_kernel", "gpu_time_ns": 5.0}]
    t = counters.totals(rows, ["gpu_time_ns"], ["dot_do_o", "convert_dq"])
    assert t["part_share_gpu_time_ns"] == pytest.approx(0.15)
    with pytest.raises(RuntimeError, match="part_filter"):
        counters.totals(rows, ["gpu_time_ns"], ["no_such_kernel"])


def test_a_zero_denominator_leaves_the_ratio_out_and_says_so() -> None:
    notes: list[str] = []
    t = counters.totals([{"name": "k", "l2_red_sectors": 0.0, "dram_write_bytes": 64.0}],
                        ["l2_red_sectors", "dram_write_bytes"], notes=notes)
    assert "dram_write_over_red_bytes" not in t and any("dram_write_over_red_bytes" in n for n in notes)
    p = AttnParams(batch=1, heads=1, seqlen_q=128, head_dim=64)
    m = counters.measurements({"gpu_time_ns": 0.0}, {"gpu_time_ns": 5.0}, counters.tensor_bytes(p), notes)
    assert "ratio_gpu_time_ns" not in m and any("ratio_gpu_time_ns" in n for n in notes)


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
