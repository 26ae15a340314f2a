"""gpu.mainloop-trace: per-warpgroup timelines of the FA3 forward's steady-state loop, from kb's traced build.

kb's variant `fa3-2024-08-trace` (verifiers/pinned/variants.py) is the FA3 pin with trace records inserted
in CollectiveMainloopFwd::mma's non-causal steady-state loop: the first thread of each consumer warpgroup
writes (clock64, event, %smid, m_block) at seven points of every iteration (events in
variants.TRACE_EVENTS: iteration start, K ready, issue turn, QK and PV issued, S ready, softmax done, PV done)
into slots of its own. `fa3-2024-08-nosched-trace` is the same without the warp-scheduler barrier. This
check runs the traced fp16 d128 forward once (after a warm-up run), reads the records and reports, over
every traced work tile (the first `skip` iterations of each dropped):

- `issue_alternation`: of consecutive issue turns (event 2) of the two consumer warpgroups of one CTA and
  tile, in clock order, the share taken by the other warpgroup than the previous one (1: strict
  alternation). It does not tell the pingpong schedule apart: on the H100 the build without the
  warp-scheduler barrier (fa3-2024-08-nosched-trace) alternated at or above 0.95 too, because both
  warpgroups consume the same two-stage K/V pipeline and neither can run an iteration ahead. That build
  staggers its phases too (`softmax_concurrent` 0.397 against the pin's 0.309, `softmax_under_other_mma`
  0.862 against 0.824), so these measures describe the schedule, and the barrier's part in it is the
  difference between the two builds, not either bound;
- `softmax_under_other_mma`: the share of each warpgroup's softmax time (S ready to softmax done) during
  which the other warpgroup of its CTA is inside its matrix phase (issue turn to PV done);
- `softmax_concurrent`: the share of softmax time during which the other warpgroup is in its softmax too
  (pingpong keeps the two apart; warpgroups in lockstep would read near 1);
- `k_wait_share`: the share of iteration time spent from iteration start to K ready (waiting for TMA data);
- `softmax_share`: softmax time over iteration time; `iterations`, `tiles`, `ctas`, `sms` traced; and the
  traced kernel's time against the untraced pin's (`trace_slowdown`), since a trace that changed the timing
  a lot would describe another schedule.

clock64 is an SM's own counter: intervals are compared only within one CTA (both warpgroups on one SM).
Event points are where the pinned calls return, so an interval includes the leader thread's recording
(a few instructions); what the compiler moves across a clock read is not controlled.
"""

from __future__ import annotations

import ctypes
from typing import Any, Literal

from pydantic import Field

from kb.registry import Context, Outcome, Params, Requirements, verifier

GPU = Requirements(cuda=True, min_cc=90, max_cc=90)
EV_START, EV_K_READY, EV_TURN, EV_ISSUED, EV_S_READY, EV_SOFTMAX_DONE, EV_PV_DONE = range(7)


class TraceParams(Params):
    """The traced variant and the forward's shape (fp16, d 128, non-causal: the traced loop)."""

    variant: Literal["fa3-2024-08-trace", "fa3-2024-08-nosched-trace"] = "fa3-2024-08-trace"
    batch: int = Field(2, gt=0)
    heads: int = Field(16, gt=0)
    seqlen: int = Field(8192, ge=512)
    skip: int = Field(1, ge=0)  # iterations dropped at the start of each tile
    tiles: int = Field(64, gt=0, le=256)  # work tiles per CTA with slots
    events: int = Field(512, gt=0, le=4096)  # slots per (CTA, warpgroup, tile)
    timing_runs: int = Field(10, ge=1)
    existential: bool = False  # the statement says the effect can occur: a miss is inconclusive, not a refutation


def _overlap(a: tuple[int, int], spans: list[tuple[int, int]]) -> int:
    """Clock cycles of interval `a` covered by the (sorted, possibly overlapping) intervals in `spans`."""
    total, cur_lo, cur_hi = 0, None, None
    for lo, hi in spans:
        lo, hi = max(lo, a[0]), min(hi, a[1])
        if lo >= hi:
            continue
        if cur_hi is None or lo > cur_hi:
            if cur_hi is not None:
                total += cur_hi - cur_lo
            cur_lo, cur_hi = lo, hi
        else:
            cur_hi = max(cur_hi, hi)
    if cur_hi is not None:
        total += cur_hi - cur_lo
    return total


def iterations(rec: list[tuple[int, int]], skip: int) -> list[dict[int, int]]:
    """One warpgroup's (clock, event) records of one tile, in slot order, as {event: clock} per iteration."""
    its: list[dict[int, int]] = []
    for clk, ev in rec:
        if ev == EV_START:
            its.append({})
        if its:
            its[-1][ev] = clk
    full = [it for it in its if len(it) == 7]
    return full[skip:]


def analyse(tiles: dict[tuple[int, int], list[list[tuple[int, int]]]], skip: int) -> dict[str, float | int]:
    """The measurements from {(cta, tile): [warpgroup 0's records, warpgroup 1's records]}."""
    turns_alt = turns = 0
    sm_time = sm_other = sm_both = it_time = k_wait = 0
    n_it = 0
    for recs in tiles.values():
        its = [iterations(r, skip) for r in recs]
        if not all(its):
            continue
        for wg in (0, 1):
            for it in its[wg]:
                if not it[EV_START] <= it[EV_K_READY] <= it[EV_TURN] <= it[EV_ISSUED] <= it[EV_S_READY] \
                        <= it[EV_SOFTMAX_DONE] <= it[EV_PV_DONE]:
                    raise RuntimeError(f"trace events out of order in one iteration: {sorted(it.items())}")
        order = sorted((it[EV_TURN], wg) for wg in (0, 1) for it in its[wg])
        turns += len(order) - 1
        turns_alt += sum(order[i][1] != order[i - 1][1] for i in range(1, len(order)))
        for wg in (0, 1):
            other = sorted((it[EV_TURN], it[EV_PV_DONE]) for it in its[1 - wg])
            other_soft = sorted((it[EV_S_READY], it[EV_SOFTMAX_DONE]) for it in its[1 - wg])
            for it in its[wg]:
                soft = (it[EV_S_READY], it[EV_SOFTMAX_DONE])
                sm_time += soft[1] - soft[0]
                sm_other += _overlap(soft, other)
                sm_both += _overlap(soft, other_soft)
                it_time += it[EV_PV_DONE] - it[EV_START]
                k_wait += it[EV_K_READY] - it[EV_START]
                n_it += 1
    if not n_it or not turns:
        raise RuntimeError("no complete steady-state iteration traced (sequence too short, or skip too large)")
    return {"issue_alternation": round(turns_alt / turns, 4),
            "softmax_under_other_mma": round(sm_other / max(sm_time, 1), 4),
            "softmax_concurrent": round(sm_both / max(sm_time, 1), 4),
            "k_wait_share": round(k_wait / max(it_time, 1), 4),
            "softmax_share": round(sm_time / max(it_time, 1), 4), "iterations": n_it}


def decode(raw: Any, ctas: int, tiles: int, events: int) -> tuple[dict[tuple[int, int], list[list[tuple[int, int]]]],
                                                                  set[int]]:
    """The buffer (int64 numpy, ctas x 2 x tiles x events x 2) as {(cta, tile): [records of warpgroup 0, 1]}
    and the SMs seen. A warpgroup's records of a tile run up to its first empty slot."""
    import numpy as np

    arr = raw.reshape(ctas, 2, tiles, events, 2)
    used = arr[:, :, :, 0, 0] != 0  # (cta, wg, tile): the tile has a first record
    out: dict[tuple[int, int], list[list[tuple[int, int]]]] = {}
    sms: set[int] = set()
    for c, t in zip(*np.nonzero(used[:, 0, :] & used[:, 1, :]), strict=True):
        recs = []
        for wg in (0, 1):
            rows = arr[c, wg, t]
            empty = np.nonzero(rows[:, 0] == 0)[0]
            rows = rows[: int(empty[0]) if len(empty) else events]
            info = rows[:, 1].astype(np.uint64)
            recs.append(list(zip(rows[:, 0].tolist(), (info >> np.uint64(48)).astype(np.int64).tolist(), strict=True)))
            sms.update(((info >> np.uint64(32)) & np.uint64(0xFFFF)).astype(np.int64).tolist())
        out[(int(c), int(t))] = recs
    return out, sms


@verifier("gpu.mainloop-trace", kind="gpu-profile", params=TraceParams, requires=GPU, timeout_s=600)
def mainloop_trace(p: TraceParams, ctx: Context) -> Outcome:
    """Run kb's traced FA3 fp16 d128 forward once and measure its warpgroups' schedule from the records."""
    import torch

    from verifiers.gpu import pinned as gp
    from verifiers.pinned import build as pinned_build
    from verifiers.pinned import variants

    if why := variants.unavailable(p.variant, "fa3-2024-08"):
        return Outcome(verdict="skipped", reason=why)
    lib = pinned_build.load(p.variant).lib
    lib.kb_trace_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lib.kb_trace_set.restype = ctypes.c_int
    ctas = torch.cuda.get_device_properties(0).multi_processor_count  # the persistent scheduler's grid at most
    buf = torch.zeros(ctas * 2 * p.tiles * p.events * 2, dtype=torch.int64, device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(0)
    shape = (p.batch, p.seqlen, p.heads, 128)
    x = {n: torch.randn(shape, device="cuda", dtype=torch.float16, generator=gen) for n in "qkv"}

    def ns(impl: str) -> Any:
        return gp.as_impl(impl, False, 128)

    def timed(impl: str) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(p.timing_runs):
            gp.forward(ns(impl), x)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / p.timing_runs

    with torch.no_grad():
        o_pin = gp.forward(ns("fa3-2024-08"), x)[0]
        t_pin = timed("fa3-2024-08")
        if lib.kb_trace_set(ctypes.c_void_p(buf.data_ptr()), ctas, p.tiles, p.events) != 0:
            raise RuntimeError("kb_trace_set failed")
        o_var = gp.forward(ns(p.variant), x)[0]  # warm-up, recording
        t_traced = timed(p.variant)  # every run records into the same slots
        buf.zero_()
        gp.forward(ns(p.variant), x)
        torch.cuda.synchronize()
        lib.kb_trace_set(None, 0, 0, 0)
    diff = float((o_pin.float() - o_var.float()).abs().max())
    if not diff <= 1e-2:
        raise RuntimeError(f"the traced variant's O differs from the pin's by {diff:.3g}")
    recs, sms = decode(buf.cpu().numpy(), ctas, p.tiles, p.events)
    full = sum(1 for c, t in recs if any(len(r) >= p.events for r in recs[(c, t)]))
    m = analyse(recs, p.skip)
    meas: dict[str, tuple[Any, str]] = {
        "issue_alternation": (m["issue_alternation"], "share of consecutive issue turns taken by the other warpgroup"),
        "softmax_under_other_mma": (m["softmax_under_other_mma"], "share of softmax time with the other warpgroup "
                                    "between its issue turn and its PV done"),
        "softmax_concurrent": (m["softmax_concurrent"], "share of softmax time with the other warpgroup in softmax too"),
        "k_wait_share": (m["k_wait_share"], "share of iteration time from start to K ready"),
        "softmax_share": (m["softmax_share"], "softmax time over iteration time"),
        "iterations": (m["iterations"], f"steady-state iterations traced (first {p.skip} per tile dropped)"),
        "tiles": (len(recs), "work tiles traced"),
        "ctas": (len({c for c, _ in recs}), "CTAs traced"),
        "sms": (len(sms), "distinct %smid"),
        "tiles_out_of_slots": (full, "tiles whose records filled every slot (cut short)"),
        "o_max_abs_diff": (diff, "traced variant against the pin, max |O|"),
        "trace_slowdown": (round(t_traced / t_pin, 4), "x (traced run's time over the pin's)"),
    }
    log = (f"{torch.cuda.get_device_name()}: {p.variant}, B {p.batch} H {p.heads} N {p.seqlen} d 128 fp16; "
           f"pin {t_pin:.3f} ms, traced {t_traced:.3f} ms; " + ", ".join(f"{k} {v[0]}" for k, v in meas.items()))
    out = Outcome(measurements=meas, log=log, environment={
        "variant_build": variants.provenance(p.variant), "pin_build": pinned_build.provenance("fa3-2024-08"),
        "device": torch.cuda.get_device_name(), "events": variants.TRACE_EVENTS, "clock": "clock64, per CTA"})
    if not p.existential:
        return out
    from verifiers.gpu.varlen import judge_existential

    return judge_existential(out, ctx)
