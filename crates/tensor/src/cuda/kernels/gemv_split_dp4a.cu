// The split products (gemv_split.cuh's scheme) with activations in two 8-bit terms (quant_act8 in quant.cu: x ≈
// d·(q1 + q2/254), the CPU's i16 precision), for q8, q4 and q6 weights — what decode runs on the block formats:
// `dp4a` multiplies four weight bytes by four activation bytes and adds them into an integer, two per four weights,
// where the f32 kernels (gemv_split_f32.cu) spend an extraction and an FMA per weight; the activations are read as
// bytes, half the f32 traffic. A lane's chunks, the warp sum and the quarter-sums keep gemv_split.cuh's fixed
// order, so a row's sum does not depend on B or the block height.

// Sixteen q8 weights against sixteen activation bytes of one term: four dp4a (integer sums, exact in any order).
__device__ __forceinline__ int dp4a_q8(uint4 w, int4 x) {
    int s = __dp4a((int)w.x, x.x, 0);
    s = __dp4a((int)w.y, x.y, s);
    s = __dp4a((int)w.z, x.z, s);
    return __dp4a((int)w.w, x.w, s);
}

// A q4 block's low and high nibbles (weights 0..15 and 16..31) against one activation term's two halves.
__device__ __forceinline__ int dp4a_q4(const int (&wl)[4], const int (&wh)[4], int4 lo, int4 hi) {
    int s = __dp4a(wl[0], lo.x, 0);
    s = __dp4a(wh[0], hi.x, s);
    s = __dp4a(wl[1], lo.y, s);
    s = __dp4a(wh[1], hi.y, s);
    s = __dp4a(wl[2], lo.z, s);
    s = __dp4a(wh[2], hi.z, s);
    s = __dp4a(wl[3], lo.w, s);
    return __dp4a(wh[3], hi.w, s);
}

// The dp4a products' end: the store (with the deferred rows' 1/rms in the norm-free instances, the only ones that
// take deferred rows, ops.rs), then the norm tail or the deferred norm's groups (counted, or whole in the block:
// `_gb`, SUB sub-blocks: no counter's chain at the end). A deferring product lets the next kernel launch once every
// block's weights are in: its groups' chain is L2 traffic, which the next product's first weight loads overlap.
template <int B, int R, int NORM, bool Q8, int SUB = 1>
__device__ __forceinline__ void gs_d_finish(float (&acc)[B][R], float* y, const float* __restrict__ bias, int n0,
                                            int N, int K, int accumulate, const float* __restrict__ xss,
                                            float xeps, NORM_PARAMS, float* nss) {
    if (NORM == GS_GROUPS || NORM == GS_GROUPS_BLOCK) pdl_trigger();
    if constexpr (NORM == GS_GROUPS_BLOCK) {
        static_assert(SUB * R == 32, "a block of one group");
        __shared__ __align__(16) float ys[B * 32];
        // The norm's weights for the thread's four columns of the group, asked for before the sums.
        float4 w = __ldg((const float4*)(ng + blockIdx.x * 32 + (threadIdx.x & 7) * 4));
        split_store<B, R, SUB>(acc, y, bias, n0, N, accumulate, nullptr, K, xeps, ys);
        split_groups_block<B>(ys, w, N, nq, nq2, nds, nss);
    } else {
        split_store<B, R>(acc, y, bias, n0, N, accumulate, NORM == GS_NO_NORM ? xss : nullptr, K, xeps);
        if (NORM == GS_TAIL && ng) split_norm_tail<B, true, Q8>(y, N, NORM_ARGS);
        if (NORM == GS_GROUPS && ng) split_norm_groups<B, R>(y, N, ng, counter, nq, nq2, nds, nss);
    }
}

template <int B, int R, int NORM, int SUB = 1>
__device__ void gs_q8d(const unsigned char* __restrict__ Q, const f16_t* __restrict__ S,
                       const signed char* __restrict__ xq, const signed char* __restrict__ xq2,
                       const float2* __restrict__ xds, const float* __restrict__ xss, float xeps, float* y,
                       const float* __restrict__ bias, int N, int K, int accumulate, NORM_PARAMS, float* nss) {
    int lane = threadIdx.x & 31, n0 = (blockIdx.x * SUB + gs_sub<SUB>()) * R, c0, c1;
    split_range<SUB>(K / 16, c0, c1);
    int nb = K / 32;
    float acc[B][R];
#pragma unroll
    for (int b = 0; b < B; b++)
#pragma unroll
        for (int r = 0; r < R; r++) acc[b][r] = 0.0f;
    uint4 w[R];
    float d[R];
    // The first chunk's weights are loaded before the wait: they do not depend on the kernel before.
    if (c0 + lane < c1) load_q8<R>(Q, S, n0, N, K, c0 + lane, w, d);
    if (NORM == GS_NO_NORM) ng = nullptr;  // the norm-free instances: no tail code, fewer registers
    PDL_ENTER_NORM(ng);
    for (int c = c0 + lane; c < c1; c += 32) {
        int k = c * 16;
        if (c != c0 + lane) load_q8<R>(Q, S, n0, N, K, c, w, d);
#pragma unroll
        for (int b = 0; b < B; b++) {
            int4 xv = __ldg((const int4*)(xq + (size_t)b * K + k));
            int4 xv2 = __ldg((const int4*)(xq2 + (size_t)b * K + k));
            float dx = __ldg(&xds[(size_t)b * nb + (k >> 5)].x);
#pragma unroll
            for (int r = 0; r < R; r++) {
                int isum = dp4a_q8(w[r], xv), isum2 = dp4a_q8(w[r], xv2);
                acc[b][r] = fmaf(d[r] * dx, fmaf((float)isum2, 1.0f / 254.0f, (float)isum), acc[b][r]);
            }
        }
    }
    gs_d_finish<B, R, NORM, true, SUB>(acc, y, bias, n0, N, K, accumulate, xss, xeps, NORM_ARGS, nss);
}

template <int B, int R, int NORM, int SUB = 1>
__device__ void gs_q4d(const unsigned char* __restrict__ Q, const f16_t* __restrict__ QS,
                       const signed char* __restrict__ xq, const signed char* __restrict__ xq2,
                       const float2* __restrict__ xds, const float* __restrict__ xss, float xeps, float* y,
                       const float* __restrict__ bias, int N, int K, int accumulate, NORM_PARAMS, float* nss) {
    int lane = threadIdx.x & 31, n0 = (blockIdx.x * SUB + gs_sub<SUB>()) * R, c0, c1;
    int nb = K / 32;
    split_range<SUB>(nb, c0, c1);
    float acc[B][R];
#pragma unroll
    for (int b = 0; b < B; b++)
#pragma unroll
        for (int r = 0; r < R; r++) acc[b][r] = 0.0f;
    uint4 w[R];
    f16_t qd[R];
    if (c0 + lane < c1) load_q4<R>(Q, QS, n0, N, K, c0 + lane, w, qd);
    if (NORM == GS_NO_NORM) ng = nullptr;  // the norm-free instances: no tail code, fewer registers
    PDL_ENTER_NORM(ng);
    for (int blk = c0 + lane; blk < c1; blk += 32) {
        if (blk != c0 + lane) load_q4<R>(Q, QS, n0, N, K, blk, w, qd);
#pragma unroll
        for (int b = 0; b < B; b++) {
            const int4* xb = (const int4*)(xq + (size_t)b * K + blk * 32);
            const int4* xb2 = (const int4*)(xq2 + (size_t)b * K + blk * 32);
            int4 lo = __ldg(xb), hi = __ldg(xb + 1), lo2 = __ldg(xb2), hi2 = __ldg(xb2 + 1);
            float2 ds = __ldg(&xds[(size_t)b * nb + blk]);
#pragma unroll
            for (int r = 0; r < R; r++) {
                unsigned m = 0x0f0f0f0fu;
                int wl[4] = {(int)(w[r].x & m), (int)(w[r].y & m), (int)(w[r].z & m), (int)(w[r].w & m)};
                int wh[4] = {(int)((w[r].x >> 4) & m), (int)((w[r].y >> 4) & m), (int)((w[r].z >> 4) & m),
                             (int)((w[r].w >> 4) & m)};
                int isum = dp4a_q4(wl, wh, lo, hi), isum2 = dp4a_q4(wl, wh, lo2, hi2);
                float d = h2f(qd[r]), mn = q4_min(d);
                acc[b][r] = fmaf(d * ds.x, fmaf((float)isum2, 1.0f / 254.0f, (float)isum), fmaf(mn, ds.y, acc[b][r]));
            }
        }
    }
    gs_d_finish<B, R, NORM, false, SUB>(acc, y, bias, n0, N, K, accumulate, xss, xeps, NORM_ARGS, nss);
}

// Q6 (the q4 backends' output head, matrix.rs): a chunk is one block, its low nibbles as Q4's (16 bytes) and their
// two high bits (8 bytes, q6_word in common.cuh) with the f16 scale; weights d·v − 32d for v = q + 32 in 1..=63, the
// minimum taken through the activations' sum as Q4's. Only norm-free instances (a head norms nothing after it).
// load_q4's nibbles and scales, then the blocks' high bits.
template <int R>
__device__ __forceinline__ void load_q6(const unsigned char* __restrict__ Q, const unsigned char* __restrict__ QH,
                                        const f16_t* __restrict__ QS, int n0, int N, int K, int blk, uint4 (&w)[R],
                                        uint2 (&h)[R], f16_t (&qd)[R]) {
    load_q4<R>(Q, QS, n0, N, K, blk, w, qd);
#pragma unroll
    for (int r = 0; r < R; r++) h[r] = __ldg((const uint2*)(QH + (size_t)min(n0 + r, N - 1) * (K / 4)) + blk);
}

template <int B, int R>
__device__ void gs_q6d(const unsigned char* __restrict__ Q, const f16_t* __restrict__ QS,
                       const signed char* __restrict__ xq, const signed char* __restrict__ xq2,
                       const float2* __restrict__ xds, const float* __restrict__ xss, float xeps, float* y,
                       const float* __restrict__ bias, int N, int K, int accumulate) {
    int lane = threadIdx.x & 31, n0 = blockIdx.x * R, c0, c1;
    int nb = K / 32;
    const unsigned char* QH = Q + (size_t)N * (K / 2);
    split_range(nb, c0, c1);
    float acc[B][R];
#pragma unroll
    for (int b = 0; b < B; b++)
#pragma unroll
        for (int r = 0; r < R; r++) acc[b][r] = 0.0f;
    uint4 w[R];
    uint2 h[R];
    f16_t qd[R];
    if (c0 + lane < c1) load_q6<R>(Q, QH, QS, n0, N, K, c0 + lane, w, h, qd);
    PDL_ENTER_NORM(nullptr);
    for (int blk = c0 + lane; blk < c1; blk += 32) {
        if (blk != c0 + lane) load_q6<R>(Q, QH, QS, n0, N, K, blk, w, h, qd);
#pragma unroll
        for (int b = 0; b < B; b++) {
            const int4* xb = (const int4*)(xq + (size_t)b * K + blk * 32);
            const int4* xb2 = (const int4*)(xq2 + (size_t)b * K + blk * 32);
            int4 lo = __ldg(xb), hi = __ldg(xb + 1), lo2 = __ldg(xb2), hi2 = __ldg(xb2 + 1);
            float2 ds = __ldg(&xds[(size_t)b * nb + blk]);
            const int xl[4] = {lo.x, lo.y, lo.z, lo.w}, xh[4] = {hi.x, hi.y, hi.z, hi.w};
            const int xl2[4] = {lo2.x, lo2.y, lo2.z, lo2.w}, xh2[4] = {hi2.x, hi2.y, hi2.z, hi2.w};
#pragma unroll
            for (int r = 0; r < R; r++) {
                // A word's two unpacked halves used at once by both terms (integer sums: any order, the same).
                int isum = 0, isum2 = 0;
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    int wl = (int)q6_word(w[r], h[r], i), wh = (int)q6_word(w[r], h[r], i + 4);
                    isum = __dp4a(wh, xh[i], __dp4a(wl, xl[i], isum));
                    isum2 = __dp4a(wh, xh2[i], __dp4a(wl, xl2[i], isum2));
                }
                float d = h2f(qd[r]);
                acc[b][r] = fmaf(d * ds.x, fmaf((float)isum2, 1.0f / 254.0f, (float)isum), fmaf(q6_min(d), ds.y, acc[b][r]));
            }
        }
    }
    split_store<B, R>(acc, y, bias, n0, N, accumulate, xss, K, xeps);
}

#define GS_INSTANCE_Q6(B, R, BOUNDS)                                                                           \
    extern "C" __global__ void __launch_bounds__(BOUNDS())                                                     \
        gemvs_q6d_##B##_r##R##_nn(const unsigned char* Q, const f16_t* QS, const signed char* xq,              \
                                  const signed char* xq2, const float2* xds, const float* xss, float xeps,     \
                                  float* y, const float* bias, int N, int K, int acc, NORM_PARAMS,            \
                                  float* nss) {                                                               \
        gs_q6d<B, R>(Q, QS, xq, xq2, xds, xss, xeps, y, bias, N, K, acc);                                      \
    }

#define GS_INSTANCES_D(B, R, SUFFIX, NORM, Q4_BOUNDS)                                                          \
    extern "C" __global__ void __launch_bounds__(GS_WARPS * 32)                                                \
        gemvs_q8d_##B##SUFFIX(const unsigned char* Q, const f16_t* S, const signed char* xq,                   \
                              const signed char* xq2, const float2* xds, const float* xss, float xeps, float* y,        \
                              const float* bias, int N, int K, int acc, NORM_PARAMS, float* nss) {            \
        gs_q8d<B, R, NORM>(Q, S, xq, xq2, xds, xss, xeps, y, bias, N, K, acc, NORM_ARGS, nss);               \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(Q4_BOUNDS())                                                  \
        gemvs_q4d_##B##SUFFIX(const unsigned char* Q, const f16_t* QS, const signed char* xq,               \
                              const signed char* xq2, const float2* xds, const float* xss, float xeps, float* y,        \
                              const float* bias, int N, int K, int acc, NORM_PARAMS, float* nss) {            \
        gs_q4d<B, R, NORM>(Q, QS, xq, xq2, xds, xss, xeps, y, bias, N, K, acc, NORM_ARGS, nss);              \
    }

// The deferring products with their group in one block (`_gb`: GS_GROUPS_BLOCK, 32/R sub-blocks of GS_WARPS warps,
// one block of 32 rows), for one input — the o and down products of one-stream decode (ops.rs) — at the heights
// whose sub-blocks fit: q8 at 4 and 8, q4 at 8. q4 at 4, and q4 at 8 asked for 2 blocks an SM, spilled and were
// slower (docs/performance-gpu.md).
#define GS_INSTANCE_GB(F, B, R, ST)                                                                            \
    extern "C" __global__ void __launch_bounds__(GS_WARPS * 32 * (32 / R), 1)                                 \
        gemvs_##F##d_##B##_r##R##_gb(const unsigned char* Q, const ST* S, const signed char* xq,              \
                                     const signed char* xq2, const float2* xds, const float* xss, float xeps,  \
                                     float* y, const float* bias, int N, int K, int acc, NORM_PARAMS,         \
                                     float* nss) {                                                            \
        gs_##F##d<B, R, GS_GROUPS_BLOCK, 32 / R>(Q, S, xq, xq2, xds, xss, xeps, y, bias, N, K, acc, NORM_ARGS, nss); \
    }
