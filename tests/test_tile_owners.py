"""gpu.tile-owners on the CPU: the record layout decodes, the counts see a split or partial tile, and the
owner record reaches the machine code of the kernel the check runs."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import variant_kernel_sass
from verifiers.gpu.owners import OwnerParams, analyse, decode
from verifiers.pinned import owners

P = OwnerParams(batch=1, heads=2, seqlen=512, block_m=128, block_n=176)  # 8 Q tiles, 3 K/V blocks each


def _buffer(recs: list[tuple[int, int, int, int, int, int, int, int]], ctas: int, tiles: int) -> np.ndarray:
    """A device buffer as the variant writes it: (cta, wg, work, sm, m_block, bidh, bidb, n_block_max) each."""
    buf = np.zeros((ctas, 2, tiles, 4), dtype=np.uint64)
    for cta, wg, work, sm, m, h, b, n in recs:
        buf[cta, wg, work] = [(1 << 63) | sm, m, (b << 32) | h, n]
    return buf.reshape(-1).view(np.int64)


def _owned(ctas: int = 4) -> list[tuple[int, int, int, int, int, int, int, int]]:
    """The pin's map: tile i goes to CTA i % ctas as its work item i // ctas, both warpgroups, all 3 blocks."""
    tiles = [(m, h) for h in range(2) for m in range(4)]
    return [(i % ctas, wg, i // ctas, 10 + i % ctas, m, h, 0, 3) for i, (m, h) in enumerate(tiles) for wg in (0, 1)]


def test_one_owner_per_tile_decodes_to_zero_counts() -> None:
    m = analyse(decode(_buffer(_owned(), 4, 8), 4, 8), P)
    assert m["tiles_expected"] == m["tiles_recorded"] == 8 and m["work_items"] == 8 and m["sms"] == 4
    assert m["tiles_missing"] == m["tiles_unexpected"] == m["tiles_with_two_owners"] == m["tiles_one_warpgroup"] == 0
    assert m["n_block_max_min"] == m["n_block_max_max"] == m["n_blocks_full"] == 3


def test_split_partial_and_half_owned_tiles_are_counted() -> None:
    recs = _owned()
    recs.append((3, 0, 5, 13, 0, 0, 0, 2))  # tile (0, 0, 0) again, by another work item, over 2 blocks only
    recs.append((3, 1, 5, 13, 0, 0, 0, 2))
    recs = [r for r in recs if not (r[4] == 3 and r[5] == 1 and r[1] == 1)]  # tile (3, 1): warpgroup 1 missing
    recs = [r for r in recs if not (r[4] == 2 and r[5] == 1)]  # tile (2, 1): no record at all
    m = analyse(decode(_buffer(recs, 4, 8), 4, 8), P)
    assert m["tiles_with_two_owners"] == 1 and m["tiles_one_warpgroup"] == 1 and m["tiles_missing"] == 1
    assert m["n_block_max_min"] == 2 < m["n_blocks_full"]


def test_no_record_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="no owner record"):
        analyse(decode(np.zeros(4 * 2 * 8 * 4, dtype=np.int64), 4, 8), P)


def test_owner_record_reaches_the_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiles the owner variant's fp16 d128 unit (about a minute on 2 cores): the non-causal, cluster-2 kernel
    the check runs reads %smid once (the record; the pin's kernels read it nowhere, seen 2026-12-08) and the unit
    exports the buffer's setter."""
    obj, kernel = variant_kernel_sass(owners.NAME, tmp_path, monkeypatch)
    assert "kb_owner_set" in subprocess.run(["nm", str(obj)], capture_output=True, text=True, check=True).stdout
    # %smid compiles to a read of SR_VIRTUALSMID into a uniform register (nvcc 13.0, sm_90a): once per kernel
    assert len(re.findall(r"S2U?R U?R\d+, SR_(?:VIRTUAL)?SMID", kernel)) == 1
