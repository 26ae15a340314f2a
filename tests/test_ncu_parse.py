"""gpu.ncu-metrics on a CPU: parsing ncu's raw CSV (units row, scaled values), the summary and the ratios.

The fixture is a hand-written ncu `--csv --page raw` output of two kernels: the
longest one gives the launch and occupancy figures, bytes are summed, and values
printed with a unit prefix (Mbyte, Kbyte, usecond) are brought to base units.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from verifiers.gpu import ncu
from verifiers.gpu.params import AttnParams

FIXTURE = Path(__file__).parent / "fixtures" / "ncu" / "raw-two-kernels.csv"


def test_parse_reads_units_and_scales_prefixed_values() -> None:
    rows = ncu.parse_csv(FIXTURE.read_text())
    assert [r["name"] for r in rows] == ["flash_fwd_kernel", "small_kernel"]
    k = rows[0]
    assert k["dram__bytes_read.sum"] == 201_326_592  # thousands separators
    assert k["dram__bytes_write.sum"] == pytest.approx(67_108_864)  # 67.108864 Mbyte
    assert k["gpu__time_duration.sum"] == pytest.approx(1_250_500)  # usecond -> ns
    assert k["launch__shared_mem_per_block_dynamic"] == pytest.approx(49_152)  # Kbyte
    assert k["launch__occupancy_limit_registers"] == 2  # a count: no scaling


def test_unit_factor() -> None:
    assert ncu.unit_factor("byte") == 1 and ncu.unit_factor("Gbyte") == 1e9
    assert ncu.unit_factor("Ksector") == 1e3 and ncu.unit_factor("msecond") == 1e6
    assert ncu.unit_factor("%") == 1 and ncu.unit_factor("register/thread") == 1


def test_summary_and_ratios() -> None:
    rows = ncu.parse_csv(FIXTURE.read_text())
    s = ncu.summarize(rows)
    assert s["kernels"] == 2 and s["longest_kernel"] == "flash_fwd_kernel"
    assert s["dram_read_bytes"] == 201_326_592 + 1_024
    assert s["dram_write_bytes"] == pytest.approx(67_108_864 + 2_048)
    assert s["l2_read_bytes"] == 32 * (201_326_592 + 64)
    assert s["global_load_bytes"] == pytest.approx(32 * (4.5e6 + 16e6))  # both in Msector, the column's unit
    assert s["occ_ctas_per_sm"] == 2 and s["occ_limit_warps"] == 16  # the tightest of the four limits
    assert s["block_threads"] == 128 and s["registers_per_thread"] == 255
    p = AttnParams(batch=1, heads=32, seqlen_q=8192, head_dim=128)
    sizes = ncu.tensor_bytes(p)
    assert sizes["o"] == 1 * 32 * 8192 * 128 * 2 and sizes["kv"] == 2 * sizes["o"] and sizes["lse"] == 32 * 8192 * 4
    other = dict(s, l2_read_bytes=s["l2_read_bytes"] + sizes["kv"], dram_bytes=3 * s["dram_bytes"],
                 global_load_bytes=s["global_load_bytes"] + 2 * sizes["kv"])
    m = ncu.measurements(s, sizes, other)
    assert m["dram_write_over_o_lse"][0] == pytest.approx((67_108_864 + 2_048) / (sizes["o"] + sizes["lse"]))
    assert m["dram_read_over_l2_read"][0] == pytest.approx(s["dram_read_bytes"] / s["l2_read_bytes"])
    assert m["l2_read_over_kv"][0] == pytest.approx(s["l2_read_bytes"] / sizes["kv"])
    assert m["l2_read_delta_over_kv"][0] == pytest.approx(1.0)
    assert m["global_load_delta_over_kv"][0] == pytest.approx(2.0)
    assert m["dram_ratio_other_to_this"][0] == pytest.approx(3.0)
    assert "l2_read_delta_over_kv" not in ncu.measurements(s, sizes, None)


def test_profile_pass_command_and_kernel_filter(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def fake_run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        seen["cmd"] = cmd
        return subprocess.CompletedProcess(cmd, 0, stdout=FIXTURE.read_text(), stderr="")

    monkeypatch.setattr(ncu.shutil, "which", lambda name: "/opt/ncu/ncu")
    monkeypatch.setattr(ncu.subprocess, "run", fake_run)
    p = ncu.NcuParams(impl="fa2-v2.0.0", phase="backward", kernel_filter=["seqk_parallel", "dot_do_o"])
    rows = ncu.profile_pass(p, p.phase, p.kernel_filter)
    cmd = seen["cmd"]
    assert len(rows) == 2
    assert cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[cmd.index("--print-units") + 1] == "base"
    assert cmd[cmd.index("--kernel-name") + 1] == "regex:seqk_parallel|dot_do_o"
    assert cmd[-1] == "backward"


def test_profile_pass_without_kernels_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ncu.shutil, "which", lambda name: "/opt/ncu/ncu")
    monkeypatch.setattr(ncu.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(
        cmd, 0, stdout="==PROF== No kernels were profiled.\n", stderr=""))
    with pytest.raises(RuntimeError, match="0 kernels profiled"):
        ncu.profile_pass(ncu.NcuParams(), "forward", ["no_such_kernel"])


def test_kernel_filter_takes_names_not_patterns() -> None:
    with pytest.raises(ValidationError, match="identifier substrings"):
        ncu.NcuParams(kernel_filter=["flash.*|x"])
