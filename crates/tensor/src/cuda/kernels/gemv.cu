// Decode products: y[b][n] (+)= sum_k W[n][k] * x'[b][k] (+ bias[n]) for B <= 8 input rows, where x' is x, or
// RMSNorm(x)·g when `g` is given (the norm folded into the product: every warp reads the whole of x anyway, so it
// sums x² on the way and scales its dot products at the end; no separate norm kernel, no normed copy of x).
// One warp computes ROWS output rows for all B inputs, so each weight byte is read once and each activation load
// serves ROWS rows. 16-byte weight loads; activations are f32 read through L1.

#define GEMV_WARPS 4

template <int B, int ROWS>
__device__ __forceinline__ void gemv_store(float (*acc)[ROWS], const float* ss, float* y, const float* bias, int n0,
                                           int N, int K, float eps, bool norm, int accumulate) {
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int b = 0; b < B; b++) {
        float scale = norm ? rsqrtf(warp_sum(ss[b]) / (float)K + eps) : 1.0f;
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            float s = warp_sum(acc[b][r]) * scale;
            int n = n0 + r;
            if (lane == 0 && n < N) {
                if (bias) s += bias[n];
                float* o = y + (size_t)b * N + n;
                *o = accumulate ? *o + s : s;
            }
        }
    }
}

// Loads 4 activations (and their norm weights): x'·g into v, x² into ss.
template <bool NORM>
__device__ __forceinline__ float4 load_x4(const float* x, const float* g, float& ss) {
    float4 v = __ldg((const float4*)x);
    if (NORM) {
        float4 w = __ldg((const float4*)g);
        ss = fmaf(v.x, v.x, fmaf(v.y, v.y, fmaf(v.z, v.z, fmaf(v.w, v.w, ss))));
        v.x *= w.x; v.y *= w.y; v.z *= w.z; v.w *= w.w;
    }
    return v;
}

template <int B, int ROWS, bool NORM>
__device__ void gemv_bf16_t(const bf16_t* __restrict__ W, const float* __restrict__ x, float* y,
                            const float* __restrict__ bias, int N, int K, int accumulate,
                            const float* __restrict__ g, float eps) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int n0 = (blockIdx.x * GEMV_WARPS + warp) * ROWS;
    if (n0 >= N) return;
    float acc[B][ROWS], ss[B];
#pragma unroll
    for (int b = 0; b < B; b++) {
        ss[b] = 0.0f;
#pragma unroll
        for (int r = 0; r < ROWS; r++) acc[b][r] = 0.0f;
    }
    // 16-byte loads need every row to start on a 16-byte boundary; other widths take the scalar loop.
    int kv = (K % 8 == 0) ? K : 0;
    for (int k = lane * 8; k < kv; k += 256) {
        uint4 w[ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            int n = min(n0 + r, N - 1);
            w[r] = __ldg((const uint4*)(W + (size_t)n * K + k));
        }
#pragma unroll
        for (int b = 0; b < B; b++) {
            float4 x0 = load_x4<NORM>(x + (size_t)b * K + k, g + k, ss[b]);
            float4 x1 = load_x4<NORM>(x + (size_t)b * K + k + 4, g + k + 4, ss[b]);
#pragma unroll
            for (int r = 0; r < ROWS; r++) {
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
    for (int k = kv + lane; k < K; k += 32) {
#pragma unroll
        for (int b = 0; b < B; b++) {
            float xv = x[(size_t)b * K + k];
            if (NORM) {
                ss[b] = fmaf(xv, xv, ss[b]);
                xv *= g[k];
            }
#pragma unroll
            for (int r = 0; r < ROWS; r++) {
                int n = min(n0 + r, N - 1);
                acc[b][r] = fmaf(bf2f(W[(size_t)n * K + k]), xv, acc[b][r]);
            }
        }
    }
    gemv_store<B, ROWS>(acc, ss, y, bias, n0, N, K, eps, NORM, accumulate);
}

// Q8: quants [N][K] int8, scales [N][K/32] f16. A lane takes 16 quants (half a block) per load.
template <int B, int ROWS, bool NORM>
__device__ void gemv_q8_t(const unsigned char* __restrict__ Q, const f16_t* __restrict__ S,
                          const float* __restrict__ x, float* y, const float* __restrict__ bias, int N, int K,
                          int accumulate, const float* __restrict__ g, float eps) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int n0 = (blockIdx.x * GEMV_WARPS + warp) * ROWS;
    if (n0 >= N) return;
    float acc[B][ROWS], ss[B];
#pragma unroll
    for (int b = 0; b < B; b++) {
        ss[b] = 0.0f;
#pragma unroll
        for (int r = 0; r < ROWS; r++) acc[b][r] = 0.0f;
    }
    int nb = K / 32;
    for (int k = lane * 16; k < K; k += 512) {
        uint4 w[ROWS];
        float d[ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            int n = min(n0 + r, N - 1);
            w[r] = __ldg((const uint4*)(Q + (size_t)n * K + k));
            d[r] = h2f(__ldg(S + (size_t)n * nb + (k >> 5)));
            w[r].x ^= 0x80808080u; w[r].y ^= 0x80808080u; w[r].z ^= 0x80808080u; w[r].w ^= 0x80808080u;
        }
#pragma unroll
        for (int b = 0; b < B; b++) {
            const float* xb = x + (size_t)b * K + k;
            float4 xv[4];
#pragma unroll
            for (int i = 0; i < 4; i++) xv[i] = load_x4<NORM>(xb + 4 * i, g + k + 4 * i, ss[b]);
            float xs = 0.0f;
#pragma unroll
            for (int i = 0; i < 4; i++) xs += (xv[i].x + xv[i].y) + (xv[i].z + xv[i].w);
#pragma unroll
            for (int r = 0; r < ROWS; r++) {
                // (q + 128) through the magic number; the 128s come off once per 16 through the sum of x.
                unsigned ws[4] = {w[r].x, w[r].y, w[r].z, w[r].w};
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
    gemv_store<B, ROWS>(acc, ss, y, bias, n0, N, K, eps, NORM, accumulate);
}

// Q4: quants [N][K/2] (per block of 32: byte j holds weight j low, j+16 high), scales [N][K/32] (f16 d):
// weight = d*q + m, m = −8d. A lane takes one block (16 bytes) per load.
template <int B, int ROWS, bool NORM>
__device__ void gemv_q4_t(const unsigned char* __restrict__ Q, const f16_t* __restrict__ DS,
                          const float* __restrict__ x, float* y, const float* __restrict__ bias, int N, int K,
                          int accumulate, const float* __restrict__ g, float eps) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int n0 = (blockIdx.x * GEMV_WARPS + warp) * ROWS;
    if (n0 >= N) return;
    float acc[B][ROWS], ss[B];
#pragma unroll
    for (int b = 0; b < B; b++) {
        ss[b] = 0.0f;
#pragma unroll
        for (int r = 0; r < ROWS; r++) acc[b][r] = 0.0f;
    }
    int nb = K / 32;
    for (int blk = lane; blk < nb; blk += 32) {
        uint4 w[ROWS];
        float d[ROWS], m[ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            int n = min(n0 + r, N - 1);
            w[r] = __ldg((const uint4*)(Q + (size_t)n * (K / 2)) + blk);
            d[r] = h2f(__ldg(DS + (size_t)n * nb + blk));
            m[r] = q4_min(d[r]);
        }
#pragma unroll
        for (int b = 0; b < B; b++) {
            const float* xb = x + (size_t)b * K + blk * 32;
            const float* gb = g + blk * 32;
            float xs = 0.0f;
            float a[ROWS];
#pragma unroll
            for (int r = 0; r < ROWS; r++) a[r] = 0.0f;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float4 lo = load_x4<NORM>(xb + 4 * i, gb + 4 * i, ss[b]);
                float4 hi = load_x4<NORM>(xb + 16 + 4 * i, gb + 16 + 4 * i, ss[b]);
                xs += (lo.x + lo.y) + (lo.z + lo.w) + (hi.x + hi.y) + (hi.z + hi.w);
#pragma unroll
                for (int r = 0; r < ROWS; r++) {
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
            for (int r = 0; r < ROWS; r++) acc[b][r] = fmaf(d[r], a[r], fmaf(m[r], xs, acc[b][r]));
        }
    }
    gemv_store<B, ROWS>(acc, ss, y, bias, n0, N, K, eps, NORM, accumulate);
}

// Rows per warp: bf16 reads 2 weight bytes per activation it multiplies; the block formats read 1 or 0.5, so
// more rows share each activation load to keep L1 traffic below the weight stream.
#define ROWS_BF16 2
#define ROWS_Q8 2
#define ROWS_Q4 4

#define GEMV_INSTANCES(B, NORM, SUFFIX)                                                                        \
    extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)                                              \
        gemv_bf16_##B##SUFFIX(const bf16_t* W, const float* x, float* y, const float* bias, int N, int K,      \
                              int acc, const float* g, float eps) {                                            \
        PDL_ENTER();                                                                                           \
        gemv_bf16_t<B, ROWS_BF16, NORM>(W, x, y, bias, N, K, acc, g, eps);                                     \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)                                              \
        gemv_q8_##B##SUFFIX(const unsigned char* Q, const f16_t* S, const float* x, float* y,                  \
                            const float* bias, int N, int K, int acc, const float* g, float eps) {             \
        PDL_ENTER();                                                                                           \
        gemv_q8_t<B, ROWS_Q8, NORM>(Q, S, x, y, bias, N, K, acc, g, eps);                                      \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)                                              \
        gemv_q4_##B##SUFFIX(const unsigned char* Q, const f16_t* DS, const float* x, float* y,              \
                            const float* bias, int N, int K, int acc, const float* g, float eps) {             \
        PDL_ENTER();                                                                                           \
        gemv_q4_t<B, ROWS_Q4, NORM>(Q, DS, x, y, bias, N, K, acc, g, eps);                                     \
    }

#define GEMV_BOTH(B) GEMV_INSTANCES(B, false, ) GEMV_INSTANCES(B, true, _rms)
GEMV_BOTH(1)
GEMV_BOTH(2)
GEMV_BOTH(3)
GEMV_BOTH(4)
GEMV_BOTH(5)
GEMV_BOTH(6)
GEMV_BOTH(7)
GEMV_BOTH(8)
