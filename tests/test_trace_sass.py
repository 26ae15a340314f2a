"""The traced FA3 variant's machine code: its clock reads bracket what the trace says they bracket.

A clock read can only time an interval if the compiler left the interval's work between the reads. This test
compiles the traced fp16 d128 unit (kb's variant fa3-2024-08-trace, about a minute on 2 cores) and reads the
SASS of the kernel the paper's shape runs (non-causal, cluster 2, static persistent scheduler): of its seven
clock reads, the issue turn must follow the scheduler's BAR.SYNC, S-ready the wait for one outstanding WGMMA
group, PV-done the wait for none, and every MUFU.EX2 between the first and the last read must sit between
S-ready and softmax-done. Needs nvcc, cuobjdump and the clones (kb.local.toml); skipped without them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import variant_kernel_sass
from verifiers.pinned import variants


def test_trace_clock_reads_bracket_their_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, kernel = variant_kernel_sass("fa3-2024-08-trace", tmp_path, monkeypatch)
    ins = [ln for ln in kernel.split("\n") if re.search(r"/\*[0-9a-f]{4,}\*/", ln)]
    at = {k: [i for i, ln in enumerate(ins) if re.search(p, ln)] for k, p in {
        "clock": r"CS2R R\d+, SR_CLOCKLO", "ex2": r"MUFU\.EX2", "bar": r"BAR\.SYNC",
        "wait1": r"WARPGROUP\.DEPBAR\.LE gsb0, 0x1", "wait0": r"WARPGROUP\.DEPBAR\.LE gsb0, 0x0"}.items()}
    clk = at["clock"]
    assert len(clk) == len(variants.TRACE_EVENTS) == 7
    start, k_ready, turn, issued, s_ready, soft_done, pv_done = clk
    assert any(k_ready < b < turn for b in at["bar"])  # the scheduler barrier sits before the issue-turn read
    assert any(issued < w < s_ready for w in at["wait1"])  # S ready: one WGMMA group may still be in flight
    assert any(soft_done < w < pv_done for w in at["wait0"])  # PV done: none in flight
    loop_ex2 = [i for i in at["ex2"] if start < i < pv_done]
    assert loop_ex2 and all(s_ready < i < soft_done for i in loop_ex2)
