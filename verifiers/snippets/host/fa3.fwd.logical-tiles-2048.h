struct Flash_fwd_params { int seqlen_q; bool is_causal; int *cu_seqlens_q; };
typedef void *cudaStream_t;
namespace cutlass { inline int ceil_div(int a, int b) { return (a + b - 1) / b; } struct bfloat16_t {}; }
struct kb_FixedSeqLen { static constexpr bool kUseVarSeqLen = false; };
#define BOOL_SWITCH(COND, CONST_NAME, ...) [&] { if (COND) { constexpr static bool CONST_NAME = true; return __VA_ARGS__(); } else { constexpr static bool CONST_NAME = false; return __VA_ARGS__(); } }()
#define SEQLEN_SWITCH(CU_SEQLENS, NAME, ...) [&] { using NAME = kb_FixedSeqLen; return __VA_ARGS__(); }()
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kNWarps_, int kStages_, bool Is_Q_in_regs_, int kClusterM_, class Element_> struct Flash_fwd_kernel_traits { static constexpr int kHeadDim = kHeadDim_, kBlockM = kBlockM_, kBlockN = kBlockN_, kNWarps = kNWarps_; };
static int kb_bm = 0, kb_bn = 0, kb_warps = 0, kb_hd = 0;
template <class Kernel_traits, bool Is_causal, class Seqlen_traits> void run_flash_fwd(Flash_fwd_params &, cudaStream_t) { kb_bm = Kernel_traits::kBlockM; kb_bn = Kernel_traits::kBlockN; kb_warps = Kernel_traits::kNWarps; kb_hd = Kernel_traits::kHeadDim; }
