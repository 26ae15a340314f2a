struct Flash_bwd_params { bool is_causal; int *cu_seqlens_q; int *cu_seqlens_k; bool deterministic; };
typedef void *cudaStream_t;
namespace cutlass { inline int ceil_div(int a, int b) { return (a + b - 1) / b; } struct bfloat16_t {}; }
#define BOOL_SWITCH(COND, CONST_NAME, ...) [&] { if (COND) { constexpr static bool CONST_NAME = true; return __VA_ARGS__(); } else { constexpr static bool CONST_NAME = false; return __VA_ARGS__(); } }()
static int kb_bm = 0, kb_bn = 0;
template <int kHeadDim, int kBlockM, int kBlockN, typename Element, bool Is_causal, bool Varlen, bool Deterministic, bool dKV_swapAB, bool dQ_swapAB, int AtomLayoutMSdP = 1, int AtomLayoutNdKV = 2, int AtomLayoutMdQ = 1> void run_flash_bwd(Flash_bwd_params &, cudaStream_t) { kb_bm = kBlockM; kb_bn = kBlockN; }
