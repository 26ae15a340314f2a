"""Reference tiled FA1- and FA2-style forward and backward, against dense attention.

These follow the notes' loop orders: FA1's forward walks K/V tiles in the
outer loop and re-normalises the stored output after each; FA2's forward
owns a Q tile, walks K/V tiles inside and normalises once, saving the LSE.
Both backward passes walk K/V tiles outside and Q tiles inside, adding dQ
contributions across the outer loop. Everything is fp64, so the error left
is reassociation alone.
"""

from __future__ import annotations

from typing import Literal

from kb.registry import Context, Outcome, Params, verifier


class TiledParams(Params):
    """Problem size, tile sizes, loop style and masking."""

    style: Literal["fa1", "fa2"]
    causal: bool = False
    block_q: int = 32
    block_k: int = 32
    n: int = 200
    d: int = 32
    seed: int = 0


def _problem(p: TiledParams):
    import torch

    g = torch.Generator().manual_seed(p.seed)
    return [torch.randn(p.n, p.d, generator=g, dtype=torch.float64) for _ in range(4)]


def _mask(i0: int, i1: int, j0: int, j1: int, causal: bool):
    import torch

    if not causal:
        return None
    rows = torch.arange(i0, i1).unsqueeze(1)
    cols = torch.arange(j0, j1).unsqueeze(0)
    return cols > rows


def _scores(q, k, i0: int, i1: int, j0: int, j1: int, scale: float, causal: bool):
    """Scaled scores of one (Q tile, K tile) pair, with causal positions set to -inf."""
    s = q[i0:i1] @ k[j0:j1].T * scale
    mk = _mask(i0, i1, j0, j1, causal)
    return s if mk is None else s.masked_fill(mk, float("-inf"))


def _skip(i1: int, j0: int, causal: bool) -> bool:
    # Causal: a K tile starting after the Q tile's last row contributes nothing.
    return causal and j0 > i1 - 1


def forward_fa1(q, k, v, p: TiledParams):
    """Outer loop over K/V tiles; O, l, m live in 'HBM' and are rewritten per step."""
    import torch

    n, scale = q.shape[0], q.shape[1] ** -0.5
    o = torch.zeros_like(q)
    l = torch.zeros(n, 1, dtype=q.dtype)  # noqa: E741
    m = torch.full((n, 1), float("-inf"), dtype=q.dtype)
    for j0 in range(0, n, p.block_k):
        j1 = min(j0 + p.block_k, n)
        for i0 in range(0, n, p.block_q):
            i1 = min(i0 + p.block_q, n)
            if _skip(i1, j0, p.causal):
                continue
            s = _scores(q, k, i0, i1, j0, j1, scale, p.causal)
            mt = s.max(1, keepdim=True).values
            pt = torch.exp(s - mt)
            lt = pt.sum(1, keepdim=True)
            m_new = torch.maximum(m[i0:i1], mt)
            a = torch.exp(m[i0:i1] - m_new)
            b = torch.exp(mt - m_new)
            l_new = a * l[i0:i1] + b * lt
            o[i0:i1] = (l[i0:i1] * a * o[i0:i1] + b * (pt @ v[j0:j1])) / l_new
            l[i0:i1], m[i0:i1] = l_new, m_new
    return o, m + torch.log(l)


def forward_fa2(q, k, v, p: TiledParams):
    """One Q tile per owner; inner loop over K/V tiles; normalise once; keep LSE."""
    import torch

    n, scale = q.shape[0], q.shape[1] ** -0.5
    o = torch.zeros_like(q)
    lse = torch.zeros(n, 1, dtype=q.dtype)
    for i0 in range(0, n, p.block_q):
        i1 = min(i0 + p.block_q, n)
        acc = torch.zeros(i1 - i0, q.shape[1], dtype=q.dtype)
        m = torch.full((i1 - i0, 1), float("-inf"), dtype=q.dtype)
        l = torch.zeros(i1 - i0, 1, dtype=q.dtype)  # noqa: E741
        for j0 in range(0, n, p.block_k):
            j1 = min(j0 + p.block_k, n)
            if _skip(i1, j0, p.causal):
                break
            s = _scores(q, k, i0, i1, j0, j1, scale, p.causal)
            m_new = torch.maximum(m, s.max(1, keepdim=True).values)
            pt = torch.exp(s - m_new)
            alpha = torch.exp(m - m_new)
            l = alpha * l + pt.sum(1, keepdim=True)  # noqa: E741
            acc = acc * alpha + pt @ v[j0:j1]
            m = m_new
        o[i0:i1] = acc / l
        lse[i0:i1] = m + torch.log(l)
    return o, lse


def backward_tiled(q, k, v, do, o, lse, p: TiledParams):
    """K/V tiles outside, Q tiles inside; dK/dV owned per K tile, dQ added across K tiles."""
    import torch

    n, scale = q.shape[0], q.shape[1] ** -0.5
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    d_row = (do * o).sum(1, keepdim=True)  # FA2 precomputes D; FA1 forms the same rowsum per tile
    for j0 in range(0, n, p.block_k):
        j1 = min(j0 + p.block_k, n)
        for i0 in range(0, n, p.block_q):
            i1 = min(i0 + p.block_q, n)
            if _skip(i1, j0, p.causal):
                continue
            s = _scores(q, k, i0, i1, j0, j1, scale, p.causal)
            pt = torch.exp(s - lse[i0:i1])
            dv[j0:j1] += pt.T @ do[i0:i1]
            dp = do[i0:i1] @ v[j0:j1].T
            di = d_row[i0:i1] if p.style == "fa2" else (do[i0:i1] * o[i0:i1]).sum(1, keepdim=True)
            ds = pt * (dp - di)
            dq[i0:i1] += ds @ k[j0:j1] * scale
            dk[j0:j1] += ds.T @ q[i0:i1] * scale
    return dq, dk, dv


def _dense(q, k, v, causal: bool):
    import torch

    s = q @ k.T * q.shape[1] ** -0.5
    if causal:
        s = s.masked_fill(torch.ones(s.shape, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, 1) @ v, torch.logsumexp(s, 1, keepdim=True)


@verifier("math.tiled-forward", kind="cpu-check", params=TiledParams, timeout_s=60)
def tiled_forward(p: TiledParams, ctx: Context) -> Outcome:
    """The tiled forward (FA1 or FA2 loop order) equals dense attention and its LSE."""
    q, k, v, _ = _problem(p)
    o, lse = (forward_fa1 if p.style == "fa1" else forward_fa2)(q, k, v, p)
    ref_o, ref_lse = _dense(q, k, v, p.causal)
    err = max(float((o - ref_o).abs().max()), float((lse - ref_lse).abs().max()))
    return Outcome(measurements={"max_abs_err": (err, "")}, log=f"{p.style} causal={p.causal} Br={p.block_q} Bc={p.block_k}")


@verifier("math.tiled-backward", kind="cpu-check", params=TiledParams, timeout_s=60)
def tiled_backward(p: TiledParams, ctx: Context) -> Outcome:
    """The tiled backward gives autograd's dQ, dK, dV from recomputed P."""
    q, k, v, do = _problem(p)
    o, lse = (forward_fa1 if p.style == "fa1" else forward_fa2)(q, k, v, p)
    dq, dk, dv = backward_tiled(q, k, v, do, o, lse, p)
    for t in (q, k, v):
        t.requires_grad_()
    ref_o, _ = _dense(q, k, v, p.causal)
    ref_o.backward(do)
    err = max(float((dq - q.grad).abs().max()), float((dk - k.grad).abs().max()), float((dv - v.grad).abs().max()))
    return Outcome(measurements={"max_abs_err": (err, "")})


class CausalTilesParams(Params):
    """Sequence length and tile sizes."""

    n: int
    block_q: int
    block_k: int


@verifier("math.causal-tiles", kind="cpu-check", params=CausalTilesParams, timeout_s=10)
def causal_tiles(p: CausalTilesParams, ctx: Context) -> Outcome:
    """Count the (Q tile, K tile) pairs a causal kernel must visit versus the dense grid."""
    visited = dense = 0
    for i0 in range(0, p.n, p.block_q):
        i1 = min(i0 + p.block_q, p.n)
        for j0 in range(0, p.n, p.block_k):
            dense += 1
            visited += 0 if _skip(i1, j0, True) else 1
    return Outcome(measurements={
        "tiles_visited": (visited, "tiles"), "tiles_dense": (dense, "tiles"), "fraction": (visited / dense, ""),
    })
