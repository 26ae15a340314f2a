"""gpu.tile-owners: which work item finished which Q tile of the FA3 forward, from kb's owner-recording build.

kb's variant `fa3-2024-08-owner` (verifiers/pinned/owners.py) is the FA3 pin with one record per finished work
tile of the 16-bit forward: once the epilogue's O store of a tile has returned, the first thread of each
consumer warpgroup writes (m_block, head, batch, n_block_max, %smid) into a slot of its own (CTA, warpgroup,
work index). This check runs the fp16 d128 forward once at a non-causal shape and reports, over the problem's
Q tiles (batch x heads x ceil(seqlen / 128)):

- `tiles_expected`, `tiles_recorded` (distinct tiles with a record), `tiles_missing`;
- `tiles_with_two_owners`: tiles finished by more than one work item (a CTA and work index), i.e. whose O
  was stored in parts;
- `tiles_one_warpgroup`: tiles whose work item has a record from only one of its two consumer warpgroups;
- `n_block_max_min` / `n_block_max_max` against `n_blocks_full` = ceil(seqlen / block_n), the K/V blocks of the
  whole key range: a work item that ran fewer would have stored a partial O;
- `ctas`, `sms`, `work_items`; and the variant's O against the pin's (`o_max_abs_diff`), since a record that
  changed the computation would describe another kernel.
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

from pydantic import Field

from kb.registry import Context, Outcome, Params, Requirements, verifier

GPU = Requirements(cuda=True, min_cc=90, max_cc=90)


class OwnerParams(Params):
    """The forward's shape (fp16, d 128, non-causal) and the pinned tile sizes the counts are taken against."""

    batch: int = Field(2, gt=0)
    heads: int = Field(16, gt=0)
    seqlen: int = Field(8192, ge=128)
    block_m: int = Field(128, gt=0)  # the Q tile of the pin's fp16 d128 traits
    block_n: int = Field(176, gt=0)  # the K/V tile of the same traits
    tiles: int = Field(64, gt=0, le=4096)  # work slots per CTA


def decode(raw: Any, ctas: int, tiles: int) -> list[dict[str, int]]:
    """The buffer (int64 numpy, ctas x 2 x tiles x 4) as one dict per complete record."""
    import numpy as np

    arr = raw.reshape(ctas, 2, tiles, 4).astype(np.uint64)
    out = []
    for c, wg, t in zip(*np.nonzero(arr[:, :, :, 0] >> np.uint64(63)), strict=True):
        w = arr[c, wg, t]
        out.append({"cta": int(c), "wg": int(wg), "work": int(t), "sm": int(w[0] & np.uint64(0xFFFFFFFF)),
                    "m_block": int(w[1]), "bidh": int(w[2] & np.uint64(0xFFFFFFFF)), "bidb": int(w[2] >> np.uint64(32)),
                    "n_block_max": int(w[3])})
    return out


def analyse(recs: list[dict[str, int]], p: OwnerParams) -> dict[str, int]:
    """The counts from the records (see the module docstring)."""
    owners: dict[tuple[int, int, int], set[tuple[int, int]]] = {}
    wgs: dict[tuple[int, int], set[int]] = {}
    nmax = []
    for r in recs:
        owners.setdefault((r["m_block"], r["bidh"], r["bidb"]), set()).add((r["cta"], r["work"]))
        wgs.setdefault((r["cta"], r["work"]), set()).add(r["wg"])
        nmax.append(r["n_block_max"])
    m_blocks = math.ceil(p.seqlen / p.block_m)
    expected = {(m, h, b) for m in range(m_blocks) for h in range(p.heads) for b in range(p.batch)}
    if not nmax:
        raise RuntimeError("no owner record: the buffer was not set, or the kernel that ran is not the recorded one")
    return {"tiles_expected": len(expected), "tiles_recorded": len(set(owners) & expected),
            "tiles_missing": len(expected - set(owners)), "tiles_unexpected": len(set(owners) - expected),
            "tiles_with_two_owners": sum(len(o) > 1 for o in owners.values()),
            "tiles_one_warpgroup": sum(len(w) < 2 for w in wgs.values()),
            "n_block_max_min": min(nmax), "n_block_max_max": max(nmax),
            "n_blocks_full": math.ceil(p.seqlen / p.block_n), "work_items": len(wgs),
            "ctas": len({r["cta"] for r in recs}), "sms": len({r["sm"] for r in recs})}


@verifier("gpu.tile-owners", kind="gpu-profile", params=OwnerParams, requires=GPU, timeout_s=600)
def tile_owners(p: OwnerParams, ctx: Context) -> Outcome:
    """Run kb's owner-recording FA3 fp16 d128 forward once and count which work item finished each Q tile."""
    import torch

    from verifiers.gpu import pinned as gp
    from verifiers.pinned import build as pinned_build
    from verifiers.pinned import owners, variants

    if why := variants.unavailable(owners.NAME, "fa3-2024-08"):
        return Outcome(verdict="skipped", reason=why)
    lib = pinned_build.load(owners.NAME).lib
    lib.kb_owner_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    lib.kb_owner_set.restype = ctypes.c_int
    ctas = torch.cuda.get_device_properties(0).multi_processor_count  # the persistent scheduler's grid at most
    per_cta = math.ceil(p.batch * p.heads * math.ceil(p.seqlen / p.block_m) / ctas)
    if per_cta > p.tiles:
        raise ValueError(f"{per_cta} work tiles per CTA at this shape; raise `tiles` (now {p.tiles})")
    buf = torch.zeros(ctas * 2 * p.tiles * 4, dtype=torch.int64, device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(0)
    shape = (p.batch, p.seqlen, p.heads, 128)
    x = {n: torch.randn(shape, device="cuda", dtype=torch.float16, generator=gen) for n in "qkv"}
    with torch.no_grad():
        o_pin = gp.forward(gp.as_impl("fa3-2024-08", False, 128), x)[0]
        if lib.kb_owner_set(ctypes.c_void_p(buf.data_ptr()), ctas, p.tiles) != 0:
            raise RuntimeError("kb_owner_set failed")
        o_var = gp.forward(gp.as_impl(owners.NAME, False, 128), x)[0]
        torch.cuda.synchronize()
        lib.kb_owner_set(None, 0, 0)
    diff = float((o_pin.float() - o_var.float()).abs().max())
    if not diff <= 1e-2:
        raise RuntimeError(f"the owner-recording variant's O differs from the pin's by {diff:.3g}")
    m = analyse(decode(buf.cpu().numpy(), ctas, p.tiles), p)
    units = {"tiles_expected": "Q tiles (batch x heads x m-blocks)", "tiles_recorded": "Q tiles with an owner record",
             "tiles_missing": "Q tiles without one", "tiles_unexpected": "records of tiles outside the problem",
             "tiles_with_two_owners": "Q tiles finished by more than one work item",
             "tiles_one_warpgroup": "work items recorded by one consumer warpgroup only",
             "n_block_max_min": "K/V blocks a work item ran over (least)", "n_block_max_max": "(most)",
             "n_blocks_full": f"ceil(seqlen / {p.block_n}): the whole key range", "work_items": "(CTA, work index)",
             "ctas": "CTAs with a record", "sms": "distinct %smid"}
    meas: dict[str, tuple[Any, str]] = {k: (v, units[k]) for k, v in m.items()}
    meas["o_max_abs_diff"] = (diff, "owner-recording variant against the pin, max |O|")
    log = (f"{torch.cuda.get_device_name()}: {owners.NAME}, B {p.batch} H {p.heads} N {p.seqlen} d 128 fp16, "
           "non-causal; " + ", ".join(f"{k} {v[0]}" for k, v in meas.items()))
    return Outcome(measurements=meas, log=log, environment={
        "variant_build": variants.provenance(owners.NAME), "pin_build": pinned_build.provenance("fa3-2024-08"),
        "device": torch.cuda.get_device_name()})
