// Decode products, split over K: a block of 4 warps computes R output rows for B ≤ 8 input rows; warp w takes the
// w-th quarter of K and its lanes walk it in 16-byte weight chunks, loading R rows' chunks back to back (R × 16
// bytes in flight per lane) and the chunk's activations once for all R rows, so activation traffic is 1/R of
// the per-row kernels' (gemv.cu, where every warp re-reads x for its two rows). The quarters are added in a fixed
// order through shared memory, so a row's sum is the same whatever B is: batched rows equal rows alone, bit for
// bit.
#define GS_WARPS 4

// What a split kernel does with its output rows once stored (its template's NORM): nothing (instances `_nn`), the
// norm tail (no suffix: split_norm_tail), or the norm deferred to the next product (dp4a instances `_gn`:
// split_norm_groups). Each its own instance, so one's code costs the others no registers.
#define GS_NO_NORM 0
#define GS_TAIL 1
#define GS_GROUPS 2
#define GS_GROUPS_BLOCK 3

// Blocks of SUB sub-blocks (the `_gb` instances, GS_GROUPS_BLOCK): sub-block s of a block is what a block of
// GS_WARPS warps is elsewhere, rows (blockIdx.x·SUB + s)·R on, so the block holds SUB·R = 32 rows, a whole group of
// the deferred norm, and finishes it itself. A thread's warp within its sub-block, and its sub-block:
template <int SUB>
__device__ __forceinline__ int gs_warp() {
    return SUB == 1 ? threadIdx.x >> 5 : (threadIdx.x >> 5) & (GS_WARPS - 1);
}
template <int SUB>
__device__ __forceinline__ int gs_sub() {
    return SUB == 1 ? 0 : threadIdx.x / (GS_WARPS * 32);
}

// `xss` (dp4a kernels; 0: none): where the norm before was deferred to this product (split_norm_groups), each
// input row's sums of squares by group of 32 columns, [B][K/32]; each row's 1/rms is made from them here, a warp
// a row, the groups summed in a fixed order (so every block, and a row batched or alone, gets the same bits), its
// loads beside the warps' sums. ptxas: the q4 norm-free kernel at 4 rows 72 → 79 registers with this code, wherever
// it is placed (after a barrier too), held at 72 by its launch bounds (GS_NN4_BOUNDS_1 below); the q8 one-row
// kernels 56 → 48 (4 rows) and 95 → 71 (8).
//
// With SUB sub-blocks (`_gb`), each sums its own rows, and `ysm` (shared, [B][SUB·R]) gets the block's stored
// values too, for its group's norm.
template <int B, int R, int SUB = 1>
__device__ __forceinline__ void split_store(float (*acc)[R], float* y, const float* __restrict__ bias, int n0, int N,
                                            int accumulate, const float* __restrict__ xss = nullptr, int K = 0,
                                            float xeps = 0.0f, float* ysm = nullptr) {
    __shared__ float red[SUB][GS_WARPS][B * R];
    __shared__ float rinv[B];
    int warp = gs_warp<SUB>(), lane = threadIdx.x & 31, sub = gs_sub<SUB>();
    if (xss) {
        int G = K / 32;
        for (int b = sub * GS_WARPS + warp; b < B; b += SUB * GS_WARPS) {
            float s = 0.0f;
#pragma unroll 4
            for (int i = lane; i < G; i += 32) s += __ldcg(xss + (size_t)b * G + i);
            s = warp_sum(s);
            if (lane == 0) rinv[b] = rsqrtf(s / (float)K + xeps);
        }
    }
#pragma unroll
    for (int b = 0; b < B; b++) {
#pragma unroll
        for (int r = 0; r < R; r++) {
            float v = warp_sum(acc[b][r]);
            if (lane == 0) red[sub][warp][b * R + r] = v;
        }
    }
    __syncthreads();
    // (A sub-block's stride for SUB > 1; blockDim.x alone, as the kernels were measured, keeps their registers.)
    for (int i = threadIdx.x - sub * GS_WARPS * 32; i < B * R; i += SUB == 1 ? blockDim.x : GS_WARPS * 32) {
        int b = i / R, n = n0 + i % R;
        if (n >= N) continue;
        float s = red[sub][0][i];
#pragma unroll
        for (int w = 1; w < GS_WARPS; w++) s += red[sub][w][i];
        if (xss) s *= rinv[b];
        if (bias) s += bias[n];
        float* o = y + (size_t)b * N + n;
        if constexpr (SUB > 1) {
            s = accumulate ? *o + s : s;
            *o = s;
            ysm[b * (SUB * R) + sub * R + i % R] = s;
        } else {
            *o = accumulate ? *o + s : s;
        }
    }
}

// Float4s a thread of the norm tail holds in registers: rows of up to 4·NORM_TAIL_V·blockDim columns (8,192 for
// 128 threads; ops.rs's NORM_TAIL_MAX_N) are loaded once and normed from there.
#define NORM_TAIL_V 16

// A thread's four normed values (columns n..n+3 of row b) in the two 8-bit terms, given the maximum and sum of
// their block of 32 (reduced over the eight threads that hold it); the block's first thread writes (d, sum).
__device__ __forceinline__ void act8_store4(float4 o, float amax, float bsum, int b, int n, int N, signed char* nq,
                                            signed char* nq2, float2* nds) {
    float d, id;
    act8_scale(amax, d, id);
    char4 a, c;
    act8_terms(o.x, id, a.x, c.x);
    act8_terms(o.y, id, a.y, c.y);
    act8_terms(o.z, id, a.z, c.z);
    act8_terms(o.w, id, a.w, c.w);
    size_t at = (size_t)b * N + n;
    *(char4*)(nq + at) = a;
    *(char4*)(nq2 + at) = c;
    if ((threadIdx.x & 7) == 0) nds[(size_t)b * (N / 32) + n / 32] = make_float2(d, bsum);
}

// The norm after a residual update, folded into the product that made it: once a block's rows are stored, the
// last block to finish (counted on `counter`, which it resets) RMS-norms the whole output rows with weights `ng`
// into `nout`, so the next product's input is ready without a norm kernel and its launch. One block sums each row
// in a fixed order, so the result depends neither on which block came last nor on B.
//
// With A8 (the dp4a kernels) and `nq` given (and N whole blocks of 32), it also writes the normed rows' two-term
// 8-bit form (quant_act8 in quant.cu, the same rounding) for a dp4a product next, sparing that product its
// quant_act8 launch: eight threads hold a block of 32 as float4s and reduce its maximum and sum among themselves.
template <int B, bool A8, bool SMEM>
__device__ __forceinline__ void split_norm_tail(const float* y, int N, const float* __restrict__ ng, float* nout,
                                                float eps, unsigned* counter, signed char* nq, signed char* nq2,
                                                float2* nds) {
    __shared__ float red[32];
    if (!arrive_last(counter, gridDim.x)) return;
    if (threadIdx.x == 0) trace_mark(901);
    // The norm weights asked of L2 now, so their loads after the sum below do not wait on HBM.
    for (int n = threadIdx.x * 32; n < N; n += blockDim.x * 32) prefetch_l2(ng + n);
    // Rows up to TAIL_V float4s a thread are loaded whole (one round trip to L2, not one per element), summed, and
    // written from there: with SMEM by cp.async into the dynamic shared memory the host gives the norm kernels (N
    // floats), which needs no registers for them; otherwise into registers, which every product with a norm then
    // carries (16 float4s a thread). Measured in decode: shared memory for bf16 and q8 (o/down at q8 135 → 56
    // registers), registers for q4 (its one-input products hold 8 rows, 127 registers either way); ops.rs's
    // tail_in_smem says the same to the host, which gives the shared memory.
    constexpr int TAIL_V = NORM_TAIL_V;
    bool whole = (N & 3) == 0 && N <= (int)blockDim.x * 4 * TAIL_V;
    const float4 zero4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    extern __shared__ float4 tail_row[];
#define TAIL_AT(j) (SMEM ? tail_row[threadIdx.x + (j) * blockDim.x] : v[j])
    // Loops over the row in shared memory unrolled only in part: fully unrolled, the compiler hoists every shared
    // load and the registers come back.
    constexpr int TAIL_UNROLL = SMEM ? 4 : TAIL_V;
#pragma unroll 1
    for (int b = 0; b < B; b++) {
        const float* yb = y + (size_t)b * N;
        float* ob = nout + (size_t)b * N;
        float ss = 0.0f;
        if (whole) {
            float4 v[TAIL_V];  // the row's registers, unused with SMEM
            if constexpr (SMEM) {
                // Each thread reads back only what it copied, so its own wait suffices (no barrier).
#pragma unroll
                for (int j = 0; j < TAIL_V; j++) {
                    int n = (threadIdx.x + j * blockDim.x) * 4;
                    if (n < N) cp_async16(&TAIL_AT(j), yb + n);
                }
                cp_async_commit();
                cp_async_wait<0>();
#pragma unroll TAIL_UNROLL
                for (int j = 0; j < TAIL_V; j++) {
                    int n = (threadIdx.x + j * blockDim.x) * 4;
                    float4 t = n < N ? TAIL_AT(j) : zero4;
                    ss = fmaf(t.x, t.x, fmaf(t.y, t.y, fmaf(t.z, t.z, fmaf(t.w, t.w, ss))));
                }
            } else {
#pragma unroll
                for (int j = 0; j < TAIL_V; j++) {
                    int n = (threadIdx.x + j * blockDim.x) * 4;
                    v[j] = n < N ? __ldcg((const float4*)(yb + n)) : zero4;
                    ss = fmaf(v[j].x, v[j].x, fmaf(v[j].y, v[j].y, fmaf(v[j].z, v[j].z, fmaf(v[j].w, v[j].w, ss))));
                }
            }
            float inv = rsqrtf(block_sum(ss, red) / (float)N + eps);
            PDL_LATE_TRIGGER();
            if (threadIdx.x == 0) trace_mark(902);
            bool act8 = A8 && nq && (N & 31) == 0;
#pragma unroll TAIL_UNROLL
            for (int j = 0; j < TAIL_V; j++) {
                int n = (threadIdx.x + j * blockDim.x) * 4;
                if (n < N) {
                    float4 w = __ldg((const float4*)(ng + n)), t = TAIL_AT(j);
                    t = make_float4(t.x * inv * w.x, t.y * inv * w.y, t.z * inv * w.z, t.w * inv * w.w);
                    *(float4*)(ob + n) = t;
                    if (!SMEM || act8) TAIL_AT(j) = t;  // in shared memory only the 8-bit writing reads it back
                } else if (!SMEM) {
                    v[j] = zero4;
                }
            }
            // Eight consecutive threads hold one block of 32 (all in range or all out, N being whole blocks); four
            // blocks at a time, so their shuffles and divisions overlap rather than wait on one another.
            constexpr int TG = 4;
            // One group of TG blocks from float4 j0 on; false past the row (N being whole warps).
            auto group = [&](int j0) {
                if (((threadIdx.x & ~31u) + j0 * blockDim.x) * 4 >= (unsigned)N) return false;
                float amax[TG], bs[TG];
#pragma unroll
                for (int u = 0; u < TG; u++) {
                    // (In registers zero past N.)
                    float4 o = !SMEM || (threadIdx.x + (j0 + u) * blockDim.x) * 4 < N ? TAIL_AT(j0 + u) : zero4;
                    amax[u] = fmaxf(fmaxf(fabsf(o.x), fabsf(o.y)), fmaxf(fabsf(o.z), fabsf(o.w)));
                    bs[u] = (o.x + o.y) + (o.z + o.w);
                }
#pragma unroll
                for (int m = 1; m < 8; m <<= 1) {
#pragma unroll
                    for (int u = 0; u < TG; u++) {
                        amax[u] = fmaxf(amax[u], __shfl_xor_sync(0xffffffffu, amax[u], m));
                        bs[u] += __shfl_xor_sync(0xffffffffu, bs[u], m);
                    }
                }
#pragma unroll
                for (int u = 0; u < TG; u++) {
                    int n = (threadIdx.x + (j0 + u) * blockDim.x) * 4;
                    if (n < N) act8_store4(TAIL_AT(j0 + u), amax[u], bs[u], b, n, N, nq, nq2, nds);
                }
                return true;
            };
            // The groups rolled from shared memory, unrolled from registers (a pragma's count taken from SMEM
            // changed the register path's code: q4d_2_r4 142 → 162 registers).
            if constexpr (SMEM) {
#pragma unroll 1
                for (int j0 = 0; j0 < TAIL_V && act8; j0 += TG)
                    if (!group(j0)) break;
            } else {
#pragma unroll
                for (int j0 = 0; j0 < TAIL_V && act8; j0 += TG)
                    if (!group(j0)) break;
            }
        } else {
            for (int n = threadIdx.x; n < N; n += blockDim.x) {
                float v = __ldcg(yb + n);
                ss = fmaf(v, v, ss);
            }
            float inv = rsqrtf(block_sum(ss, red) / (float)N + eps);
            PDL_LATE_TRIGGER();
            for (int n = threadIdx.x; n < N; n += blockDim.x) ob[n] = __ldcg(yb + n) * inv * ng[n];
        }
    }
#undef TAIL_AT
    if (threadIdx.x == 0) {
        *counter = 0u;
        trace_mark(903);
    }
}

// A deferred group's end, for split_norm_groups and split_groups_block alike (so the two give the same bits): eight
// threads a row, four columns each (`v`, row b's columns n..n+3 of group g; threads past the rows, `on` false, take
// part in the shuffles only), write the two-term 8-bit form of v·w and the group's sum of squares.
__device__ __forceinline__ void group_finish(float4 v, float4 w, bool on, int b, int n, int N, int g,
                                             signed char* nq, signed char* nq2, float2* nds, float* nss) {
    int G = N / 32;
    float ss = fmaf(v.x, v.x, fmaf(v.y, v.y, fmaf(v.z, v.z, v.w * v.w)));
    float4 t = make_float4(v.x * w.x, v.y * w.y, v.z * w.z, v.w * w.w);
    float amax = fmaxf(fmaxf(fabsf(t.x), fabsf(t.y)), fmaxf(fabsf(t.z), fabsf(t.w)));
    float bs = (t.x + t.y) + (t.z + t.w);
#pragma unroll
    for (int m = 1; m < 8; m <<= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
        bs += __shfl_xor_sync(0xffffffffu, bs, m);
        ss += __shfl_xor_sync(0xffffffffu, ss, m);
    }
    if (on) {
        act8_store4(t, amax, bs, b, n, N, nq, nq2, nds);
        if ((threadIdx.x & 7) == 0) nss[(size_t)b * G + g] = ss;
    }
}

// The norm deferred to the dp4a product next, for the o and down products at q8/q4 (ops.rs, NormOut::defer): the
// last-block tail above norms the whole row in one block, a serial step on the critical path. Here each group of 32 output columns is
// finished by the last of its 32/R blocks (one counter a group, counter[g]): it writes the group's two-term 8-bit
// form of y·g — the norm's weights applied, not yet divided by the row's RMS, which scales a block of 32 and its
// 8-bit form alike — and the group's sum of squares (nss[b][g]), from which the next product makes each row's
// 1/rms (split_store's `xss`). Every sum's order is fixed, so rows give the same bits alone and batched. Needs N a
// multiple of 32.
template <int B, int R>
__device__ __forceinline__ void split_norm_groups(const float* y, int N, const float* __restrict__ ng,
                                                  unsigned* counter, signed char* nq, signed char* nq2, float2* nds,
                                                  float* nss) {
    static_assert(8 * B <= GS_WARPS * 32 && 32 % R == 0, "eight threads a row of a group; whole groups a block");
    int g = blockIdx.x * R / 32;
    // Eight threads a row of the group, four columns each (threads past B rows idle in the shuffles).
    int b = threadIdx.x >> 3, n = g * 32 + (threadIdx.x & 7) * 4;
    // The norm's weights are constants: asked for before the count, so the group's last block has them by then.
    float4 w = __ldg((const float4*)(ng + n));
    if (!arrive_last(counter + g, 32 / R)) return;
    bool on = b < B;
    const float4 zero4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float4 v = on ? __ldcg((const float4*)(y + (size_t)b * N + n)) : zero4;
    group_finish(v, w, on, b, n, N, g, nq, nq2, nds, nss);
    if (threadIdx.x == 0) counter[g] = 0u;
}

// The same groups' 8-bit form and sums of squares when the block holds its group whole (GS_GROUPS_BLOCK: SUB·R =
// 32 rows, `ys` the block's stored values, [B][32], from split_store): no counter, no fence, no second read of the
// rows from L2 — the block's barrier is the wait. The arithmetic is split_norm_groups's, in the same order, so the
// bits are the same whichever instance a row runs (rows alone run these, batched the `_gn` ones).
template <int B>
__device__ __forceinline__ void split_groups_block(const float* ys, float4 w, int N, signed char* nq,
                                                   signed char* nq2, float2* nds, float* nss) {
    int g = blockIdx.x;
    int b = threadIdx.x >> 3, n = g * 32 + (threadIdx.x & 7) * 4;
    __syncthreads();
    if (threadIdx.x >= 32 * ((8 * B + 31) / 32)) return;  // whole warps for the shuffles
    bool on = b < B;
    const float4 zero4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float4 v = on ? *(const float4*)(ys + b * 32 + (threadIdx.x & 7) * 4) : zero4;
    group_finish(v, w, on, b, n, N, g, nq, nq2, nds, nss);
}

// A split kernel's entry: one that norms its output (`ng` given) lets the next kernel launch only from its norm
// tail, once the last block has summed the rows (PDL_ENTER_LATE in common.cuh: the next product's weight loads
// would queue ahead of the tail's), or, deferring its norm, once its own loads are done (gs_q8d, gs_q4d); the
// others at once.
#define PDL_ENTER_NORM(ng)     \
    do {                       \
        pdl_wait();            \
        trace_entry();         \
        if (!(ng)) pdl_trigger(); \
    } while (0)

// The folded norm's parameters every split kernel takes: norm weights and output, epsilon, the blocks' counter, the
// two-term 8-bit output (0: none). The dp4a kernels also take, last, where the norm is deferred
// (split_norm_groups), the groups' sums of squares (0: not deferred).
#define NORM_PARAMS \
    const float *ng, float *nout, float eps, unsigned *counter, signed char *nq, signed char *nq2, float2 *nds
#define NORM_ARGS ng, nout, eps, counter, nq, nq2, nds

// The chunks [c0, c1) of this warp when K holds `chunks` of them.
template <int SUB = 1>
__device__ __forceinline__ void split_range(int chunks, int& c0, int& c1) {
    int per = (chunks + GS_WARPS - 1) / GS_WARPS;
    c0 = gs_warp<SUB>() * per;
    c1 = min(chunks, c0 + per);
}

// A lane's R rows of one chunk of q8 weights (16 quants, half a block) with their blocks' scales; rows past N
// repeat the last. Loaded into registers before a kernel's PDL wait for its first chunk: asking L2 for them
// instead measured slower at q4, where a lane has about one chunk.
template <int R>
__device__ __forceinline__ void load_q8(const unsigned char* __restrict__ Q, const f16_t* __restrict__ S, int n0,
                                        int N, int K, int c, uint4 (&w)[R], float (&d)[R]) {
#pragma unroll
    for (int r = 0; r < R; r++) {
        size_t n = min(n0 + r, N - 1);
        w[r] = __ldg((const uint4*)(Q + n * K + c * 16));
        d[r] = h2f(__ldg(S + n * (K / 32) + (c >> 1)));
    }
}

// A lane's R rows of q4 block `blk` (16 bytes) with their scales; rows past N repeat the last.
template <int R>
__device__ __forceinline__ void load_q4(const unsigned char* __restrict__ Q, const f16_t* __restrict__ QS, int n0,
                                        int N, int K, int blk, uint4 (&w)[R], f16_t (&qd)[R]) {
#pragma unroll
    for (int r = 0; r < R; r++) {
        size_t n = min(n0 + r, N - 1);
        w[r] = __ldg((const uint4*)(Q + n * (K / 2)) + blk);
        qd[r] = __ldg(QS + n * (K / 32) + blk);
    }
}

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

// The same products with activations in two 8-bit terms (quant_act8 in quant.cu: x ≈ d·(q1 + q2/254), the CPU's
// i16 precision): `dp4a` multiplies four weight bytes by four activation bytes and adds them into an integer, two
// per four weights, where the kernels above spend an extraction and an FMA per weight; the activations are read as
// bytes, half the f32 traffic. A lane's chunks, the warp sum and the
// quarter-sums keep the fixed order above, so a row's sum does not depend on B or the block height.
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
