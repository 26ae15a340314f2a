// kb's host harness for the pinned FlashAttention-3 Hopper kernels
// (Dao-AILab/flash-attention hopper/ @ 3669b25206d5938e3cc74a5f7860e31c38af8204, cutlass @ 756c351b).
//
// kb's own code. It implements kb_attn_abi.h by filling the pinned Flash_fwd_params /
// Flash_bwd_params (hopper/flash.h) the way the pinned hopper/flash_api.cpp does for the dense
// (batch, seqlen, heads, head_dim) case (mha_fwd -> set_params_fprop; mha_bwd -> set_params_dgrad),
// and calls the pinned run_mha_fwd_<T, D> / run_mha_bwd_<T, D> specialisations, which are defined
// in the pinned units flash_{fwd,bwd}_hdim*_{bf16,fp16}_sm90.cu linked into the same library,
// and the FP8 forward of flash_fwd_hdim{128,256}_e4m3_sm90.cu where the build has those units
// (is_e4m3: q, k, v float8_e4m3, o fp16, as mha_fwd allocates it for e4m3 input; this revision
// takes no scaling factors, so the inputs are used as they are).
// No PyTorch: tensors arrive as raw pointers, scratch buffers as caller-allocated ws[i].
//
// Workspace (kb_workspace), all caller-allocated uninitialised (torch.empty):
//   phase 0 (forward):
//     ws[0] tile_count_semaphore   int32[1]                                  (4 bytes)
//           mha_fwd allocates it with torch::zeros when is_causal (the dynamic persistent tile
//           scheduler atomically bumps it) and torch::empty otherwise; zeroed here likewise.
//   phase 1 (backward), D = head_dim, kBlockM = D <= 64 ? 128 : (D < 256 ? 64 : 32),
//     sq_r = round_up(seqlen_q, kBlockM), D_r = D <= 64 ? 64 : round_up(D, 32):
//     ws[0] softmax_d (dsoftmax_sum) float32[b, h, sq_r]                     torch::empty
//     ws[1] softmax_lse_log2         float32[b, h, sq_r]                     torch::empty
//     ws[2] dq_accum                 float32[b, h, sq_r, D_r]                torch::empty
//     ws[3] dq_semaphore             int32[ceil(seqlen_q / kBlockM), b, h]   torch::empty
//     (dq_accum and dq_semaphore are cleared by the pinned backward preprocess kernel; nothing is
//     zeroed here.)
// lse (forward output, backward input): float32 [b, h, seqlen_q], as mha_fwd allocates it.
//
// Not available at this revision: dropout (mha_fwd/mha_bwd pass p_dropout = 0; no Philox state
// is taken, so kb_philox_increment is 0 and p_dropout != 0 is refused). `deterministic` exists
// (mha_bwd argument -> Flash_bwd_params::deterministic -> the Deterministic template switch).
// num_splits is ignored. The backward for heads_k != heads is refused: mha_bwd writes dK/dV into
// (b, s_k, h, d) expanded tensors and reduces them with at::sum_out, which needs two more
// buffers and a reduction this ABI (4 ws slots, dk/dv of heads_k) does not carry.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include <cuda_runtime.h>
#include <cuda_fp16.h>

#include <cutlass/numeric_types.h>

#include "flash.h"  // pinned hopper/flash.h: Flash_fwd_params, Flash_bwd_params, run_mha_*_ templates

#include "kb_attn_abi.h"

// The pinned specialisations this library links (defined in the pinned .cu units).
template <> void run_mha_fwd_<cutlass::bfloat16_t, 128>(Flash_fwd_params &params, cudaStream_t stream);
template <> void run_mha_fwd_<cutlass::half_t, 128>(Flash_fwd_params &params, cudaStream_t stream);
template <> void run_mha_bwd_<cutlass::bfloat16_t, 128>(Flash_bwd_params &params, cudaStream_t stream);
template <> void run_mha_bwd_<cutlass::half_t, 128>(Flash_bwd_params &params, cudaStream_t stream);
#ifndef KB_FA3_NO_FWD_HDIM64
template <> void run_mha_fwd_<cutlass::bfloat16_t, 64>(Flash_fwd_params &params, cudaStream_t stream);
template <> void run_mha_fwd_<cutlass::half_t, 64>(Flash_fwd_params &params, cudaStream_t stream);
#endif
#ifdef KB_UNIT_fwd_e4m3_128
template <> void run_mha_fwd_<cutlass::float_e4m3_t, 128>(Flash_fwd_params &params, cudaStream_t stream);
#endif
#ifdef KB_UNIT_fwd_e4m3_256
template <> void run_mha_fwd_<cutlass::float_e4m3_t, 256>(Flash_fwd_params &params, cudaStream_t stream);
#endif

namespace {

thread_local std::string g_err;

int fail(const std::string &msg) {
  g_err = msg;
  return 1;
}

// Stand-in for at::cuda::getCurrentDeviceProperties(), which mha_fwd / mha_bwd consult for the
// architecture check: the cudaDeviceProp of the current device, cached per device.
const cudaDeviceProp *kb_current_device_properties() {
  static cudaDeviceProp props[64];
  static bool have[64] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return nullptr;
  if (!have[dev]) {
    if (cudaGetDeviceProperties(&props[dev], dev) != cudaSuccess) return nullptr;
    have[dev] = true;
  }
  return &props[dev];
}

// Stand-in for at::cuda::CUDAGuard{q.get_device()}: make q's device current for the call.
struct DeviceGuard {
  int prev = -1;
  bool switched = false;
  int set_from(const void *ptr) {
    cudaPointerAttributes attr;
    if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
      cudaGetLastError();
      return fail("cudaPointerGetAttributes failed on q");
    }
    if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)
      return fail("q must be on CUDA");
    if (cudaGetDevice(&prev) != cudaSuccess) return fail("cudaGetDevice failed");
    if (attr.device != prev) {
      if (cudaSetDevice(attr.device) != cudaSuccess) return fail("cudaSetDevice failed");
      switched = true;
    }
    return 0;
  }
  ~DeviceGuard() {
    if (switched) cudaSetDevice(prev);
  }
};

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Element strides of a contiguous (batch, seqlen, heads, head_dim) tensor.
struct Strides4 {
  int64_t batch, row, head;
};
inline Strides4 bshd(int64_t s, int64_t h, int64_t d) { return {s * h * d, h * d, d}; }

// Sizes the pinned mha_fwd derives (dense path, head_size_og % 8 == 0 for the supported dims).
struct FwdShape {
  int head_size, head_size_rounded, seqlen_q_rounded, seqlen_k_rounded;
};
FwdShape fwd_shape(const KbAttnArgs &a) {
  FwdShape s;
  s.head_size = (int)round_up(a.head_dim, 8);
  s.head_size_rounded = (int)round_up(s.head_size, 32);
  s.seqlen_q_rounded = (int)round_up(a.seqlen_q, 128);
  s.seqlen_k_rounded = (int)round_up(a.seqlen_k, 128);
  return s;
}

// Sizes the pinned mha_bwd derives.
struct BwdShape {
  int head_size_rounded, kBlockM, seqlen_q_rounded, seqlen_k_rounded, num_m_blocks;
};
BwdShape bwd_shape(const KbAttnArgs &a) {
  BwdShape s;
  const int d = a.head_dim;
  s.head_size_rounded = d <= 64 ? 64 : (int)round_up(d, 32);
  s.kBlockM = d <= 64 ? 128 : (d < 256 ? 64 : 32);
  s.seqlen_q_rounded = (int)round_up(a.seqlen_q, s.kBlockM);
  s.seqlen_k_rounded = (int)round_up(a.seqlen_k, 128);
  s.num_m_blocks = (a.seqlen_q + s.kBlockM - 1) / s.kBlockM;
  return s;
}

// The field-by-field effect of the pinned set_params_fprop for the dense case
// (cu_seqlens_q/k = seqused_k = p = nullptr, seqlenq_ngroups_swapped = unpadded_lse = false).
void fill_fprop(Flash_fwd_params &p, const KbAttnArgs &a, int seqlen_q_rounded, int seqlen_k_rounded,
                int head_size, int head_size_rounded, void *q, void *k, void *v, void *out, void *lse,
                float p_dropout, int window_size_left, int window_size_right) {
  p = {};

  // mha_fwd: is_bf16 = (q.dtype == bf16), is_e4m3 = (q.dtype == float8_e4m3fn).
  p.is_e4m3 = a.is_e4m3 != 0;
  p.is_bf16 = !p.is_e4m3 && a.is_bf16 != 0;

  const Strides4 sq = bshd(a.seqlen_q, a.heads, head_size);
  const Strides4 sk = bshd(a.seqlen_k, a.heads_k, head_size);
  p.q_ptr = q;
  p.k_ptr = k;
  p.v_ptr = v;
  p.q_row_stride = sq.row;
  p.k_row_stride = sk.row;
  p.v_row_stride = sk.row;
  p.q_head_stride = sq.head;
  p.k_head_stride = sk.head;
  p.v_head_stride = sk.head;
  p.o_ptr = out;
  p.o_row_stride = sq.row;
  p.o_head_stride = sq.head;
  // Not varlen: batch strides are set.
  p.q_batch_stride = sq.batch;
  p.k_batch_stride = sk.batch;
  p.v_batch_stride = sk.batch;
  p.o_batch_stride = sq.batch;

  p.cu_seqlens_q = nullptr;
  p.cu_seqlens_k = nullptr;
  p.seqused_k = nullptr;
  p.p_ptr = nullptr;
  p.softmax_lse_ptr = lse;

  p.b = a.batch;
  p.h = a.heads;
  p.h_k = a.heads_k;
  p.h_h_k_ratio = a.heads / a.heads_k;
  p.seqlen_q = a.seqlen_q;
  p.seqlen_k = a.seqlen_k;
  p.seqlen_q_rounded = seqlen_q_rounded;
  p.seqlen_k_rounded = seqlen_k_rounded;
  p.d = head_size;
  p.d_rounded = head_size_rounded;

  p.scale_softmax = a.softmax_scale;
  p.scale_softmax_log2 = a.softmax_scale * M_LOG2E;  // float * double, stored as float
  const __half h = __float2half(p.scale_softmax_log2);
  const __half2 h2 = __half2(h, h);
  std::memcpy(&p.scale_softmax_log2_half2, &h2, sizeof(uint32_t));

  // Stored as the keep probability.
  p.p_dropout = 1.f - p_dropout;
  p.p_dropout_in_uint8_t = uint8_t(std::floor(p.p_dropout * 255.0));
  p.rp_dropout = 1.f / p.p_dropout;
  p.scale_softmax_rp_dropout = p.rp_dropout * p.scale_softmax;

  p.is_causal = window_size_left < 0 && window_size_right == 0;
  if (window_size_left < 0 && window_size_right >= 0) window_size_left = a.seqlen_k;
  if (window_size_left >= 0 && window_size_right < 0) window_size_right = a.seqlen_k;
  p.window_size_left = window_size_left;
  p.window_size_right = window_size_right;

  p.is_seqlens_k_cumulative = true;
  p.unpadded_lse = false;
}

__global__ void kb_fill_f32(float *x, int64_t n, float val) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    x[i] = val;
}

int check_ws(const KbAttnArgs &a, const int64_t *need, int n) {
  for (int i = 0; i < n; ++i) {
    if (need[i] > 0 && (a.ws[i] == nullptr || a.ws_bytes[i] < need[i]))
      return fail("ws[" + std::to_string(i) + "] missing or smaller than " + std::to_string(need[i]) + " bytes");
  }
  return 0;
}

void ws_fwd(const KbAttnArgs &a, int64_t *b) {
  (void)a;
  b[0] = (int64_t)sizeof(int32_t);  // tile_count_semaphore int32[1]
  b[1] = b[2] = b[3] = 0;
}

void ws_bwd(const KbAttnArgs &a, int64_t *b) {
  const BwdShape s = bwd_shape(a);
  const int64_t bh = (int64_t)a.batch * a.heads;
  b[0] = bh * s.seqlen_q_rounded * (int64_t)sizeof(float);                        // softmax_d
  b[1] = bh * s.seqlen_q_rounded * (int64_t)sizeof(float);                        // softmax_lse_log2
  b[2] = bh * s.seqlen_q_rounded * s.head_size_rounded * (int64_t)sizeof(float);  // dq_accum
  b[3] = (int64_t)s.num_m_blocks * bh * (int64_t)sizeof(int32_t);                // dq_semaphore
}

bool fwd_unit_built(const KbAttnArgs &a) {
  const int d = a.head_dim;
  if (a.is_e4m3) {
#ifdef KB_UNIT_fwd_e4m3_128
    if (d == 128) return true;
#endif
#ifdef KB_UNIT_fwd_e4m3_256
    if (d == 256) return true;
#endif
    return false;
  }
#ifndef KB_FA3_NO_FWD_HDIM64
  if (d == 64) return true;
#endif
  return d == 128;
}

int validate_common(const KbAttnArgs *a) {
  if (!a) return fail("null args");
  if (a->batch <= 0) return fail("batch size must be positive");
  if (a->heads <= 0 || a->heads_k <= 0 || a->heads % a->heads_k != 0)
    return fail("Number of heads in key/value must divide number of heads in query");
  if (a->seqlen_q < 0 || a->seqlen_k < 0) return fail("negative sequence length");
  if (a->p_dropout != 0.f) return fail("dropout does not exist at this revision (mha_fwd/mha_bwd use p_dropout = 0)");
  return 0;
}

}  // namespace

extern "C" {

int kb_workspace(KbAttnArgs *a, int phase) {
  g_err.clear();
  if (!a) return fail("null args");
  if (phase == 0) {
    ws_fwd(*a, a->ws_bytes);
    return fwd_unit_built(*a) ? 0 : fail("no forward unit for this head_dim and dtype in this build");
  }
  if (phase == 1) {
    ws_bwd(*a, a->ws_bytes);
    if (a->is_e4m3) return fail("this revision has no FP8 backward");
    return a->head_dim == 128 ? 0 : fail("no backward unit for this head_dim in this build");
  }
  return fail("phase must be 0 or 1");
}

int kb_fwd(KbAttnArgs *a, cudaStream_t stream) {
  g_err.clear();
  if (int e = validate_common(a)) return e;

  // mha_fwd: architecture check on the current device's properties.
  const cudaDeviceProp *dprops = kb_current_device_properties();
  if (!dprops) return fail("cudaGetDeviceProperties failed");
  if (!(dprops->major == 9 && dprops->minor == 0)) return fail("FlashAttention only supports Hopper GPUs or newer.");

  if (!(a->head_dim == 64 || a->head_dim == 128 || a->head_dim == 256))
    return fail("Only support head size 64, 128, and 256 for now");
  if (!fwd_unit_built(*a)) return fail("no forward unit for this head_dim and dtype in this build");

  const FwdShape s = fwd_shape(*a);

  DeviceGuard guard;
  if (int e = guard.set_from(a->q)) return e;

  int64_t need[4];
  ws_fwd(*a, need);
  if (int e = check_ws(*a, need, 4)) return e;

  Flash_fwd_params params;
  fill_fprop(params, *a, s.seqlen_q_rounded, s.seqlen_k_rounded, s.head_size, s.head_size_rounded, a->q, a->k,
             a->v, a->o, a->lse, /*p_dropout=*/0.f,
             /*window_size_left=*/-1, /*window_size_right=*/a->is_causal ? 0 : -1);

  // tile_count_semaphore: torch::zeros({1}) if causal, torch::empty({1}) otherwise.
  params.tile_count_semaphore = static_cast<int *>(a->ws[0]);
  if (a->is_causal) {
    if (cudaMemsetAsync(a->ws[0], 0, sizeof(int32_t), stream) != cudaSuccess)
      return fail(std::string("memset tile_count_semaphore: ") + cudaGetErrorString(cudaGetLastError()));
  }

  // The pinned launchers end with CHECK_CUDA(cudaGetLastError()) and exit(1) on any error; do not
  // let an unrelated earlier (non-sticky) error reach them.
  cudaGetLastError();

  if (a->seqlen_k > 0) {
    // run_mha_fwd's dispatch, restricted to the units linked here.
    if (a->is_e4m3) {
#ifdef KB_UNIT_fwd_e4m3_128
      if (s.head_size == 128) run_mha_fwd_<cutlass::float_e4m3_t, 128>(params, stream);
#endif
#ifdef KB_UNIT_fwd_e4m3_256
      if (s.head_size == 256) run_mha_fwd_<cutlass::float_e4m3_t, 256>(params, stream);
#endif
    } else if (a->is_bf16) {
      if (s.head_size == 128) run_mha_fwd_<cutlass::bfloat16_t, 128>(params, stream);
#ifndef KB_FA3_NO_FWD_HDIM64
      else if (s.head_size == 64) run_mha_fwd_<cutlass::bfloat16_t, 64>(params, stream);
#endif
    } else {
      if (s.head_size == 128) run_mha_fwd_<cutlass::half_t, 128>(params, stream);
#ifndef KB_FA3_NO_FWD_HDIM64
      else if (s.head_size == 64) run_mha_fwd_<cutlass::half_t, 64>(params, stream);
#endif
    }
  } else {
    // seqlen_k == 0: out.zero_(); softmax_lse.fill_(+inf). (o is 2 bytes per element: fp16 for e4m3 input.)
    const int64_t n_out = (int64_t)a->batch * a->seqlen_q * a->heads * a->head_dim;
    const int64_t n_lse = (int64_t)a->batch * a->heads * a->seqlen_q;
    if (n_out > 0 && cudaMemsetAsync(a->o, 0, n_out * 2, stream) != cudaSuccess)
      return fail(std::string("memset out: ") + cudaGetErrorString(cudaGetLastError()));
    if (n_lse > 0) {
      const int threads = 256;
      const int blocks = (int)std::min<int64_t>((n_lse + threads - 1) / threads, 4096);
      kb_fill_f32<<<blocks, threads, 0, stream>>>(static_cast<float *>(a->lse), n_lse,
                                                  std::numeric_limits<float>::infinity());
    }
  }
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return fail(std::string("launch: ") + cudaGetErrorString(err));
  return 0;
}

int kb_bwd(KbAttnArgs *a, cudaStream_t stream) {
  g_err.clear();
  if (int e = validate_common(a)) return e;
  if (a->is_e4m3) return fail("this revision has no FP8 backward");

  // mha_bwd: architecture check on the current device's properties.
  const cudaDeviceProp *dprops = kb_current_device_properties();
  if (!dprops) return fail("cudaGetDeviceProperties failed");
  if (!(dprops->major == 9 && dprops->minor >= 0)) return fail("FlashAttentionHopper only supports Hopper GPUs or newer.");

  const int head_size = a->head_dim;
  if (head_size % 8 != 0) return fail("head_size should be a multiple of 8");
  if (head_size > 128) return fail("FlashAttention backward only supports head dimension at most 128");
  if (head_size != 128) return fail("no backward unit for this head_dim in this build");
  if (a->heads_k != a->heads)
    return fail("MQA/GQA backward needs mha_bwd's dk/dv_expanded buffers and at::sum_out; not expressible in this ABI");
  if (a->seqlen_q > 0 && a->seqlen_k == 0)
    return fail("seqlen_k == 0: the pinned backward would launch an empty grid; refused");

  const BwdShape s = bwd_shape(*a);

  DeviceGuard guard;
  if (int e = guard.set_from(a->q)) return e;

  int64_t need[4];
  ws_bwd(*a, need);
  if (int e = check_ws(*a, need, 4)) return e;

  void *softmax_d = a->ws[0];
  void *softmax_lse_log2 = a->ws[1];
  void *dq_accum = a->ws[2];
  int *dq_semaphore = static_cast<int *>(a->ws[3]);

  Flash_bwd_params params;
  // set_params_dgrad: set_params_fprop(q, k, v, out, ..., softmax_lse, p_dropout = 0, softmax_scale,
  // window -1 / (causal ? 0 : -1)) ...
  fill_fprop(params, *a, s.seqlen_q_rounded, s.seqlen_k_rounded, head_size, s.head_size_rounded, a->q, a->k, a->v,
             a->o, a->lse, /*p_dropout=*/0.f,
             /*window_size_left=*/-1, /*window_size_right=*/a->is_causal ? 0 : -1);
  // ... then the gradient pointers and strides (dk/dv are the un-expanded tensors: heads_k == heads).
  const Strides4 sq = bshd(a->seqlen_q, a->heads, head_size);
  const Strides4 sk = bshd(a->seqlen_k, a->heads_k, head_size);
  params.do_ptr = a->dout;
  params.do_row_stride = sq.row;
  params.do_head_stride = sq.head;
  params.dq_ptr = a->dq;
  params.dk_ptr = a->dk;
  params.dv_ptr = a->dv;
  params.dq_row_stride = sq.row;
  params.dk_row_stride = sk.row;
  params.dv_row_stride = sk.row;
  params.dq_head_stride = sq.head;
  params.dk_head_stride = sk.head;
  params.dv_head_stride = sk.head;
  params.do_batch_stride = sq.batch;
  params.dq_batch_stride = sq.batch;
  params.dk_batch_stride = sk.batch;
  params.dv_batch_stride = sk.batch;
  params.dq_accum_ptr = dq_accum;
  params.dk_accum_ptr = nullptr;
  params.dv_accum_ptr = nullptr;
  params.dsoftmax_sum = softmax_d;
  params.deterministic = a->deterministic != 0;
  // mha_bwd after set_params_dgrad:
  params.softmax_lse_log2_ptr = softmax_lse_log2;
  params.dq_semaphore = dq_semaphore;  // torch::empty; cleared by the pinned preprocess kernel

  cudaGetLastError();  // see kb_fwd

  if (a->seqlen_q > 0) {
    // run_mha_bwd's dispatch: d <= 64 / <= 96 / else 128; only the hdim128 units are linked here.
    if (a->is_bf16)
      run_mha_bwd_<cutlass::bfloat16_t, 128>(params, stream);
    else
      run_mha_bwd_<cutlass::half_t, 128>(params, stream);
  } else {
    // seqlen_q == 0: dk_expanded.zero_(); dv_expanded.zero_(); softmax_d.zero_().
    const int64_t n_kv = (int64_t)a->batch * a->seqlen_k * a->heads_k * head_size * 2;
    if (n_kv > 0) {
      if (cudaMemsetAsync(a->dk, 0, n_kv, stream) != cudaSuccess || cudaMemsetAsync(a->dv, 0, n_kv, stream) != cudaSuccess)
        return fail(std::string("memset dk/dv: ") + cudaGetErrorString(cudaGetLastError()));
    }
    if (need[0] > 0 && cudaMemsetAsync(softmax_d, 0, need[0], stream) != cudaSuccess)
      return fail(std::string("memset softmax_d: ") + cudaGetErrorString(cudaGetLastError()));
  }
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return fail(std::string("launch: ") + cudaGetErrorString(err));
  return 0;
}

const char *kb_units() {
  static const std::string units = std::string("fwd:bf16:128;fwd:fp16:128;bwd:bf16:128;bwd:fp16:128")
#ifndef KB_FA3_NO_FWD_HDIM64
      + ";fwd:bf16:64;fwd:fp16:64"
#endif
#ifdef KB_UNIT_fwd_e4m3_128
      + ";fwd:e4m3:128"
#endif
#ifdef KB_UNIT_fwd_e4m3_256
      + ";fwd:e4m3:256"
#endif
      ;
  return units.c_str();
}

const char *kb_last_error() { return g_err.c_str(); }

uint64_t kb_philox_increment(KbAttnArgs *a, int phase) {
  (void)a;
  (void)phase;
  return 0;  // no dropout / Philox at this revision
}

}  // extern "C"
