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

// The input row in shared memory. bf16 experts read it as plain f32 (padded like the block formats' and read 16
// bytes at a time, the H100 ran them 2.5% slower: docs/performance-gpu.md). q8 and q4 experts read it as the dense
// decode products do (quant_act8, quant.cu): two 8-bit terms a value, x ≈ d·(q1 + q2/254), 16 bytes of padding
// after every 32 (MOE_XQ), and dp4a on four weights at a time. A lane reads its own 32-block, so unpadded the lanes
// of a warp would hit the same banks and the products be bound by shared memory, not by reading the weights;
// padded, the 16-byte reads of a phase's 8 lanes cover distinct banks. The terms also halve the work a weight costs
// (no conversion to float, no FMA each).
#define MOE_XQ(i) ((i) + ((i) >> 5) * 16)

// Sixteen q8 weights (or q4 nibbles moved to -8..7) against sixteen activation bytes: four dp4a.
__device__ __forceinline__ int moe_dp16(uint4 w, int4 x, int s) {
    s = __dp4a((int)w.x, x.x, s);
    s = __dp4a((int)w.y, x.y, s);
    s = __dp4a((int)w.z, x.z, s);
    return __dp4a((int)w.w, x.w, s);
}

// R weight rows (n0, n0 + 1, ...; those below N) of expert matrix (q, s) in `fmt` (0 bf16, 1 q8, 2 q4) dotted with
// the shared input (x as f32 for bf16; xq, xq2, xd as above for q8/q4), by one warp; the sums on every lane. The
// block formats take two rows a warp (MOE_ROWS_Q): both rows' weights in flight at once, and a block's input made
// for 16 outputs (+23–29% decode on the Qwen3-30B-A3B shape); bf16 rows are twice as long and one a warp is faster
// (two: −6%, docs/performance-gpu.md).
#define MOE_ROWS_Q 2
template <int R>
__device__ __forceinline__ void moe_rows_dot(int fmt, const unsigned char* q, const f16_t* s, int n0, int N, int K,
                                             const float* x, const signed char* xq, const signed char* xq2,
                                             const float* xd, float (&out)[R]) {
    int lane = threadIdx.x & 31;
    float acc[R];
    int rows = min(R, N - n0);
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.0f;
    if (fmt == 0) {
        for (int i = lane; i < K / 8; i += 32) {
            const float* xv = x + i * 8;
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (r >= rows) break;
                uint4 w = ((const uint4*)(q + (size_t)(n0 + r) * K * 2))[i];
                unsigned u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
                for (int j = 0; j < 4; j++)
                    acc[r] += __uint_as_float(u[j] << 16) * xv[2 * j] + __uint_as_float(u[j] & 0xffff0000u) * xv[2 * j + 1];
            }
        }
    } else {
        int nb = K / 32;
        for (int b = lane; b < nb; b += 32) {
            const int4* a = (const int4*)(xq + b * 48);
            const int4* c = (const int4*)(xq2 + b * 48);
            int4 a0 = a[0], a1 = a[1], c0 = c[0], c1 = c[1];
            float dx = xd[b];
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (r >= rows) break;
                int n = n0 + r, i1, i2;
                if (fmt == 1) {
                    const uint4* wr = (const uint4*)(q + (size_t)n * K) + 2 * b;
                    uint4 w0 = wr[0], w1 = wr[1];
                    i1 = moe_dp16(w1, a1, moe_dp16(w0, a0, 0));
                    i2 = moe_dp16(w1, c1, moe_dp16(w0, c0, 0));
                } else {
                    // q4: byte j holds weights j (low nibble) and 16 + j (high); each nibble minus 8, a signed byte.
                    uint4 w = ((const uint4*)(q + (size_t)n * K / 2))[b];
                    const unsigned m = 0x0f0f0f0fu, eight = 0x08080808u;
                    uint4 lo = make_uint4(__vsub4(w.x & m, eight), __vsub4(w.y & m, eight), __vsub4(w.z & m, eight),
                                          __vsub4(w.w & m, eight));
                    uint4 hi = make_uint4(__vsub4((w.x >> 4) & m, eight), __vsub4((w.y >> 4) & m, eight),
                                          __vsub4((w.z >> 4) & m, eight), __vsub4((w.w >> 4) & m, eight));
                    i1 = moe_dp16(hi, a1, moe_dp16(lo, a0, 0));
                    i2 = moe_dp16(hi, c1, moe_dp16(lo, c0, 0));
                }
                acc[r] = fmaf(h2f(s[(size_t)n * nb + b]) * dx, fmaf((float)i2, 1.0f / 254.0f, (float)i1), acc[r]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) out[r] = warp_sum(acc[r]);
}

// y[i][n] = W_e · x_i for every item i (a row's slot: row i / k, expert ids[i]): the matrix of expert e is at
// qt[e] (bf16 values or quants) and st[e] (f16 scales), N×K. x holds one f32 row per row (per_item 0: an item
// reads its row's) or per item. Grid (⌈N/8⌉ for bf16, ⌈N/16⌉ for q8/q4, items), 8 warps a block, a warp one output
// (bf16) or two (MOE_ROWS_Q); shared memory: 4·K bytes for bf16, 3·K + K/8 for q8/q4 (moe.rs, moe_gemv_smem).
//
// `order` (or 0: item order) lists the items by expert (moe_order): blocks start in item order, so a pass of several
// rows reads each chosen expert's weights from memory once and the neighbouring items of that expert from L2.
//
// One kernel a family (moe_gemv_bf16, moe_gemv_q): as one kernel with the format an argument, the block formats'
// two-term dp4a path set the register count for bf16 too, and bf16 decode ran 2.3% slower than before that path
// (docs/performance-gpu.md, session 29).
template <bool BF16>
__device__ __forceinline__ void moe_gemv_body(const unsigned long long* __restrict__ qt,
                                              const unsigned long long* __restrict__ st, const int* __restrict__ ids,
                                              const int* __restrict__ order, const float* __restrict__ x,
                                              float* __restrict__ y, int fmt, int N, int K, int k, int per_item) {
    extern __shared__ __align__(16) unsigned char moe_sm[];
    float* xs = (float*)moe_sm;
    signed char* xq = (signed char*)moe_sm;
    signed char* xq2 = xq + MOE_XQ(K);
    float* xd = (float*)(xq2 + MOE_XQ(K));
    int item = order ? order[blockIdx.y] : blockIdx.y;
    const float* xr = x + (size_t)(per_item ? item : item / k) * K;
    if (BF16) {
        for (int i = threadIdx.x; i < K; i += blockDim.x) xs[i] = xr[i];
    } else {
        // A warp a block of 32, rounded as act8_block rounds (common.cuh), so these terms are the dense path's.
        int lane = threadIdx.x & 31;
        for (int b = threadIdx.x >> 5; b < K / 32; b += blockDim.x >> 5) {
            float v = xr[b * 32 + lane], d, id;
            act8_scale(warp_max(fabsf(v)), d, id);
            act8_terms(v, id, xq[MOE_XQ(b * 32 + lane)], xq2[MOE_XQ(b * 32 + lane)]);
            if (lane == 0) xd[b] = d;
        }
    }
    __syncthreads();
    int e = ids[item], lane = threadIdx.x & 31;
    const unsigned char* q = (const unsigned char*)qt[e];
    const f16_t* sc = (const f16_t*)st[e];
    float* yi = y + (size_t)item * N;
    if (BF16) {
        int n0 = blockIdx.x * 8 + threadIdx.x / 32;
        if (n0 >= N) return;
        float v[1];
        moe_rows_dot<1>(0, q, sc, n0, N, K, xs, xq, xq2, xd, v);
        if (lane == 0) yi[n0] = v[0];
    } else {
        int n0 = (blockIdx.x * 8 + threadIdx.x / 32) * MOE_ROWS_Q;
        if (n0 >= N) return;
        float v[MOE_ROWS_Q];
        moe_rows_dot<MOE_ROWS_Q>(fmt, q, sc, n0, N, K, xs, xq, xq2, xd, v);
        if (lane == 0)
#pragma unroll
            for (int r = 0; r < MOE_ROWS_Q; r++)
                if (n0 + r < N) yi[n0 + r] = v[r];
    }
}

extern "C" __global__ void moe_gemv_bf16(const unsigned long long* __restrict__ qt,
                                         const unsigned long long* __restrict__ st, const int* __restrict__ ids,
                                         const int* __restrict__ order, const float* __restrict__ x,
                                         float* __restrict__ y, int fmt, int N, int K, int k, int per_item) {
    PDL_ENTER();
    moe_gemv_body<true>(qt, st, ids, order, x, y, fmt, N, K, k, per_item);
}

extern "C" __global__ void moe_gemv_q(const unsigned long long* __restrict__ qt,
                                      const unsigned long long* __restrict__ st, const int* __restrict__ ids,
                                      const int* __restrict__ order, const float* __restrict__ x,
                                      float* __restrict__ y, int fmt, int N, int K, int k, int per_item) {
    PDL_ENTER();
    moe_gemv_body<false>(qt, st, ids, order, x, y, fmt, N, K, k, per_item);
}

// order[p] = the items (indices into ids) sorted by expert, each expert's in item order: one block, a thread an
// item (items ≤ blockDim.x); counts in shared memory (E ints).
extern "C" __global__ void moe_order(const int* __restrict__ ids, int* __restrict__ order, int items, int E) {
    PDL_ENTER();
    extern __shared__ int start[];
    for (int e = threadIdx.x; e < E; e += blockDim.x) start[e] = 0;
    __syncthreads();
    int t = threadIdx.x, e = t < items ? ids[t] : 0;
    if (t < items) atomicAdd(&start[e], 1);
    __syncthreads();
    if (t == 0) {
        int acc = 0;
        for (int i = 0; i < E; i++) {
            int c = start[i];
            start[i] = acc;
            acc += c;
        }
    }
    __syncthreads();
    if (t < items) {
        int rank = 0;
        for (int j = 0; j < t; j++) rank += ids[j] == e;
        order[start[e] + rank] = t;
    }
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

// The shared expert's output y gated per row (Qwen3-Next): x[r] += sigmoid(input[r] · gw) · y[r], input the layer's
// normed f32 rows. Grid R, 256 threads.
extern "C" __global__ void __launch_bounds__(256)
    moe_shared_gate_add(float* __restrict__ x, const float* __restrict__ y, const float* __restrict__ input,
                        const float* __restrict__ gw, int H) {
    PDL_ENTER();
    __shared__ float red[32];
    int r = blockIdx.x;
    float s = 0.0f;
    for (int c = threadIdx.x; c < H; c += blockDim.x) s += input[(size_t)r * H + c] * gw[c];
    float g = 1.0f / (1.0f + expf(-block_sum(s, red)));
    for (int c = threadIdx.x; c < H; c += blockDim.x) x[(size_t)r * H + c] += g * y[(size_t)r * H + c];
}
