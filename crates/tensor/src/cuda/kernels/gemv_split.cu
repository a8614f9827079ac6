// The split products' instances (gemv_split.cuh, gemv_split_f32.cu, gemv_split_dp4a.cu before this file).
//
// Every block height for every input count: the table in ops.rs (split_rows) picks one per format and input
// count from the kernel benchmark (examples/gpu_gemv.rs). The height does not change a row's sum, so any pick
// keeps batched rows bit-identical to rows alone.
//
// Each also comes norm-free (suffix `_nn`: the same kernel without the norm's code, whose registers the products
// that fold no norm — q/k/v, gate/up — need not carry: ptxas gives the q8 one-row kernel 135 registers with it,
// 56 without); and the dp4a kernels with the norm deferred to the next product (suffix `_gn`, ops.rs's
// NormOut::defer).
//
// q4's one-input norm-free products at height 4 (q/k/v, gate/up, the head) held 7 blocks an SM at 72 registers;
// the deferred norm's 1/rms in their store took them to 79 (6 blocks, slower). They ask ptxas for 9
// (GS_NN4_BOUNDS_1: 56 registers, no spill), faster than 7 or 8 — more warps an SM, each waiting on its one round
// trip; 10 and 12 spill and lose (docs/performance-gpu.md). At two inputs it spilled. A minimum of 1 is not the
// same as none: ptxas then gave other q4 kernels 50 more registers.
// (Function-like, so the comma appears only where the bounds are used, not as a macro argument.)
#define GS_BOUNDS() GS_WARPS * 32
#define GS_NN4_BOUNDS_1() GS_WARPS * 32, 9
#define GS_NN4_BOUNDS_2 GS_BOUNDS
#define GS_NN4_BOUNDS_3 GS_BOUNDS
#define GS_NN4_BOUNDS_4 GS_BOUNDS
#define GS_NN4_BOUNDS_5 GS_BOUNDS
#define GS_NN4_BOUNDS_6 GS_BOUNDS
#define GS_NN4_BOUNDS_7 GS_BOUNDS
#define GS_NN4_BOUNDS_8 GS_BOUNDS
// The 6-bit head's one-input products at height 4 asked for 7 blocks an SM (72 registers, no spill; ptxas gave 95
// unasked, 5 an SM, and spilled 64 bytes at 8, 104 at 9).
#define GS_Q6_BOUNDS_1() GS_WARPS * 32, 7
#define GS_Q6_BOUNDS_2 GS_BOUNDS
#define GS_Q6_BOUNDS_3 GS_BOUNDS
#define GS_Q6_BOUNDS_4 GS_BOUNDS
#define GS_Q6_BOUNDS_5 GS_BOUNDS
#define GS_Q6_BOUNDS_6 GS_BOUNDS
#define GS_Q6_BOUNDS_7 GS_BOUNDS
#define GS_Q6_BOUNDS_8 GS_BOUNDS
#define GS_HEIGHT(B, R, NN_BOUNDS)                                                                             \
    GS_INSTANCES(B, R, _r##R, GS_TAIL)                                                                         \
    GS_INSTANCES(B, R, _r##R##_nn, GS_NO_NORM)                                                                 \
    GS_INSTANCES_D(B, R, _r##R, GS_TAIL, GS_BOUNDS)                                                            \
    GS_INSTANCES_D(B, R, _r##R##_nn, GS_NO_NORM, NN_BOUNDS)                                                    \
    GS_INSTANCES_D(B, R, _r##R##_gn, GS_GROUPS, GS_BOUNDS)
#define GS_HEIGHTS(B)                                                                                  \
    GS_HEIGHT(B, 2, GS_BOUNDS) GS_HEIGHT(B, 4, GS_NN4_BOUNDS_##B) GS_HEIGHT(B, 8, GS_BOUNDS)                   \
    GS_INSTANCE_Q6(B, 2, GS_BOUNDS) GS_INSTANCE_Q6(B, 4, GS_Q6_BOUNDS_##B) GS_INSTANCE_Q6(B, 8, GS_BOUNDS)

// These kernels take most of NVRTC's time, so mod.rs compiles them as compile units of their own, side by side:
// KVAD_GS_PART = p instantiates input counts 2p+1 and 2p+2 only, −1 none (the unit of all other kernels); unset,
// all of them.
#if !defined(KVAD_GS_PART) || KVAD_GS_PART == 0
GS_HEIGHTS(1)
GS_HEIGHTS(2)
GS_INSTANCE_GB(q8, 1, 4, f16_t)
GS_INSTANCE_GB(q8, 1, 8, f16_t)
GS_INSTANCE_GB(q4, 1, 8, f16_t)
#endif
#if !defined(KVAD_GS_PART) || KVAD_GS_PART == 1
GS_HEIGHTS(3)
GS_HEIGHTS(4)
#endif
#if !defined(KVAD_GS_PART) || KVAD_GS_PART == 2
GS_HEIGHTS(5)
GS_HEIGHTS(6)
#endif
#if !defined(KVAD_GS_PART) || KVAD_GS_PART == 3
GS_HEIGHTS(7)
GS_HEIGHTS(8)
#endif
