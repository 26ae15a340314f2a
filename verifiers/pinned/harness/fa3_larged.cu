// kb's host harness for the large-d pin's Hopper forward
// (Dao-AILab/flash-attention hopper/ @ d7e4dba3e568106b0f1b6323b07c1272f53679b3, cutlass @ 7127592).
//
// kb's own code. It implements kb_attn_abi.h's forward for two pinned units of that revision, linked
// into the same library unchanged:
//   instantiations/flash_fwd_hdim64_512_bf16_sm90.cu  run_mha_fwd_<90, bf16, 64, 512, false x4>
//       head_dim 64, head_dim_v 512: the LargeHeadDimV path (kHeadDimV > 256 in the pinned mainloop);
//   instantiations/flash_fwd_hdim128_bf16_sm90.cu     run_mha_fwd_<90, bf16, 128, 128, false x4>
//       the ordinary d = 128 forward of the same revision, the comparison point;
// plus the pinned flash_prepare_scheduler.cu, which the launch template references (its varlen branch).
//
// It fills the pinned Flash_fwd_params (hopper/flash.h) the way the pinned hopper/flash_api.cpp mha_fwd does
// for the dense case: no cu_seqlens, seqused, paging, appended KV, rotary, q_v, softcap or descales; one split
// (num_splits = 1, so no out_accum); pack_gqa false (mha_fwd's get_pack_gqa answers false when h == h_k, the
// only case taken here); window sizes as set_params_fprop derives them from is_causal.
//
// Entry points: kb_fwd (head_dim_v = head_dim) and kb_larged_fwd (head_dim_v given). The backward is refused.
//
// Workspace (kb_workspace, phase 0), caller-allocated uninitialised (torch.empty):
//   ws[0] scheduler metadata int32[metadata_size], as mha_fwd sizes it for a dense call:
//         scheduler_needs_semaphore = (is_causal || is_local) && num_splits == 1 on sm_90;
//         when it is, b_rounded = round_up(b, 4), vectors = 1 (varlen_sort_batches, !is_local)
//         + 1 (head_swizzle, is_causal), metadata_size = 1 + b_rounded * vectors, the semaphore at
//         offset b_rounded * vectors, zero-filled here as mha_fwd zeroes the tensor (not varlen);
//         otherwise 0 bytes and params.tile_count_semaphore stays null.
// o is (batch, seqlen_q, heads, head_dim_v) in the input dtype; lse is float32 (batch, heads, seqlen_q).

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include <cuda_runtime.h>

#include <cutlass/numeric_types.h>

#include "flash.h"  // pinned hopper/flash.h: Flash_fwd_params, the run_mha_fwd_ template

#include "kb_attn_abi.h"

extern "C" int kb_larged_fwd(KbAttnArgs *a, int head_dim_v, cudaStream_t stream);

namespace {

thread_local std::string g_err;

int fail(const std::string &msg) {
  g_err = msg;
  return 1;
}

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// mha_fwd's round_up_headdim / round_up_headdimv for the two dims this library holds.
int rounded_head(int d) { return d <= 64 ? 64 : (d <= 128 ? 128 : (d <= 256 ? 256 : 512)); }

bool causal_semaphore(const KbAttnArgs &a) { return a.is_causal != 0; }  // dense, one split, sm_90

int64_t metadata_ints(const KbAttnArgs &a) {
  if (!causal_semaphore(a)) return 0;
  const int64_t b_rounded = round_up(a.batch, 4);
  const int vectors = 1 /*varlen_sort_batches*/ + 1 /*head_swizzle*/;
  return 1 + b_rounded * vectors;
}

int check_args(const KbAttnArgs &a, int head_dim_v) {
  if (a.is_e4m3 || !a.is_bf16) return fail("this library holds the bf16 units only");
  if (a.p_dropout != 0.f) return fail("the pinned hopper/ forward takes no dropout");
  if (a.heads != a.heads_k) return fail("heads_k != heads is refused (the PackGQA units are not linked)");
  if (a.num_splits > 1) return fail("one split only (the split units and the combine are not linked)");
  const bool large = a.head_dim == 64 && head_dim_v == 512;
  const bool d128 = a.head_dim == 128 && head_dim_v == 128;
  if (!large && !d128) return fail("this library holds (head_dim, head_dim_v) = (64, 512) and (128, 128)");
  if (a.batch <= 0 || a.seqlen_q <= 0 || a.seqlen_k <= 0 || a.heads <= 0) return fail("empty problem");
  return 0;
}

}  // namespace

// The two specialisations called below are declared by the primary template in flash.h and defined by the pinned
// units' explicit instantiations, linked into the same library.

extern "C" {

int kb_workspace(KbAttnArgs *a, int phase) {
  for (int i = 0; i < 4; ++i) a->ws_bytes[i] = 0;
  if (phase != 0) return fail("this library has no backward");
  a->ws_bytes[0] = metadata_ints(*a) * 4;
  return 0;
}

int kb_larged_fwd(KbAttnArgs *a, int head_dim_v, cudaStream_t stream) {
  if (check_args(*a, head_dim_v)) return 1;
  int dev = 0;
  cudaDeviceProp props;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&props, dev) != cudaSuccess)
    return fail("cudaGetDeviceProperties failed");
  if (props.major != 9) return fail("the pinned units are built for sm_90a");

  const int d = a->head_dim, dv = head_dim_v, h = a->heads, sq = a->seqlen_q, sk = a->seqlen_k;
  Flash_fwd_params p;
  std::memset(&p, 0, sizeof(p));  // set_params_fprop: params = {}
  p.is_bf16 = true;
  p.is_e4m3 = false;
  p.q_ptr = a->q;
  p.k_ptr = a->k;
  p.v_ptr = a->v;
  // Contiguous (batch, seqlen, heads, dim): strides in elements.
  p.q_row_stride = (int64_t)h * d;
  p.k_row_stride = (int64_t)h * d;
  p.v_row_stride = (int64_t)h * dv;
  p.q_head_stride = d;
  p.k_head_stride = d;
  p.v_head_stride = dv;
  p.v_dim_stride = 1;
  p.o_ptr = a->o;
  p.o_row_stride = (int64_t)h * dv;
  p.o_head_stride = dv;
  p.q_batch_stride = (int64_t)sq * h * d;
  p.o_batch_stride = (int64_t)sq * h * dv;
  p.k_batch_stride = (int64_t)sk * h * d;
  p.v_batch_stride = (int64_t)sk * h * dv;
  p.softmax_lse_ptr = a->lse;
  p.b = a->batch;
  p.h = h;
  p.h_k = a->heads_k;
  p.seqlen_q = sq;
  p.seqlen_k = sk;
  p.seqlen_q_rounded = (int)round_up(sq, 128);
  p.seqlen_k_rounded = (int)round_up(sk, 128);
  p.d = d;
  p.d_rounded = rounded_head(d);
  p.scale_softmax = a->softmax_scale;
  p.softcap = 0.f;
  // set_params_fprop with p_dropout = 0: the keep probability is 1.
  p.p_dropout = 1.f;
  p.p_dropout_in_uint8_t = uint8_t(std::floor(p.p_dropout * 255.0));
  p.rp_dropout = 1.f;
  // mha_fwd: is_causal gives window_size_right = 0; left stays -1. set_params_fprop then derives is_causal /
  // is_local and replaces negative windows by seqlen_k - 1 and seqlen_q - 1.
  int wl = -1, wr = a->is_causal ? 0 : -1;
  p.is_causal = wl < 0 && wr == 0;
  p.is_local = (wl >= 0 || wr >= 0) && !p.is_causal;
  p.window_size_left = wl < 0 ? sk - 1 : wl;
  p.window_size_right = wr < 0 ? sq - 1 : wr;
  p.attention_chunk = 0;
  p.arch = props.major * 10 + props.minor;
  p.num_sm = props.multiProcessorCount;  // sm_margin = 0
  p.total_q = a->batch * sq;
  p.total_k = a->batch * sk;
  p.b_k = a->batch;
  p.dv = dv;
  p.dv_rounded = dv == d ? p.d_rounded : rounded_head(dv);
  p.page_size = 1;  // not paged
  p.num_pages = 0;
  p.pagedkv_tma = false;
  p.num_splits = 1;
  p.pack_gqa = false;
  p.varlen_sort_batches = !p.is_local;
  p.head_swizzle = p.is_causal || p.is_local;
  p.prepare_varlen_pdl = false;  // use_prepare_varlen is false for a dense call
  if (causal_semaphore(*a)) {
    const int64_t n = metadata_ints(*a);
    if (!a->ws[0] || a->ws_bytes[0] < n * 4) return fail("ws[0] (scheduler metadata) missing or too small");
    const int offset = (int)(n - 1);
    if (cudaMemsetAsync(a->ws[0], 0, n * 4, stream) != cudaSuccess) return fail("cudaMemsetAsync failed");
    p.tile_count_semaphore = static_cast<int *>(a->ws[0]) + offset;
    p.tile_count_semaphore_offset = offset;
  }
  p.rotary_dim = 0;

  if (d == 64)
    run_mha_fwd_<90, cutlass::bfloat16_t, 64, 512, false, false, false, false>(p, stream);
  else
    run_mha_fwd_<90, cutlass::bfloat16_t, 128, 128, false, false, false, false>(p, stream);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return fail(std::string("launch failed: ") + cudaGetErrorString(err));
  return 0;
}

int kb_fwd(KbAttnArgs *a, cudaStream_t stream) { return kb_larged_fwd(a, a->head_dim, stream); }

int kb_bwd(KbAttnArgs *, cudaStream_t) { return fail("this library has no backward"); }

const char *kb_units() { return "fwd:bf16:64x512;fwd:bf16:128"; }

const char *kb_last_error() { return g_err.c_str(); }

uint64_t kb_philox_increment(KbAttnArgs *, int) { return 0; }

}  // extern "C"
