// Products of 9–32 rows on the tensor cores (a decode step of many replies): every weight is read from memory once
// and multiplied into all rows by m16n8k16 bf16 products with f32 accumulators, the block formats turned into bf16
// in registers right after the load (d·q, as dequant_q8/q4 write them for cuBLAS), so no step dequantises a whole
// matrix into a buffer first. Activations are bf16, as cuBLAS takes them for passes of more than 8 rows.
//
// A block of MF_WARPS warps computes 16·MT output rows; warp w takes the w-th share of K. Within a warp the
// tensor core's M is the output rows (a lane holds rows g and g+8 of each 16, g = lane/4) and N the input rows,
// 8 per tile. A product's k order is free as long as weights and activations agree, so lane t of a group loads
// L weights of its row that lie together in memory (one 16-byte load: 8 bf16, 16 q8 or 32 q4 weights) at
// k0 = step·4L + t·L, and product m of the step takes its weights 4m..4m+3 as the k slots (2t, 2t+1, 2t+8, 2t+9)
// of the mma layout, with the activations at the same k (8 bytes, one load). The warps' sums are added in a fixed
// order through shared memory: the result does not depend on timing.
#define MF_WARPS 8

__device__ __forceinline__ void mma_bf16_16816(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                               unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Two floats as bf16x2, rounded to nearest even (f2bf's rounding): `lo` in the low half (the lower k).
__device__ __forceinline__ unsigned bf16x2(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ unsigned word_of(uint4 v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// A lane's weights of one row for one step: the 16 bytes and the block's scale(s); q6's high bits (h, unused by
// the other formats).
struct MfRaw {
    uint4 w;
    unsigned s;
    uint2 h;
};

// Formats: 0 bf16 (L = 8), 1 q8 (L = 16, f16 scale), 2 q4 (L = 32, one block with its f16 scale), 3 q6 (L = 32).
template <int FMT>
struct Mf;

template <>
struct Mf<0> {
    static constexpr int L = 8;
    static __device__ __forceinline__ MfRaw load(const void* W, const void*, size_t r, int K, int k0, int) {
        return {__ldg((const uint4*)((const bf16_t*)W + r * K + k0)), 0u, make_uint2(0u, 0u)};
    }
    // The bf16x2 words of weights 4m..4m+1 and 4m+2..4m+3.
    static __device__ __forceinline__ void words(const MfRaw& v, int m, unsigned& w0, unsigned& w1) {
        w0 = word_of(v.w, 2 * m);
        w1 = word_of(v.w, 2 * m + 1);
    }
};

template <>
struct Mf<1> {
    static constexpr int L = 16;
    static __device__ __forceinline__ MfRaw load(const void* Q, const void* S, size_t r, int K, int k0, int) {
        unsigned s = __ldg((const f16_t*)S + r * (K / 32) + (k0 >> 5));
        return {__ldg((const uint4*)((const unsigned char*)Q + r * K + k0)), s, make_uint2(0u, 0u)};
    }
    static __device__ __forceinline__ void words(const MfRaw& v, int m, unsigned& w0, unsigned& w1) {
        float d = h2f((f16_t)v.s);
        unsigned q = word_of(v.w, m) ^ 0x80808080u;
        float q0 = byte_f(q, 0) - 128.0f, q1 = byte_f(q, 1) - 128.0f, q2 = byte_f(q, 2) - 128.0f,
              q3 = byte_f(q, 3) - 128.0f;
        w0 = bf16x2(d * q0, d * q1);
        w1 = bf16x2(d * q2, d * q3);
    }
};

template <>
struct Mf<2> {
    static constexpr int L = 32;
    static __device__ __forceinline__ MfRaw load(const void* Q, const void* S, size_t r, int K, int k0, int) {
        int blk = k0 >> 5;
        unsigned s = __ldg((const f16_t*)S + r * (K / 32) + blk);
        return {__ldg((const uint4*)((const unsigned char*)Q + r * (K / 2)) + blk), s, make_uint2(0u, 0u)};
    }
    // Weight j of a block is byte j's low nibble (j < 16) or byte j-16's high one: d·q + m, unfused as the CPU.
    static __device__ __forceinline__ void words(const MfRaw& v, int m, unsigned& w0, unsigned& w1) {
        float d = h2f((f16_t)v.s), mn = q4_min(d);
        unsigned q = m < 4 ? word_of(v.w, m) & 0x0f0f0f0fu : (word_of(v.w, m - 4) >> 4) & 0x0f0f0f0fu;
        float f0 = __fadd_rn(__fmul_rn(d, byte_f(q, 0)), mn), f1 = __fadd_rn(__fmul_rn(d, byte_f(q, 1)), mn);
        float f2 = __fadd_rn(__fmul_rn(d, byte_f(q, 2)), mn), f3 = __fadd_rn(__fmul_rn(d, byte_f(q, 3)), mn);
        w0 = bf16x2(f0, f1);
        w1 = bf16x2(f2, f3);
    }
};

// Q6 (L = 32, one block: 16 nibble bytes, 8 bytes of high bits at Q + N·K/2, f16 scale): d·q as dequant_q6.
template <>
struct Mf<3> {
    static constexpr int L = 32;
    static __device__ __forceinline__ MfRaw load(const void* Q, const void* S, size_t r, int K, int k0, int N) {
        int blk = k0 >> 5;
        unsigned s = __ldg((const f16_t*)S + r * (K / 32) + blk);
        const unsigned char* q = (const unsigned char*)Q;
        uint2 h = __ldg((const uint2*)(q + (size_t)N * (K / 2) + r * (K / 4)) + blk);
        return {__ldg((const uint4*)(q + r * (K / 2)) + blk), s, h};
    }
    static __device__ __forceinline__ void words(const MfRaw& v, int m, unsigned& w0, unsigned& w1) {
        float d = h2f((f16_t)v.s);
        unsigned q = q6_word(v.w, v.h, m);
        float q0 = byte_f(q, 0) - 32.0f, q1 = byte_f(q, 1) - 32.0f, q2 = byte_f(q, 2) - 32.0f,
              q3 = byte_f(q, 3) - 32.0f;
        w0 = bf16x2(d * q0, d * q1);
        w1 = bf16x2(d * q2, d * q3);
    }
};

template <int FMT, int NT, int MT>
__device__ void mma_few(const void* W, const void* S, const bf16_t* __restrict__ x, float* y,
                        const float* __restrict__ bias, int N, int K, int rows, int accumulate) {
    constexpr int L = Mf<FMT>::L;
    __shared__ float red[MF_WARPS][16][NT * 8 + 1];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int n0 = blockIdx.x * 16 * MT;
    int steps = K / (4 * L);
    int per = (steps + MF_WARPS - 1) / MF_WARPS;
    int s0 = warp * per, s1 = min(steps, s0 + per);
    size_t rlo[MT], rhi[MT];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        rlo[mt] = min(n0 + mt * 16 + g, N - 1);
        rhi[mt] = min(n0 + mt * 16 + g + 8, N - 1);
    }
    // This lane's input rows (one per tile); rows past the pass read as zeros.
    const bf16_t* xr[NT];
    bool xin[NT];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        int i = nt * 8 + g;
        xin[nt] = i < rows;
        xr[nt] = x + (size_t)min(i, rows - 1) * K;
    }
    float acc[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[mt][nt][c] = 0.0f;
    // A step's weights and activations are loaded one step ahead: the loads of step s+1 are in flight while
    // step s is multiplied (the activations come from L2, whose latency would otherwise stall every step).
    MfRaw lo[MT], hi[MT];
    uint2 xb[NT][L / 4];
    if (s0 < s1) {
        int k0 = s0 * 4 * L + t * L;
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            lo[mt] = Mf<FMT>::load(W, S, rlo[mt], K, k0, N);
            hi[mt] = Mf<FMT>::load(W, S, rhi[mt], K, k0, N);
        }
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int m = 0; m < L / 4; m++) xb[nt][m] = __ldg((const uint2*)(xr[nt] + k0 + 4 * m));
    }
#pragma unroll 1
    for (int s = s0; s < s1; s++) {
        int k1 = (s + 1) * 4 * L + t * L;
        MfRaw nlo[MT], nhi[MT];
        uint2 nxb[NT][L / 4];
        if (s + 1 < s1) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                nlo[mt] = Mf<FMT>::load(W, S, rlo[mt], K, k1, N);
                nhi[mt] = Mf<FMT>::load(W, S, rhi[mt], K, k1, N);
            }
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int m = 0; m < L / 4; m++) nxb[nt][m] = __ldg((const uint2*)(xr[nt] + k1 + 4 * m));
        }
#pragma unroll
        for (int m = 0; m < L / 4; m++) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                unsigned a0, a1, a2, a3;
                Mf<FMT>::words(lo[mt], m, a0, a2);
                Mf<FMT>::words(hi[mt], m, a1, a3);
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    uint2 b = xin[nt] ? xb[nt][m] : make_uint2(0u, 0u);
                    mma_bf16_16816(acc[mt][nt], a0, a1, a2, a3, b.x, b.y);
                }
            }
        }
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            lo[mt] = nlo[mt];
            hi[mt] = nhi[mt];
        }
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int m = 0; m < L / 4; m++) xb[nt][m] = nxb[nt][m];
    }
    // c0, c1: output row g, input rows 2t and 2t+1 of the tile; c2, c3: output row g+8. One 16-row tile at a time
    // through shared memory (a fixed 17 KB whatever MT).
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        if (mt > 0) __syncthreads();
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            red[warp][g][nt * 8 + 2 * t] = acc[mt][nt][0];
            red[warp][g][nt * 8 + 2 * t + 1] = acc[mt][nt][1];
            red[warp][g + 8][nt * 8 + 2 * t] = acc[mt][nt][2];
            red[warp][g + 8][nt * 8 + 2 * t + 1] = acc[mt][nt][3];
        }
        __syncthreads();
        for (int idx = threadIdx.x; idx < 16 * rows; idx += blockDim.x) {
            int o = idx & 15, i = idx >> 4, n = n0 + mt * 16 + o;
            if (n >= N) continue;
            float v = red[0][o][i];
#pragma unroll
            for (int w = 1; w < MF_WARPS; w++) v += red[w][o][i];
            if (bias) v += bias[n];
            float* out = y + (size_t)i * N + n;
            *out = accumulate ? *out + v : v;
        }
    }
}

#define MF_INSTANCE(FMT, NAME, NT, MT)                                                                          \
    extern "C" __global__ void __launch_bounds__(MF_WARPS * 32)                                                 \
        mmf_##NAME##_##NT##_m##MT(const void* W, const void* S, const bf16_t* x, float* y, const float* bias, \
                                  int N, int K, int rows, int acc) {                                            \
        PDL_ENTER();                                                                                           \
        mma_few<FMT, NT, MT>(W, S, x, y, bias, N, K, rows, acc);                                               \
    }
#define MF_TILES(FMT, NAME, MT) \
    MF_INSTANCE(FMT, NAME, 1, MT) MF_INSTANCE(FMT, NAME, 2, MT) MF_INSTANCE(FMT, NAME, 3, MT) MF_INSTANCE(FMT, NAME, 4, MT)
MF_TILES(0, bf16, 1)
MF_TILES(0, bf16, 2)
MF_TILES(0, bf16, 4)
MF_TILES(1, q8, 1)
MF_TILES(1, q8, 2)
MF_TILES(1, q8, 4)
MF_TILES(2, q4, 1)
MF_TILES(2, q4, 2)
MF_TILES(2, q4, 4)
MF_TILES(3, q6, 1)
MF_TILES(3, q6, 2)
MF_TILES(3, q6, 4)
