// Attention for prompt rows on the tensor cores, in the flash-attention style: a block takes a tile of up to 64
// consecutive rows of one sequence and one query head (grid: tiles × heads; the tile list comes from the host) and
// walks that sequence's keys 64 at a time through shared memory, S = Q·Kᵀ and O += P·V as m16n8k16 f16 products
// with f32 accumulators, and the softmax kept online in registers (exp2 with log2(e) folded into Q's scale). Each
// of the 4 warps owns 16 rows; a lane holds rows g and g+8 of its warp (g = lane/4) as the mma layouts give them,
// so P goes from the S accumulators into the next product's A fragments without shared memory.
//
// Decode rows keep the key-stream kernels (attention.cu): a 64-row tile would waste the tensor core on one row,
// and the batched decode path must give every row the bits it gets alone.
#define FA_BM 64
#define FA_BN 64
#define FA_LOG2E 1.4426950408889634f

__device__ __forceinline__ void mma_16816(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8×8 f16 matrices from shared memory, transposed (the B operand of P·V from V stored key-major).
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned* r, const f16_t* p) {
    unsigned a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

__device__ __forceinline__ unsigned pack_h2(float lo, float hi) {
    return (unsigned)f2h(lo) | ((unsigned)f2h(hi) << 16);
}

__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

template <int HD>
__device__ void flash_t(const float* __restrict__ q, const f16_t* __restrict__ k_pages,
                        const f16_t* __restrict__ v_pages, void* out, const int* __restrict__ row_pos,
                        const int* __restrict__ row_seq, const int* __restrict__ tables, int max_pages,
                        const int* __restrict__ tiles, int nh, int nkv, int window, float scale, int out_bf16) {
    constexpr int LD = HD + 8;  // halves per shared row: 16-byte aligned, and 8 rows of an ldmatrix hit 8 bank groups
    constexpr int KC = HD / 16;  // k-chunks of Q·Kᵀ, and pairs of 8-wide output tiles of P·V
    __shared__ __align__(16) f16_t ks[FA_BN * LD];
    __shared__ __align__(16) f16_t vs[FA_BN * LD];
    int h = blockIdx.y, kvh = h / (nh / nkv);
    int r0 = tiles[2 * blockIdx.x], n = tiles[2 * blockIdx.x + 1];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int* table = tables + (size_t)row_seq[r0] * max_pages;
    int first = row_pos[r0], last = row_pos[r0 + n - 1];
    int ra = warp * 16 + g, rb = ra + 8;
    // A row past the tile sees no key (position -1); its output is not written.
    int pa = ra < n ? row_pos[r0 + ra] : -1, pb = rb < n ? row_pos[r0 + rb] : -1;
    int la = window > 0 ? pa + 1 - window : 0, lb = window > 0 ? pb + 1 - window : 0;
    int wlast = warp * 16 < n ? row_pos[r0 + min(warp * 16 + 15, n - 1)] : -1;

    const size_t qstride = (size_t)nh * HD;
    const float* qa_row = q + (size_t)(r0 + min(ra, n - 1)) * qstride + (size_t)h * HD;
    const float* qb_row = q + (size_t)(r0 + min(rb, n - 1)) * qstride + (size_t)h * HD;
    const float qs = scale * FA_LOG2E;
    unsigned qf[KC][4];
#pragma unroll
    for (int c = 0; c < KC; c++) {
        int d = c * 16 + 2 * t;
        qf[c][0] = pack_h2(qa_row[d] * qs, qa_row[d + 1] * qs);
        qf[c][1] = pack_h2(qb_row[d] * qs, qb_row[d + 1] * qs);
        qf[c][2] = pack_h2(qa_row[d + 8] * qs, qa_row[d + 9] * qs);
        qf[c][3] = pack_h2(qb_row[d + 8] * qs, qb_row[d + 9] * qs);
    }
    float o[2 * KC][4];
#pragma unroll
    for (int i = 0; i < 2 * KC; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float ma = -INFINITY, mb = -INFINITY, sa = 0.0f, sb = 0.0f;

    int k_lo = window > 0 ? max(0, first + 1 - window) : 0;
    for (int k0 = k_lo; k0 <= last; k0 += FA_BN) {
        __syncthreads();  // every warp is done with the previous tile
        constexpr int CH = HD / 8;  // 16-byte pieces per key row
        for (int i = threadIdx.x; i < FA_BN * CH; i += blockDim.x) {
            int j = i / CH, c = i % CH, key = k0 + j;
            uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
            if (key <= last) {
                size_t a = (((size_t)table[key / PAGE] * nkv + kvh) * PAGE + key % PAGE) * HD + c * 8;
                kv = *(const uint4*)(k_pages + a);
                vv = *(const uint4*)(v_pages + a);
            }
            *(uint4*)(ks + j * LD + c * 8) = kv;
            *(uint4*)(vs + j * LD + c * 8) = vv;
        }
        __syncthreads();
        if (wlast < k0) continue;  // every row of this warp is before the tile (warp-uniform)

        float s[FA_BN / 8][4];
#pragma unroll
        for (int j = 0; j < FA_BN / 8; j++) {
            s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
            const f16_t* kr = ks + (j * 8 + g) * LD + 2 * t;
#pragma unroll
            for (int c = 0; c < KC; c++) {
                unsigned b0 = *(const unsigned*)(kr + c * 16), b1 = *(const unsigned*)(kr + c * 16 + 8);
                mma_16816(s[j], qf[c], b0, b1);
            }
        }
        float mxa = ma, mxb = mb;
#pragma unroll
        for (int j = 0; j < FA_BN / 8; j++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int key = k0 + j * 8 + 2 * t + e;
                if (key <= pa && key >= la) mxa = fmaxf(mxa, s[j][e]);
                else s[j][e] = -INFINITY;
                if (key <= pb && key >= lb) mxb = fmaxf(mxb, s[j][2 + e]);
                else s[j][2 + e] = -INFINITY;
            }
        }
        mxa = quad_max(mxa);
        mxb = quad_max(mxb);
        // A row that has seen no key yet keeps max -inf: its reference is 0 so exp2 gives 0, not NaN.
        float refa = mxa == -INFINITY ? 0.0f : mxa, refb = mxb == -INFINITY ? 0.0f : mxb;
        float ca = exp2f(ma - refa), cb = exp2f(mb - refb);
        float ta = 0.0f, tb = 0.0f;
#pragma unroll
        for (int j = 0; j < FA_BN / 8; j++) {
            s[j][0] = exp2f(s[j][0] - refa);
            s[j][1] = exp2f(s[j][1] - refa);
            s[j][2] = exp2f(s[j][2] - refb);
            s[j][3] = exp2f(s[j][3] - refb);
            ta += s[j][0] + s[j][1];
            tb += s[j][2] + s[j][3];
        }
        sa = sa * ca + ta;  // each lane's share of the row sum; the quad adds them at the end
        sb = sb * cb + tb;
        ma = mxa;
        mb = mxb;
#pragma unroll
        for (int i = 0; i < 2 * KC; i++) {
            o[i][0] *= ca;
            o[i][1] *= ca;
            o[i][2] *= cb;
            o[i][3] *= cb;
        }
#pragma unroll
        for (int kc = 0; kc < FA_BN / 16; kc++) {
            unsigned pf[4] = {pack_h2(s[2 * kc][0], s[2 * kc][1]), pack_h2(s[2 * kc][2], s[2 * kc][3]),
                              pack_h2(s[2 * kc + 1][0], s[2 * kc + 1][1]), pack_h2(s[2 * kc + 1][2], s[2 * kc + 1][3])};
            const f16_t* vr = vs + (kc * 16 + (lane & 15)) * LD + (lane >> 4) * 8;
#pragma unroll
            for (int dp = 0; dp < KC; dp++) {
                unsigned b[4];
                ldmatrix_x4_trans(b, vr + dp * 16);
                mma_16816(o[2 * dp], pf, b[0], b[1]);
                mma_16816(o[2 * dp + 1], pf, b[2], b[3]);
            }
        }
    }
    sa = quad_sum(sa);
    sb = quad_sum(sb);
#pragma unroll
    for (int i = 0; i < 2 * KC; i++) {
        int col = h * HD + i * 8 + 2 * t;
#pragma unroll
        for (int half = 0; half < 2; half++) {
            int rr = half ? rb : ra;
            if (rr >= n) continue;
            float inv = 1.0f / (half ? sb : sa);
            float v0 = o[i][2 * half] * inv, v1 = o[i][2 * half + 1] * inv;
            size_t idx = (size_t)(r0 + rr) * qstride + col;
            if (out_bf16) {
                ((bf16_t*)out)[idx] = f2bf(v0);
                ((bf16_t*)out)[idx + 1] = f2bf(v1);
            } else {
                ((float*)out)[idx] = v0;
                ((float*)out)[idx + 1] = v1;
            }
        }
    }
}

#define FLASH(HD)                                                                                              \
    extern "C" __global__ void __launch_bounds__(128) flash_attention_##HD(                                    \
        const float* q, const f16_t* k_pages, const f16_t* v_pages, void* out, const int* row_pos,              \
        const int* row_seq, const int* tables, int max_pages, const int* tiles, int nh, int nkv, int window,   \
        float scale, int out_bf16) {                                                                           \
        PDL_ENTER();                                                                                           \
        flash_t<HD>(q, k_pages, v_pages, out, row_pos, row_seq, tables, max_pages, tiles, nh, nkv, window,     \
                    scale, out_bf16);                                                                          \
    }
FLASH(16)
FLASH(32)
FLASH(64)
FLASH(128)
