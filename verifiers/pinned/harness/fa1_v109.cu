// kb's own host harness for the pinned FlashAttention v1.0.9 kernels
// (Dao-AILab/flash-attention @ 6d48e14a6c2f551db96f0badc658a6279a929df3), behind kb_attn_abi.h.
//
// It replays, for equal-length batches, what the pinned csrc/flash_attn/fmha_api.cpp `mha_fwd` /
// `mha_bwd` do when called from the pinned flash_attn/flash_attn_interface.py
// (zero_tensors=False, return_softmax=False, rng_state passed from forward to backward), and calls
// the pinned launchers unchanged: run_fmha_fwd_hdim64/128(Launch_params<FMHA_fprop_params>&) and
// run_fmha_bwd_hdim64/128(FMHA_dgrad_params&, cudaStream_t, bool configure). Both num_splits
// heuristics (num_splits_heuristic_fwd/_bwd) live inside those pinned launch templates and run
// there whenever params.num_splits <= 0; this file does not re-implement them.
//
// Layout: our (batch, seqlen, heads, head_dim) contiguous tensors are the pinned varlen
// (total = batch*seqlen, heads, head_dim) tensors, with cu_seqlens[i] = i*seqlen.
//
// Workspace (caller allocates uninitialised; sizes from kb_workspace):
//   phase 0 (forward)
//     ws[0]  meta, 16 + 8*(b+1) bytes:
//              [0,16)            rng_state, 2 x uint64 (pinned: torch::empty({2}, int64)); the pinned
//                                forward kernel writes (seed, offset) into it (0, 0 without dropout)
//              [16, 16+4(b+1))   cu_seqlens_q, int32[b+1] = i*seqlen_q   (filled here by a tiny kernel)
//              [.., +4(b+1))     cu_seqlens_k, int32[b+1] = i*seqlen_k
//     ws[1]  o_tmp, fp32 (b*seqlen_q, h, d) = 4*b*sq*h*d bytes, only when the pin's `loop` is true
//            (rounded max_seqlen_k > blocksize_c); else 0 bytes. Pinned: torch::empty.
//     ws[2], ws[3]  unused (0 bytes).
//   phase 1 (backward)
//     ws[0]  meta as above; here rng_state is written by this harness with what the pinned forward
//            kernel would have stored there: (seed, offset) with dropout, (0, 0) without.
//     ws[1]  softmax_d, fp32 (b, h, max_seqlen_q) = 4*b*h*roundup(sq,16) bytes. Pinned: torch::empty.
//     ws[2]  dq_tmp, fp32 (b*seqlen_q, h, d) = 4*b*sq*h*d bytes. Always sized, because whether the pin
//            needs it (loop, or num_splits > 1 as decided by the pinned configure pass) is known
//            only on the device; used only where the pin uses it. Zero-filled here only when
//            num_splits > 1 (pinned: torch::zeros / dq_tmp.zero_()), else left as torch::empty.
//     ws[3]  unused (0 bytes).
//   lse (a->lse): fp32 (b, h, roundup(seqlen_q, 16)) as the pin allocates it; this equals the ABI's
//   (b, h, seqlen_q) only when seqlen_q % 16 == 0, so other seqlen_q are refused (see kb_workspace).
//
// Harness-side glue (not in the kernel units): cu_seqlens fill, rng_state fill for the backward,
// the fp32 -> fp16/bf16 copy of dq_tmp into dq when num_splits > 1 (the pin's `dq.copy_(dq_tmp)`),
// and at::cuda::getCurrentDeviceProperties() (declared by kb's ATen shim).

#include "kb_attn_abi.h"

#include "fmha.h"  // pinned: FMHA_fprop_params, FMHA_dgrad_params, Launch_params, run_fmha_*, set_alpha

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

// ---------------------------------------------------------------------------------------------
// ATen glue: the pinned launchers call at::cuda::getCurrentDeviceProperties(); cache per device.
namespace at {
namespace cuda {
cudaDeviceProp* getCurrentDeviceProperties() {
  static std::mutex mu;
  static std::vector<std::unique_ptr<cudaDeviceProp>> cache;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) dev = 0;
  std::lock_guard<std::mutex> lock(mu);
  if (static_cast<int>(cache.size()) <= dev) cache.resize(dev + 1);
  if (!cache[dev]) {
    auto p = std::make_unique<cudaDeviceProp>();
    std::memset(p.get(), 0, sizeof(cudaDeviceProp));
    if (cudaGetDeviceProperties(p.get(), dev) != cudaSuccess) {
      cudaGetLastError();  // leave no sticky error behind; props stay zeroed (major 0 -> refused)
    }
    cache[dev] = std::move(p);
  }
  return cache[dev].get();
}
}  // namespace cuda
}  // namespace at

namespace {

thread_local std::string g_err;

int fail(const std::string& msg) {
  g_err = msg;
  return 1;
}

// Geometry exactly as mha_fwd / mha_bwd derive it from max_seqlen_q_/max_seqlen_k_ and head_size.
struct Geo {
  int b, h, d, sq, sk;
  int blocksize_c;
  int max_sk;  // rounded, what the pin passes as params.seqlen_k
  int max_sq;  // rounded to 16, what the pin passes as params.seqlen_q
  bool loop;
  int64_t total_q, total_k;
};

Geo geometry(const KbAttnArgs* a, int blocksize_c) {
  Geo g;
  g.b = a->batch;
  g.h = a->heads;
  g.d = a->head_dim;
  g.sq = a->seqlen_q;
  g.sk = a->seqlen_k;
  g.blocksize_c = blocksize_c;
  int max_sk = ((g.sk + blocksize_c - 1) / blocksize_c) * blocksize_c;
  if (g.sk <= 128) {
    max_sk = 128;
  } else if (g.sk <= 256) {
    max_sk = 256;
  }
  g.max_sk = max_sk;
  g.max_sq = ((g.sq + 16 - 1) / 16) * 16;
  g.loop = g.max_sk > blocksize_c;
  g.total_q = int64_t(g.b) * g.sq;
  g.total_k = int64_t(g.b) * g.sk;
  return g;
}

// mha_fwd: blocksize_c = head_size > 64 ? 128 : 256.
int fwd_blocksize_c(int d) { return d > 64 ? 128 : 256; }
// mha_bwd: blocksize_c = (head_size > 64 || (is_sm75 && head_size > 32)) ? 128 : 256.
int bwd_blocksize_c(int d, bool is_sm75) { return (d > 64 || (is_sm75 && d > 32)) ? 128 : 256; }

int64_t meta_bytes(int b) { return 16 + 8 * int64_t(b + 1); }

// Shape checks shared by kb_workspace / kb_fwd / kb_bwd (what the pin TORCH_CHECKs, restricted to
// what this build contains).
int check_shape(const KbAttnArgs* a) {
  if (!a) return fail("null args");
  if (a->is_e4m3) return fail("v1.0.9 has no FP8 (e4m3) path");
  if (a->batch <= 0 || a->heads <= 0 || a->seqlen_q <= 0 || a->seqlen_k <= 0)
    return fail("batch, heads, seqlen_q, seqlen_k must be > 0");
  if (a->heads_k != a->heads) return fail("v1.0.9 has no MQA/GQA: heads_k must equal heads");
  const int d = a->head_dim;
  if (!((d % 8 == 0) && (d <= 128))) return fail("head_dim must be a multiple of 8 and <= 128 (pinned check)");
  if (d <= 32) return fail("head_dim <= 32 dispatches to the hdim32 units, which this build does not contain");
  if (a->seqlen_q % 16 != 0)
    return fail("the pin's softmax_lse is (b, h, roundup(seqlen_q, 16)); the ABI's lse is (b, h, seqlen_q), "
                "so seqlen_q must be a multiple of 16 for this harness");
  if (!(a->p_dropout >= 0.f) || !(a->p_dropout < 1.f)) return fail("p_dropout must be in [0, 1) (pinned check p_dropout < 1)");
  return 0;
}

int check_device(bool bf16, bool bwd, int d, cudaDeviceProp** out_props) {
  cudaDeviceProp* dprops = at::cuda::getCurrentDeviceProperties();
  const bool is_sm75 = dprops->major == 7 && dprops->minor == 5;
  const bool is_sm80 = dprops->major == 8 && dprops->minor == 0;
  const bool is_sm8x = dprops->major == 8 && dprops->minor >= 0;
  const bool is_sm90 = dprops->major == 9 && dprops->minor == 0;
  if (!(is_sm90 || is_sm8x || is_sm75)) return fail("pinned API requires sm75, sm8x or sm90");
  if (bf16 && !(is_sm8x || is_sm90)) return fail("bf16 requires sm8x or sm90 (pinned check)");
  if (bwd && d > 64 && !(is_sm80 || is_sm90)) return fail("backward with head_dim > 64 requires sm80 or sm90 (pinned check)");
  *out_props = dprops;
  return 0;
}

int check_ws(const KbAttnArgs* a, const int64_t need[4]) {
  for (int i = 0; i < 4; ++i) {
    if (need[i] > 0 && (a->ws[i] == nullptr || a->ws_bytes[i] < need[i]))
      return fail("ws[" + std::to_string(i) + "] needs " + std::to_string(need[i]) + " bytes");
  }
  return 0;
}

void ws_need(const KbAttnArgs* a, int phase, int64_t need[4]) {
  for (int i = 0; i < 4; ++i) need[i] = 0;
  // Workspace sizes do not depend on the device: forward blocksize_c has no sm75 term, and the
  // backward buffers (softmax_d, dq_tmp) do not depend on blocksize_c.
  const Geo g = geometry(a, fwd_blocksize_c(a->head_dim));
  need[0] = meta_bytes(g.b);
  if (phase == 0) {
    if (g.loop) need[1] = 4 * g.total_q * g.h * g.d;  // o_tmp
  } else {
    need[1] = 4 * int64_t(g.b) * g.h * g.max_sq;       // softmax_d
    need[2] = 4 * g.total_q * g.h * g.d;               // dq_tmp
  }
}

// Sets the current device to the one holding `ptr` for the scope (the pin's CUDAGuard on q's device).
struct DeviceGuard {
  int prev = -1;
  explicit DeviceGuard(const void* ptr) {
    cudaPointerAttributes attr;
    if (cudaPointerGetAttributes(&attr, ptr) == cudaSuccess && attr.type == cudaMemoryTypeDevice) {
      int cur = 0;
      if (cudaGetDevice(&cur) == cudaSuccess && cur != attr.device) {
        prev = cur;
        cudaSetDevice(attr.device);
      }
    } else {
      cudaGetLastError();
    }
  }
  ~DeviceGuard() {
    if (prev >= 0) cudaSetDevice(prev);
  }
};

__global__ void kb_fill_meta(uint64_t* rng_state, int write_rng, uint64_t seed, uint64_t offset,
                             int* cu_q, int* cu_k, int b, int sq, int sk) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= b) {
    cu_q[i] = i * sq;
    cu_k[i] = i * sk;
  }
  if (write_rng && i == 0) {
    rng_state[0] = seed;
    rng_state[1] = offset;
  }
}

// torch's dq.copy_(dq_tmp): elementwise float -> half / bfloat16, round to nearest even.
__device__ __forceinline__ void kb_cvt(__half* dst, float x) { *dst = __float2half_rn(x); }
__device__ __forceinline__ void kb_cvt(__nv_bfloat16* dst, float x) { *dst = __float2bfloat16_rn(x); }
template <typename T>
__global__ void kb_copy_f32_to(T* dst, const float* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    kb_cvt(dst + i, src[i]);
}

int launch_meta(const KbAttnArgs* a, const Geo& g, bool write_rng, uint64_t seed, uint64_t offset,
                cudaStream_t stream, int** cu_q, int** cu_k, uint64_t** rng) {
  char* base = static_cast<char*>(a->ws[0]);
  *rng = reinterpret_cast<uint64_t*>(base);
  *cu_q = reinterpret_cast<int*>(base + 16);
  *cu_k = reinterpret_cast<int*>(base + 16 + 4 * int64_t(g.b + 1));
  const int threads = 256;
  const int blocks = (g.b + 1 + threads - 1) / threads;
  kb_fill_meta<<<blocks, threads, 0, stream>>>(*rng, write_rng ? 1 : 0, seed, offset, *cu_q, *cu_k, g.b, g.sq, g.sk);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return fail(std::string("meta fill launch: ") + cudaGetErrorString(e));
  return 0;
}

// The pinned set_params_fprop, field by field, for contiguous (total, h, d) q/k/v/out.
void fill_fprop(FMHA_fprop_params& params, const KbAttnArgs* a, const Geo& g,
                void* cu_q, void* cu_k, void* o_tmp, void* s, void* lse, int num_splits) {
  const Data_type data_type = a->is_bf16 ? DATA_TYPE_BF16 : DATA_TYPE_FP16;
  const size_t b = g.b, seqlen_q = g.max_sq, seqlen_k = g.max_sk, h = g.h, d = g.d;

  std::memset(static_cast<void*>(&params), 0, sizeof(FMHA_fprop_params));
  params.is_bf16 = a->is_bf16 != 0;

  const uint32_t row_stride = uint32_t(h * d);  // stride(0) of a contiguous (total, h, d) tensor
  const uint32_t head_stride = uint32_t(d);     // stride(1)
  params.q_ptr = a->q;
  params.k_ptr = a->k;
  params.v_ptr = a->v;
  params.q_row_stride_in_elts = row_stride;
  params.k_row_stride_in_elts = row_stride;  // heads_k == heads
  params.v_row_stride_in_elts = row_stride;
  params.q_head_stride_in_elts = head_stride;
  params.k_head_stride_in_elts = head_stride;
  params.v_head_stride_in_elts = head_stride;
  params.o_ptr = a->o;
  params.o_row_stride_in_elts = row_stride;
  params.o_head_stride_in_elts = head_stride;
  params.o_tmp_ptr = o_tmp;
  params.o_tmp_row_stride_in_elts = uint32_t(h * d);
  params.o_tmp_head_stride_in_elts = uint32_t(d);

  params.cu_seqlens_q = static_cast<int*>(cu_q);
  params.cu_seqlens_k = static_cast<int*>(cu_k);

  params.s_ptr = s;
  params.s_stride_in_bytes = uint32_t(get_size_in_bytes(b * h * seqlen_k, data_type));

  params.softmax_lse_ptr = lse;

  params.b = int(b);
  params.h = int(h);
  params.seqlen_q = int(seqlen_q);
  params.seqlen_k = int(seqlen_k);
  params.d = int(d);

  const float scale_bmm1 = a->softmax_scale;
  params.scale_bmm1f = scale_bmm1;
  set_alpha(params.scale_bmm1, scale_bmm1, data_type);

  // Probability of keeping, its uint32/uint16 thresholds (rounded down) and 1/keep.
  params.p_dropout = 1.f - a->p_dropout;
  params.p_dropout_in_uint = uint32_t(std::floor(params.p_dropout * 4294967295.0));
  params.p_dropout_in_uint16_t = uint16_t(std::floor(params.p_dropout * 65535.0));
  params.rp_dropout = 1.f / params.p_dropout;
  params.scale_bmm1_rp_dropout = params.rp_dropout * params.scale_bmm1f;
  set_alpha(params.scale_dropout, params.rp_dropout, data_type);

  params.is_causal = a->is_causal != 0;
  params.num_splits = num_splits;
}

}  // namespace

extern "C" {

int kb_workspace(KbAttnArgs* a, int phase) {
  if (check_shape(a)) return 1;
  if (phase != 0 && phase != 1) return fail("phase must be 0 (forward) or 1 (backward)");
  int64_t need[4];
  ws_need(a, phase, need);
  for (int i = 0; i < 4; ++i) a->ws_bytes[i] = need[i];
  return 0;
}

int kb_fwd(KbAttnArgs* a, cudaStream_t stream) {
  if (check_shape(a)) return 1;
  if (!a->q || !a->k || !a->v || !a->o || !a->lse) return fail("q, k, v, o, lse must be set");
  int64_t need[4];
  ws_need(a, 0, need);
  if (check_ws(a, need)) return 1;
  cudaDeviceProp* dprops = nullptr;
  if (check_device(a->is_bf16 != 0, false, a->head_dim, &dprops)) return 1;

  const bool is_dropout = a->p_dropout > 0.0;
  Launch_params<FMHA_fprop_params> launch_params(dprops, stream, is_dropout, /*return_softmax=*/false);
  const Geo g = geometry(a, fwd_blocksize_c(a->head_dim));

  DeviceGuard guard(a->q);

  int *cu_q, *cu_k;
  uint64_t* rng;
  // rng_state is torch::empty in the pin; the forward kernel writes it.
  if (launch_meta(a, g, /*write_rng=*/false, 0, 0, stream, &cu_q, &cu_k, &rng)) return 1;

  fill_fprop(launch_params.params, a, g, cu_q, cu_k, g.loop ? a->ws[1] : nullptr, /*s=*/nullptr, a->lse,
             a->num_splits);
  launch_params.params.rng_state = rng;
  if (is_dropout) {
    // gen->philox_cuda_state(b*h*32) outside graph capture: PhiloxCudaState(seed, offset) by value.
    launch_params.params.philox_args = at::PhiloxCudaState(a->seed, a->offset);
  }

  const int d = launch_params.params.d;
  if (d <= 64) {
    run_fmha_fwd_hdim64(launch_params);
  } else {
    run_fmha_fwd_hdim128(launch_params);
  }
  cudaError_t e = cudaPeekAtLastError();
  if (e != cudaSuccess) return fail(std::string("forward launch: ") + cudaGetErrorString(e));
  return 0;
}

int kb_bwd(KbAttnArgs* a, cudaStream_t stream) {
  if (check_shape(a)) return 1;
  if (!a->q || !a->k || !a->v || !a->o || !a->lse || !a->dout || !a->dq || !a->dk || !a->dv)
    return fail("q, k, v, o, lse, dout, dq, dk, dv must be set");
  int64_t need[4];
  ws_need(a, 1, need);
  if (check_ws(a, need)) return 1;
  // Pinned Python: num_splits = 1 if deterministic else 0; _flash_attn_backward(num_splits=n) forces n.
  int num_splits = a->num_splits;
  if (a->deterministic) {
    if (num_splits > 1) return fail("deterministic=1 means num_splits=1 in v1.0.9; got num_splits > 1");
    num_splits = 1;
  }
  cudaDeviceProp* dprops = nullptr;
  if (check_device(a->is_bf16 != 0, true, a->head_dim, &dprops)) return 1;
  const bool is_sm75 = dprops->major == 7 && dprops->minor == 5;

  const bool is_dropout = a->p_dropout > 0.0;
  const Geo g = geometry(a, bwd_blocksize_c(a->head_dim, is_sm75));

  DeviceGuard guard(a->q);

  int *cu_q, *cu_k;
  uint64_t* rng;
  // rng_state from the forward: what the pinned forward kernel stored there (seed/offset of
  // philox_cuda_state with dropout, zeros without).
  if (launch_meta(a, g, /*write_rng=*/true, is_dropout ? a->seed : 0, is_dropout ? a->offset : 0, stream,
                  &cu_q, &cu_k, &rng))
    return 1;

  void* softmax_d = a->ws[1];
  void* dq_tmp = a->ws[2];
  // softmax_lse_[:, :, :max_seqlen_q].contiguous() is the forward's lse itself (same max_seqlen_q).
  FMHA_dgrad_params params;
  fill_fprop(params, a, g, cu_q, cu_k, g.loop ? dq_tmp : nullptr, /*s=*/nullptr, a->lse, num_splits);
  const uint32_t row_stride = uint32_t(int64_t(g.h) * g.d);
  const uint32_t head_stride = uint32_t(g.d);
  params.dq_ptr = a->dq;
  params.dk_ptr = a->dk;
  params.dv_ptr = a->dv;
  params.dq_row_stride_in_elts = row_stride;
  params.dk_row_stride_in_elts = row_stride;
  params.dv_row_stride_in_elts = row_stride;
  params.dq_head_stride_in_elts = head_stride;
  params.dk_head_stride_in_elts = head_stride;
  params.dv_head_stride_in_elts = head_stride;
  params.do_ptr = a->dout;
  params.dsoftmax_sum = softmax_d;

  auto launch = [&](bool configure) {
    if (params.d <= 64) {
      run_fmha_bwd_hdim64(params, stream, configure);
    } else {
      run_fmha_bwd_hdim128(params, stream, configure);
    }
  };

  launch(/*configure=*/true);  // resolves params.num_splits when it is <= 0 (pinned heuristic)

  const int64_t dq_tmp_bytes = 4 * g.total_q * g.h * g.d;
  if (params.num_splits > 1) {
    if (!g.loop) params.o_tmp_ptr = dq_tmp;  // o_tmp stores dq_tmp in the backward pass
    cudaError_t e = cudaMemsetAsync(dq_tmp, 0, size_t(dq_tmp_bytes), stream);
    if (e != cudaSuccess) return fail(std::string("dq_tmp zero fill: ") + cudaGetErrorString(e));
  }

  params.rng_state = rng;  // the rng_state.has_value() branch of the pin

  launch(/*configure=*/false);
  cudaError_t e = cudaPeekAtLastError();
  if (e != cudaSuccess) return fail(std::string("backward launch: ") + cudaGetErrorString(e));

  if (params.num_splits > 1) {
    const int64_t n = g.total_q * g.h * g.d;
    const int threads = 256;
    int64_t blocks64 = (n + threads - 1) / threads;
    const int blocks = int(blocks64 < 65535 * 16 ? blocks64 : 65535 * 16);
    if (a->is_bf16) {
      kb_copy_f32_to<__nv_bfloat16><<<blocks, threads, 0, stream>>>(
          static_cast<__nv_bfloat16*>(a->dq), static_cast<const float*>(dq_tmp), n);
    } else {
      kb_copy_f32_to<__half><<<blocks, threads, 0, stream>>>(
          static_cast<__half*>(a->dq), static_cast<const float*>(dq_tmp), n);
    }
    e = cudaGetLastError();
    if (e != cudaSuccess) return fail(std::string("dq copy launch: ") + cudaGetErrorString(e));
  }
  return 0;
}

const char* kb_units() {
  return "fwd:fp16:64;fwd:bf16:64;fwd:fp16:128;fwd:bf16:128;"
         "bwd:fp16:64;bwd:bf16:64;bwd:fp16:128;bwd:bf16:128";
}

const char* kb_last_error() { return g_err.c_str(); }

uint64_t kb_philox_increment(KbAttnArgs* a, int phase) {
  if (!a) return 0;
  // Forward: philox_cuda_state(b*h*32) only when p_dropout > 0 (already a multiple of 4).
  // Backward: the pinned Python always hands the forward's rng_state over, so mha_bwd takes the
  // rng_state branch and never asks the generator.
  if (phase == 0 && a->p_dropout > 0.0) return uint64_t(a->batch) * uint64_t(a->heads) * 32ull;
  return 0;
}

}  // extern "C"
