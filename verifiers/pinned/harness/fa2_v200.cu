// kb harness for flash-attention v2.0.0 (4f285b35): fills the pinned Flash_fwd_params / Flash_bwd_params
// from kb's C ABI the way the pinned csrc/flash_attn/flash_api.cpp (mha_fwd, mha_bwd) does for dense,
// equal-length batches, and calls the pinned run_mha_fwd_ / run_mha_bwd_ unchanged. kb's own code.
// Which (phase, dtype, head_dim) units are linked is decided by the build: -DKB_UNIT_<phase>_<dtype>_<d>.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <cutlass/numeric_types.h>
#include "flash.h"
#include "kb_attn_abi.h"

namespace {
std::string g_error;
int fail(const std::string& msg) { g_error = msg; return 1; }
int round_up(int x, int m) { return (x + m - 1) / m * m; }
}  // namespace

namespace at { namespace cuda {
// The pinned launchers read the device properties through this ATen name (the shim declares it).
cudaDeviceProp* getCurrentDeviceProperties() {
  static cudaDeviceProp props[64];
  static bool have[64] = {};
  int dev = 0;
  cudaGetDevice(&dev);
  if (!have[dev]) { cudaGetDeviceProperties(&props[dev], dev); have[dev] = true; }
  return &props[dev];
}
}}  // namespace at::cuda

namespace {
// The pinned set_params_fprop, restated for raw pointers: contiguous (b, s, h, d) strides in elements.
void fill_fwd(Flash_fwd_params& p, const KbAttnArgs* a) {
  std::memset(&p, 0, sizeof(p));
  const int d = a->head_dim;
  p.is_bf16 = a->is_bf16 != 0;
  p.q_ptr = a->q; p.k_ptr = a->k; p.v_ptr = a->v; p.o_ptr = a->o;
  p.q_row_stride = a->heads * d; p.k_row_stride = a->heads_k * d; p.v_row_stride = a->heads_k * d;
  p.q_head_stride = d; p.k_head_stride = d; p.v_head_stride = d;
  p.o_row_stride = a->heads * d; p.o_head_stride = d;
  p.q_batch_stride = a->seqlen_q * a->heads * d;
  p.k_batch_stride = a->seqlen_k * a->heads_k * d;
  p.v_batch_stride = a->seqlen_k * a->heads_k * d;
  p.o_batch_stride = a->seqlen_q * a->heads * d;
  p.cu_seqlens_q = nullptr; p.cu_seqlens_k = nullptr; p.p_ptr = nullptr;
  p.softmax_lse_ptr = a->lse;
  p.b = a->batch; p.h = a->heads; p.h_k = a->heads_k; p.h_h_k_ratio = a->heads / a->heads_k;
  p.seqlen_q = a->seqlen_q; p.seqlen_k = a->seqlen_k;
  p.seqlen_q_rounded = round_up(a->seqlen_q, 128); p.seqlen_k_rounded = round_up(a->seqlen_k, 128);
  p.d = d; p.d_rounded = round_up(d, 32);
  p.scale_softmax = a->softmax_scale;
  p.scale_softmax_log2 = a->softmax_scale * float(M_LOG2E);
  p.p_dropout = 1.f - a->p_dropout;  // the pinned field holds the keep probability
  p.p_dropout_in_uint8_t = uint8_t(std::floor(p.p_dropout * 255.0));
  p.rp_dropout = 1.f / p.p_dropout;
  p.scale_softmax_rp_dropout = p.rp_dropout * p.scale_softmax;
  p.is_causal = a->is_causal != 0;
  if (a->p_dropout > 0.f) p.philox_args = at::PhiloxCudaState(a->seed, a->offset);
}

bool supported(const KbAttnArgs* a, const char* phase, std::string* why) {
  if (a->head_dim % 8 != 0) { *why = "head_dim must be a multiple of 8 (the pinned API pads otherwise)"; return false; }
  if (a->heads % a->heads_k != 0) { *why = "heads must be a multiple of heads_k"; return false; }
  if (!(a->p_dropout < 1.f)) { *why = "p_dropout must be < 1"; return false; }
  (void)phase;
  return true;
}
}  // namespace

extern "C" {

const char* kb_last_error() { return g_error.c_str(); }

const char* kb_units() {
  return ""
#ifdef KB_UNIT_fwd_bf16_128
  "fwd:bf16:128;"
#endif
#ifdef KB_UNIT_fwd_fp16_128
  "fwd:fp16:128;"
#endif
#ifdef KB_UNIT_fwd_bf16_64
  "fwd:bf16:64;"
#endif
#ifdef KB_UNIT_fwd_fp16_64
  "fwd:fp16:64;"
#endif
#ifdef KB_UNIT_bwd_bf16_128
  "bwd:bf16:128;"
#endif
#ifdef KB_UNIT_bwd_fp16_128
  "bwd:fp16:128;"
#endif
#ifdef KB_UNIT_bwd_bf16_64
  "bwd:bf16:64;"
#endif
#ifdef KB_UNIT_bwd_fp16_64
  "bwd:fp16:64;"
#endif
  ;
}

// v2.0.0 requests b*h*32 Philox counter values per call (mha_fwd and mha_bwd alike).
uint64_t kb_philox_increment(KbAttnArgs* a, int phase) { (void)phase; return uint64_t(a->batch) * a->heads * 32; }

int kb_workspace(KbAttnArgs* a, int phase) {
  for (int i = 0; i < 4; ++i) a->ws_bytes[i] = 0;
  if (phase == 1) {
    const int sq_r = round_up(a->seqlen_q, 128), d_r = round_up(a->head_dim, 32);
    // ws[0]: softmax_d, float32 (b, h, seqlen_q_rounded); ws[1]: dq_accum, float32 (b, h, seqlen_q_rounded, d_rounded);
    // ws[2], ws[3]: dk/dv expanded to all query heads, (b, seqlen_k, h, d) in the input dtype, only for MQA/GQA.
    a->ws_bytes[0] = int64_t(a->batch) * a->heads * sq_r * 4;
    a->ws_bytes[1] = int64_t(a->batch) * a->heads * sq_r * d_r * 4;
    if (a->heads != a->heads_k) {
      a->ws_bytes[2] = a->ws_bytes[3] = int64_t(a->batch) * a->seqlen_k * a->heads * a->head_dim * 2;
    }
  }
  return 0;
}

int kb_fwd(KbAttnArgs* a, cudaStream_t stream) {
  std::string why;
  if (!supported(a, "fwd", &why)) return fail(why);
  if (a->is_e4m3) return fail("v2.0.0 has no FP8 (e4m3) path");
  Flash_fwd_params p;
  fill_fwd(p, a);
  const int d = a->head_dim;
  if (a->is_bf16) {
#ifdef KB_UNIT_fwd_bf16_128
    if (d == 128) { run_mha_fwd_<cutlass::bfloat16_t, 128>(p, stream); return 0; }
#endif
#ifdef KB_UNIT_fwd_bf16_64
    if (d == 64) { run_mha_fwd_<cutlass::bfloat16_t, 64>(p, stream); return 0; }
#endif
  } else {
#ifdef KB_UNIT_fwd_fp16_128
    if (d == 128) { run_mha_fwd_<cutlass::half_t, 128>(p, stream); return 0; }
#endif
#ifdef KB_UNIT_fwd_fp16_64
    if (d == 64) { run_mha_fwd_<cutlass::half_t, 64>(p, stream); return 0; }
#endif
  }
  return fail("this build has no forward unit for head_dim " + std::to_string(d) + (a->is_bf16 ? " bf16" : " fp16"));
}

int kb_bwd(KbAttnArgs* a, cudaStream_t stream) {
  std::string why;
  if (!supported(a, "bwd", &why)) return fail(why);
  if (a->is_e4m3) return fail("v2.0.0 has no FP8 (e4m3) path");
  if (a->heads != a->heads_k) return fail("MQA/GQA backward needs the group sum the pinned API does in ATen; not driven here");
  Flash_bwd_params p;
  fill_fwd(p, a);  // set_params_dgrad starts from set_params_fprop (p_ptr null)
  const int d = a->head_dim;
  p.do_ptr = a->dout; p.dq_ptr = a->dq; p.dk_ptr = a->dk; p.dv_ptr = a->dv;
  p.do_row_stride = a->heads * d; p.do_head_stride = d;
  p.dq_row_stride = a->heads * d; p.dk_row_stride = a->heads_k * d; p.dv_row_stride = a->heads_k * d;
  p.dq_head_stride = d; p.dk_head_stride = d; p.dv_head_stride = d;
  p.do_batch_stride = a->seqlen_q * a->heads * d;
  p.dq_batch_stride = a->seqlen_q * a->heads * d;
  p.dk_batch_stride = a->seqlen_k * a->heads_k * d;
  p.dv_batch_stride = a->seqlen_k * a->heads_k * d;
  p.dsoftmax_sum = a->ws[0];
  p.dq_accum_ptr = a->ws[1];  // the pinned mha_bwd always takes the loop path (loop = true)
  p.dk_accum_ptr = nullptr; p.dv_accum_ptr = nullptr;
  if (a->is_bf16) {
#ifdef KB_UNIT_bwd_bf16_128
    if (d == 128) { run_mha_bwd_<cutlass::bfloat16_t, 128>(p, stream, false); return 0; }
#endif
#ifdef KB_UNIT_bwd_bf16_64
    if (d == 64) { run_mha_bwd_<cutlass::bfloat16_t, 64>(p, stream, false); return 0; }
#endif
  } else {
#ifdef KB_UNIT_bwd_fp16_128
    if (d == 128) { run_mha_bwd_<cutlass::half_t, 128>(p, stream, false); return 0; }
#endif
#ifdef KB_UNIT_bwd_fp16_64
    if (d == 64) { run_mha_bwd_<cutlass::half_t, 64>(p, stream, false); return 0; }
#endif
  }
  return fail("this build has no backward unit for head_dim " + std::to_string(d) + (a->is_bf16 ? " bf16" : " fp16"));
}

}  // extern "C"
