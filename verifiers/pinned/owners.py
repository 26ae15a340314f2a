"""kb's owner-recording variant of the FA3 pin: which work item finished which Q tile of the forward.

`fa3-2024-08-owner` is the FA3 pin (hopper/ at 3669b25) with one record per finished work tile: after the
16-bit forward's epilogue store of a tile returns, the first thread of each consumer warpgroup writes the
tile's coordinates (m_block, head, batch), the number of K/V blocks its mainloop ran over (n_block_max) and its
%smid into a slot of its own (CTA, warpgroup, work index), stores only. Nothing else changes; a null buffer
(the default) writes nothing. gpu.tile-owners reads the records.

This module registers the variant with verifiers/pinned/variants.py's table on import (as larged.py registers
its build), so the older variants' table, and the code hash of every check that reads it, stay as they were.
`python -m verifiers.pinned.variants fa3-2024-08-owner [-j N] [--derive-only]` derives and builds it.
"""

from __future__ import annotations

from verifiers.pinned import build as pinned_build
from verifiers.pinned import variants
from verifiers.pinned.variants import Edit, Variant

NAME = "fa3-2024-08-owner"
_KERNEL = "hopper/flash_fwd_kernel.h"
_HELPER = """// kb owner instrumentation (kb's variant, verifiers/pinned/owners.py). With a buffer set by kb_owner_set (in
// the fp16 d128 unit) the first thread of each consumer warpgroup records, once the epilogue's store of a work
// tile has returned, which tile it was: four words per (CTA, warpgroup, work index) slot, stores only.
static __device__ unsigned long long* kb_owner_buf = nullptr;
static __device__ int kb_owner_ctas = 0;
static __device__ int kb_owner_tiles = 0;
__device__ __forceinline__ void kb_owner_record(int work_idx, int m_block, int bidh, int bidb, int n_block_max) {
    if ((threadIdx.x % 128) != 0) { return; }
    unsigned long long* buf = kb_owner_buf;
    int const wg = int(threadIdx.x / 128) - 1;  // consumer warpgroup 0 or 1 (warpgroup 0 produces)
    if (buf == nullptr || wg < 0 || work_idx >= kb_owner_tiles) { return; }
    unsigned long long const cta =
        blockIdx.x + (unsigned long long)gridDim.x * (blockIdx.y + (unsigned long long)gridDim.y * blockIdx.z);
    if (cta >= (unsigned long long)kb_owner_ctas) { return; }
    unsigned int smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    unsigned long long const slot = (cta * 2 + wg) * kb_owner_tiles + work_idx;
    buf[4 * slot + 1] = (unsigned long long)(unsigned int)m_block;
    buf[4 * slot + 2] = ((unsigned long long)(unsigned int)bidb << 32) | (unsigned int)bidh;
    buf[4 * slot + 3] = (unsigned long long)(unsigned int)n_block_max;
    buf[4 * slot] = (1ull << 63) | smid;  // written last: a slot with bit 63 set is complete
}"""
_SETTER = """
// kb owner instrumentation: this unit's owner buffer (0 on success).
extern "C" int kb_owner_set(void* buf, int ctas, int tiles) {
    if (cudaMemcpyToSymbol(flash::kb_owner_buf, &buf, sizeof(buf)) != cudaSuccess) { return 1; }
    if (cudaMemcpyToSymbol(flash::kb_owner_ctas, &ctas, sizeof(int)) != cudaSuccess) { return 2; }
    if (cudaMemcpyToSymbol(flash::kb_owner_tiles, &tiles, sizeof(int)) != cudaSuccess) { return 3; }
    return 0;
}"""
OWNER = (
    Edit(_KERNEL, 23, "46ce993853e784fef4405cc46a0fad6088de14649d0ec2e994d9cb332ea13fdf", "insert_after", _HELPER,
         "the owner buffer and the recording helper, inside namespace flash"),
    # Line 182 ends the 16-bit forward consumer's collective_epilogue.store(...) call (the FP8 kernel's loop is
    # further down and is not recorded).
    Edit(_KERNEL, 182, "0fce7cefa6c84708cde1238b1cfe625ef97abf604f454bfa3aaa32cd0ab80e9b", "insert_after",
         "            kb_owner_record(work_idx, m_block, bidh, bidb, n_block_max);  // kb: this tile's owner",
         "one record per finished work tile, after its O store returned"),
    Edit("hopper/flash_fwd_hdim128_fp16_sm90.cu", 9, "d10b36aa74a59bcf4a88185837f658afaf3646eff2bb16c3928d0e9335e945d2",
         "insert_after", _SETTER, "the host setter of the owner buffer, in the one unit whose kernels record"),
)
VARIANT = Variant(name=NAME, base="fa3-2024-08", edits=OWNER,
                  about="FA3 hopper/ at 3669b25 with kb's owner record after each 16-bit forward work tile's O "
                        "store (fp16 d128 unit's buffer); otherwise the pin",
                  sha="7a5053c69bf01624828da8d458dede018f8e466d")

variants.VARIANTS.setdefault(NAME, VARIANT)
pinned_build.REVISIONS.setdefault(NAME, variants._revision(VARIANT))

