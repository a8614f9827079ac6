// The fallback product for bf16 weights whose width is not a whole number of blocks of 32, which the split kernels
// (gemv_split.cu) do not take: y[b][n] (+)= sum_k W[n][k] * x[b][k] (+ bias[n]) for B <= 8 input rows. Every other
// decode product runs the split kernels; the block formats are always whole blocks.
// One warp computes ROWS output rows for all B inputs, so each weight byte is read once and each activation load
// serves ROWS rows. 16-byte weight loads where the width allows; activations are f32 read through L1.

#define GEMV_WARPS 4

template <int B, int ROWS>
__device__ __forceinline__ void gemv_store(float (*acc)[ROWS], float* y, const float* bias, int n0, int N,
                                           int accumulate) {
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int b = 0; b < B; b++) {
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
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

template <int B, int ROWS>
__device__ void gemv_bf16_t(const bf16_t* __restrict__ W, const float* __restrict__ x, float* y,
                            const float* __restrict__ bias, int N, int K, int accumulate) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int n0 = (blockIdx.x * GEMV_WARPS + warp) * ROWS;
    if (n0 >= N) return;
    float acc[B][ROWS];
#pragma unroll
    for (int b = 0; b < B; b++) {
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
            float4 x0 = __ldg((const float4*)(x + (size_t)b * K + k));
            float4 x1 = __ldg((const float4*)(x + (size_t)b * K + k + 4));
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
#pragma unroll
            for (int r = 0; r < ROWS; r++) {
                int n = min(n0 + r, N - 1);
                acc[b][r] = fmaf(bf2f(W[(size_t)n * K + k]), xv, acc[b][r]);
            }
        }
    }
    gemv_store<B, ROWS>(acc, y, bias, n0, N, accumulate);
}

// Rows per warp: bf16 reads 2 weight bytes per activation it multiplies, so 2 rows share each activation load
// (ops.rs launches blocks of GEMV_WARPS · ROWS_BF16 = 8 rows).
#define ROWS_BF16 2

#define GEMV_INSTANCE(B)                                                                                       \
    extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)                                              \
        gemv_bf16_##B(const bf16_t* W, const float* x, float* y, const float* bias, int N, int K, int acc) {   \
        PDL_ENTER();                                                                                           \
        gemv_bf16_t<B, ROWS_BF16>(W, x, y, bias, N, K, acc);                                                   \
    }

GEMV_INSTANCE(1)
GEMV_INSTANCE(2)
GEMV_INSTANCE(3)
GEMV_INSTANCE(4)
GEMV_INSTANCE(5)
GEMV_INSTANCE(6)
GEMV_INSTANCE(7)
GEMV_INSTANCE(8)
