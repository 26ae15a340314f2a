"""Mathematical identities behind FlashAttention, checked in fp64 on the CPU.

Each verifier builds its own random inputs from a fixed seed and reports the
largest absolute difference from the dense reference; the claim's expectation
says how small it must be.
"""

from __future__ import annotations

from kb.registry import Context, Outcome, Params, verifier


class RowParams(Params):
    """Row length, K-tile size and how many rows to try."""

    n: int = 256
    block: int = 64
    rows: int = 16
    masked_rows: int = 0
    d: int = 32
    seed: int = 0


def _inputs(p: RowParams):
    import torch

    g = torch.Generator().manual_seed(p.seed)
    s = torch.randn(p.rows, p.n, generator=g, dtype=torch.float64) * 4
    if p.masked_rows:
        s[: p.masked_rows] = float("-inf")
    v = torch.randn(p.n, p.d, generator=g, dtype=torch.float64)
    return s, v


def online_softmax_pv(s, v, block: int, normalize_each_step: bool = False):
    """Stream K-tiles of scores through the running (max, sum, acc) state.

    Starts from m = -inf, l = 0, acc = 0. A tile whose scores are all -inf leaves
    the state as it was (the shift uses 0 when the max is still -inf, so exp(-inf)=0
    instead of NaN). Returns (output, m, l); fully masked rows give 0 and l = 0.
    """
    import torch

    rows = s.shape[0]
    m = torch.full((rows, 1), float("-inf"), dtype=s.dtype)
    l = torch.zeros((rows, 1), dtype=s.dtype)  # noqa: E741 - the notes' name
    acc = torch.zeros((rows, v.shape[1]), dtype=s.dtype)
    for j in range(0, s.shape[1], block):
        sj = s[:, j : j + block]
        m_new = torch.maximum(m, sj.max(dim=1, keepdim=True).values)
        shift = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(sj - shift)
        alpha = torch.exp(torch.where(torch.isinf(m), torch.full_like(m, float("-inf")), m - shift))
        l_new = alpha * l + p.sum(dim=1, keepdim=True)
        if normalize_each_step:
            safe = torch.where(l_new == 0, torch.ones_like(l_new), l_new)
            acc = (acc * alpha * l + p @ v[j : j + block]) / safe
        else:
            acc = acc * alpha + p @ v[j : j + block]
        m, l = m_new, l_new  # noqa: E741
    if not normalize_each_step:
        acc = acc / torch.where(l == 0, torch.ones_like(l), l)
    return acc, m, l


def dense_reference(s, v):
    """softmax(s) @ v, with fully masked rows defined as 0."""
    import torch

    p = torch.softmax(s, dim=1)
    p = torch.nan_to_num(p, nan=0.0)
    return p @ v


@verifier("math.online-softmax", kind="cpu-check", params=RowParams, timeout_s=60)
def online_softmax(p: RowParams, ctx: Context) -> Outcome:
    """Tile-by-tile rescaled merging equals dense softmax times V (masked rows included)."""
    s, v = _inputs(p)
    out, _, _ = online_softmax_pv(s, v, p.block)
    err = float((out - dense_reference(s, v)).abs().max())
    return Outcome(measurements={"max_abs_err": (err, "")}, log=f"rows={p.rows} n={p.n} block={p.block}")


@verifier("math.deferred-normalization", kind="cpu-check", params=RowParams, timeout_s=60)
def deferred_normalization(p: RowParams, ctx: Context) -> Outcome:
    """Dividing by the running sum once at the end equals normalising after every tile."""
    s, v = _inputs(p)
    late, _, _ = online_softmax_pv(s, v, p.block)
    early, _, _ = online_softmax_pv(s, v, p.block, normalize_each_step=True)
    err = max(float((late - early).abs().max()), float((late - dense_reference(s, v)).abs().max()))
    return Outcome(measurements={"max_abs_err": (err, "")})


@verifier("math.logsumexp", kind="cpu-check", params=RowParams, timeout_s=60)
def logsumexp(p: RowParams, ctx: Context) -> Outcome:
    """The saved statistic m + log(l) equals the row's log-sum-exp."""
    import torch

    s, v = _inputs(p)
    _, m, l = online_softmax_pv(s, v, p.block)  # noqa: E741
    live = slice(p.masked_rows, None)
    lse = (m + torch.log(l))[live].squeeze(1)
    err = float((lse - torch.logsumexp(s[live], dim=1)).abs().max())
    return Outcome(measurements={"max_abs_err": (err, "")})


class ShiftParams(Params):
    """Vector length and the constant shift."""

    n: int = 128
    shift: float = 37.5
    seed: int = 0


@verifier("math.softmax-shift", kind="cpu-check", params=ShiftParams, timeout_s=30)
def softmax_shift(p: ShiftParams, ctx: Context) -> Outcome:
    """softmax(x - c) equals softmax(x): subtracting the max changes nothing but range."""
    import torch

    x = torch.randn(8, p.n, generator=torch.Generator().manual_seed(p.seed), dtype=torch.float64) * 5
    err = float((torch.softmax(x - p.shift, 1) - torch.softmax(x, 1)).abs().max())
    return Outcome(measurements={"max_abs_err": (err, "")})


@verifier("math.exp2-rewrite", kind="cpu-check", params=ShiftParams, timeout_s=30)
def exp2_rewrite(p: ShiftParams, ctx: Context) -> Outcome:
    """exp(x) equals exp2(x * log2(e)), the form kernels use with a folded scale."""
    import math

    import torch

    x = torch.randn(p.n, generator=torch.Generator().manual_seed(p.seed), dtype=torch.float64) * 10
    ref = torch.exp(x)
    err = float(((torch.exp2(x * math.log2(math.e)) - ref) / ref).abs().max())
    return Outcome(measurements={"max_abs_err": (err, "relative")})


class BackwardParams(Params):
    """Sequence length and head dimension of the random problem."""

    n: int = 96
    d: int = 32
    seed: int = 0
    causal: bool = False


@verifier("math.backward-identities", kind="cpu-check", params=BackwardParams, timeout_s=60)
def backward_identities(p: BackwardParams, ctx: Context) -> Outcome:
    """dV=PᵀdO, dP=dO Vᵀ, D=rowsum(dO∘O)=rowsum(P∘dP), dS=P∘(dP−D), dQ=dS K·s, dK=dSᵀQ·s, against autograd."""
    import torch

    g = torch.Generator().manual_seed(p.seed)
    q, k, v, do = (torch.randn(p.n, p.d, generator=g, dtype=torch.float64) for _ in range(4))
    scale = p.d**-0.5
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    s = (q @ k.T) * scale
    if p.causal:
        s = s.masked_fill(torch.ones(p.n, p.n, dtype=torch.bool).triu(1), float("-inf"))
    pr = torch.softmax(s, dim=1)
    o = pr @ v
    o.backward(do)
    with torch.no_grad():
        dv = pr.T @ do
        dp = do @ v.T
        d_row = (do * o).sum(1, keepdim=True)
        d_alt = (pr * dp).sum(1, keepdim=True)
        ds = pr * (dp - d_row)
        dq = ds @ k * scale
        dk = ds.T @ q * scale
        errs = [
            (dv - v.grad).abs().max(), (dq - q.grad).abs().max(),
            (dk - k.grad).abs().max(), (d_row - d_alt).abs().max(),
        ]
    return Outcome(measurements={"max_abs_err": (float(max(errs)), "")},
                   log="dv, dq, dk, D-identity errors: " + ", ".join(f"{float(e):.2e}" for e in errs))
