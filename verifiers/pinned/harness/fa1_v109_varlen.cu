// kb's packed variable-length entry for the pinned FlashAttention v1.0.9 forward
// (Dao-AILab/flash-attention @ 6d48e14a6c2f551db96f0badc658a6279a929df3).
//
// The dense harness (fa1_v109.cu) drives equal-length batches: it writes cu_seqlens[i] = i * seqlen itself.
// This entry hands the caller's cu_seqlens_q / cu_seqlens_k (int32, b + 1, on the device) to the pinned
// launcher instead, as the pinned csrc/flash_attn/fmha_api.cpp `mha_fwd` does for a packed batch
// (zero_tensors=False, return_softmax=False, no dropout), and calls run_fmha_fwd_hdim64/128 unchanged.
//
// It is compiled as one translation unit with the dense harness (included below) into a library of its own
// (verifiers/pinned/varlen.py), linked with the same cached pinned unit objects, so the dense library and the
// checks that load it are untouched. The dense harness contributes the ATen glue, fill_fprop (the pinned
// set_params_fprop field by field), geometry (mha_fwd's rounding of max_seqlen_q/k) and the device checks.
//
// Arguments (KbAttnArgs):
//   batch        b: cu_seqlens_q and cu_seqlens_k hold b + 1 offsets
//   seqlen_q/k   max_seqlen_q_ / max_seqlen_k_ as the caller passes them to mha_fwd (rounded here as there)
//   q, k, v, o   (total_q or total_k, heads, head_dim), contiguous
//   lse          fp32 (b, heads, roundup(max_seqlen_q, 16)), the pin's softmax_lse
//   ws[0]        rng_state, 16 bytes (the pinned forward kernel writes (seed, offset) there; (0, 0) here)
//   ws[1]        o_tmp, fp32 (total_q, heads, head_dim), when the pin's `loop` is true; else 0 bytes
//   num_splits   0 = the pinned heuristic inside the launch template; > 0 forces; on return, the count launched
//                (gridDim.z), as the launch template leaves it in params.num_splits
// p_dropout must be 0 and heads_k must equal heads (v1.0.9 has no MQA/GQA).

#include "fa1_v109.cu"  // kb's dense harness (one translation unit; this library does not export its names to it)

namespace {

int check_varlen(const KbAttnArgs* a, int64_t total_q) {
  if (!a) return fail("null args");
  if (a->is_e4m3) return fail("v1.0.9 has no FP8 (e4m3) path");
  if (a->batch <= 0 || a->heads <= 0 || a->seqlen_q <= 0 || a->seqlen_k <= 0 || total_q <= 0)
    return fail("batch, heads, max_seqlen_q, max_seqlen_k and total_q must be > 0");
  if (a->heads_k != a->heads) return fail("v1.0.9 has no MQA/GQA: heads_k must equal heads");
  const int d = a->head_dim;
  if (!((d % 8 == 0) && (d <= 128))) return fail("head_dim must be a multiple of 8 and <= 128 (pinned check)");
  if (d <= 32) return fail("head_dim <= 32 dispatches to the hdim32 units, which this build does not contain");
  if (a->p_dropout != 0.f) return fail("the packed entry takes no dropout (p_dropout must be 0)");
  return 0;
}

void varlen_need(const KbAttnArgs* a, int64_t total_q, int64_t need[4]) {
  for (int i = 0; i < 4; ++i) need[i] = 0;
  const Geo g = geometry(a, fwd_blocksize_c(a->head_dim));
  need[0] = 16;                                           // rng_state
  if (g.loop) need[1] = 4 * total_q * g.h * int64_t(g.d);  // o_tmp (total_q, h, d) fp32
}

}  // namespace

extern "C" {

// Fill a->ws_bytes for the packed forward of `total_q` query rows; returns 0, or nonzero if unsupported.
int kb_varlen_workspace(KbAttnArgs* a, int64_t total_q) {
  if (check_varlen(a, total_q)) return 1;
  int64_t need[4];
  varlen_need(a, total_q, need);
  for (int i = 0; i < 4; ++i) a->ws_bytes[i] = need[i];
  return 0;
}

// The pinned forward over a packed batch: cu_seqlens_q / cu_seqlens_k are int32[b + 1] device pointers.
int kb_varlen_fwd(KbAttnArgs* a, const int* cu_seqlens_q, const int* cu_seqlens_k, int64_t total_q,
                  cudaStream_t stream) {
  if (check_varlen(a, total_q)) return 1;
  if (!a->q || !a->k || !a->v || !a->o || !a->lse || !cu_seqlens_q || !cu_seqlens_k)
    return fail("q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k must be set");
  int64_t need[4];
  varlen_need(a, total_q, need);
  if (check_ws(a, need)) return 1;
  cudaDeviceProp* dprops = nullptr;
  if (check_device(a->is_bf16 != 0, false, a->head_dim, &dprops)) return 1;

  Launch_params<FMHA_fprop_params> launch_params(dprops, stream, /*is_dropout=*/false, /*return_softmax=*/false);
  const Geo g = geometry(a, fwd_blocksize_c(a->head_dim));

  DeviceGuard guard(a->q);
  fill_fprop(launch_params.params, a, g, const_cast<int*>(cu_seqlens_q), const_cast<int*>(cu_seqlens_k),
             g.loop ? a->ws[1] : nullptr, /*s=*/nullptr, a->lse, a->num_splits);
  launch_params.params.rng_state = static_cast<uint64_t*>(a->ws[0]);

  if (launch_params.params.d <= 64) {
    run_fmha_fwd_hdim64(launch_params);
  } else {
    run_fmha_fwd_hdim128(launch_params);
  }
  cudaError_t e = cudaPeekAtLastError();
  if (e != cudaSuccess) return fail(std::string("packed forward launch: ") + cudaGetErrorString(e));
  a->num_splits = launch_params.params.num_splits;
  return 0;
}

}  // extern "C"
