// kb's C ABI for driving a pinned FlashAttention revision from Python (ctypes).
// kb's own code: each revision's harness (fa1_v109.cu, fa2_v200.cu, fa3_hopper.cu) fills the pinned
// params struct from these arguments and calls the pinned launch function unchanged.
#pragma once
#include <cstdint>
#include <cuda_runtime_api.h>

extern "C" {

// All tensors are contiguous and caller-allocated (torch), layout (batch, seqlen, heads, head_dim)
// for q, k, v, o, dout, dq, dk, dv; lse is float32 (batch, heads, seqlen_q) unless the revision's
// workspace query says otherwise. ws[i] are revision-specific scratch buffers of ws_bytes[i] bytes,
// allocated by the caller uninitialised (torch.empty) after kb_workspace() sized them; the harness
// zero-fills a buffer itself only where the pinned API allocates it with zeros.
struct KbAttnArgs {
  void *q, *k, *v, *o, *lse, *dout, *dq, *dk, *dv;
  void *ws[4];
  int64_t ws_bytes[4];
  int batch, heads, heads_k, seqlen_q, seqlen_k, head_dim;
  int is_bf16, is_causal;
  float p_dropout;      // probability of dropping (0 = off)
  float softmax_scale;
  uint64_t seed, offset;  // Philox state as the pinned API would take it from the generator
  int num_splits;         // FA1: 0 = the pinned heuristic; >0 forces; ignored elsewhere
  int deterministic;      // revisions with a deterministic backward; ignored elsewhere
  int is_e4m3;            // FA3 forward: q, k, v are float8_e4m3 and o is fp16 (hopper/ mha_fwd); must be 0 elsewhere
};

// Fill a->ws_bytes for phase 0 (forward) or 1 (backward); returns 0, or nonzero if unsupported.
int kb_workspace(KbAttnArgs* a, int phase);
// Launch the pinned forward / backward on `stream`; returns 0 or nonzero (see kb_last_error).
int kb_fwd(KbAttnArgs* a, cudaStream_t stream);
int kb_bwd(KbAttnArgs* a, cudaStream_t stream);
// Semicolon-separated "phase:dtype:head_dim" entries this build contains, e.g. "fwd:bf16:128;bwd:bf16:128".
const char* kb_units();
const char* kb_last_error();
// Philox counter advance the pinned API requests per call (e.g. b*h*32 for v2.0.0), so the caller
// can replay or advance generator state as the pinned API would.
uint64_t kb_philox_increment(KbAttnArgs* a, int phase);
}
