"""gpu.mainloop-trace's arithmetic on synthetic records (the GPU run itself is in the negative-control suite)."""

from __future__ import annotations

import numpy as np
import pytest

from verifiers.gpu.trace import analyse, decode, iterations


def _wg(offset: int, n: int, period: int = 100, softmax: tuple[int, int] = (30, 60)) -> list[tuple[int, int]]:
    """One warpgroup's records: n iterations, events at fixed offsets inside each period."""
    at = {0: 0, 1: 1, 2: 2, 3: 10, 4: softmax[0], 5: softmax[1], 6: 80}
    return [(1000 + offset + i * period + at[ev], ev) for i in range(n) for ev in range(7)]


def test_pingpong_shifted_by_half_a_period_alternates_and_hides_softmax() -> None:
    m = analyse({(0, 0): [_wg(0, 10), _wg(50, 10)]}, skip=1)
    assert m["issue_alternation"] == 1.0
    # WG0's softmax [30, 60] of each kept period overlaps WG1's matrix phase [52, 130] by 8 of 30 cycles (9
    # iterations); WG1's [80, 110] overlaps WG0's next phase [102, 180] by 8, except in its last iteration,
    # which has no next WG0 phase: (9 * 8 + 8 * 8) of 18 * 30 cycles
    assert m["softmax_under_other_mma"] == pytest.approx((9 * 8 + 8 * 8) / (18 * 30), abs=1e-4)
    assert m["softmax_concurrent"] == 0.0  # [30, 60] and [80, 110] never meet
    assert m["k_wait_share"] == pytest.approx(1 / 80, abs=1e-3)
    assert m["iterations"] == 18


def test_two_turns_in_a_row_do_not_count_as_alternation() -> None:
    # WG0's turns at 0, 100, 200, ... ; WG1 also in every period but WG0 takes two in a row at the seam
    wg0 = _wg(0, 6, period=100)
    wg1 = _wg(10, 6, period=100)  # nearly in lockstep: turns alternate, softmaxes coincide
    m = analyse({(0, 0): [wg0, wg1]}, skip=0)
    assert m["issue_alternation"] == 1.0 and m["softmax_concurrent"] == pytest.approx(20 / 30, abs=1e-3)
    wg1_late = _wg(250, 3, period=100)  # WG0 runs iterations 0-2 alone, then both interleave
    m = analyse({(0, 0): [_wg(0, 6), wg1_late]}, skip=0)
    assert m["issue_alternation"] < 0.8


def test_out_of_order_events_are_an_error_not_a_measurement() -> None:
    bad = _wg(0, 3)
    bad[5] = (bad[5][0] - 1000, bad[5][1])  # softmax done before S ready
    with pytest.raises(RuntimeError, match="out of order"):
        analyse({(0, 0): [bad, _wg(50, 3)]}, skip=0)


def test_iterations_keep_only_complete_ones_and_drop_the_first() -> None:
    recs = [*_wg(0, 3), (9999, 0), (10000, 1)]  # a fourth, cut-short iteration
    assert len(iterations(recs, skip=0)) == 3 and len(iterations(recs, skip=1)) == 2


def test_decode_reads_slots_until_the_first_empty_one() -> None:
    ctas, tiles, events = 2, 1, 4
    raw = np.zeros((ctas, 2, tiles, events, 2), dtype=np.int64)
    for wg in (0, 1):
        for k in range(3):
            raw[1, wg, 0, k] = (100 + k, (k << 48) | (7 << 32) | 5)
    recs, sms = decode(raw.reshape(-1), ctas, tiles, events)
    assert list(recs) == [(1, 0)] and recs[(1, 0)][0] == [(100, 0), (101, 1), (102, 2)] and sms == {7}
