// The split products with f32 activations (gemv_split.cuh's scheme): bf16, q8 and q4 weights. Decode runs them
// for bf16 weights, and for q8/q4 products wider than the 8-bit activations' scratch (ops.rs).

template <int B, int R, int NORM>
__device__ void gs_bf16(const bf16_t* __restrict__ W, const float* __restrict__ x, float* y,
                        const float* __restrict__ bias, int N, int K, int accumulate, NORM_PARAMS) {
    int lane = threadIdx.x & 31, n0 = blockIdx.x * R, c0, c1;
    split_range(K / 8, c0, c1);
    float acc[B][R];
#pragma unroll
    for (int b = 0; b < B; b++)
#pragma unroll
        for (int r = 0; r < R; r++) acc[b][r] = 0.0f;
    // bf16 lanes walk several chunks: their loop kept as it was measured best, the first chunk asked of L2 before
    // the wait (loading it into registers there measured slower).
    if (c0 + lane < c1) {
#pragma unroll
        for (int r = 0; r < R; r++) prefetch_l2(W + (size_t)min(n0 + r, N - 1) * K + (c0 + lane) * 8);
    }
    if (NORM == GS_NO_NORM) ng = nullptr;  // the norm-free instances: no tail code, fewer registers
    PDL_ENTER_NORM(ng);
    for (int c = c0 + lane; c < c1; c += 32) {
        int k = c * 8;
        uint4 w[R];
#pragma unroll
        for (int r = 0; r < R; r++) w[r] = __ldg((const uint4*)(W + (size_t)min(n0 + r, N - 1) * K + k));
#pragma unroll
        for (int b = 0; b < B; b++) {
            float4 x0 = __ldg((const float4*)(x + (size_t)b * K + k));
            float4 x1 = __ldg((const float4*)(x + (size_t)b * K + k + 4));
#pragma unroll
            for (int r = 0; r < R; r++) {
                float a = acc[b][r];
                a = fmaf(__uint_as_float(w[r].x << 16), x0.x, a);
                a = fmaf(__uint_as_float(w[r].x & 0xffff0000u), x0.y, a);
                a = fmaf(__uint_as_float(w[r].y << 16), x0.z, a);
                a = fmaf(__uint_as_float(w[r].y & 0xffff0000u), x0.w, a);
                a = fmaf(__uint_as_float(w[r].z << 16), x1.x, a);
                a = fmaf(__uint_as_float(w[r].z & 0xffff0000u), x1.y, a);
                a = fmaf(__uint_as_float(w[r].w << 16), x1.z, a);
                a = fmaf(__uint_as_float(w[r].w & 0xffff0000u), x1.w, a);
                acc[b][r] = a;
            }
        }
    }
    split_store<B, R>(acc, y, bias, n0, N, accumulate);
    if (NORM == GS_TAIL && ng) split_norm_tail<B, false, true>(y, N, NORM_ARGS);
}

// Q8: a chunk is half a block (16 quants); the block's f16 scale comes with it.
template <int B, int R, int NORM>
__device__ void gs_q8(const unsigned char* __restrict__ Q, const f16_t* __restrict__ S, const float* __restrict__ x,
                      float* y, const float* __restrict__ bias, int N, int K, int accumulate, NORM_PARAMS) {
    int lane = threadIdx.x & 31, n0 = blockIdx.x * R, c0, c1;
    split_range(K / 16, c0, c1);
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
            const float* xb = x + (size_t)b * K + k;
            float4 xv[4];
#pragma unroll
            for (int i = 0; i < 4; i++) xv[i] = __ldg((const float4*)(xb + 4 * i));
            float xs = 0.0f;
#pragma unroll
            for (int i = 0; i < 4; i++) xs += (xv[i].x + xv[i].y) + (xv[i].z + xv[i].w);
#pragma unroll
            for (int r = 0; r < R; r++) {
                // (q + 128) through the magic number; the 128s come off once per chunk through the sum of x.
                unsigned ws[4] = {w[r].x ^ 0x80808080u, w[r].y ^ 0x80808080u, w[r].z ^ 0x80808080u,
                                  w[r].w ^ 0x80808080u};
                float a = 0.0f;
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    a = fmaf(byte_f(ws[i], 0), xv[i].x, a);
                    a = fmaf(byte_f(ws[i], 1), xv[i].y, a);
                    a = fmaf(byte_f(ws[i], 2), xv[i].z, a);
                    a = fmaf(byte_f(ws[i], 3), xv[i].w, a);
                }
                acc[b][r] = fmaf(d[r], a - 128.0f * xs, acc[b][r]);
            }
        }
    }
    split_store<B, R>(acc, y, bias, n0, N, accumulate);
    if (NORM == GS_TAIL && ng) split_norm_tail<B, false, true>(y, N, NORM_ARGS);
}

// Q4: a chunk is one block (16 bytes: byte j holds weight j low, j+16 high) with its f16 scale d (the minimum −8d).
template <int B, int R, int NORM>
__device__ void gs_q4(const unsigned char* __restrict__ Q, const f16_t* __restrict__ QS,
                      const float* __restrict__ x, float* y, const float* __restrict__ bias, int N, int K,
                      int accumulate, NORM_PARAMS) {
    int lane = threadIdx.x & 31, n0 = blockIdx.x * R, c0, c1;
    int nb = K / 32;
    split_range(nb, c0, c1);
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
            const float* xb = x + (size_t)b * K + blk * 32;
            float xs = 0.0f;
            float a[R];
#pragma unroll
            for (int r = 0; r < R; r++) a[r] = 0.0f;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float4 lo = __ldg((const float4*)(xb + 4 * i));
                float4 hi = __ldg((const float4*)(xb + 16 + 4 * i));
                xs += (lo.x + lo.y) + (lo.z + lo.w) + (hi.x + hi.y) + (hi.z + hi.w);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    unsigned ws = i == 0 ? w[r].x : i == 1 ? w[r].y : i == 2 ? w[r].z : w[r].w;
                    unsigned l = ws & 0x0f0f0f0fu, h = (ws >> 4) & 0x0f0f0f0fu;
                    float t = a[r];
                    t = fmaf(byte_f(l, 0), lo.x, t);
                    t = fmaf(byte_f(l, 1), lo.y, t);
                    t = fmaf(byte_f(l, 2), lo.z, t);
                    t = fmaf(byte_f(l, 3), lo.w, t);
                    t = fmaf(byte_f(h, 0), hi.x, t);
                    t = fmaf(byte_f(h, 1), hi.y, t);
                    t = fmaf(byte_f(h, 2), hi.z, t);
                    t = fmaf(byte_f(h, 3), hi.w, t);
                    a[r] = t;
                }
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
                float d = h2f(qd[r]), m = q4_min(d);
                acc[b][r] = fmaf(d, a[r], fmaf(m, xs, acc[b][r]));
            }
        }
    }
    split_store<B, R>(acc, y, bias, n0, N, accumulate);
    if (NORM == GS_TAIL && ng) split_norm_tail<B, false, false>(y, N, NORM_ARGS);
}

#define GS_INSTANCES(B, R, SUFFIX, NORM)                                                                       \
    extern "C" __global__ void __launch_bounds__(GS_WARPS * 32)                                                \
        gemvs_bf16_##B##SUFFIX(const bf16_t* W, const float* x, float* y, const float* bias, int N, int K,     \
                               int acc, NORM_PARAMS) {                                                         \
        gs_bf16<B, R, NORM>(W, x, y, bias, N, K, acc, NORM_ARGS);                                          \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(GS_WARPS * 32)                                                \
        gemvs_q8_##B##SUFFIX(const unsigned char* Q, const f16_t* S, const float* x, float* y,                 \
                             const float* bias, int N, int K, int acc, NORM_PARAMS) {                          \
        gs_q8<B, R, NORM>(Q, S, x, y, bias, N, K, acc, NORM_ARGS);                                         \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(GS_WARPS * 32)                                                \
        gemvs_q4_##B##SUFFIX(const unsigned char* Q, const f16_t* QS, const float* x, float* y,             \
                             const float* bias, int N, int K, int acc, NORM_PARAMS) {                          \
        gs_q4<B, R, NORM>(Q, QS, x, y, bias, N, K, acc, NORM_ARGS);                                        \
    }
