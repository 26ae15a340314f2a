struct Flash_fwd_params { float p_dropout; bool is_causal; };
typedef void *cudaStream_t;
namespace cutlass { struct bfloat16_t {}; }
namespace at { namespace cuda { struct kb_props { int major, minor; }; inline kb_props *getCurrentDeviceProperties() { static kb_props p{8, 0}; return &p; } } }
#define BOOL_SWITCH(COND, CONST_NAME, ...) [&] { if (COND) { constexpr bool CONST_NAME = true; return __VA_ARGS__(); } else { constexpr bool CONST_NAME = false; return __VA_ARGS__(); } }()
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kNWarps_, bool Is_Q_in_regs_, bool Share_Q_K_smem_, class elem_type> struct Flash_fwd_kernel_traits { static constexpr int kHeadDim = kHeadDim_, kBlockM = kBlockM_, kBlockN = kBlockN_, kNWarps = kNWarps_; };
static int kb_bm = 0, kb_bn = 0, kb_warps = 0, kb_hd = 0;
template <class Kernel_traits, bool Is_dropout, bool Is_causal> void run_flash_fwd(Flash_fwd_params &, cudaStream_t) { kb_bm = Kernel_traits::kBlockM; kb_bn = Kernel_traits::kBlockN; kb_warps = Kernel_traits::kNWarps; kb_hd = Kernel_traits::kHeadDim; }
