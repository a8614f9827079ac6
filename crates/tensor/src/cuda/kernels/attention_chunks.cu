// Decode attention for passes of more than 8 rows at head width 256, keys in chunks through shared memory (head
// widths up to 128 run attention_split.cu, on the tensor cores).
//
// The key-stream kernels (attention.cu) give each warp one key at a time: a dependent load, then a warp-sum per
// query head, and at many rows each warp waits on one key after another. Here a block of 256 threads still takes
// one row and one KV head (grid (R, nkv)) but walks the keys lo..=pos in chunks of KC (64, or 32 for head width
// 256): the whole chunk's K and V rows are copied into shared memory by cp.async, the next chunk's copy in flight
// while the current one is used.
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
// Head width 256 and every group of up to 8 query heads (padded to a power of two): `Gpu::attention_in_chunks`
// takes them for passes of more than 8 rows at that width.
ATT_CHUNKS(256, 1) ATT_CHUNKS(256, 2) ATT_CHUNKS(256, 4) ATT_CHUNKS(256, 8)
