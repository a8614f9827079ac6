// Decode attention for passes of more than 8 rows, keys in chunks through shared memory.
//
// The key-stream kernels (attention.cu) give each warp one key at a time: a dependent load, then a warp-sum per
// query head. At 32 rows their 256 blocks of 8 warps leave each warp waiting on one key after another (24 µs a
// layer of the 8B shape, 0.7 TB/s of KV). Here a block of 256 threads still takes one row and one KV head (grid
// (R, nkv)) but walks the keys lo..=pos in chunks of KC (64, or 32 for head width 256): the whole chunk's K and V
// rows are copied into shared memory by cp.async, the next chunk's copy in flight while the current one is used.
// Per chunk:
//   scores  TPK = 256/KC lanes own a key, each a strided quarter (eighth) of its dims, for all GM query heads at
//           once (each K element converted once, used GM times), then summed over the TPK lanes by shuffles;
//   softmax warp g takes query head g: the chunk's maximum, the rescale factor of what came before, the
//           probabilities, the running sum;
//   values  thread t owns dim t mod HD of heads t/HD, t/HD + 256/HD, …, adding p·v over the chunk's keys in order.
// Everything a row computes is in a fixed order in its own block: a row's bits do not depend on the other rows of
// the pass (tested), only on which kernel the pass runs (`Gpu::attention` picks by the pass's row count).
#define AC_THREADS 256
#define AC_PAGE 16

// Keys a chunk holds, lanes a key, and the K row stride in halves: with 4 lanes a key the stride must be 16 words
// modulo 32 so that the 8 lanes of a 16-byte shared load (two keys × four parts) hit 32 different banks.
template <int HD>
struct AcShape {
    static constexpr int KC = HD <= 128 ? 64 : 32;
    static constexpr int TPK = AC_THREADS / KC;
    static constexpr int LDK = (TPK == 4 && (HD / 2) % 32 == 0) ? HD + 32 : HD;
};

template <int HD, int GM>
__device__ void attention_chunks_t(const float* __restrict__ q, const f16_t* __restrict__ k_pages,
                                   const f16_t* __restrict__ v_pages, void* out, const int* __restrict__ row_pos,
                                   const int* __restrict__ row_seq, const int* __restrict__ tables, int max_pages,
                                   int nh, int nkv, int window, float scale, int out_bf16) {
    constexpr int KC = AcShape<HD>::KC, TPK = AcShape<HD>::TPK, LDK = AcShape<HD>::LDK;
    constexpr int PIECES = HD / 8;               // 16-byte pieces of a K or V row
    constexpr int MYP = PIECES / TPK;            // pieces of a key's row a lane takes for the scores
    constexpr int HSTEP = AC_THREADS / HD;       // query heads apart of one thread's outputs
    constexpr int NO = (GM + HSTEP - 1) / HSTEP;  // outputs a thread owns
    extern __shared__ __align__(16) unsigned char ac_sm[];
    f16_t* ks = (f16_t*)ac_sm;                 // [2][KC][LDK]
    f16_t* vs = ks + 2 * KC * LDK;             // [2][KC][HD]
    float* qs = (float*)(vs + 2 * KC * HD);    // [GM][HD], scaled
    float* ps = qs + GM * HD;                  // [GM][KC] scores, then probabilities
    float* al = ps + GM * KC;                  // [GM] rescale of what came before this chunk
    float* ls = al + GM;                       // [GM] final sums

    int r = blockIdx.x, kvh = blockIdx.y, t = threadIdx.x, warp = t >> 5, lane = t & 31;
    int G = nh / nkv;
    int pos = row_pos[r];
    const int* table = tables + (size_t)row_seq[r] * max_pages;
    int lo = window > 0 ? max(0, pos + 1 - window) : 0;
    int nchunks = (pos - lo + KC) / KC;

    const float* qb = q + (size_t)r * nh * HD + (size_t)kvh * G * HD;
    for (int i = t; i < GM * HD; i += AC_THREADS) qs[i] = i < G * HD ? qb[i] * scale : 0.0f;

    auto load = [&](int c) {
        int k0 = lo + c * KC, n = min(KC, pos + 1 - k0), buf = c & 1;
        for (int i = t; i < KC * PIECES; i += AC_THREADS) {
            int j = i / PIECES, pc = i % PIECES;
            if (j < n) {
                int key = k0 + j;
                size_t a = (((size_t)table[key / AC_PAGE] * nkv + kvh) * AC_PAGE + key % AC_PAGE) * HD + pc * 8;
                cp_async16(ks + (buf * KC + j) * LDK + pc * 8, k_pages + a);
                cp_async16(vs + (buf * KC + j) * HD + pc * 8, v_pages + a);
            }
        }
        cp_async_commit();
    };

    float m = -INFINITY, l = 0.0f;  // warp g's running maximum and sum for query head g
    float acc[NO];
#pragma unroll
    for (int i = 0; i < NO; i++) acc[i] = 0.0f;
    const int d = t % HD, gb = t / HD;

    load(0);
    for (int c = 0; c < nchunks; c++) {
        int k0 = lo + c * KC, n = min(KC, pos + 1 - k0), buf = c & 1;
        if (c + 1 < nchunks) {
            load(c + 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        // Scores: key j = t / TPK, part p = t % TPK takes pieces p, p + TPK, ….
        {
            int j = t / TPK, p = t % TPK;
            float s[GM];
#pragma unroll
            for (int g = 0; g < GM; g++) s[g] = 0.0f;
            const f16_t* kr = ks + (buf * KC + j) * LDK;
#pragma unroll
            for (int e = 0; e < MYP; e++) {
                int d0 = (e * TPK + p) * 8;
                float kf[8];
                load_f16<8>(kr + d0, kf);
#pragma unroll
                for (int g = 0; g < GM; g++) {
                    float4 qa = *(const float4*)(qs + g * HD + d0);
                    float4 qc = *(const float4*)(qs + g * HD + d0 + 4);
                    float v = s[g];
                    v = fmaf(qa.x, kf[0], v);
                    v = fmaf(qa.y, kf[1], v);
                    v = fmaf(qa.z, kf[2], v);
                    v = fmaf(qa.w, kf[3], v);
                    v = fmaf(qc.x, kf[4], v);
                    v = fmaf(qc.y, kf[5], v);
                    v = fmaf(qc.z, kf[6], v);
                    v = fmaf(qc.w, kf[7], v);
                    s[g] = v;
                }
            }
#pragma unroll
            for (int g = 0; g < GM; g++) {
#pragma unroll
                for (int o = 1; o < TPK; o <<= 1) s[g] += __shfl_xor_sync(0xffffffffu, s[g], o);
                if (g % TPK == p) ps[g * KC + j] = j < n ? s[g] : -INFINITY;
            }
        }
        __syncthreads();
        // Softmax: warp g, query head g; lane takes keys lane, lane + 32.
        if (warp < G) {
            float* pg = ps + warp * KC;
            float sv[KC / 32];
            float cm = -INFINITY;
#pragma unroll
            for (int e = 0; e < KC / 32; e++) {
                sv[e] = pg[lane + 32 * e];
                cm = fmaxf(cm, sv[e]);
            }
            float mn = fmaxf(m, warp_max(cm));
            float sum = 0.0f;
#pragma unroll
            for (int e = 0; e < KC / 32; e++) {
                float pe = lane + 32 * e < n ? expf(sv[e] - mn) : 0.0f;
                pg[lane + 32 * e] = pe;
                sum += pe;
            }
            sum = warp_sum(sum);
            float cr = expf(m - mn);
            l = l * cr + sum;
            m = mn;
            if (lane == 0) al[warp] = cr;
        }
        __syncthreads();
        // Values: thread t adds p·v for dim d of heads gb, gb + HSTEP, … over the chunk's keys in order.
        {
            const f16_t* vb = vs + buf * KC * HD + d;
#pragma unroll
            for (int i = 0; i < NO; i++) {
                int g = gb + i * HSTEP;
                if (g < GM) acc[i] *= al[g];
            }
            int j = 0;
            for (; j + 4 <= n; j += 4) {
                float v0 = h2f(vb[j * HD]), v1 = h2f(vb[(j + 1) * HD]);
                float v2 = h2f(vb[(j + 2) * HD]), v3 = h2f(vb[(j + 3) * HD]);
#pragma unroll
                for (int i = 0; i < NO; i++) {
                    int g = gb + i * HSTEP;
                    if (g < GM) {
                        float4 pp = *(const float4*)(ps + g * KC + j);
                        float a = acc[i];
                        a = fmaf(pp.x, v0, a);
                        a = fmaf(pp.y, v1, a);
                        a = fmaf(pp.z, v2, a);
                        a = fmaf(pp.w, v3, a);
                        acc[i] = a;
                    }
                }
            }
            for (; j < n; j++) {
                float v0 = h2f(vb[j * HD]);
#pragma unroll
                for (int i = 0; i < NO; i++) {
                    int g = gb + i * HSTEP;
                    if (g < GM) acc[i] = fmaf(ps[g * KC + j], v0, acc[i]);
                }
            }
        }
        __syncthreads();
    }
    if (warp < G && lane == 0) ls[warp] = l;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < NO; i++) {
        int g = gb + i * HSTEP;
        if (g < G) {
            float v = acc[i] / ls[g];
            size_t idx = (size_t)r * nh * HD + ((size_t)kvh * G + g) * HD + d;
            if (out_bf16) ((bf16_t*)out)[idx] = f2bf(v);
            else ((float*)out)[idx] = v;
        }
    }
}

#define ATT_CHUNKS(HD, GM)                                                                                     \
    extern "C" __global__ void __launch_bounds__(AC_THREADS, 2) attention_chunks_##HD##_g##GM(                 \
        const float* q, const f16_t* k_pages, const f16_t* v_pages, void* out, const int* row_pos,              \
        const int* row_seq, const int* tables, int max_pages, int nh, int nkv, int window, float scale,        \
        int out_bf16) {                                                                                        \
        PDL_ENTER();                                                                                           \
        attention_chunks_t<HD, GM>(q, k_pages, v_pages, out, row_pos, row_seq, tables, max_pages, nh, nkv,     \
                                   window, scale, out_bf16);                                                   \
    }
// Every head width of the key-stream kernels (32·D, D = 1, 2, 4, 8) and group of up to 8 query heads (padded to
// a power of two); `Gpu::attention` takes them for decode passes of more than 8 rows.
ATT_CHUNKS(32, 1) ATT_CHUNKS(32, 2) ATT_CHUNKS(32, 4) ATT_CHUNKS(32, 8)
ATT_CHUNKS(64, 1) ATT_CHUNKS(64, 2) ATT_CHUNKS(64, 4) ATT_CHUNKS(64, 8)
ATT_CHUNKS(128, 1) ATT_CHUNKS(128, 2) ATT_CHUNKS(128, 4) ATT_CHUNKS(128, 8)
ATT_CHUNKS(256, 1) ATT_CHUNKS(256, 2) ATT_CHUNKS(256, 4) ATT_CHUNKS(256, 8)

// The chunk kernel with both products on the tensor cores (head widths up to 128): m16n8k16 f16 `mma.sync` with
// f32 accumulators, exact to about f32 by splitting the f32 operand in two f16 parts. Rows 0–7 of the A operand
// are the group's query heads' high parts, rows 8–15 their low parts (x = hi + lo, lo = f16(x − hi)); K and V are
// f16 already, so a lane's c0 + c2 (row g plus row g + 8) is head g's product. Scores: warp w takes keys 8w..8w+7
// of the chunk, the queries' A fragments kept in registers for every chunk; values: warp w takes dims 16w..16w+15
// (warps past HD/16 idle there), P split the same way from the shared probabilities. The softmax is the other
// kernel's (a warp per query head); the sums' order is fixed, so a row's bits are still its own.
__device__ __forceinline__ void ac_split(float x, f16_t& hi, f16_t& lo) {
    hi = f2h(x);
    lo = f2h(x - h2f(hi));
}

template <int HD>
__device__ void attention_chunks_mma_t(const float* __restrict__ q, const f16_t* __restrict__ k_pages,
                                       const f16_t* __restrict__ v_pages, void* out, const int* __restrict__ row_pos,
                                       const int* __restrict__ row_seq, const int* __restrict__ tables,
                                       int max_pages, int nh, int nkv, int window, float scale, int out_bf16) {
    constexpr int KC = 64, LD = HD + 8, PS = KC + 8, PIECES = HD / 8, KS = HD / 16;
    extern __shared__ __align__(16) unsigned char ac_sm[];
    f16_t* ks = (f16_t*)ac_sm;         // [2][KC][LD]
    f16_t* vs = ks + 2 * KC * LD;      // [2][KC][LD]
    float* ps = (float*)(vs + 2 * KC * LD);  // [8][PS]
    float* al = ps + 8 * PS;           // [8]
    float* ls = al + 8;                // [8]

    int r = blockIdx.x, kvh = blockIdx.y, t = threadIdx.x, warp = t >> 5, lane = t & 31;
    int gq = lane >> 2, tq = lane & 3;
    int G = nh / nkv;
    int pos = row_pos[r];
    const int* table = tables + (size_t)row_seq[r] * max_pages;
    int lo = window > 0 ? max(0, pos + 1 - window) : 0;
    int nchunks = (pos - lo + KC) / KC;

    // Query head gq's A fragments: a0/a2 its high parts at dims 16c + 2tq (+8), a1/a3 the low parts.
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

    auto load = [&](int c) {
        int k0 = lo + c * KC, n = min(KC, pos + 1 - k0), buf = c & 1;
        for (int i = t; i < KC * PIECES; i += AC_THREADS) {
            int j = i / PIECES, pc = i % PIECES;
            if (j < n) {
                int key = k0 + j;
                size_t a = (((size_t)table[key / AC_PAGE] * nkv + kvh) * AC_PAGE + key % AC_PAGE) * HD + pc * 8;
                cp_async16(ks + (buf * KC + j) * LD + pc * 8, k_pages + a);
                cp_async16(vs + (buf * KC + j) * LD + pc * 8, v_pages + a);
            } else {
                *(uint4*)(vs + (buf * KC + j) * LD + pc * 8) = make_uint4(0, 0, 0, 0);
            }
        }
        cp_async_commit();
    };

    float m = -INFINITY, l = 0.0f;  // warp g's running maximum and sum for query head g
    float o[2][4];
#pragma unroll
    for (int i = 0; i < 2; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;

    load(0);
    for (int c = 0; c < nchunks; c++) {
        int k0 = lo + c * KC, n = min(KC, pos + 1 - k0), buf = c & 1;
        if (c + 1 < nchunks) {
            load(c + 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        // Scores of keys 8·warp..8·warp+7 (the B operand straight from K's rows).
        {
            float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            const f16_t* kr = ks + (buf * KC + warp * 8 + gq) * LD + 2 * tq;
#pragma unroll
            for (int cc = 0; cc < KS; cc++) {
                unsigned b0 = *(const unsigned*)(kr + cc * 16), b1 = *(const unsigned*)(kr + cc * 16 + 8);
                mma_16816(s, qf[cc], b0, b1);
            }
            int j = warp * 8 + 2 * tq;
            if (gq < G) {
                float2 sv;
                sv.x = j < n ? s[0] + s[2] : -INFINITY;
                sv.y = j + 1 < n ? s[1] + s[3] : -INFINITY;
                *(float2*)(ps + gq * PS + j) = sv;
            }
        }
        __syncthreads();
        if (warp < G) {
            float* pg = ps + warp * PS;
            float s0 = pg[lane], s1 = pg[lane + 32];
            float mn = fmaxf(m, warp_max(fmaxf(s0, s1)));
            float p0 = lane < n ? expf(s0 - mn) : 0.0f, p1 = lane + 32 < n ? expf(s1 - mn) : 0.0f;
            pg[lane] = p0;
            pg[lane + 32] = p1;
            float sum = warp_sum(p0 + p1);
            float cr = expf(m - mn);
            l = l * cr + sum;
            m = mn;
            if (lane == 0) al[warp] = cr;
        }
        __syncthreads();
        // Values of dims 16·warp..16·warp+15.
        if (warp < KS) {
            float a = gq < G ? al[gq] : 0.0f;
#pragma unroll
            for (int i = 0; i < 2; i++) {
                o[i][0] *= a;
                o[i][1] *= a;
                o[i][2] *= a;
                o[i][3] *= a;
            }
            const float* pg = ps + min(gq, 7) * PS + 2 * tq;
#pragma unroll
            for (int kc = 0; kc < KC / 16; kc++) {
                if (kc * 16 >= n) break;
                unsigned pf[4];
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    float2 pv = gq < G ? *(const float2*)(pg + kc * 16 + 8 * e) : make_float2(0.0f, 0.0f);
                    f16_t h0, l0, h1, l1;
                    ac_split(pv.x, h0, l0);
                    ac_split(pv.y, h1, l1);
                    pf[2 * e] = (unsigned)h0 | ((unsigned)h1 << 16);
                    pf[2 * e + 1] = (unsigned)l0 | ((unsigned)l1 << 16);
                }
                // Keys past n have probability 0, and their V rows were zeroed by the load (never-written shared
                // memory could hold NaN, and 0 · NaN is NaN).
                unsigned b[4];
                ldmatrix_x4_trans(b, vs + (buf * KC + kc * 16 + (lane & 15)) * LD + warp * 16 + (lane >> 4) * 8);
                mma_16816(o[0], pf, b[0], b[1]);
                mma_16816(o[1], pf, b[2], b[3]);
            }
        }
        __syncthreads();
    }
    if (warp < G && lane == 0) ls[warp] = l;
    __syncthreads();
    if (warp < KS && gq < G) {
        float inv = 1.0f / ls[gq];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            int dd = warp * 16 + i * 8 + 2 * tq;
            float v0 = (o[i][0] + o[i][2]) * inv, v1 = (o[i][1] + o[i][3]) * inv;
            size_t idx = (size_t)r * nh * HD + ((size_t)kvh * G + gq) * HD + dd;
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

#define ATT_CHUNKS_MMA(HD)                                                                                     \
    extern "C" __global__ void __launch_bounds__(AC_THREADS, 2) attention_chunks_mma_##HD(                    \
        const float* q, const f16_t* k_pages, const f16_t* v_pages, void* out, const int* row_pos,              \
        const int* row_seq, const int* tables, int max_pages, int nh, int nkv, int window, float scale,        \
        int out_bf16) {                                                                                        \
        PDL_ENTER();                                                                                           \
        attention_chunks_mma_t<HD>(q, k_pages, v_pages, out, row_pos, row_seq, tables, max_pages, nh, nkv,     \
                                   window, scale, out_bf16);                                                   \
    }
ATT_CHUNKS_MMA(32)
ATT_CHUNKS_MMA(64)
ATT_CHUNKS_MMA(128)
