"""Charts of a claim's GPU evidence, for its page: what each run measured against what the check expects.

- throughput (gpu.benchmark, metric tflops): TFLOP/s per run with the p20-p80 spread of its timings,
  the expected band (a `tflops` rule, or a `util_vs_peak` rule times the peak) and the hardware peak;
- a time ratio against a second configuration: the ratio per run with its expected band;
- memory against N (a gpu.benchmark sweep over `seqlens`): peak extra bytes per N, one line per run,
  with linear and quadratic growth as guides;
- bitwise repeats (gpu.bitwise-repeat): distinct outputs per tensor per run, out of the repeats.

Only runs of each check as it stands are drawn (same parameters, same expectation).

The peak is the registered hardware constant (sources/hardware.yaml), never a literal here.
"""

from __future__ import annotations

import re
from typing import Any

from markupsafe import Markup

from kb.export.site.svg import Bar, sweep_chart, value_bars

MAX_RUNS = 12  # per chart, newest first
_TENSORS = ("o", "lse", "dq", "dk", "dv")
_TENSOR_NAMES = {"o": "O", "lse": "LSE", "dq": "dQ", "dk": "dK", "dv": "dV"}


def expect_band(rule: dict[str, Any] | None) -> tuple[float | None, float | None] | None:
    """An expectation rule as the (low, high) range it accepts; None for rules that are not a range."""
    if not rule:
        return None
    try:
        if rule.get("between") is not None:
            lo, hi = rule["between"]
            return float(lo), float(hi)
        if rule.get("approx") is not None:
            a = float(rule["approx"])
            tol = float(rule["abs"]) if rule.get("abs") is not None else abs(a) * float(rule.get("rel") or 0)
            return a - tol, a + tol
        if rule.get("equals") is not None and isinstance(rule["equals"], int | float):
            return float(rule["equals"]), float(rule["equals"])
        lo = float(rule["at_least"]) if rule.get("at_least") is not None else None
        hi = float(rule["at_most"]) if rule.get("at_most") is not None else None
    except (TypeError, ValueError):
        return None
    return (lo, hi) if lo is not None or hi is not None else None


def _inside(v: float, band: tuple[float | None, float | None] | None) -> bool | None:
    if band is None:
        return None
    lo, hi = band
    return (lo is None or v >= lo - 1e-12) and (hi is None or v <= hi + 1e-12)


def _scalar(run: dict[str, Any], name: str) -> float | None:
    m = (run.get("measurements") or {}).get(name)
    v = m.get("value") if isinstance(m, dict) else None
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _when(run: dict[str, Any]) -> str:
    hw = str(run.get("hardware_class", "")).removeprefix("NVIDIA ")
    return f"{str(run.get('started', ''))[:16].replace('T', ' ')} · {hw}"


def _verdict_ok(run: dict[str, Any]) -> bool | None:
    return {"supports": True, "refutes": False}.get(run.get("verdict", ""))


def _peak(run: dict[str, Any], sources: dict[str, dict[str, Any]]) -> tuple[str, float] | None:
    """(GPU, dense bf16 peak TFLOP/s) the run was compared with: its `peak_gpu`, the unit it names, or its class."""
    util = (run.get("measurements") or {}).get("util_vs_peak") or {}
    named = (run.get("params") or {}).get("peak_gpu") or next(iter(re.findall(r"of (\S+) dense", str(util.get("unit", "")))), None)
    candidates = [named] if named else [sid for sid in sources if f" {sid} " in f" {run.get('hardware_class', '')} "]
    for sid in candidates:
        src = sources.get(sid) or {}
        peak = (src.get("constants") or {}).get("peak_bf16_dense_tflops")
        if src.get("kind") == "hardware" and isinstance(peak, int | float):
            return sid, float(peak)
    return None


def _range(band: tuple[float | None, float | None], unit: str) -> str:
    lo, hi = band
    if lo is not None and hi is not None:
        return f"{lo:.4g}–{hi:.4g} {unit}"
    return f"at least {lo:.4g} {unit}" if lo is not None else f"at most {hi:.4g} {unit}"


def _chart(kind: str, title: str, caption: str, svg: Markup) -> dict[str, Any]:
    return {"kind": kind, "title": title, "caption": caption, "svg": svg}


def _throughput(check: dict[str, Any], runs: list[dict[str, Any]], sources: dict[str, dict[str, Any]]) -> dict[str, Any]:
    peak = next((p for r in runs if (p := _peak(r, sources))), None)
    expect = check.get("expect") or {}
    band, band_label = expect_band(expect.get("tflops")), ""
    util = expect_band(expect.get("util_vs_peak"))
    if band is None and util and peak:
        band = tuple(None if v is None else v * peak[1] for v in util)  # type: ignore[assignment]
        lo, hi = (f"{v:g}" if v is not None else "…" for v in util)
        band_label = f"{lo}–{hi} of the {peak[0]} peak = " + "–".join(
            f"{v:.0f}" if v is not None else "…" for v in band) + " TFLOP/s"  # type: ignore[union-attr]
    rows = []
    for r in runs:
        tf = _scalar(r, "tflops")
        med, p20, p80 = (_scalar(r, k) for k in ("ms_median", "ms_p20", "ms_p80"))
        spread = (tf * med / p80, tf * med / p20) if tf and med and p20 and p80 else None
        u = _scalar(r, "util_vs_peak")
        text = f"{tf:g} TFLOP/s" + (f" ({u:.1%} of peak)" if u is not None else "")
        rows.append(Bar(_when(r), tf or 0.0, spread=spread, ok=_verdict_ok(r), text=text))
    title = "Throughput per run"
    reference = (f"{peak[0]} dense bf16 peak", peak[1]) if peak else None
    svg = value_bars(rows, "TFLOP/s", title, reference=reference, band=band, band_label=band_label)
    caption = "Median TFLOP/s of each run, newest first; whiskers span the p20–p80 of its timings."
    if band:
        caption += f" Shaded: what the check expects, {band_label or _range(band, 'TFLOP/s')}."
    if peak:
        caption += f" Dashed: the {peak[0]} dense bf16 peak, {peak[1]:g} TFLOP/s (sources/hardware.yaml)."
    caption += " Green: the run supports the claim; red: it refutes it."
    return _chart("throughput", title, caption, svg)


def _ratio(check: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    band = expect_band((check.get("expect") or {}).get("time_ratio"))
    rows = []
    for r in runs:
        v = _scalar(r, "time_ratio") or 0.0
        a, b = _scalar(r, "ms_this"), _scalar(r, "ms_other")
        detail = f" ({a:.3g} ms / {b:.3g} ms)" if a and b else ""
        rows.append(Bar(_when(r), v, ok=_verdict_ok(r), text=f"{v:.3g}×{detail}"))
    title = "Time ratio per run (this / other)"
    svg = value_bars(rows, "×", title, band=band)
    caption = "Time of this configuration over the other's, per run, newest first."
    if band:
        caption += f" Shaded: what the check expects, {_range(band, '×')}."
    return _chart("ratio", title, caption + " Green: the run supports the claim; red: it refutes it.", svg)


def _memory(check: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    series = []
    for r in runs:
        ns = (r.get("params") or {}).get("seqlens") or []
        bs = ((r.get("measurements") or {}).get("peak_extra_bytes") or {}).get("value")
        if isinstance(bs, list) and len(bs) == len(ns) and len(ns) >= 2:
            expo = _scalar(r, "memory_exponent")
            name = _when(r) + (f" (exponent {expo:g})" if expo is not None else "")
            series.append((name, [(float(n), float(b)) for n, b in zip(ns, bs, strict=True)]))
    if not series:
        return None
    rule = expect_band((check.get("expect") or {}).get("memory_exponent"))
    title = "Peak extra memory against sequence length"
    caption = ("Bytes allocated above the inputs at each N (log-log), one solid line per run; the labels under "
               "the axis are the newest run's. Dashed: how the first point would grow if memory were linear "
               "or quadratic in N.")
    if rule:
        lo, hi = rule
        caption += " The check expects an exponent " + (f"≤ {hi:g}" if lo is None else f"≥ {lo:g}" if hi is None
                                                          else f"in [{lo:g}, {hi:g}]") + "."
    return _chart("memory", title, caption, sweep_chart(series, title))


def _distinct(check: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    expect = check.get("expect") or {}
    rows, top = [], 1.0
    for r in runs:
        repeats = _scalar(r, "repeats")
        top = max(top, repeats or 0)
        for t in _TENSORS:
            v = _scalar(r, f"distinct_{t}")
            if v is None:
                continue
            band = expect_band(expect.get(f"distinct_{t}"))
            of = f" of {repeats:g} repeats" if repeats else ""
            rows.append(Bar(f"{_TENSOR_NAMES[t]} · {_when(r)}", v, expected=band, ok=_inside(v, band),
                            text=f"{v:g} distinct{of}"))
    title = "Distinct outputs per run"
    svg = value_bars(rows, "distinct", title, top=top)
    caption = ("How many different results each tensor gave over the repeats of a run (1: bitwise repeatable). "
               "Shaded: what the check expects of that tensor; green inside it, red outside, blue where it "
               "expects nothing of that tensor.")
    return _chart("distinct", title, caption, svg)


def gpu_charts(claim: dict[str, Any], sources: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The charts a claim page shows for its GPU runs, one per check that has something to draw."""
    out: list[dict[str, Any]] = []
    for i, check in enumerate(claim.get("checks") or []):
        # Only runs of the check as it stands: a run under other parameters or another expectation measured
        # something else (it is listed, as stale, in the evidence history).
        runs = [r for r in claim.get("runs", []) if r.get("check_index") == i and r.get("verifier") == check.get("verifier")
                and r.get("params") == check.get("params") and (r.get("expect") or {}) == (check.get("expect") or {})
                and r.get("verdict") in ("supports", "refutes", "inconclusive")][:MAX_RUNS]
        mine: list[dict[str, Any] | None] = []
        if runs and check.get("verifier") == "gpu.benchmark":
            if tf := [r for r in runs if _scalar(r, "tflops") is not None]:
                mine.append(_throughput(check, tf, sources))
            if ratio := [r for r in runs if _scalar(r, "time_ratio") is not None]:
                mine.append(_ratio(check, ratio))
            mine.append(_memory(check, runs))
        elif runs and check.get("verifier") == "gpu.bitwise-repeat":
            if any(_scalar(r, f"distinct_{t}") is not None for r in runs for t in _TENSORS):
                mine.append(_distinct(check, runs))
        out += [{**chart, "check": i} for chart in mine if chart is not None]
    return out
