// Mixture-of-experts on the device: the router's logits (f32 weights on f32 rows, as the CPU computes them), each
// row's choice made exactly as kvad-models' route.rs makes it, the chosen experts' products as GEMVs whose matrices
// are picked on the device from a table of addresses (so a decode pass recorded as a graph replays whatever the
// router chooses), and the weighted sum added to the residual stream.

// logits[r][e] = x[r] · w[e] in f32. One warp per (row, expert), 8 warps a block; K a multiple of 4.
extern "C" __global__ void moe_router(const float* __restrict__ x, const float* __restrict__ w,
                                      float* __restrict__ out, int R, int E, int K) {
    PDL_ENTER();
    int item = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (item >= R * E) return;
    int r = item / E, e = item % E;
    const float4* xr = (const float4*)(x + (size_t)r * K);
    const float4* wr = (const float4*)(w + (size_t)e * K);
    float s = 0.0f;
    for (int i = lane; i < K / 4; i += 32) {
        float4 a = xr[i], b = wr[i];
        s += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
    }
    s = warp_sum(s);
    if (lane == 0) out[item] = s;
}

// route.rs's order: the larger value first, the lower index among equals (as f32::total_cmp for non-NaN values).
__device__ __forceinline__ bool moe_before(float a, int ia, float b, int ib) {
    return ib < 0 || a > b || (a == b && ia < ib);
}

// The warp's first (value, index) in that order among v[0..n) whose flag is clear; every lane gets it.
__device__ __forceinline__ int moe_best(const float* v, const unsigned char* taken, int n, float& bv) {
    int lane = threadIdx.x & 31, bi = -1;
    float best = -INFINITY;
    for (int i = lane; i < n; i += 32)
        if (!taken[i] && moe_before(v[i], i, best, bi)) best = v[i], bi = i;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, best, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (oi >= 0 && moe_before(ov, oi, best, bi)) best = ov, bi = oi;
    }
    bv = best;
    return bi;
}

// Most experts a token uses on the device.
#define MOE_MAX_K 16

// One row's experts and weights from its logits, one warp a row: softmax (scoring 0) or sigmoid (1); a choice bias
// added for choosing only; groups (G > 0) ranked by their best score (softmax) or the sum of their best two
// (sigmoid), all but the best TG masked (0 for softmax, -inf for sigmoid); the top k; weights the scores without
// the bias (softmax with groups: the masked scores), normalised (summed largest first, + 1e-20 for sigmoid), scaled.
// Out: ids[r][k] in increasing expert order, w[r][k]. Shared memory: 4·(2E + G) + E bytes.
extern "C" __global__ void moe_route(const float* __restrict__ logits, const float* __restrict__ bias, int* ids,
                                     float* wout, int E, int k, int scoring, int G, int TG, int normalise,
                                     float scale) {
    PDL_ENTER();
    extern __shared__ float sm[];
    float* score = sm;
    float* choice = sm + E;
    float* rank = sm + 2 * E;
    unsigned char* taken = (unsigned char*)(rank + (G > 0 ? G : 1));
    int r = blockIdx.x, lane = threadIdx.x;
    const float* lr = logits + (size_t)r * E;
    if (scoring == 0) {
        float m = -INFINITY;
        for (int i = lane; i < E; i += 32) m = fmaxf(m, lr[i]);
        m = warp_max(m);
        float s = 0.0f;
        for (int i = lane; i < E; i += 32) {
            float v = expf(lr[i] - m);
            score[i] = v;
            s += v;
        }
        s = warp_sum(s);
        float inv = 1.0f / s;
        for (int i = lane; i < E; i += 32) score[i] *= inv;
    } else {
        for (int i = lane; i < E; i += 32) score[i] = 1.0f / (1.0f + expf(-lr[i]));
    }
    for (int i = lane; i < E; i += 32) {
        choice[i] = score[i] + (bias ? bias[i] : 0.0f);
        taken[i] = 0;
    }
    __syncwarp();
    if (G > 0) {
        int per = E / G;
        for (int g = lane; g < G; g += 32) {
            const float* c = choice + g * per;
            float b1 = -INFINITY, b2 = -INFINITY;
            int i1 = -1;
            for (int i = 0; i < per; i++)
                if (moe_before(c[i], i, b1, i1)) b2 = b1, b1 = c[i], i1 = i;
                else if (c[i] > b2) b2 = c[i];
            rank[g] = scoring == 0 ? b1 : (per >= 2 ? b1 + b2 : b1);
            taken[g] = 0;
        }
        __syncwarp();
        // The best TG groups, marked in `taken` (reset below for the experts' choice).
        unsigned kept[4] = {0, 0, 0, 0};  // up to 128 groups
        for (int t = 0; t < TG; t++) {
            float bv;
            int g = moe_best(rank, taken, G, bv);
            if (lane == 0) taken[g] = 1;
            kept[g >> 5] |= 1u << (g & 31);
            __syncwarp();
        }
        float masked = scoring == 0 ? 0.0f : -INFINITY;
        for (int i = lane; i < E; i += 32) {
            int g = i / per;
            if (!(kept[g >> 5] >> (g & 31) & 1)) choice[i] = masked;
        }
        for (int g = lane; g < G; g += 32) taken[g] = 0;
        __syncwarp();
    }
    int chosen[MOE_MAX_K];
    for (int t = 0; t < k; t++) {
        float bv;
        int i = moe_best(choice, taken, E, bv);
        chosen[t] = i;
        if (lane == 0) taken[i] = 1;
        __syncwarp();
    }
    if (lane != 0) return;
    // Increasing expert order (k is small).
    for (int a = 1; a < k; a++)
        for (int b = a; b > 0 && chosen[b - 1] > chosen[b]; b--) {
            int t = chosen[b];
            chosen[b] = chosen[b - 1];
            chosen[b - 1] = t;
        }
    float wv[MOE_MAX_K];
    for (int t = 0; t < k; t++) wv[t] = (scoring == 0 && G > 0) ? choice[chosen[t]] : score[chosen[t]];
    if (normalise) {
        float byv[MOE_MAX_K];
        for (int t = 0; t < k; t++) byv[t] = wv[t];
        for (int a = 1; a < k; a++)
            for (int b = a; b > 0 && byv[b - 1] < byv[b]; b--) {
                float t = byv[b];
                byv[b] = byv[b - 1];
                byv[b - 1] = t;
            }
        float sum = 0.0f;
        for (int t = 0; t < k; t++) sum += byv[t];
        if (scoring == 1) sum += 1e-20f;
        for (int t = 0; t < k; t++) wv[t] /= sum;
    }
    for (int t = 0; t < k; t++) {
        ids[r * k + t] = chosen[t];
        wout[r * k + t] = scale != 1.0f ? wv[t] * scale : wv[t];
    }
}

// One weight row of expert matrix (q, s) in `fmt` (0 bf16, 1 q8, 2 q4) dotted with x (shared memory), by one warp;
// the sum on every lane.
__device__ __forceinline__ float moe_row_dot(int fmt, const unsigned char* q, const f16_t* s, int n, int K,
                                             const float* x) {
    int lane = threadIdx.x & 31;
    float acc = 0.0f;
    if (fmt == 0) {
        const uint4* wr = (const uint4*)(q + (size_t)n * K * 2);
        for (int i = lane; i < K / 8; i += 32) {
            uint4 w = wr[i];
            const float* xv = x + i * 8;
            unsigned u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (int j = 0; j < 4; j++) {
                acc += __uint_as_float(u[j] << 16) * xv[2 * j] + __uint_as_float(u[j] & 0xffff0000u) * xv[2 * j + 1];
            }
        }
    } else if (fmt == 1) {
        int nb = K / 32;
        const uint4* wr = (const uint4*)(q + (size_t)n * K);
        const f16_t* sr = s + (size_t)n * nb;
        for (int b = lane; b < nb; b += 32) {
            uint4 w0 = wr[2 * b], w1 = wr[2 * b + 1];
            unsigned u[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
            const float* xv = x + b * 32;
            float d = 0.0f;
#pragma unroll
            for (int j = 0; j < 8; j++) {
#pragma unroll
                for (int t = 0; t < 4; t++) d += (float)(signed char)(u[j] >> (8 * t)) * xv[4 * j + t];
            }
            acc += h2f(sr[b]) * d;
        }
    } else {
        int nb = K / 32;
        const uint4* wr = (const uint4*)(q + (size_t)n * K / 2);
        const f16_t* sr = s + (size_t)n * nb;
        for (int b = lane; b < nb; b += 32) {
            uint4 w = wr[b];
            unsigned u[4] = {w.x, w.y, w.z, w.w};
            const float* xv = x + b * 32;
            float d = 0.0f;
#pragma unroll
            for (int j = 0; j < 4; j++) {
#pragma unroll
                for (int t = 0; t < 4; t++) {
                    int byte = (u[j] >> (8 * t)) & 0xff;
                    d += (float)((byte & 15) - 8) * xv[4 * j + t] + (float)((byte >> 4) - 8) * xv[16 + 4 * j + t];
                }
            }
            acc += h2f(sr[b]) * d;
        }
    }
    return warp_sum(acc);
}

// y[i][n] = W_e · x_i for every item i (a row's slot: row i / k, expert ids[i]): the matrix of expert e is at
// qt[e] (bf16 values or quants) and st[e] (f16 scales), N×K. x holds one f32 row per row (per_item 0: an item
// reads its row's) or per item. Grid (⌈N/8⌉, items), 8 warps a block, a warp an output; K·4 bytes of shared memory.
extern "C" __global__ void moe_gemv(const unsigned long long* __restrict__ qt, const unsigned long long* __restrict__ st,
                                    const int* __restrict__ ids, const float* __restrict__ x, float* __restrict__ y,
                                    int fmt, int N, int K, int k, int per_item) {
    PDL_ENTER();
    extern __shared__ float xs[];
    int item = blockIdx.y;
    const float* xr = x + (size_t)(per_item ? item : item / k) * K;
    for (int i = threadIdx.x; i < K; i += blockDim.x) xs[i] = xr[i];
    __syncthreads();
    int n = blockIdx.x * 8 + threadIdx.x / 32;
    if (n >= N) return;
    int e = ids[item];
    float v = moe_row_dot(fmt, (const unsigned char*)qt[e], (const f16_t*)st[e], n, K, xs);
    if ((threadIdx.x & 31) == 0) y[(size_t)item * N + n] = v;
}

// out[i] = bf16(x[perm[i]]) for i < n, rows of H: a prompt's rows in the order of the experts that read them.
extern "C" __global__ void moe_gather_bf16(const float* __restrict__ x, const int* __restrict__ perm,
                                           bf16_t* __restrict__ out, int H) {
    PDL_ENTER();
    const float* xr = x + (size_t)perm[blockIdx.x] * H;
    bf16_t* o = out + (size_t)blockIdx.x * H;
    for (int i = threadIdx.x; i < H; i += blockDim.x) o[i] = f2bf(xr[i]);
}

// x[r] += Σ_j w[r][j] · y[pos[r][j]] (pos 0: y[r·k + j]), the experts in the order route gave (increasing), summed
// from zero before the residual add as the CPU does. One block per row.
extern "C" __global__ void moe_combine(float* __restrict__ x, const float* __restrict__ y, const float* __restrict__ w,
                                       const int* __restrict__ pos, int k, int H) {
    PDL_ENTER();
    int r = blockIdx.x;
    for (int c = threadIdx.x; c < H; c += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < k; j++) {
            int p = pos ? pos[r * k + j] : r * k + j;
            acc += y[(size_t)p * H + c] * w[r * k + j];
        }
        x[(size_t)r * H + c] += acc;
    }
}
