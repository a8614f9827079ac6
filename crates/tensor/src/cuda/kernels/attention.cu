// Causal attention of new token rows over a paged f16 KV cache, with an online softmax.
//
// Grid (R, nkv): one block serves all G = nh/nkv query heads of one KV head for one row (GQA), so every key and
// value is read once per row. Keys lo..=pos in tiles of 32, lo from the sliding window. q [R][nh*hd] f32, out
// [R][nh*hd] (f32, or bf16 for a following GEMM). Dynamic shared memory: qs[G][hd], ks[32][hd+1], vs[32][hd],
// ps[G][32], stats[3][G].
#define ATT_T 32
#define ATT_MAXO 16

extern "C" __global__ void __launch_bounds__(128)
    attention(const float* __restrict__ q, const f16_t* __restrict__ k_pages, const f16_t* __restrict__ v_pages,
              void* out, const int* __restrict__ row_pos, const int* __restrict__ row_seq,
              const int* __restrict__ tables, int max_pages, int nh, int nkv, int hd, int window, float scale,
              int out_bf16) {
    PDL_ENTER();
    extern __shared__ float sm[];
    int r = blockIdx.x, kvh = blockIdx.y, t = threadIdx.x, nt = blockDim.x;
    int G = nh / nkv;
    float* qs = sm;
    float* ks = qs + G * hd;
    float* vs = ks + ATT_T * (hd + 1);
    float* ps = vs + ATT_T * hd;
    float* mx = ps + G * ATT_T;
    float* ls = mx + G;
    float* al = ls + G;
    int pos = row_pos[r];
    const int* table = tables + (size_t)row_seq[r] * max_pages;
    int lo = window > 0 ? max(0, pos + 1 - window) : 0;
    const float* qr = q + (size_t)r * nh * hd + (size_t)kvh * G * hd;
    for (int i = t; i < G * hd; i += nt) qs[i] = qr[i] * scale;
    if (t < G) {
        mx[t] = -INFINITY;
        ls[t] = 0.0f;
    }
    float acc[ATT_MAXO];
#pragma unroll
    for (int i = 0; i < ATT_MAXO; i++) acc[i] = 0.0f;
    int warp = t >> 5, lane = t & 31, nw = nt >> 5;
    __syncthreads();
    for (int k0 = lo; k0 <= pos; k0 += ATT_T) {
        int n = min(ATT_T, pos + 1 - k0);
        for (int i = t; i < n * hd; i += nt) {
            int j = i / hd, d = i % hd, key = k0 + j;
            size_t a = (((size_t)table[key / PAGE] * nkv + kvh) * PAGE + key % PAGE) * hd + d;
            ks[j * (hd + 1) + d] = h2f(k_pages[a]);
            vs[j * hd + d] = h2f(v_pages[a]);
        }
        __syncthreads();
        for (int p = t; p < G * ATT_T; p += nt) {
            int g = p / ATT_T, j = p % ATT_T;
            float s = -INFINITY;
            if (j < n) {
                s = 0.0f;
                const float* qg = qs + g * hd;
                const float* kj = ks + j * (hd + 1);
                for (int d = 0; d < hd; d++) s = fmaf(qg[d], kj[d], s);
            }
            ps[p] = s;
        }
        __syncthreads();
        for (int g = warp; g < G; g += nw) {
            float s = ps[g * ATT_T + lane];
            float m_old = mx[g];
            float m_new = fmaxf(m_old, warp_max(s));
            float p = lane < n ? expf(s - m_new) : 0.0f;
            float sum = warp_sum(p);
            ps[g * ATT_T + lane] = p;
            __syncwarp();
            if (lane == 0) {
                float a = expf(m_old - m_new);
                al[g] = a;
                ls[g] = ls[g] * a + sum;
                mx[g] = m_new;
            }
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < ATT_MAXO; i++) {
            int o = t + i * nt;
            if (o < G * hd) {
                int g = o / hd, d = o % hd;
                float a = acc[i] * al[g];
                const float* pg = ps + g * ATT_T;
                for (int j = 0; j < n; j++) a = fmaf(pg[j], vs[j * hd + d], a);
                acc[i] = a;
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < ATT_MAXO; i++) {
        int o = t + i * nt;
        if (o < G * hd) {
            int g = o / hd;
            float v = acc[i] / ls[g];
            size_t idx = (size_t)r * nh * hd + (size_t)kvh * G * hd + o;
            if (out_bf16) ((bf16_t*)out)[idx] = f2bf(v);
            else ((float*)out)[idx] = v;
        }
    }
}

// Attention by key streams, for head widths of 32·D (D = 1, 2, 4, 8) and up to 8 query heads per KV head: grid
// (R, nkv), 8 warps; warp w takes keys lo+w, lo+w+8, …; lane l holds dims [l·D, l·D + D) of q, k, v and the
// accumulators of every query head of the group, so a key costs one coalesced load of its K and V rows and a
// warp-sum per head, with no shared memory until the 8 warps' partial softmaxes are merged at the end.
#define ATT_WARPS 8
#define ATT_GMAX 8

template <int D>
__device__ __forceinline__ void load_f16(const f16_t* p, float* out) {
    if (D == 1) {
        out[0] = h2f(p[0]);
    } else if (D == 2) {
        unsigned u = *(const unsigned*)p;
        out[0] = h2f(u & 0xffff); out[1] = h2f(u >> 16);
    } else if (D == 4) {
        uint2 u = *(const uint2*)p;
        out[0] = h2f(u.x & 0xffff); out[1] = h2f(u.x >> 16); out[2] = h2f(u.y & 0xffff); out[3] = h2f(u.y >> 16);
    } else {
        uint4 u = *(const uint4*)p;
        unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; i++) { out[2 * i] = h2f(w[i] & 0xffff); out[2 * i + 1] = h2f(w[i] >> 16); }
    }
}

// One key of a key stream: the score of each of the G query heads (a warp sum over the lanes' D dims), then the
// online-softmax update of the head's running maximum m, sum l and accumulators by the key's value row.
template <int D, int GM>
__device__ __forceinline__ void key_step(const float (&qr)[GM][D], const float (&kv)[D], const float (&vv)[D],
                                         float (&acc)[GM][D], float (&m)[GM], float (&l)[GM], int G) {
#pragma unroll
    for (int g = 0; g < GM; g++) {
        if (g < G) {
            float s = 0.0f;
#pragma unroll
            for (int i = 0; i < D; i++) s = fmaf(qr[g][i], kv[i], s);
            s = warp_sum(s);
            float mn = fmaxf(m[g], s);
            float c = expf(m[g] - mn), p = expf(s - mn);
            l[g] = l[g] * c + p;
#pragma unroll
            for (int i = 0; i < D; i++) acc[g][i] = fmaf(acc[g][i], c, p * vv[i]);
            m[g] = mn;
        }
    }
}

// The end of a key-stream block: each warp's (m, l, accumulators) into shared memory (sm_m/sm_l [W][GM], sm_acc
// [W][G·hd]), then one output of the block per thread per turn, `emit(o, num, den, mx)` for o in [0, G·hd): the
// block's softmax numerator and denominator at its running maximum mx (−inf, 0, 0 where no warp saw a key) — whole
// warps take consecutive outputs, so `emit` may use warp shuffles.
template <int D, int W, int GM, typename Emit>
__device__ __forceinline__ void merge_warps_raw(const float (&acc)[GM][D], const float (&m)[GM], const float (&l)[GM],
                                                float (*sm_m)[GM], float (*sm_l)[GM], float* sm_acc, int G,
                                                Emit emit) {
    const int hd = 32 * D;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int g = 0; g < GM; g++) {
        if (g < G) {
            if (lane == 0) { sm_m[warp][g] = m[g]; sm_l[warp][g] = l[g]; }
#pragma unroll
            for (int i = 0; i < D; i++) sm_acc[warp * G * hd + g * hd + lane * D + i] = acc[g][i];
        }
    }
    __syncthreads();
    for (int o = threadIdx.x; o < G * hd; o += blockDim.x) {
        int g = o / hd;
        float mx = -INFINITY;
        for (int w = 0; w < W; w++) mx = fmaxf(mx, sm_m[w][g]);
        float num = 0.0f, den = 0.0f;
        for (int w = 0; w < W; w++) {
            if (sm_m[w][g] == -INFINITY) continue;  // a warp that saw no key
            float c = expf(sm_m[w][g] - mx);
            num = fmaf(sm_acc[w * G * hd + o], c, num);
            den = fmaf(sm_l[w][g], c, den);
        }
        emit(o, num, den, mx);
    }
}

// merge_warps_raw's outputs divided out: `emit(o, value)`.
template <int D, int W, int GM, typename Emit>
__device__ __forceinline__ void merge_warps(const float (&acc)[GM][D], const float (&m)[GM], const float (&l)[GM],
                                            float (*sm_m)[GM], float (*sm_l)[GM], float* sm_acc, int G, Emit emit) {
    merge_warps_raw<D, W, GM>(acc, m, l, sm_m, sm_l, sm_acc, G,
                              [&](int o, float num, float den, float) { emit(o, num / den); });
}

template <int D>
__device__ void attention_keys_t(const float* __restrict__ q, const f16_t* __restrict__ k_pages,
                                 const f16_t* __restrict__ v_pages, void* out, const int* __restrict__ row_pos,
                                 const int* __restrict__ row_seq, const int* __restrict__ tables, int max_pages,
                                 int nh, int nkv, int window, float scale, int out_bf16) {
    const int hd = 32 * D;
    __shared__ float sm_m[ATT_WARPS][ATT_GMAX], sm_l[ATT_WARPS][ATT_GMAX];
    extern __shared__ float sm_acc_dyn[];  // [ATT_WARPS][G * hd]
    int r = blockIdx.x, kvh = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int G = nh / nkv;
    int pos = row_pos[r];
    const int* table = tables + (size_t)row_seq[r] * max_pages;
    int lo = window > 0 ? max(0, pos + 1 - window) : 0;
    float qr[ATT_GMAX][D], acc[ATT_GMAX][D], m[ATT_GMAX], l[ATT_GMAX];
    const float* qb = q + (size_t)r * nh * hd + (size_t)kvh * G * hd + lane * D;
#pragma unroll
    for (int g = 0; g < ATT_GMAX; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < D; i++) {
            qr[g][i] = g < G ? qb[g * hd + i] * scale : 0.0f;
            acc[g][i] = 0.0f;
        }
    }
    for (int key = lo + warp; key <= pos; key += ATT_WARPS) {
        size_t a = (((size_t)table[key / PAGE] * nkv + kvh) * PAGE + key % PAGE) * hd + lane * D;
        float kv[D], vv[D];
        load_f16<D>(k_pages + a, kv);
        load_f16<D>(v_pages + a, vv);
        key_step<D, ATT_GMAX>(qr, kv, vv, acc, m, l, G);
    }
    // Merge the warps' partial softmaxes.
    size_t base = (size_t)r * nh * hd + (size_t)kvh * G * hd;
    merge_warps<D, ATT_WARPS, ATT_GMAX>(acc, m, l, sm_m, sm_l, sm_acc_dyn, G, [&](int o, float v) {
        if (out_bf16) ((bf16_t*)out)[base + o] = f2bf(v);
        else ((float*)out)[base + o] = v;
    });
}

#define ATT_KEYS(D)                                                                                            \
    extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32) attention_keys_##D(                           \
        const float* q, const f16_t* k_pages, const f16_t* v_pages, void* out, const int* row_pos,              \
        const int* row_seq, const int* tables, int max_pages, int nh, int nkv, int window, float scale,        \
        int out_bf16) {                                                                                        \
        PDL_ENTER();                                                                                           \
        attention_keys_t<D>(q, k_pages, v_pages, out, row_pos, row_seq, tables, max_pages, nh, nkv, window,    \
                            scale, out_bf16);                                                                  \
    }
// Only D = 8: the one shape whose accumulators fit neither 32 nor 16 warps (GM·D > 32, head width 256 with 8 query
// heads a KV head; `Gpu::attention_warps`).
ATT_KEYS(8)

// The key-stream kernel with W warps per block (W = 16 or 32) and the accumulators sized for GM >= G query heads
// per KV head, for decode passes of up to 8 rows: their (rows × KV heads) blocks leave most of the GPU idle and
// each warp walks its keys one after another, so more warps per block take fewer keys each, and each warp loads
// its next key's page entry, K and V before the arithmetic of the current one. (Passes of more rows run
// attention_split.cu or attention_chunks.cu.) Per key the arithmetic is the W = 8 kernel's; the merge of the warps'
// partial softmaxes runs over W warps.
template <int D, int W, int GM>
__device__ void attention_keys_wt(const float* __restrict__ q, const f16_t* __restrict__ k_pages,
                                  const f16_t* __restrict__ v_pages, void* out, const int* __restrict__ row_pos,
                                  const int* __restrict__ row_seq, const int* __restrict__ tables, int max_pages,
                                  int nh, int nkv, int window, float scale, int out_bf16) {
    const int hd = 32 * D;
    __shared__ float sm_m[W][GM], sm_l[W][GM];
    extern __shared__ float sm_acc_w[];  // [W][G * hd]
    int r = blockIdx.x, kvh = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int G = nh / nkv;
    int pos = row_pos[r];
    const int* table = tables + (size_t)row_seq[r] * max_pages;
    int lo = window > 0 ? max(0, pos + 1 - window) : 0;
    float qr[GM][D], acc[GM][D], m[GM], l[GM];
    const float* qb = q + (size_t)r * nh * hd + (size_t)kvh * G * hd + lane * D;
#pragma unroll
    for (int g = 0; g < GM; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < D; i++) {
            qr[g][i] = g < G ? qb[g * hd + i] * scale : 0.0f;
            acc[g][i] = 0.0f;
        }
    }
    float kv[D], vv[D];
    int key = lo + warp;
    if (key <= pos) {
        size_t a = (((size_t)table[key / PAGE] * nkv + kvh) * PAGE + key % PAGE) * hd + lane * D;
        load_f16<D>(k_pages + a, kv);
        load_f16<D>(v_pages + a, vv);
    }
    while (key <= pos) {
        int nk = key + W;
        float kn[D], vn[D];
        if (nk <= pos) {
            size_t a = (((size_t)table[nk / PAGE] * nkv + kvh) * PAGE + nk % PAGE) * hd + lane * D;
            load_f16<D>(k_pages + a, kn);
            load_f16<D>(v_pages + a, vn);
        }
        key_step<D, GM>(qr, kv, vv, acc, m, l, G);
        if (nk <= pos) {
#pragma unroll
            for (int i = 0; i < D; i++) {
                kv[i] = kn[i];
                vv[i] = vn[i];
            }
        }
        key = nk;
    }
    size_t base = (size_t)r * nh * hd + (size_t)kvh * G * hd;
    merge_warps<D, W, GM>(acc, m, l, sm_m, sm_l, sm_acc_w, G, [&](int o, float v) {
        if (out_bf16) ((bf16_t*)out)[base + o] = f2bf(v);
        else ((float*)out)[base + o] = v;
    });
}

#define ATT_KEYS_W(D, W, GM)                                                                                   \
    extern "C" __global__ void __launch_bounds__(W * 32) attention_keys_##D##_w##W##_g##GM(                    \
        const float* q, const f16_t* k_pages, const f16_t* v_pages, void* out, const int* row_pos,              \
        const int* row_seq, const int* tables, int max_pages, int nh, int nkv, int window, float scale,        \
        int out_bf16) {                                                                                        \
        PDL_ENTER();                                                                                           \
        attention_keys_wt<D, W, GM>(q, k_pages, v_pages, out, row_pos, row_seq, tables, max_pages, nh, nkv,    \
                                    window, scale, out_bf16);                                                  \
    }
// Instances, the ones `Gpu::attention_warps` picks: 32 warps where 2·GM·D accumulator and query registers fit under
// 64 a thread (GM·D <= 16), else 16 warps where they fit under 128 (GM·D <= 32).
ATT_KEYS_W(1, 32, 1) ATT_KEYS_W(1, 32, 2) ATT_KEYS_W(1, 32, 4) ATT_KEYS_W(1, 32, 8)
ATT_KEYS_W(2, 32, 1) ATT_KEYS_W(2, 32, 2) ATT_KEYS_W(2, 32, 4) ATT_KEYS_W(2, 32, 8)
ATT_KEYS_W(4, 32, 1) ATT_KEYS_W(4, 32, 2) ATT_KEYS_W(4, 32, 4)
ATT_KEYS_W(8, 32, 1) ATT_KEYS_W(8, 32, 2)
ATT_KEYS_W(4, 16, 8)
ATT_KEYS_W(8, 16, 4)
