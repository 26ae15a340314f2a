"""gpu.matrix: one row of the kernel-selection matrix (one workload, one mode, every backend, forward and backward).

A cell is (backend, pass) for the row's workload and mode. Each cell is timed in
`batches` batches of `reps` back-to-back calls (CUDA events around each batch);
the cell's figure is the median of the batch means and its spread the lowest
and highest batch mean. A cell that fails (an unsupported shape, a compile
error, a missing package) records its error and the row goes on: one bad cell
never costs the others. Cells the row's `skip` names are not run at all, with
the reason (kb's builds of the pins hold only some head dims and no GQA
backward), so the page can say "unsupported" instead of "not measured".

Ratios compare cells of the row: `speedup` = time(slower) / time(faster), for
a pass (forward, backward, or train = forward + backward). Its ends are the
ratio of the opposite ends of the two spreads, so a verdict that changes within
the spread is inconclusive (verifiers.gpu.verdict.judge_spread).

Torch is imported inside the functions only: the registry scan imports this
module on machines without torch.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from kb.registry import Context, Outcome, Params, Requirements, verifier
from verifiers.gpu.compiling import graph_break, no_donated_buffers
from verifiers.gpu.params import PINNED_IMPLS, Impl
from verifiers.gpu.verdict import judge_spread

# "sdpa" is PyTorch's own choice of backend (no sdpa_kernel context): what "SDPA" means to a user.
Backend = Literal["sdpa", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn", "sdpa-math", "flex", "fa4",
                  "fa2-v2.0.0", "fa3-2024-08"]
Pass = Literal["forward", "backward"]
RatioPass = Literal["forward", "backward", "train"]
Workload = Literal["packed", "vision-d64", "vision-d80", "vision-d128", "causal-long", "gqa"]

# The workloads, bf16. "packed": 8 equal-length documents of 1024 tokens, causal within each document (LLM
# training on packed sequences). Backends with a packed-sequence API take the 8192 tokens as one packed
# sequence (fa4: cu_seqlens; flex: a document mask); the others run the same documents as a dense batch of 8,
# which computes the same attention (nothing crosses a document boundary), the only form kb's builds take.
WORKLOADS: dict[str, dict[str, Any]] = {
    "packed": {"batch": 8, "heads": 16, "seqlen": 1024, "head_dim": 128, "causal": True, "docs": 8},
    "vision-d64": {"batch": 32, "heads": 12, "seqlen": 197, "head_dim": 64, "causal": False},   # ViT-B/16, 224 px
    "vision-d80": {"batch": 32, "heads": 16, "seqlen": 257, "head_dim": 80, "causal": False},   # ViT-H/14, 224 px
    "vision-d128": {"batch": 16, "heads": 16, "seqlen": 1024, "head_dim": 128, "causal": False},
    "causal-long": {"batch": 2, "heads": 16, "seqlen": 8192, "head_dim": 128, "causal": True},
    "gqa": {"batch": 2, "heads": 32, "heads_kv": 8, "seqlen": 4096, "head_dim": 128, "causal": True},
}
NAME = r"^[a-z][a-z0-9_]*$"


class Ratio(Params):
    """A comparison of two cells of the row: measurement `name` = time(slower) / time(faster) for `pass_`."""

    name: str = Field(pattern=NAME)
    faster: Backend
    slower: Backend
    pass_: RatioPass = Field("forward", alias="pass")


class MatrixParams(Params):
    """One row: a workload, eager or torch.compile, the backends, how many batches of how many calls."""

    workload: Workload
    mode: Literal["eager", "compile"] = "eager"
    backends: list[Backend] = Field(min_length=1)
    passes: list[Pass] = ["forward", "backward"]
    # "backend" or "backend/pass" -> why the cell is not run (a build without that kernel, say).
    skip: dict[str, str] = {}
    batches: int = Field(5, ge=3, le=20)
    reps: int = Field(10, ge=1, le=200)
    ratios: list[Ratio] = []
    # The workload's sizes as the claim states them; they must equal the preset (so a statement's shape is bound
    # to what runs, and a preset edited under a claim fails validation instead of measuring something else).
    shape: dict[str, int] = {}
    dtype: Literal["bfloat16", "float16"] = "bfloat16"
    min_cc: int | None = 90
    max_cc: int | None = None

    @field_validator("backends")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("backends lists a backend twice")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> MatrixParams:
        preset = WORKLOADS[self.workload]
        for k, v in self.shape.items():
            if k not in preset or isinstance(preset[k], bool) or preset[k] != v:
                raise ValueError(f"shape {k}={v} is not workload {self.workload!r}'s "
                                 f"({ {n: x for n, x in preset.items() if not isinstance(x, bool)} })")
        cells = {f"{b}/{p}" for b in self.backends for p in self.passes}
        for key in self.skip:
            b, _, p = key.partition("/")
            if b not in self.backends or (p and f"{b}/{p}" not in cells):
                raise ValueError(f"skip names {key!r}, which is not a cell of this row")
        for r in self.ratios:
            for b in (r.faster, r.slower):
                if b not in self.backends:
                    raise ValueError(f"ratio {r.name!r} names {b!r}, which is not among backends")
                for p in ("forward", "backward") if r.pass_ == "train" else (r.pass_,):
                    if p not in self.passes or is_skipped(self, b, p):
                        raise ValueError(f"ratio {r.name!r} needs the {b}/{p} cell, which this row does not run")
        if len({r.name for r in self.ratios}) != len(self.ratios):
            raise ValueError("two ratios share a name")
        if any(b in PINNED_IMPLS for b in self.backends) and self.max_cc is None:
            self.max_cc = 90  # kb's builds of the pins hold sm_90 code only
        return self


def is_skipped(p: MatrixParams, backend: str, pass_: str) -> str | None:
    """The reason a cell is not run, or None."""
    return p.skip.get(f"{backend}/{pass_}") or p.skip.get(backend)


def flops(workload: str, pass_: str) -> float:
    """Attention FLOPs of one call (4 B H N^2 d, half under a causal mask; backward 2.5x the forward)."""
    w = WORKLOADS[workload]
    f = 4.0 * w["batch"] * w["heads"] * w["seqlen"] ** 2 * w["head_dim"]
    if w["causal"]:
        f /= 2
    return f * (2.5 if pass_ == "backward" else 1.0)


@dataclass
class Cell:
    """One measured cell: the batch means in ms, or the error that stopped it."""

    batch_ms: list[float] | None = None
    error: str | None = None

    @property
    def median(self) -> float:
        """Median of the batch means."""
        return statistics.median(self.batch_ms or [math.nan])

    @property
    def spread(self) -> tuple[float, float]:
        """Lowest and highest batch mean."""
        return (min(self.batch_ms or [math.nan]), max(self.batch_ms or [math.nan]))


def _key(backend: str, pass_: str) -> str:
    return f"{backend}.{pass_}"


def cell_measurements(p: MatrixParams, cells: dict[tuple[str, str], Cell]) -> dict[str, tuple[Any, str]]:
    """Per cell: ms (median of batch means), ms_spread ([min, max] batch mean), tflops; or its error."""
    meas: dict[str, tuple[Any, str]] = {}
    failed = 0
    for (b, ps), c in sorted(cells.items()):
        k = _key(b, ps)
        if c.error is not None or not c.batch_ms:
            failed += 1
            meas[f"error.{k}"] = ((c.error or "no timing")[:300], "")
            continue
        lo, hi = c.spread
        meas[f"ms.{k}"] = (round(c.median, 5), f"ms per call, median of {len(c.batch_ms)} batch means")
        meas[f"ms_spread.{k}"] = ([round(lo, 5), round(hi, 5)], "ms, lowest..highest batch mean")
        meas[f"tflops.{k}"] = (round(flops(p.workload, ps) / (c.median * 1e-3) / 1e12, 1), "TFLOP/s")
    meas["cells_run"] = (len(cells), "cells")
    meas["cells_failed"] = (failed, "cells that raised or gave no timing")
    return meas


def _pass_ms(cells: dict[tuple[str, str], Cell], backend: str, pass_: str) -> tuple[float, float, float] | str:
    """(median, fastest end, slowest end) of a pass (train = forward + backward), or the error text."""
    parts = ("forward", "backward") if pass_ == "train" else (pass_,)
    med = lo = hi = 0.0
    for ps in parts:
        c = cells.get((backend, ps))
        if c is None or c.error is not None or not c.batch_ms:
            return f"{backend}/{ps}: {(c.error if c else None) or 'not measured'}"
        med, lo, hi = med + c.median, lo + c.spread[0], hi + c.spread[1]
    return med, lo, hi


def ratio_measurements(p: MatrixParams, cells: dict[tuple[str, str], Cell]
                       ) -> tuple[dict[str, tuple[Any, str]], dict[str, tuple[float, float]], list[str]]:
    """Each ratio's value (slower / faster at the medians), its ends over the spreads, and cell errors."""
    meas: dict[str, tuple[Any, str]] = {}
    ends: dict[str, tuple[float, float]] = {}
    errors: list[str] = []
    for r in p.ratios:
        fast, slow = _pass_ms(cells, r.faster, r.pass_), _pass_ms(cells, r.slower, r.pass_)
        bad = [x for x in (fast, slow) if isinstance(x, str)]
        if bad:
            errors.append(f"{r.name}: " + "; ".join(bad))  # type: ignore[arg-type]
            continue
        assert not isinstance(fast, str) and not isinstance(slow, str)
        value = slow[0] / fast[0]
        # Least favourable: the slower backend at its fastest over the faster at its slowest; and the reverse.
        lo, hi = slow[1] / fast[2], slow[2] / fast[1]
        meas[r.name] = (round(value, 4), f"time({r.slower}) / time({r.faster}), {r.pass_}")
        meas[f"{r.name}_spread"] = ([round(lo, 4), round(hi, 4)], "from the batch spreads of both cells")
        ends[r.name] = (lo, hi)
    return meas, ends, errors


def judge_row(p: MatrixParams, cells: dict[tuple[str, str], Cell], ctx: Context, log: str = "",
              environment: dict[str, Any] | None = None) -> Outcome:
    """The row's outcome from its cells: measurements, ratios, and the verdict against the expectation."""
    meas = cell_measurements(p, cells)
    rmeas, ends, errors = ratio_measurements(p, cells)
    meas.update(rmeas)
    out = Outcome(measurements=meas, log=log, environment=environment or {})
    missing = [e for e in errors if e.split(":", 1)[0] in ctx.expect]
    if missing:
        out.verdict, out.reason = "error", "a compared cell did not run: " + " | ".join(missing)
        return out
    return judge_spread(out, ends, ctx)


# ------------------------------------------------------------------ the GPU side (torch inside functions only)


def _attn(p: MatrixParams, backend: str) -> Any:
    """The AttnParams of a backend at the row's workload (the dense form; "sdpa" runs as sdpa-flash's shape)."""
    from verifiers.gpu.params import AttnParams

    w = WORKLOADS[p.workload]
    impl: Impl = "sdpa-flash" if backend == "sdpa" else backend  # type: ignore[assignment]
    return AttnParams(impl=impl, batch=w["batch"], heads=w["heads"], heads_kv=w.get("heads_kv"),
                      seqlen_q=w["seqlen"], head_dim=w["head_dim"], dtype=p.dtype, causal=w["causal"])


def _packed_call(p: MatrixParams, backend: str) -> tuple[Any, dict[str, Any]] | None:
    """For fa4 and flex on the packed workload: (call(q, k, v) -> out, inputs) on one packed sequence."""
    import torch

    w = WORKLOADS["packed"]
    if p.workload != "packed" or backend not in ("fa4", "flex"):
        return None
    docs, n, h, d = w["docs"], w["seqlen"], w["heads"], w["head_dim"]
    total = docs * n
    g = torch.Generator(device="cuda").manual_seed(0)
    dt = getattr(torch, p.dtype)

    def rnd(*s: int) -> Any:
        return torch.randn(*s, generator=g, device="cuda", dtype=dt)

    if backend == "fa4":
        import inspect

        from flash_attn.cute import flash_attn_varlen_func

        x = {"q": rnd(total, h, d), "k": rnd(total, h, d), "v": rnd(total, h, d), "do": rnd(total, h, d)}
        cu = torch.arange(0, total + 1, n, device="cuda", dtype=torch.int32)
        sig = inspect.signature(flash_attn_varlen_func).parameters
        kw: dict[str, Any] = {"cu_seqlens_q": cu, "cu_seqlens_k": cu, "causal": True}
        for name in ("max_seqlen_q", "max_seqlen_k"):
            if name in sig:
                kw[name] = n

        def call(q: Any, k: Any, v: Any) -> Any:
            res = flash_attn_varlen_func(q, k, v, **kw)
            return res[0] if isinstance(res, tuple) else res
        return call, x
    from torch.nn.attention.flex_attention import create_block_mask

    from verifiers.gpu import common

    x = {"q": rnd(1, h, total, d), "k": rnd(1, h, total, d), "v": rnd(1, h, total, d), "do": rnd(1, h, total, d)}
    doc = torch.arange(total, device="cuda") // n

    def mask_mod(b: Any, hh: Any, qi: Any, ki: Any) -> Any:
        return (doc[qi] == doc[ki]) & (qi >= ki)

    mask = create_block_mask(mask_mod, None, None, total, total, device="cuda")

    def call(q: Any, k: Any, v: Any) -> Any:
        return common._flex()(q, k, v, block_mask=mask)
    return call, x


def _cell_fn(p: MatrixParams, backend: str, pass_: str) -> Any:
    """A closure running one call of the cell (forward under no_grad, or one backward with a kept graph)."""
    import torch

    from verifiers.gpu import common

    packed = _packed_call(p, backend)
    if packed is not None:
        call, x = packed
    else:
        ap = _attn(p, backend)
        x = common.make_inputs(ap, requires_grad=pass_ == "backward")

        if backend == "sdpa":
            w = WORKLOADS[p.workload]
            gqa = {"enable_gqa": True} if w.get("heads_kv") else {}

            def call(q: Any, k: Any, v: Any) -> Any:  # PyTorch picks the backend: no sdpa_kernel context
                o = torch.nn.functional.scaled_dot_product_attention(
                    q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=w["causal"], **gqa)
                return o.transpose(1, 2)
        else:
            def call(q: Any, k: Any, v: Any) -> Any:
                return common.forward(ap, {"q": q, "k": k, "v": v})[0]
            if backend in PINNED_IMPLS and p.mode == "compile":
                # kb's builds are ctypes calls dynamo cannot trace: a graph break, as a C-extension op without a
                # registered custom op is for torch.compile (the pins register none).
                call = graph_break(call)
    for t in ("q", "k", "v"):
        x[t].requires_grad_(pass_ == "backward")
    run = torch.compile(call, dynamic=False) if p.mode == "compile" else call
    if pass_ == "forward":
        def fn() -> None:
            with torch.no_grad():
                run(x["q"], x["k"], x["v"])
        return fn
    o = run(x["q"], x["k"], x["v"])

    def bwd() -> None:
        o.backward(x["do"], retain_graph=True)
    return bwd


def _time_cell(p: MatrixParams, backend: str, pass_: str) -> Cell:
    """Warm up (compile, JIT, autotune), then `batches` batches of `reps` calls; any exception is the cell's error."""
    import torch

    try:
        with no_donated_buffers():
            fn = _cell_fn(p, backend, pass_)
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            means = []
            for _ in range(p.batches):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(p.reps):
                    fn()
                b.record()
                torch.cuda.synchronize()
                means.append(a.elapsed_time(b) / p.reps)
        return Cell(batch_ms=means)
    except Exception as exc:  # a failing cell is data for the matrix, not a crash of the row
        try:
            torch.cuda.synchronize()
        except Exception:  # a broken context shows in the next cells' errors
            pass
        return Cell(error=f"{type(exc).__name__}: {exc}".splitlines()[0][:300])
    finally:
        torch.cuda.empty_cache()


@verifier("gpu.matrix", kind="gpu-benchmark", params=MatrixParams, requires=Requirements(cuda=True, min_cc=80),
          timeout_s=420)
def matrix_row(p: MatrixParams, ctx: Context) -> Outcome:
    """Time every (backend, pass) cell of one workload and mode; compare cells by the row's ratios.

    Cells run one after another in this worker; each cell's exception is recorded as its error. The
    expectation names ratios (a conclusion) or `cells_failed` (every listed backend ran).
    """
    import torch

    from verifiers.gpu import common

    if any(b == "fa4" for b in p.backends):
        try:
            import flash_attn.cute  # noqa: F401
        except ImportError:
            p = MatrixParams.model_validate({**p.model_dump(by_alias=True),
                                             "skip": {**p.skip, "fa4": "flash_attn (flash-attn-4) not installed"}})
    cells: dict[tuple[str, str], Cell] = {}
    lines = []
    for b in p.backends:
        if b in PINNED_IMPLS:
            from verifiers.gpu import pinned as gpu_pinned

            if (why := gpu_pinned.available(b)):
                for ps in p.passes:
                    cells[(b, ps)] = Cell(error=f"build not available: {why}"[:300])
                continue
        for ps in p.passes:
            if (why := is_skipped(p, b, ps)):
                lines.append(f"{b}/{ps}: skipped ({why})")
                continue
            c = _time_cell(p, b, ps)
            cells[(b, ps)] = c
            lines.append(f"{b}/{ps}: " + (f"error {c.error}" if c.error else
                                         f"median {c.median:.4f} ms, batches {[round(t, 4) for t in c.batch_ms or []]}"))
        if p.mode == "compile":
            torch._dynamo.reset()  # each backend's compiled graphs stay out of the next one's cache limits
    method = (f"{p.batches} batches x {p.reps} calls after 3 warm-up calls, CUDA events per batch; "
              f"mode {p.mode}; workload {p.workload} {WORKLOADS[p.workload]}")
    env = {**common.versions(), "workload": WORKLOADS[p.workload]}
    return judge_row(p, cells, ctx, log=method + "\n" + "\n".join(lines), environment=env)
