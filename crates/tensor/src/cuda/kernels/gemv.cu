// Decode products: y[b][n] (+)= sum_k W[n][k] * x[b][k] (+ bias[n]) for B <= 8 input rows.
// One warp computes ROWS output rows for all B inputs, so each weight byte is read once and each activation load
// serves ROWS rows. 16-byte weight loads; activations are f32 read through L1.

#define GEMV_ROWS 2
#define GEMV_WARPS 4

template <int B>
__device__ __forceinline__ void gemv_store(float (*acc)[GEMV_ROWS], float* y, const float* bias, int n0, int N,
                                           int accumulate) {
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int b = 0; b < B; b++) {
#pragma unroll
        for (int r = 0; r < GEMV_ROWS; r++) {
            float s = warp_sum(acc[b][r]);
            int n = n0 + r;
            if (lane == 0 && n < N) {
                if (bias) s += bias[n];
                float* o = y + (size_t)b * N + n;
                *o = accumulate ? *o + s : s;
            }
        }
    }
}

template <int B>
__device__ void gemv_bf16_t(const bf16_t* __restrict__ W, const float* __restrict__ x, float* y,
                            const float* __restrict__ bias, int N, int K, int accumulate) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int n0 = (blockIdx.x * GEMV_WARPS + warp) * GEMV_ROWS;
    if (n0 >= N) return;
    float acc[B][GEMV_ROWS];
#pragma unroll
    for (int b = 0; b < B; b++)
#pragma unroll
        for (int r = 0; r < GEMV_ROWS; r++) acc[b][r] = 0.0f;
    // 16-byte loads need every row to start on a 16-byte boundary; other widths take the scalar loop.
    int kv = (K % 8 == 0) ? K : 0;
    for (int k = lane * 8; k < kv; k += 256) {
        uint4 w[GEMV_ROWS];
#pragma unroll
        for (int r = 0; r < GEMV_ROWS; r++) {
            int n = min(n0 + r, N - 1);
            w[r] = __ldg((const uint4*)(W + (size_t)n * K + k));
        }
#pragma unroll
        for (int b = 0; b < B; b++) {
            float4 x0 = __ldg((const float4*)(x + (size_t)b * K + k));
            float4 x1 = __ldg((const float4*)(x + (size_t)b * K + k + 4));
#pragma unroll
            for (int r = 0; r < GEMV_ROWS; r++) {
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
        for (int r = 0; r < GEMV_ROWS; r++) {
            int n = min(n0 + r, N - 1);
            float wv = bf2f(W[(size_t)n * K + k]);
#pragma unroll
            for (int b = 0; b < B; b++) acc[b][r] = fmaf(wv, x[(size_t)b * K + k], acc[b][r]);
        }
    }
    gemv_store<B>(acc, y, bias, n0, N, accumulate);
}

// Q8: quants [N][K] int8, scales [N][K/32] f16. A lane takes 16 quants (half a block) per load.
template <int B>
__device__ void gemv_q8_t(const unsigned char* __restrict__ Q, const f16_t* __restrict__ S,
                          const float* __restrict__ x, float* y, const float* __restrict__ bias, int N, int K,
                          int accumulate) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int n0 = (blockIdx.x * GEMV_WARPS + warp) * GEMV_ROWS;
    if (n0 >= N) return;
    float acc[B][GEMV_ROWS];
#pragma unroll
    for (int b = 0; b < B; b++)
#pragma unroll
        for (int r = 0; r < GEMV_ROWS; r++) acc[b][r] = 0.0f;
    int nb = K / 32;
    for (int k = lane * 16; k < K; k += 512) {
        uint4 w[GEMV_ROWS];
        float d[GEMV_ROWS];
#pragma unroll
        for (int r = 0; r < GEMV_ROWS; r++) {
            int n = min(n0 + r, N - 1);
            w[r] = __ldg((const uint4*)(Q + (size_t)n * K + k));
            d[r] = h2f(__ldg(S + (size_t)n * nb + (k >> 5)));
            w[r].x ^= 0x80808080u; w[r].y ^= 0x80808080u; w[r].z ^= 0x80808080u; w[r].w ^= 0x80808080u;
        }
#pragma unroll
        for (int b = 0; b < B; b++) {
            const float4* xp = (const float4*)(x + (size_t)b * K + k);
            float4 xv[4] = {__ldg(xp), __ldg(xp + 1), __ldg(xp + 2), __ldg(xp + 3)};
            float xs = 0.0f;
#pragma unroll
            for (int i = 0; i < 4; i++) xs += (xv[i].x + xv[i].y) + (xv[i].z + xv[i].w);
#pragma unroll
            for (int r = 0; r < GEMV_ROWS; r++) {
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
    gemv_store<B>(acc, y, bias, n0, N, accumulate);
}

// Q4: quants [N][K/2] (per block of 32: byte j holds weight j low, j+16 high), dm [N][K/32] (f16 d, f16 m):
// weight = d*q + m. A lane takes one block (16 bytes) per load.
template <int B>
__device__ void gemv_q4_t(const unsigned char* __restrict__ Q, const unsigned* __restrict__ DM,
                          const float* __restrict__ x, float* y, const float* __restrict__ bias, int N, int K,
                          int accumulate) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int n0 = (blockIdx.x * GEMV_WARPS + warp) * GEMV_ROWS;
    if (n0 >= N) return;
    float acc[B][GEMV_ROWS];
#pragma unroll
    for (int b = 0; b < B; b++)
#pragma unroll
        for (int r = 0; r < GEMV_ROWS; r++) acc[b][r] = 0.0f;
    int nb = K / 32;
    for (int blk = lane; blk < nb; blk += 32) {
        uint4 w[GEMV_ROWS];
        float d[GEMV_ROWS], m[GEMV_ROWS];
#pragma unroll
        for (int r = 0; r < GEMV_ROWS; r++) {
            int n = min(n0 + r, N - 1);
            w[r] = __ldg((const uint4*)(Q + (size_t)n * (K / 2)) + blk);
            unsigned dm = __ldg(DM + (size_t)n * nb + blk);
            d[r] = h2f((f16_t)(dm & 0xffffu));
            m[r] = h2f((f16_t)(dm >> 16));
        }
#pragma unroll
        for (int b = 0; b < B; b++) {
            const float4* xp = (const float4*)(x + (size_t)b * K + blk * 32);
            float xs = 0.0f;
            float a[GEMV_ROWS];
#pragma unroll
            for (int r = 0; r < GEMV_ROWS; r++) a[r] = 0.0f;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float4 lo = __ldg(xp + i), hi = __ldg(xp + 4 + i);
                xs += (lo.x + lo.y) + (lo.z + lo.w) + (hi.x + hi.y) + (hi.z + hi.w);
#pragma unroll
                for (int r = 0; r < GEMV_ROWS; r++) {
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
            for (int r = 0; r < GEMV_ROWS; r++) acc[b][r] = fmaf(d[r], a[r], fmaf(m[r], xs, acc[b][r]));
        }
    }
    gemv_store<B>(acc, y, bias, n0, N, accumulate);
}

#define GEMV_INSTANCES(B)                                                                                      \
    extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)                                              \
        gemv_bf16_##B(const bf16_t* W, const float* x, float* y, const float* bias, int N, int K, int acc) {    \
        gemv_bf16_t<B>(W, x, y, bias, N, K, acc);                                                              \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)                                              \
        gemv_q8_##B(const unsigned char* Q, const f16_t* S, const float* x, float* y, const float* bias, int N, \
                    int K, int acc) {                                                                          \
        gemv_q8_t<B>(Q, S, x, y, bias, N, K, acc);                                                             \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)                                              \
        gemv_q4_##B(const unsigned char* Q, const unsigned* DM, const float* x, float* y, const float* bias,    \
                    int N, int K, int acc) {                                                                   \
        gemv_q4_t<B>(Q, DM, x, y, bias, N, K, acc);                                                            \
    }

GEMV_INSTANCES(1)
GEMV_INSTANCES(2)
GEMV_INSTANCES(3)
GEMV_INSTANCES(4)
GEMV_INSTANCES(5)
GEMV_INSTANCES(6)
GEMV_INSTANCES(7)
GEMV_INSTANCES(8)
