"""Block-matrix, shape and ownership identities the notes state, computed in fp64 on the CPU.

`math.block-identity` takes an `identity` name and computes it on random inputs
from a fixed seed: every identity is a real computation (products, sums,
tensor shapes, byte layouts, FLOP counts) whose result is compared with the
claim's expectation, so a wrong statement comes out refuted. Numeric
identities report `max_abs_err` against the dense reference; structural ones
report counts, shapes or booleans under their own names (see each helper).

`math.tile-ownership` computes the per-(Q tile, K/V tile) contributions to
dQ, dK and dV of a real attention backward and counts, for a loop orientation,
how many owners write each gradient tile.
"""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from kb.registry import Context, Outcome, Params, verifier

# Memory bound: no array an identity builds may hold more than this many elements (128 MiB of fp64).
# Checked when the parameters are read, from the sizes they declare, before anything is allocated.
MAX_ELEMENTS = 1 << 24


def _check_bound(what: str, elements: int) -> None:
    if elements > MAX_ELEMENTS:
        raise ValueError(f"{what} would hold {elements:,} elements, above the bound of {MAX_ELEMENTS:,} "
                         f"({MAX_ELEMENTS * 8 // 2**20} MiB of fp64); choose smaller sizes")

Identity = Literal[
    "qk-column-blocks",        # S = QK^T splits into column blocks Q K_b^T; block b depends on K_b alone
    "pv-split-sum",            # PV = sum_b P_b V_b over a key partition
    "d-split-scores",          # splitting QK^T along d gives partial scores that must be summed first
    "output-column-split",     # O = PV by V column blocks: disjoint, concatenated; needs the full P row
    "split-output-vs-reduction",  # A B split on an output axis vs on the contracted axis
    "qk-head-dim-contraction",  # S_ij = sum_d Q_i[:, d] K_j[:, d]^T, no d in the result
    "tile-shapes",             # shapes of Q_i, O_i, K_j, V_j, S_ij, P_ij in a tiled forward
    "online-state-shapes",     # shapes of m_i, l_i, U_i in the online-softmax forward, and its result
    "qk-pv-axes",              # d_qk contracted in QK^T and absent from PV; d_v an output axis of PV
    "mqa-shared-kv",           # many Q heads against one K/V tile: per-head scores, full-d reduction
    "softmax-count",           # score elements per tile for several head dims
    "unfused-intermediates",   # S and P element counts of unfused attention; tiled FA1 matmul FLOPs
    "two-four-prune",          # 2:4 pruning of score rows changes the softmax denominator and output
    "gqa-grad-sum",            # GQA dK/dV = sum over the Q heads of a group of per-head gradients
    "bwd-tile-products",       # tiled backward from five products per cell; forward from two
    "bwd-flops-fa1-fa2",       # matmul FLOPs of the FA1- and FA2-style tiled backward references
    "mma-b-fragment",          # PTX mma.m16n8k16 B-fragment elements of one lane when B = K^T
    "layout-transpose-bytes",  # row-major K bytes vs column-major K^T; row-major V vs column-major V
    "strided-ownership",       # FA1 split r of R owns Q tiles r, r+R, ...; every split walks all K/V
]


class BlockParams(Params):
    """Which identity, and the sizes of the random problem it is computed on."""

    identity: Identity
    n: int = 128                # sequence length (rows of Q, K, V)
    d: int = 32                 # head dimension (d_qk)
    d_v: int | None = None      # value head dimension (defaults to d)
    block_m: int = 32           # Q-tile rows (B_M / B_r)
    block_n: int = 32           # K/V-tile rows (B_N / B_c)
    parts: int = 4              # how many blocks a partition has
    heads: int = 8              # Q heads (GQA / MQA)
    kv_heads: int = 2           # K/V heads (GQA)
    d_values: list[int] = [32, 64, 128, 256, 512]
    n_values: list[int] = [64, 128, 256]
    lane: int = 0               # lane for mma-b-fragment
    num_splits: int = 2         # R for strided-ownership
    q_tiles: int = 4
    kv_tiles: int = 4
    causal: bool = False
    seed: int = 0

    @model_validator(mode="after")
    def _bounded(self) -> BlockParams:
        """The largest array any identity builds from these sizes (an upper estimate) fits the bound."""
        n, d, dv, bm, bn, h = (abs(x) for x in (self.n, self.d, self.d_v or self.d, self.block_m, self.block_n,
                                                 self.heads))
        kvh = abs(self.kv_heads)
        ns, ds = max(map(abs, self.n_values), default=1), max(map(abs, self.d_values), default=1)
        wide = max(n, d, dv)
        candidates = {
            "an n×n score matrix per head": max(h, kvh, 1) * n * wide,
            "the stacked heads' tiles": max(h, 1) * bm * max(bn, d, dv),
            "a tile against the sequence": max(bm, bn) * max(wide, bn, ds),
            "the unfused intermediates": ns * max(ns, ds),
            "the tile lists (Python objects)": 8 * (abs(self.q_tiles) + abs(self.num_splits)),
            "the byte layout (as a list)": 16 * n * max(d, dv) if self.identity == "layout-transpose-bytes" else 0,
        }
        what, most = max(candidates.items(), key=lambda kv: kv[1])
        _check_bound(f"{self.identity}: {what}", most)
        return self


def _randn(g, *shape):
    import torch

    return torch.randn(*shape, generator=g, dtype=torch.float64)


def _err(a, b) -> float:
    return float((a - b).abs().max())


def _softmax_rows(s):
    import torch

    return torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0)


def _qk_column_blocks(p: BlockParams, g) -> dict:
    import torch

    q, k = _randn(g, p.n, p.d), _randn(g, p.n, p.d)
    blocks = torch.chunk(torch.arange(p.n), p.parts)
    s = q @ k.T
    cat = torch.cat([q @ k[b].T for b in blocks], dim=1)
    # Perturb K block b: only score columns of block b may change (no partial scores to combine).
    foreign = 0
    for b in blocks:
        k2 = k.clone()
        k2[b] += _randn(g, len(b), p.d)
        changed = (q @ k2.T - s).abs() > 0
        outside = torch.ones(p.n, dtype=torch.bool)
        outside[b] = False
        foreign += int(changed[:, outside].sum())
    return {"max_abs_err": _err(cat, s), "foreign_changes": foreign, "blocks": len(blocks)}


def _pv_split_sum(p: BlockParams, g) -> dict:
    import torch

    q, k, v = _randn(g, p.n, p.d), _randn(g, p.n, p.d), _randn(g, p.n, p.d_v or p.d)
    pr = _softmax_rows(q @ k.T * p.d**-0.5)
    o = pr @ v
    blocks = torch.chunk(torch.arange(p.n), p.parts)
    partials = [pr[:, b] @ v[b] for b in blocks]
    total = torch.zeros_like(o)
    for part in partials:
        total = total + part
    return {
        "max_abs_err": _err(total, o),
        "contributors": len(partials),
        "partial_full_shape": all(list(x.shape) == list(o.shape) for x in partials),
        "single_partial_err": min(_err(x, o) for x in partials),
    }


def _d_split_scores(p: BlockParams, g) -> dict:
    import torch

    q, k = _randn(g, p.block_m, p.d), _randn(g, p.block_n, p.d)
    s = q @ k.T
    cols = torch.chunk(torch.arange(p.d), p.parts)
    partial = [q[:, c] @ k[:, c].T for c in cols]
    summed = torch.zeros_like(s)
    for x in partial:
        summed = summed + x
    ref = torch.softmax(s, 1)
    # Softmax of any one partial, or the mean of the partials' softmaxes, is not softmax(S).
    alone = min(_err(torch.softmax(x, 1), ref) for x in partial)
    mean_after = _err(sum(torch.softmax(x, 1) for x in partial) / len(partial), ref)
    return {
        "max_abs_err": max(_err(summed, s), _err(torch.softmax(summed, 1), ref)),
        "partial_softmax_err": min(alone, mean_after),
    }


def _output_column_split(p: BlockParams, g) -> dict:
    import torch

    dv = p.d_v or p.d
    q, k, v = _randn(g, p.n, p.d), _randn(g, p.n, p.d), _randn(g, p.n, dv)
    pr = _softmax_rows(q @ k.T * p.d**-0.5)
    o = pr @ v
    cols = torch.chunk(torch.arange(dv), p.parts)
    frags = [pr @ v[:, c] for c in cols]
    cover = torch.zeros(dv, dtype=torch.int64)
    for c in cols:
        cover[c] += 1
    half = p.n // 2
    # A column owner holding only half of each P row gets the wrong columns.
    partial_row = max(_err(pr[:, :half] @ v[:half, c], o[:, c]) for c in cols)
    return {
        "max_abs_err": _err(torch.cat(frags, dim=1), o),
        "max_writers_per_element": int(cover.max()),
        "partial_p_row_err": partial_row,
    }


def _split_output_vs_reduction(p: BlockParams, g) -> dict:
    """A [block_m, block_n] times B [block_n, d]: split rows of A (output) vs the contracted axis."""
    import torch

    a, b = _randn(g, p.block_m, p.block_n), _randn(g, p.block_n, p.d)
    c = a @ b
    out_writers = torch.zeros(c.shape, dtype=torch.int64)
    frags = []
    for rows in torch.chunk(torch.arange(p.block_m), p.parts):
        frag = a[rows] @ b
        frags.append(frag)
        out_writers[rows] += 1
    red_writers = torch.zeros(c.shape, dtype=torch.int64)
    total = torch.zeros_like(c)
    partials = []
    for ks in torch.chunk(torch.arange(p.block_n), p.parts):
        part = a[:, ks] @ b[ks]
        partials.append(part)
        total = total + part
        red_writers += (part != 0).to(torch.int64)
    return {
        "max_abs_err": max(_err(torch.cat(frags, 0), c), _err(total, c)),
        "output_split_writers": int(out_writers.max()),
        "reduction_split_writers": int(red_writers.min()),
        "reduction_partial_err": min(_err(x, c) for x in partials),
    }


def _qk_head_dim_contraction(p: BlockParams, g) -> dict:
    import torch

    q, k = _randn(g, p.block_m, p.d), _randn(g, p.block_n, p.d)
    s = q @ k.T
    outer = torch.zeros_like(s)
    for j in range(p.d):
        outer = outer + torch.outer(q[:, j], k[:, j])
    return {"max_abs_err": _err(outer, s), "s_shape": list(s.shape), "contracted": q.shape[1]}


def _tile_shapes(p: BlockParams, g) -> dict:
    import torch

    q, k, v = _randn(g, p.n, p.d), _randn(g, p.n, p.d), _randn(g, p.n, p.d)
    qi, kj, vj = q[: p.block_m], k[: p.block_n], v[: p.block_n]
    sij = qi @ kj.T
    pij = torch.softmax(sij, 1)
    oi = pij @ vj
    return {
        "q_tile_shape": list(qi.shape), "o_tile_shape": list(oi.shape), "k_tile_shape": list(kj.shape),
        "v_tile_shape": list(vj.shape), "s_tile_shape": list(sij.shape), "p_tile_shape": list(pij.shape),
    }


def _online_state_shapes(p: BlockParams, g) -> dict:
    import torch

    q, k, v = _randn(g, p.block_m, p.d), _randn(g, p.n, p.d), _randn(g, p.n, p.d)
    m = torch.full((p.block_m,), float("-inf"), dtype=torch.float64)
    l = torch.zeros(p.block_m, dtype=torch.float64)  # noqa: E741 - the notes' name
    u = torch.zeros(p.block_m, p.d, dtype=torch.float64)
    for j0 in range(0, p.n, p.block_n):
        s = q @ k[j0 : j0 + p.block_n].T
        m_new = torch.maximum(m, s.max(1).values)
        pt = torch.exp(s - m_new[:, None])
        alpha = torch.exp(m - m_new)
        l = alpha * l + pt.sum(1)  # noqa: E741
        u = alpha[:, None] * u + pt @ v[j0 : j0 + p.block_n]
        m = m_new
    ref = torch.softmax(q @ k.T, 1) @ v
    return {"max_abs_err": _err(u / l[:, None], ref), "m_shape": list(m.shape), "l_shape": list(l.shape),
            "u_shape": list(u.shape)}


def _qk_pv_axes(p: BlockParams, g) -> dict:
    import torch

    dv = p.d_v or p.d
    q, k, v = _randn(g, p.block_m, p.d), _randn(g, p.block_n, p.d), _randn(g, p.block_n, dv)
    s = q @ k.T
    o = torch.softmax(s, 1) @ v
    return {"qk_contracted": q.shape[1], "pv_contracted": v.shape[0], "s_shape": list(s.shape),
            "o_shape": list(o.shape), "d_v_in_o_columns": o.shape[1] == dv}


def _mqa_shared_kv(p: BlockParams, g) -> dict:
    import torch

    dv = p.d_v or p.d
    q = _randn(g, p.heads, p.block_m, p.d)
    k, v = _randn(g, p.block_n, p.d), _randn(g, p.block_n, dv)
    # One K/V tile serves every head: stack the heads' rows against it.
    s_stack = q.reshape(-1, p.d) @ k.T
    o_stack = torch.softmax(s_stack, 1) @ v
    errs = []
    for h in range(p.heads):
        s_h = q[h] @ k.T
        o_h = torch.softmax(s_h, 1) @ v
        rows = slice(h * p.block_m, (h + 1) * p.block_m)
        errs += [_err(s_stack[rows], s_h), _err(o_stack[rows], o_h)]
    # Dropping any part of d_qk changes the scores: the reduction is over the full d_qk.
    trunc = _err(q.reshape(-1, p.d)[:, : p.d // 2] @ k[:, : p.d // 2].T, s_stack)
    return {"max_abs_err": max(errs), "score_contracted": q.shape[-1], "output_columns": o_stack.shape[1],
            "truncated_d_err": trunc}


def _softmax_count(p: BlockParams, g) -> dict:
    counts = []
    for d in p.d_values:
        q, k = _randn(g, p.block_m, d), _randn(g, p.block_n, d)
        counts.append((q @ k.T).numel())
    return {"score_elements": counts[0], "distinct_counts": len(set(counts)), "score_elements_by_d": counts}


def _count_mm_flops(fn) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def _unfused_intermediates(p: BlockParams, g) -> dict:
    import math

    import torch

    from verifiers.cpu.tiled import TiledParams, forward_fa1

    ratios, by_d = [], {}
    for n in p.n_values:
        for d in p.d_values:
            q, k = _randn(g, n, d), _randn(g, n, d)
            s = q @ k.T  # written to HBM by the first kernel
            pr = torch.softmax(s, 1)  # written by the softmax kernel, read by the PV kernel
            ratios.append((s.numel() + pr.numel()) / n**2)
            by_d.setdefault(n, set()).add(s.numel() + pr.numel())
    lo, hi = min(p.n_values), max(p.n_values)
    sizes = {n: next(iter(c)) for n, c in by_d.items()}
    exponent = math.log(sizes[hi] / sizes[lo]) / math.log(hi / lo)
    # FA1 removes the N x N intermediates, not the matmul arithmetic: same FLOPs as unfused.
    n = max(p.n_values)
    q, k, v = (_randn(g, n, p.d) for _ in range(3))
    tp = TiledParams(style="fa1", block_q=p.block_m, block_k=p.block_n, n=n, d=p.d)
    tiled = _count_mm_flops(lambda: forward_fa1(q, k, v, tp))
    dense = _count_mm_flops(lambda: torch.softmax(q @ k.T, 1) @ v)
    return {"elements_per_n2": max(ratios) if len(set(ratios)) == 1 else -1.0,
            "n_exponent": round(exponent, 9),
            "depends_on_d": any(len(c) > 1 for c in by_d.values()),
            "tiled_to_unfused_flops": tiled / dense}


def _two_four_prune(p: BlockParams, g) -> dict:
    import torch

    s = _randn(g, p.block_m, p.n) * 2
    v = _randn(g, p.n, p.d)
    groups = s.reshape(p.block_m, -1, 4)
    keep = torch.zeros_like(groups, dtype=torch.bool)
    keep.scatter_(2, groups.topk(2, dim=2).indices, True)  # keep 2 of every 4 (2:4)
    pruned = s.masked_fill(~keep.reshape(s.shape), float("-inf"))
    denom_full = torch.exp(s).sum(1)
    denom_pruned = torch.exp(pruned).sum(1)
    o_full = torch.softmax(s, 1) @ v
    o_pruned = torch.softmax(pruned, 1) @ v
    changed = ((denom_full - denom_pruned).abs() / denom_full > 1e-12).to(torch.float64)
    return {"rows_denominator_changed": float(changed.mean()), "output_diff": _err(o_pruned, o_full),
            "output_shape_same": list(o_pruned.shape) == list(o_full.shape)}


def _gqa_grad_sum(p: BlockParams, g) -> dict:
    import torch

    group = p.heads // p.kv_heads
    q = _randn(g, p.heads, p.n, p.d)
    k, v, do = _randn(g, p.kv_heads, p.n, p.d), _randn(g, p.kv_heads, p.n, p.d), _randn(g, p.heads, p.n, p.d)
    kk, vv = k.clone().requires_grad_(), v.clone().requires_grad_()
    o = torch.softmax(q @ kk.repeat_interleave(group, 0).transpose(1, 2) * p.d**-0.5, -1) @ vv.repeat_interleave(group, 0)
    o.backward(do)
    # Each Q head as its own attention problem with a private copy of its K/V head.
    sum_dk, sum_dv = torch.zeros_like(k), torch.zeros_like(v)
    contributing = torch.zeros(p.kv_heads, dtype=torch.int64)
    for h in range(p.heads):
        kh, vh = k[h // group].clone().requires_grad_(), v[h // group].clone().requires_grad_()
        oh = torch.softmax(q[h] @ kh.T * p.d**-0.5, -1) @ vh
        oh.backward(do[h])
        sum_dk[h // group] += kh.grad
        sum_dv[h // group] += vh.grad
        contributing[h // group] += int(bool(kh.grad.abs().max() > 0 and vh.grad.abs().max() > 0))
    return {"max_abs_err": max(_err(sum_dk, kk.grad), _err(sum_dv, vv.grad)),
            "q_heads_per_kv_grad": int(contributing.min())}


def _bwd_tile_products(p: BlockParams, g) -> dict:
    import torch

    n, d, scale = p.n, p.d, p.d**-0.5
    q, k, v, do = (_randn(g, n, d) for _ in range(4))
    calls: list[tuple[str, int]] = []

    def mm(name, a, b):
        if a.shape[1] != b.shape[0]:
            raise ValueError(f"{name}: {tuple(a.shape)} x {tuple(b.shape)} do not chain")
        calls.append((name, a.shape[1]))
        return a @ b

    o_ref = torch.softmax(q @ k.T * scale, 1) @ v
    lse = torch.logsumexp(q @ k.T * scale, 1, keepdim=True)
    # Forward: per cell S_ij = Q_i K_j^T and P_ij V_j only.
    o = torch.zeros_like(q)
    fwd_cells = 0
    for i0 in range(0, n, p.block_m):
        acc = torch.zeros(min(p.block_m, n - i0), d, dtype=q.dtype)
        for j0 in range(0, n, p.block_n):
            s = mm("S", q[i0 : i0 + p.block_m], k[j0 : j0 + p.block_n].T) * scale
            acc = acc + mm("O", torch.exp(s - lse[i0 : i0 + p.block_m]), v[j0 : j0 + p.block_n])
            fwd_cells += 1
        o[i0 : i0 + p.block_m] = acc
    fwd_calls = len(calls)
    calls.clear()
    d_row = (do * o).sum(1, keepdim=True)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    contract: dict[str, int] = {}
    cells = 0
    for j0 in range(0, n, p.block_n):
        j = slice(j0, j0 + p.block_n)
        for i0 in range(0, n, p.block_m):
            i = slice(i0, i0 + p.block_m)
            before = len(calls)
            s = mm("S", q[i], k[j].T) * scale
            pt = torch.exp(s - lse[i])
            dp = mm("dP", do[i], v[j].T)
            dv[j] += mm("dV", pt.T, do[i])
            ds = pt * (dp - d_row[i])
            dq[i] += mm("dQ", ds, k[j]) * scale
            dk[j] += mm("dK", ds.T, q[i]) * scale
            if not contract:
                contract = {name: size for name, size in calls[before:]}
            cells += 1
    for t in (q, k, v):
        t.requires_grad_()
    ref = torch.softmax(q @ k.T * scale, 1) @ v
    ref.backward(do)
    err = max(_err(o, o_ref), _err(dq, q.grad), _err(dk, k.grad), _err(dv, v.grad))
    return {"max_abs_err": err, "fwd_products_per_cell": fwd_calls / fwd_cells,
            "bwd_products_per_cell": len(calls) / cells,
            "contract_s": contract["S"], "contract_dp": contract["dP"], "contract_dq": contract["dQ"],
            "contract_dk": contract["dK"], "contract_dv": contract["dV"]}


def _bwd_flops_fa1_fa2(p: BlockParams, g) -> dict:
    from verifiers.cpu.tiled import TiledParams, backward_tiled, forward_fa2

    q, k, v, do = (_randn(g, p.n, p.d) for _ in range(4))
    flops = {}
    for style in ("fa1", "fa2"):
        tp = TiledParams(style=style, causal=p.causal, block_q=p.block_m, block_k=p.block_n, n=p.n, d=p.d)
        o, lse = forward_fa2(q, k, v, tp)
        flops[style] = _count_mm_flops(lambda tp=tp, o=o, lse=lse: backward_tiled(q, k, v, do, o, lse, tp))
    return {"fa2_to_fa1_flops": flops["fa2"] / flops["fa1"],
            "gemms_equivalent": flops["fa1"] / (2 * p.n * p.n * p.d)}


# PTX ISA, "Matrix Fragments for mma.m16n8k16" (.f16/.bf16), B fragment (K=16 x N=8): each lane holds
# b0..b3; row = threadID_in_group * 2 + (i & 1) + (8 if i >= 2 else 0), col = groupID.
def _mma_b_fragment(p: BlockParams, g) -> dict:
    import torch

    keys, dims = 8, 16
    k = torch.tensor([[key * 1000 + dd for dd in range(dims)] for key in range(keys)], dtype=torch.float64)
    b = k.T  # B = K^T: rows are d, columns are keys
    group_id, tig = p.lane >> 2, p.lane % 4
    elems = []
    for i in range(4):
        row = tig * 2 + (i & 1) + (8 if i >= 2 else 0)
        val = int(b[row, group_id])
        elems.append([val // 1000, val % 1000])
    return {"k_elements": elems, "one_k_row": len({e[0] for e in elems}) == 1,
            "full_row": len(elems) == dims}


def _layout_transpose_bytes(p: BlockParams, g) -> dict:
    import torch

    k = _randn(g, p.n, p.d).to(torch.float16)
    v = _randn(g, p.n, p.d).to(torch.float16)
    pr = torch.softmax(_randn(g, p.block_m, p.n), 1)

    def rowmajor_bytes(x):
        return bytes(x.contiguous().view(torch.uint8).flatten().tolist())

    def colmajor_bytes(x):
        return bytes(x.T.contiguous().view(torch.uint8).flatten().tolist())

    # QK^T wants B = K^T [d, n] in column-major order; PV wants B = V [n, d] in column-major order.
    kt_ok = rowmajor_bytes(k) == colmajor_bytes(k.T)
    v_ok = rowmajor_bytes(v) == colmajor_bytes(v)
    raw = torch.frombuffer(bytearray(rowmajor_bytes(v)), dtype=torch.float16).to(torch.float64)
    ref = pr @ v.to(torch.float64)
    # Reading the row-major bytes as if they were column-major B: B[kk, nn] = raw[nn * n + kk].
    naive = raw.reshape(p.d, p.n).T
    # A transposing fragment load addresses B[kk, nn] at kk * d + nn of the same bytes: a local
    # reinterpretation that feeds P V itself (no V^T tensor is stored, no P V^T is formed).
    transposed = torch.stack([raw[kk * p.d : (kk + 1) * p.d] for kk in range(p.n)])
    return {"k_rowmajor_is_kt_colmajor": kt_ok, "v_rowmajor_is_v_colmajor": v_ok,
            "naive_read_err": _err(pr @ naive, ref), "max_abs_err": _err(pr @ transposed, ref)}


def _strided_ownership(p: BlockParams, g) -> dict:
    # The v1.0.9 forward loop: for (l = blockIdx.z; l < steps; l += gridDim.z), inside every K/V step.
    owned = [list(range(z, p.q_tiles, p.num_splits)) for z in range(p.num_splits)]
    kv_loads = [0] * p.num_splits
    for z in range(p.num_splits):
        for _j in range(p.kv_tiles):
            kv_loads[z] += 1
    every_q_once = sorted(t for o in owned for t in o) == list(range(p.q_tiles))
    return {"owned": owned, "kv_loads_per_cta": kv_loads, "disjoint_cover": every_q_once}


_IDENTITIES = {
    "qk-column-blocks": _qk_column_blocks, "pv-split-sum": _pv_split_sum, "d-split-scores": _d_split_scores,
    "output-column-split": _output_column_split, "split-output-vs-reduction": _split_output_vs_reduction,
    "qk-head-dim-contraction": _qk_head_dim_contraction, "tile-shapes": _tile_shapes,
    "online-state-shapes": _online_state_shapes, "qk-pv-axes": _qk_pv_axes, "mqa-shared-kv": _mqa_shared_kv,
    "softmax-count": _softmax_count, "unfused-intermediates": _unfused_intermediates,
    "two-four-prune": _two_four_prune, "gqa-grad-sum": _gqa_grad_sum, "bwd-tile-products": _bwd_tile_products,
    "bwd-flops-fa1-fa2": _bwd_flops_fa1_fa2, "mma-b-fragment": _mma_b_fragment,
    "layout-transpose-bytes": _layout_transpose_bytes, "strided-ownership": _strided_ownership,
}


@verifier("math.block-identity", kind="cpu-check", params=BlockParams, timeout_s=120)
def block_identity(p: BlockParams, ctx: Context) -> Outcome:
    """Compute the named block-matrix / shape / layout identity on seeded fp64 inputs."""
    import torch

    g = torch.Generator().manual_seed(p.seed)
    got = _IDENTITIES[p.identity](p, g)
    return Outcome(measurements={name: (value, "") for name, value in got.items()},
                   log=f"{p.identity}: " + ", ".join(f"{k}={v}" for k, v in got.items()))


class OwnershipParams(Params):
    """Tile grid, which index owns a work cell, and the random problem."""

    orientation: Literal["kv-owner", "q-owner"]
    q_tiles: int = 2
    kv_tiles: int = 2
    block: int = 16
    d: int = 16
    causal: bool = False
    seed: int = 0

    @model_validator(mode="after")
    def _bounded(self) -> OwnershipParams:
        nq, nk = abs(self.q_tiles * self.block), abs(self.kv_tiles * self.block)
        _check_bound("the score matrix", max(nq * nk, nq * abs(self.d), nk * abs(self.d)))
        return self


@verifier("math.tile-ownership", kind="cpu-check", params=OwnershipParams, timeout_s=60)
def tile_ownership(p: OwnershipParams, ctx: Context) -> Outcome:
    """Count the owners writing each dQ/dK/dV tile when cell (i, j) belongs to K/V tile j or Q tile i.

    Contributions are computed from a real attention backward (dQ_ij = dS_ij K_j s,
    dK_ij = dS_ij^T Q_i s, dV_ij = P_ij^T dO_i); an owner writes a tile when its
    contribution there is nonzero. Their sums are checked against autograd.
    """
    import torch

    g = torch.Generator().manual_seed(p.seed)
    nq, nk, b = p.q_tiles * p.block, p.kv_tiles * p.block, p.block
    q, do = _randn(g, nq, p.d), _randn(g, nq, p.d)
    k, v = _randn(g, nk, p.d), _randn(g, nk, p.d)
    scale = p.d**-0.5
    s = q @ k.T * scale
    if p.causal:
        s = s.masked_fill(torch.ones(nq, nk, dtype=torch.bool).triu(1 + nk - nq), float("-inf"))
    pr = torch.softmax(s, 1)
    o = pr @ v
    dp = do @ v.T
    ds = pr * (dp - (do * o).sum(1, keepdim=True))
    writers = {name: [set() for _ in range(t)] for name, t in
               (("dq", p.q_tiles), ("dk", p.kv_tiles), ("dv", p.kv_tiles))}
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for i in range(p.q_tiles):
        for j in range(p.kv_tiles):
            ri, rj = slice(i * b, (i + 1) * b), slice(j * b, (j + 1) * b)
            owner = j if p.orientation == "kv-owner" else i
            cq = ds[ri, rj] @ k[rj] * scale
            ck = ds[ri, rj].T @ q[ri] * scale
            cv = pr[ri, rj].T @ do[ri]
            dq[ri] += cq
            dk[rj] += ck
            dv[rj] += cv
            for name, tile, c in (("dq", i, cq), ("dk", j, ck), ("dv", j, cv)):
                if bool(c.abs().max() > 0):
                    writers[name][tile].add(owner)
    for t in (q, k, v):
        t.requires_grad_()
    s2 = q @ k.T * scale
    if p.causal:
        s2 = s2.masked_fill(torch.ones(nq, nk, dtype=torch.bool).triu(1 + nk - nq), float("-inf"))
    (torch.softmax(s2, 1) @ v).backward(do)
    err = max(_err(dq, q.grad), _err(dk, k.grad), _err(dv, v.grad))
    m: dict[str, tuple[object, str]] = {"max_abs_err": (err, "")}
    for name, per_tile in writers.items():
        counts = [len(w) for w in per_tile]
        m[f"{name}_writers_max"] = (max(counts), "owners")
        m[f"{name}_writers_min"] = (min(counts), "owners")
    m["all_single_owner"] = (all(v[0] == 1 for kname, v in m.items() if kname.endswith("_writers_max")), "")
    return Outcome(measurements=m, log=f"{p.orientation} {p.q_tiles}x{p.kv_tiles}: "
                   + ", ".join(f"{kk}={vv[0]}" for kk, vv in m.items()))
