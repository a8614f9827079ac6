// Decode products, split over K: a block of 4 warps computes R output rows for B ≤ 8 input rows; warp w takes the
// w-th quarter of K and its lanes walk it in 16-byte weight chunks, loading R rows' chunks back to back (R × 16
// bytes in flight per lane) and the chunk's activations once for all R rows, so activation traffic is 1/R of
// the per-row kernels' (gemv.cu, where every warp re-reads x for its two rows). The quarters are added in a fixed
// order through shared memory, so a row's sum is the same whatever B is: batched rows equal rows alone, bit for
// bit.
//
// This file is their shared part: the store of a block's rows, the norm tail and the deferred norm's groups, the
// chunks a warp takes and the block formats' weight loads. gemv_split_f32.cu (f32 activations) and
// gemv_split_dp4a.cu (8-bit activations) build the products on it, and gemv_split.cu instantiates them; mod.rs
// compiles the four as one text, in that order (NVRTC takes the sources concatenated, not through #include).
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
