"""Every measured figure across claims, in one table: the site's measurements page and its CSV.

A figure is one measurement that a GPU check's expectation decides (plus the throughput or ratio a
benchmark is about when the expectation is on a derived quantity, e.g. TFLOP/s beside `util_vs_peak`),
for one claim, check and hardware class. Its batches are the runs of that check as it stands (same
parameters, same expectation; kb.index.status decides measurement verdicts over all of them), newest
first: the table gives the newest batch's value and its p20-p80 timing spread, the range across batches,
the band the check expects, where the value lies against it, the claim's verdict on that hardware, and
the dates of the first and last batch. `gpu.profile` runs are left out: their figures are launch
configuration (grid, registers, kernel names), listed on the claim pages and in STATUS.md.

The parameter defaults below are the verifiers' own (verifiers/gpu_common_params.py, gpu.py, gpu_probe.py),
restated because kb never imports the verifier package; a run records only the parameters its check names.
"""

from __future__ import annotations

import csv
import io
from typing import Any

from kb.export.site.charts import _peak, expect_band
from kb.export.site.data import SiteData, fmt_expect, fmt_value

# The GPU verifiers whose runs hold measured figures, in the table's order.
KINDS = ("gpu.benchmark", "gpu.probe", "gpu.ncu-metrics", "gpu.ncu-counters", "gpu.atomic-contention",
         "gpu.carveout-residency", "gpu.kernel-run", "gpu.bitwise-repeat", "gpu.scratch-repeat", "gpu.toolkit-bits",
         "gpu.prefix-plans", "gpu.varlen-rows", "gpu.varlen-balance", "gpu.larged-fwd", "gpu.larged-profile",
         "gpu.variant-benchmark", "gpu.mainloop-trace", "gpu.tile-owners", "gpu.device-props")
PINNED_IMPLS = ("fa1-v1.0.9", "fa2-v2.0.0", "fa3-2024-08")
_ATTN_DEFAULTS = {"impl": "sdpa-flash", "batch": 2, "heads": 16, "seqlen_q": 1024, "head_dim": 128, "dtype": "bfloat16"}
_PHASE_DEFAULT = {"gpu.benchmark": "forward", "gpu.ncu-metrics": "forward", "gpu.ncu-counters": "forward",
                  "gpu.kernel-run": "both"}
_PROBE_DEFAULTS = {"grid": 1000, "block": 1024, "smem_bytes": 0, "m": 8192, "n": 8192, "k": 8192, "dtype": "bfloat16"}
_DTYPES = {"bfloat16": "bf16", "float16": "fp16"}
# The figure a benchmark metric or a probe is about, shown even when the expectation is on another quantity.
_PRIMARY = {("gpu.benchmark", "tflops"): "tflops", ("gpu.benchmark", "time_ratio"): "time_ratio",
            ("gpu.benchmark", "memory_exponent"): "memory_exponent", ("gpu.probe", "gemm"): "tflops"}
DECIDED = ("supports", "refutes", "inconclusive")
COLUMNS = ("claim", "check", "status", "hardware", "kind", "figure", "implementation", "pin", "shape", "dtype", "mode",
           "median", "unit", "p20", "p80", "batches", "batch_min", "batch_max", "band", "direction",
           "verdicts", "first_run", "last_run")


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _value(run: dict[str, Any], name: str) -> Any:
    m = (run.get("measurements") or {}).get(name)
    return m.get("value") if isinstance(m, dict) else None


def _unit(run: dict[str, Any], name: str) -> str:
    m = (run.get("measurements") or {}).get(name)
    return str(m.get("unit") or "") if isinstance(m, dict) else ""


def _kind(check: dict[str, Any]) -> str:
    p = check.get("params") or {}
    if check["verifier"] == "gpu.benchmark":
        return "benchmark"
    if check["verifier"] == "gpu.probe":
        return f"probe {p.get('probe', '?')}"
    return check["verifier"].removeprefix("gpu.")


def _implementation(check: dict[str, Any], run: dict[str, Any]) -> tuple[str, str]:
    """(what ran, the revision or package version it ran at), from the check's parameters and the run's environment."""
    p, env = check.get("params") or {}, run.get("environment") or {}
    packages = env.get("packages") or {}
    torch = env.get("torch") or packages.get("torch") or "?"
    if check["verifier"] == "gpu.probe":
        if p.get("probe") == "gemm":
            return "torch.matmul (cuBLAS)", f"torch {torch}"
        return f"kb probe kernel ({p.get('probe')})", f"CUDA {env.get('cuda') or env.get('torch_cuda') or '?'}"
    impl = p.get("impl", _ATTN_DEFAULTS["impl"])
    if check["verifier"].startswith("gpu.varlen-"):  # kb's packed entry to the FA1 pin (its own library)
        sha = str((env.get("pinned_build") or {}).get("source_sha") or "")
        return "fa1-v1.0.9 (packed entry)", f"flash-attention v1.0.9 @ {sha[:12]}" if sha else "flash-attention v1.0.9"
    if check["verifier"].startswith("gpu.larged-"):  # kb's build of the large-d pin (its own library)
        sha = str((env.get("pinned_build") or {}).get("source_sha") or "")
        what = "large-d pin, hdim64/512 and d128" if check["verifier"] == "gpu.larged-profile" else \
            f"large-d pin, {'hdim64/512' if p.get('config', '64x512') == '64x512' else 'd128'}"
        return what, f"flash-attention large-d-2026-08-06 @ {sha[:12]}" if sha else "flash-attention large-d-2026-08-06"
    if check["verifier"] == "gpu.variant-benchmark":  # a pin against kb's edited build of it
        sha = str((env.get("base_build") or {}).get("source_sha") or "")
        base = p.get("base", "fa3-2024-08")
        return f"{base} vs kb variant {p.get('variant')}", f"flash-attention {base} @ {sha[:12]}" if sha else base
    if check["verifier"] == "gpu.device-props":
        return "the card itself", str(env.get("device_name") or "?")
    if check["verifier"] in ("gpu.mainloop-trace", "gpu.tile-owners"):
        sha = str((env.get("pin_build") or {}).get("source_sha") or "")
        default = "fa3-2024-08-trace" if check["verifier"] == "gpu.mainloop-trace" else "fa3-2024-08-owner"
        return f"kb variant {p.get('variant', default)}", f"flash-attention fa3-2024-08 @ {sha[:12]}"
    if impl in PINNED_IMPLS:
        build = env.get("pinned_build") or {}
        sha = str(build.get("source_sha") or "")
        return impl, (f"flash-attention {build.get('pin') or impl} @ {sha[:12]}" if sha else f"flash-attention {impl}")
    if impl == "fa4":
        return impl, f"flash-attn-4 {packages.get('flash-attn-4', '?')}"
    return impl, f"torch {torch}"


def _shape(check: dict[str, Any]) -> str:
    p = check.get("params") or {}
    if check["verifier"] == "gpu.probe":
        probe = p.get("probe")
        d = {**_PROBE_DEFAULTS, **p}
        if probe == "gemm":
            return f"M×N×K {d['m']}×{d['n']}×{d['k']}"
        if probe == "smid":
            return f"grid {d['grid']} × block {d['block']}, smem {d['smem_bytes']} B"
        if probe == "atomic":
            return f"grid {d['grid']} × block {d['block']}"
        return "mma.sync m16n8k16"
    if check["verifier"].startswith("gpu.varlen-"):
        ns = p.get("lengths") or [0]
        other = p.get("other_lengths")
        vs = f" vs {len(other)} of {min(other)}–{max(other)}" if other else ""
        seqs = f"1 sequence of {ns[0]} rows" if len(ns) == 1 else \
            f"{len(ns)} sequences of {min(ns)}–{max(ns)} rows ({sum(ns)} in all)"
        return f"{seqs}{vs} · H {p.get('heads', 8)} · d {p.get('head_dim', 128)}"
    if check["verifier"].startswith("gpu.larged-"):
        big = check["verifier"] == "gpu.larged-profile"
        d = {"batch": 4 if big else 2, "heads": 16 if big else 8, "seqlen_q": 4096 if big else 512,
             "seqlen_k": 4096 if big else 512, **p}
        return f"B {d['batch']} · H {d['heads']} · N {d['seqlen_q']}×{d['seqlen_k']}"
    if check["verifier"] == "gpu.variant-benchmark":
        d = {"batch": 2, "heads": 16, "seqlen": 8192, "head_dim": 128, **p}
        return f"B {d['batch']} · H {d['heads']} · N {d['seqlen']} · d {d['head_dim']}"
    if check["verifier"] == "gpu.device-props":
        return "—"
    if check["verifier"] in ("gpu.mainloop-trace", "gpu.tile-owners"):
        d = {"batch": 2, "heads": 16, "seqlen": 8192, **p}
        return f"B {d['batch']} · H {d['heads']} · N {d['seqlen']} · d 128"
    d = {**_ATTN_DEFAULTS, **p}
    heads = f"{d['heads']}/{d['heads_kv']}" if d.get("heads_kv") else str(d["heads"])
    nk = f"×{d['seqlen_k']}" if d.get("seqlen_k") not in (None, d["seqlen_q"]) else ""
    n = f"N {d['seqlen_q']}{nk}"
    if check["verifier"] == "gpu.benchmark" and p.get("metric") == "memory_exponent":
        ns = p.get("seqlens") or [2048, 4096]
        n = f"N {min(ns)}…{max(ns)} ({len(ns)} points)"
    return f"B {d['batch']} · H {heads} · {n} · d {d['head_dim']}"


def _dtype(check: dict[str, Any]) -> str:
    p = check.get("params") or {}
    if check["verifier"] == "gpu.probe" and p.get("probe") in ("smid", "atomic"):
        return "int32/fp32" if p.get("probe") == "atomic" else "—"
    dt = p.get("dtype", "float16" if check["verifier"].startswith("gpu.varlen-") else "bfloat16")
    return _DTYPES.get(dt, str(dt))


def _mode(check: dict[str, Any]) -> str:
    p, v = check.get("params") or {}, check["verifier"]
    if v == "gpu.probe":
        return str(p.get("probe", ""))
    parts = []
    if v == "gpu.bitwise-repeat":
        parts.append("forward" if p.get("forward_only") else "forward+backward")
        parts.append(f"{p.get('repeats', 20)} repeats")
    else:
        parts.append(str(p.get("phase", _PHASE_DEFAULT.get(v, "forward"))))
    parts += [w for w, on in (("causal", p.get("causal")), ("deterministic", p.get("deterministic"))) if on]
    if p.get("dropout_p"):
        parts.append(f"dropout {p['dropout_p']}")
    if p.get("num_splits"):
        parts.append(f"num_splits {p['num_splits']}")
    if p.get("other"):
        parts.append("vs " + ", ".join(f"{k}={fmt_value(val, 40)}" for k, val in sorted(p["other"].items())))
    return ", ".join(parts)


def _spread(run: dict[str, Any], name: str) -> tuple[float, float] | None:
    """The p20-p80 range of a timed figure in its own unit (low, high), where the run recorded its timings."""
    if name in ("tflops", "util_vs_peak"):
        tf = _num(_value(run, "tflops"))
        rng = _value(run, "tflops_spread")
        lohi: tuple[float, float] | None = None
        if isinstance(rng, list) and len(rng) == 2 and all(_num(x) is not None for x in rng):
            lohi = (min(rng), max(rng))
        else:
            med, p20, p80 = (_num(_value(run, k)) for k in ("ms_median", "ms_p20", "ms_p80"))
            if tf and med and p20 and p80:
                lohi = (tf * med / p80, tf * med / p20)  # TFLOP/s at the slow and the fast end of the timings
        if lohi is None or not tf:
            return None
        if name == "util_vs_peak":
            u = _num(_value(run, "util_vs_peak"))
            return (u * lohi[0] / tf, u * lohi[1] / tf) if u is not None else None
        return lohi
    if name == "time_ratio":
        rng = _value(run, "time_ratio_spread")
        if isinstance(rng, list) and len(rng) == 2 and all(_num(x) is not None for x in rng):
            return min(rng), max(rng)
    return None


def _band(check: dict[str, Any], name: str, runs: list[dict[str, Any]], data: SiteData
          ) -> tuple[str, tuple[float | None, float | None] | None]:
    """What the check expects of this figure: (text, numeric band or None)."""
    expect = check.get("expect") or {}
    if name in expect:
        rule = expect[name]
        text = fmt_expect({name: rule})[0].removeprefix(name + " ")
        return ("equals " + text[2:] if text.startswith("= ") else text), expect_band(rule)
    if name == "tflops" and "util_vs_peak" in expect:  # the utilisation band times the registered peak
        util, peak = expect_band(expect["util_vs_peak"]), next((p for r in runs if (p := _peak(r, data.sources))), None)
        if util and peak:
            band = tuple(None if v is None else v * peak[1] for v in util)
            util_text = fmt_expect({"u": expect["util_vs_peak"]})[0].removeprefix("u ")
            ends = "–".join("…" if v is None else f"{v:.0f}" for v in band)
            return f"util {util_text} of the {peak[0]} peak {peak[1]:g} = {ends} TFLOP/s", band  # type: ignore[return-value]
    return "", None


def _direction(value: Any, band: tuple[float | None, float | None] | None, rule: dict[str, Any] | None) -> str:
    """Where the value lies against what the check expects: inside, above, below (or matches / differs)."""
    v = _num(value)
    if band is not None and v is not None:
        lo, hi = band
        if lo is not None and v < lo - 1e-12:
            return "below"
        if hi is not None and v > hi + 1e-12:
            return "above"
        return "inside"
    if rule and "is" in rule:
        return "matches" if value == rule["is"] else "differs"
    return ""


def _date(run: dict[str, Any]) -> str:
    return str(run.get("started") or "")[:10]


def measurement_rows(data: SiteData) -> list[dict[str, Any]]:
    """One row per measured figure (claim, check, hardware class, measurement), in claim order."""
    rows: list[dict[str, Any]] = []
    for c in data.claims:
        for i, check in enumerate(c.get("checks") or []):
            if check.get("verifier") not in KINDS:
                continue
            # Runs under the claim's current content only (as the status takes them): a run made before a scope or
            # statement edit is history, even with the same parameters and expectation.
            current = [r for r in c["runs"] if r.get("check_index") == i and r.get("verifier") == check["verifier"]
                       and r.get("params") == check.get("params") and (r.get("expect") or {}) == (check.get("expect") or {})
                       and r.get("claim_hash") in (None, c.get("content_hash"))
                       and r.get("verdict") in DECIDED and r.get("hardware_class") != "cpu"]
            for hw in sorted({r["hardware_class"] for r in current}):
                runs = [r for r in current if r["hardware_class"] == hw]  # newest first, as load_site orders them
                names = list(check.get("expect") or {})
                primary = _PRIMARY.get((check["verifier"], (check.get("params") or {}).get("metric", "tflops")
                                        if check["verifier"] == "gpu.benchmark" else (check.get("params") or {}).get("probe")))
                if primary and primary not in names and _value(runs[0], primary) is not None:
                    names.insert(0, primary)
                for name in names:
                    rows.append(_row(c, i, check, hw, name, runs, data))
    # Throughput first, then the probes, counters, accuracy and repeatability figures; claims in id order.
    return sorted(rows, key=lambda r: (KINDS.index(r["verifier"]), r["claim"], r["check"]))


def _row(c: dict[str, Any], i: int, check: dict[str, Any], hw: str, name: str, runs: list[dict[str, Any]],
         data: SiteData) -> dict[str, Any]:
    latest = runs[0]
    value = _value(latest, name)
    nums = [v for r in runs if (v := _num(_value(r, name))) is not None]
    spread = _spread(latest, name)
    band_text, band = _band(check, name, runs, data)
    impl, pin = _implementation(check, latest)
    verdicts = {v: sum(1 for r in runs if r.get("verdict") == v) for v in DECIDED}
    st = c["classes"].get(hw) or c["overall"]
    return {
        "claim": c["id"], "check": i, "status": st["status"], "cause": st.get("cause") or "",
        "hardware": hw, "verifier": check["verifier"], "kind": _kind(check), "figure": name,
        "implementation": impl, "pin": pin, "shape": _shape(check), "dtype": _dtype(check), "mode": _mode(check),
        "value": value, "median": fmt_value(value, 60), "unit": _unit(latest, name),
        "p20": spread[0] if spread else None, "p80": spread[1] if spread else None,
        "batches": len(runs), "batch_min": min(nums) if nums else None, "batch_max": max(nums) if nums else None,
        # How far the batches disagree, relative to the newest value (what the range column sorts by).
        "batch_rel_range": (max(nums) - min(nums)) / abs(nums[0]) if len(nums) > 1 and nums[0] else (0.0 if nums else None),
        "band": band_text, "band_range": band, "direction": _direction(value, band, (check.get("expect") or {}).get(name)),
        "verdicts": ", ".join(f"{n} {v}" for v, n in verdicts.items() if n),
        "first_run": _date(runs[-1]), "last_run": _date(latest),
    }


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    text = str(v)
    # A text cell a spreadsheet would read as a formula ("= 1", "-x", "@f") is kept as text.
    return "'" + text if text[:1] in ("=", "+", "-", "@") and _num(v) is None else text


def to_csv(rows: list[dict[str, Any]]) -> str:
    """The table as CSV (one header line, the columns of COLUMNS; numbers unformatted beyond 6 significant digits)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in rows:
        w.writerow([_cell(r["value"] if col == "median" else r[col]) for col in COLUMNS])
    return buf.getvalue()


# The table's columns as the page shows them: (sort key, header, how it sorts).
PAGE_COLUMNS = (("claim", "Claim and verdict", "text"), ("figure", "Figure", "text"),
                ("implementation", "Implementation and pin", "text"), ("shape", "Shape", "text"),
                ("dtype", "dtype", "text"), ("mode", "Mode", "text"), ("median", "Median", "num"),
                ("spread", "p20–p80", "num"), ("range", "Range across batches", "num"), ("band", "Band", "text"),
                ("direction", "Direction", "text"), ("verdicts", "Batch verdicts", "text"),
                ("hardware", "Hardware", "text"), ("runs", "Run dates", "text"))
# The selects above the table: (row attribute, label).
FACETS = (("kind", "Kind"), ("implementation", "Implementation"), ("status", "Verdict"), ("direction", "Direction"),
          ("hardware", "Hardware"))


def measurements_context(data: SiteData) -> dict[str, Any]:
    """What measurements.html renders: the rows, the columns and the filter choices with their counts."""
    rows = measurement_rows(data)
    facets = []
    for name, label in FACETS:
        counts: dict[str, int] = {}
        for r in rows:
            key = r[name] or "none"
            counts[key] = counts.get(key, 0) + 1
        facets.append((name, label, sorted(counts.items())))
    return {"rows": rows, "columns": PAGE_COLUMNS, "facets": facets, "n_claims": len({r["claim"] for r in rows})}
