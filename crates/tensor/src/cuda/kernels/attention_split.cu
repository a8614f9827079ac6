// Decode attention for passes of more than 8 rows with no block-wide step per chunk: the keys split over the warps.
//
// A chunk kernel that walks 64 keys with the whole block needs four __syncthreads a chunk (copy, scores, softmax,
// values), and its softmax warps wait for every other. Here a block of 4 warps takes one row and one KV head (grid
// (R, nkv)); warp w takes keys lo + 16·(4i + w) .. +15 for i = 0, 1, …, copying its next 16 keys' K and V rows
// into its own shared memory by cp.async while it works on the current ones, and keeps its own online softmax
// (flash-decoding within a block):
//   scores  S = Q·Kᵀ as m16n8k16 f16 `mma.sync` (two n-tiles of 8 keys), rows 0–7 of A the query heads' high
//           f16 parts, rows 8–15 their low parts (x = hi + lo), so c0 + c2 is head g's score in f32 precision;
//   softmax in registers: a quad of lanes holds a head's 16 scores, the maximum by two shuffles;
//   values  O += P·V with P split the same way, straight from the score registers into the A fragments (the
//           flash-attention layout), V by ldmatrix.trans.
// At the end the 4 warps' partial softmaxes are merged through shared memory in warp order. Every sum is in a fixed
// order in the row's own block, so a row's bits do not depend on the other rows of the pass.
#define AS_WARPS 4
#define AS_KW 16

// An f32 operand as two f16 parts, x = hi + lo (lo = f16(x − hi)): rows 0–7 of an A fragment hold the high parts,
// rows 8–15 the low, so c0 + c2 is a product to about f32 precision.
__device__ __forceinline__ void ac_split(float x, f16_t& hi, f16_t& lo) {
    hi = f2h(x);
    lo = f2h(x - h2f(hi));
}

template <int HD>
__device__ void attention_split_t(const float* __restrict__ q, const f16_t* __restrict__ k_pages,
                                  const f16_t* __restrict__ v_pages, void* out, const int* __restrict__ row_pos,
                                  const int* __restrict__ row_seq, const int* __restrict__ tables, int max_pages,
                                  int nh, int nkv, int window, float scale, int out_bf16) {
    constexpr int LD = HD + 8, PIECES = HD / 8, KS = HD / 16, NT = HD / 8;
    constexpr int STAGE = AS_KW * LD;                 // halves of one stage's K (or V)
    extern __shared__ __align__(16) unsigned char as_sm[];
    int r = blockIdx.x, kvh = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int gq = lane >> 2, tq = lane & 3;
    f16_t* ks = (f16_t*)as_sm + warp * 4 * STAGE;     // this warp's [2 stages][KW][LD] of K, then of V
    f16_t* vs = ks + 2 * STAGE;
    int G = nh / nkv;
    int pos = row_pos[r];
    const int* table = tables + (size_t)row_seq[r] * max_pages;
    int lo = window > 0 ? max(0, pos + 1 - window) : 0;
    int steps = 0;  // this warp's steps of 16 keys
    {
        int keys = pos + 1 - lo, first = warp * AS_KW;
        if (first < keys) steps = (keys - first + AS_WARPS * AS_KW - 1) / (AS_WARPS * AS_KW);
    }

    unsigned qf[KS][4];
    {
        const float* qh = q + (size_t)r * nh * HD + ((size_t)kvh * G + min(gq, G - 1)) * HD;
#pragma unroll
        for (int c = 0; c < KS; c++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int dd = c * 16 + 2 * tq + 8 * e;
                f16_t h0, l0, h1, l1;
                ac_split(gq < G ? qh[dd] * scale : 0.0f, h0, l0);
                ac_split(gq < G ? qh[dd + 1] * scale : 0.0f, h1, l1);
                qf[c][2 * e] = (unsigned)h0 | ((unsigned)h1 << 16);
                qf[c][2 * e + 1] = (unsigned)l0 | ((unsigned)l1 << 16);
            }
        }
    }

    // Step i's keys k0 .. k0 + n - 1 into stage i & 1; V rows past n zeroed (0 · NaN would be NaN).
    auto load = [&](int i) {
        int k0 = lo + (i * AS_WARPS + warp) * AS_KW, n = min(AS_KW, pos + 1 - k0), st = i & 1;
        for (int e = lane; e < AS_KW * PIECES; e += 32) {
            int j = e / PIECES, pc = e % PIECES;
            f16_t* kd = ks + st * STAGE + j * LD + pc * 8;
            f16_t* vd = vs + st * STAGE + j * LD + pc * 8;
            if (j < n) {
                int key = k0 + j;
                size_t a = (((size_t)table[key / AC_PAGE] * nkv + kvh) * AC_PAGE + key % AC_PAGE) * HD + pc * 8;
                cp_async16(kd, k_pages + a);
                cp_async16(vd, v_pages + a);
            } else {
                *(uint4*)vd = make_uint4(0, 0, 0, 0);
            }
        }
        cp_async_commit();
    };

    float o[NT][4];
#pragma unroll
    for (int i = 0; i < NT; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m = -INFINITY, l = 0.0f;  // head gq's running maximum (quad-uniform) and this lane's share of the sum

    if (steps > 0) load(0);
    for (int i = 0; i < steps; i++) {
        int k0 = lo + (i * AS_WARPS + warp) * AS_KW, n = min(AS_KW, pos + 1 - k0), st = i & 1;
        if (i + 1 < steps) {
            load(i + 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncwarp();
        float s[2][4];
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
            const f16_t* kr = ks + st * STAGE + (nt * 8 + gq) * LD + 2 * tq;
#pragma unroll
            for (int c = 0; c < KS; c++) {
                unsigned b0 = *(const unsigned*)(kr + c * 16), b1 = *(const unsigned*)(kr + c * 16 + 8);
                mma_16816(s[nt], qf[c], b0, b1);
            }
        }
        // Head gq's scores of keys nt·8 + 2tq + e (hi row plus lo row), masked past n.
        float p[2][2];
        float mx = m;
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int j = nt * 8 + 2 * tq + e;
                p[nt][e] = j < n ? s[nt][e] + s[nt][2 + e] : -INFINITY;
                mx = fmaxf(mx, p[nt][e]);
            }
        }
        mx = quad_max(mx);
        float cr = expf(m - mx);
        float ts = 0.0f;
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                p[nt][e] = expf(p[nt][e] - mx);
                ts += p[nt][e];
            }
        }
        l = l * cr + ts;
        m = mx;
#pragma unroll
        for (int i2 = 0; i2 < NT; i2++) {
            o[i2][0] *= cr;
            o[i2][1] *= cr;
            o[i2][2] *= cr;
            o[i2][3] *= cr;
        }
        unsigned pf[4];
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
            f16_t h0, l0, h1, l1;
            ac_split(p[nt][0], h0, l0);
            ac_split(p[nt][1], h1, l1);
            pf[2 * nt] = (unsigned)h0 | ((unsigned)h1 << 16);
            pf[2 * nt + 1] = (unsigned)l0 | ((unsigned)l1 << 16);
        }
        const f16_t* vr = vs + st * STAGE + (lane & 15) * LD + (lane >> 4) * 8;
#pragma unroll
        for (int dp = 0; dp < KS; dp++) {
            unsigned b[4];
            ldmatrix_x4_trans(b, vr + dp * 16);
            mma_16816(o[2 * dp], pf, b[0], b[1]);
            mma_16816(o[2 * dp + 1], pf, b[2], b[3]);
        }
        __syncwarp();  // every lane is done with this stage before step i + 2's copy lands in it
    }
    l = quad_sum(l);

    // Merge: each warp's (m, l) per head and its O rows (hi + lo) into shared memory, over the K/V stages.
    __syncthreads();
    float* pm = (float*)as_sm;                 // [AS_WARPS][8]
    float* pl = pm + AS_WARPS * 8;             // [AS_WARPS][8]
    float* po = pl + AS_WARPS * 8;             // [AS_WARPS][8][HD]
    if (tq == 0) {
        pm[warp * 8 + gq] = m;
        pl[warp * 8 + gq] = l;
    }
#pragma unroll
    for (int i2 = 0; i2 < NT; i2++) {
        float2 v = make_float2(o[i2][0] + o[i2][2], o[i2][1] + o[i2][3]);
        *(float2*)(po + (warp * 8 + gq) * HD + i2 * 8 + 2 * tq) = v;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < G * HD; e += AS_WARPS * 32) {
        int g = e / HD, d = e % HD;
        float mxw = -INFINITY;
#pragma unroll
        for (int w = 0; w < AS_WARPS; w++) mxw = fmaxf(mxw, pm[w * 8 + g]);
        float num = 0.0f, den = 0.0f;
#pragma unroll
        for (int w = 0; w < AS_WARPS; w++) {
            float mw = pm[w * 8 + g];
            if (mw == -INFINITY) continue;  // a warp that saw no key
            float c = expf(mw - mxw);
            num = fmaf(po[(w * 8 + g) * HD + d], c, num);
            den = fmaf(pl[w * 8 + g], c, den);
        }
        float v = num / den;
        size_t idx = (size_t)r * nh * HD + ((size_t)kvh * G + g) * HD + d;
        if (out_bf16) ((bf16_t*)out)[idx] = f2bf(v);
        else ((float*)out)[idx] = v;
    }
}

#define ATT_SPLIT(HD)                                                                                          \
    extern "C" __global__ void __launch_bounds__(AS_WARPS * 32, 3) attention_split_##HD(                       \
        const float* q, const f16_t* k_pages, const f16_t* v_pages, void* out, const int* row_pos,              \
        const int* row_seq, const int* tables, int max_pages, int nh, int nkv, int window, float scale,        \
        int out_bf16) {                                                                                        \
        PDL_ENTER();                                                                                           \
        attention_split_t<HD>(q, k_pages, v_pages, out, row_pos, row_seq, tables, max_pages, nh, nkv, window,  \
                              scale, out_bf16);                                                                \
    }
ATT_SPLIT(32)
ATT_SPLIT(64)
ATT_SPLIT(128)
