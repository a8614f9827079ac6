// Decode attention with qkv_post folded in, for passes whose rows are each the next token of a different
// sequence (decode steps of up to 8 sequences): block (row, KV head) takes the q/k/v product's raw row, applies the
// per-head RMSNorm and RoPE of qkv_post (elementwise.cu) to its group's query heads and to its KV head's new key,
// writes the new key and value into the pages itself, and attends over keys lo..=pos as the key-stream kernels do
// (attention.cu: warp w takes keys lo+w, lo+w+W, …, lane l dims [l·D, l·D+D)). Two launches a layer become one.
// The host splits a KV head's query heads over blocks (grid z, `DECODE_HEADS` in attention.rs: one a block, GM = 1):
// each block attends for GM of them over the same keys, and only the first writes the new key and value.
//
// Its loads do not wait on one another: the page table's first 32 entries sit one a lane (a key's page is a
// shuffle away, not a dependent load), and a warp asks for AD_KB keys' K and V rows at a time, the next AD_KB while
// it works on these. Everything the q/k/v product does not write — positions, page tables, earlier keys, the RoPE
// angles — is read before the PDL wait, so the first keys arrive while that product still runs; only the query
// heads and the new key and value come after it, asked for together. The o product may launch once the keys are
// in (PDL_ENTER_LATE). With `oq` given the output is also written in the dp4a products' two 8-bit terms (act8_block
// in quant.cu) for the o product, sparing it a quant_act8 launch.
//
// A warp takes its keys AD_KB at a time (keys_step: their scores summed across the warp together, one
// online-softmax update for the group), the new key last of warp (pos − lo) mod W's stream, taken from registers
// after rounding to f16 as the pages hold it. Without q/k norms the pages get qkv_post's bits; with them the head's
// sum of squares adds in another order (within one f16 step, tested), and the output is a key-stream kernel's of W
// warps to rounding (the scores and softmax sums add in another order).
//
// The keys may be split over blocks too (flash-decoding; attention.rs's `decode_splits`): grid x is rows × S, block
// x = r·S + c taking chunk c of its row's keys lo..=pos, S_r = min(S, ⌈n / kpb⌉) chunks for its n keys — a row's
// own count, never the pass's, so a row's bits do not depend on who shares its pass or how wide the graph's page
// tables are (blocks c ≥ S_r leave at once). Each block merges its warps into a partial softmax (numerator, maximum,
// denominator) in global scratch; the last of the row's S_r blocks to arrive (a counter, reset by it) merges those
// in chunk order and writes the output as a one-block row would. With S_r = 1 the block writes its output itself,
// the arithmetic of the kernel before the split.
#define AD_KB 4
// Most chunks a row's keys are split over: attention.rs's ATT_SPLIT_MAX (a test there checks they agree).
#define AD_SPLIT_MAX 16

template <int D> struct HalfRow;
template <> struct HalfRow<1> { typedef unsigned short T; };
template <> struct HalfRow<2> { typedef unsigned T; };
template <> struct HalfRow<4> { typedef uint2 T; };
template <> struct HalfRow<8> { typedef uint4 T; };

__device__ __forceinline__ void unpack_h(unsigned short u, float* o) { o[0] = h2f(u); }
__device__ __forceinline__ void unpack_h(unsigned u, float* o) {
    o[0] = h2f((f16_t)(u & 0xffffu));
    o[1] = h2f((f16_t)(u >> 16));
}
__device__ __forceinline__ void unpack_h(uint2 u, float* o) {
    unpack_h(u.x, o);
    unpack_h(u.y, o + 2);
}
__device__ __forceinline__ void unpack_h(uint4 u, float* o) {
    unpack_h(u.x, o);
    unpack_h(u.y, o + 2);
    unpack_h(u.z, o + 4);
    unpack_h(u.w, o + 6);
}

// Offset of this lane's dims of `key` in the pages: the page from lane (page − pbase)'s table entry when within
// the 32 held, else from the table.
__device__ __forceinline__ size_t ad_key_at(int key, int pbase, int tab, const int* table, int nkv, int kvh, int hd,
                                            int lane, int D) {
    int pg = key / PAGE, j = pg - pbase;
    int page = j < 32 ? __shfl_sync(0xffffffffu, tab, j) : table[pg];
    return (((size_t)page * nkv + kvh) * PAGE + key % PAGE) * hd + (size_t)lane * D;
}

// This lane's D dims of a head of the raw row, as few loads as the width allows.
template <int D>
__device__ __forceinline__ void ad_load(const float* src, float (&v)[D]) {
    const float* p = src + (threadIdx.x & 31) * D;
    if constexpr (D % 4 == 0) {
#pragma unroll
        for (int i = 0; i < D; i += 4) {
            float4 f = *(const float4*)(p + i);
            v[i] = f.x;
            v[i + 1] = f.y;
            v[i + 2] = f.z;
            v[i + 3] = f.w;
        }
    } else if constexpr (D == 2) {
        float2 f = *(const float2*)p;
        v[0] = f.x;
        v[1] = f.y;
    } else {
        v[0] = p[0];
    }
}

// A head's D dims of this lane through qkv_post's arithmetic: RMSNorm over the head (when `nw`), then rotate-half
// RoPE with the angles' sines and cosines (when `rope`); the partner of dim j < hd/2 is j + hd/2, held by
// lane ^ 16.
template <int D>
__device__ __forceinline__ void ad_head(const float* __restrict__ nw, float eps, bool rope, const float (&sn)[D],
                                        const float (&cs)[D], float (&v)[D]) {
    const int hd = 32 * D;
    int lane = threadIdx.x & 31;
    if (nw) {
        float ss = 0.0f;
#pragma unroll
        for (int i = 0; i < D; i++) ss += v[i] * v[i];
        float inv = rsqrtf(warp_sum(ss) / (float)hd + eps);
#pragma unroll
        for (int i = 0; i < D; i++) v[i] = v[i] * inv * nw[lane * D + i];
    }
    if (rope) {
        bool low = lane < 16;
#pragma unroll
        for (int i = 0; i < D; i++) {
            float p = __shfl_xor_sync(0xffffffffu, v[i], 16);
            // qkv_post: a2 = a·c − b·s (dims below hd/2), b2 = b·c + a·s (their partners).
            v[i] = low ? v[i] * cs[i] - p * sn[i] : v[i] * cs[i] + p * sn[i];
        }
    }
}

// The warp sums of V values a lane (keys_step): the step exchanging with lane ^ O, while C > 1 values are left,
// has the lane with that bit set keep the upper half of them and send the lower (the other the reverse), each adding
// what it receives; with one left, a plain butterfly. Lane l ends with the sum of value l >> (5 − log2 V), whole
// (the same bits in every lane that holds it). Templates, so every index is a constant and v stays in registers.
template <int V, int C, int O>
__device__ __forceinline__ void halve_sums(float (&v)[V], int lane) {
    if constexpr (O >= 1) {
        if constexpr (C > 1) {
            bool up = (lane & O) != 0;
#pragma unroll
            for (int i = 0; i < C / 2; i++) {
                float send = up ? v[i] : v[i + C / 2];
                float keep = up ? v[i + C / 2] : v[i];
                v[i] = keep + __shfl_xor_sync(0xffffffffu, send, O);
            }
            halve_sums<V, C / 2, O / 2>(v, lane);
        } else {
            v[0] += __shfl_xor_sync(0xffffffffu, v[0], O);
            halve_sums<V, 1, O / 2>(v, lane);
        }
    }
}

// AD_KB keys of a warp's stream at once (`valid` of them real, at least one): each lane's partial dot products
// for every (key, head) pair, summed across the warp by halving exchanges — at each of the five steps a lane
// keeps half its values and sends the other half, so AD_KB·GM sums take AD_KB·GM − 1 + the remaining steps'
// shuffles rather than five each, with no chain from one key to the next — then, a head at a time, the scores
// gathered back to every lane (AD_KB·GM more shuffles: 32 in all for G = 4, against 80) and one online-softmax
// update for the group: the running maximum, its rescale of the sum and accumulators, and each key's weight times
// its value row. (key_step takes keys one by one: a chain of five shuffles and two exponentials a key and head,
// which made the key loop most of the kernel's time.)
template <int D, int GM, typename raw_t>
__device__ __forceinline__ void keys_step(const float (&qr)[GM][D], const raw_t (&ck)[AD_KB],
                                          const raw_t (&cv)[AD_KB], int valid, float (&acc)[GM][D], float (&m)[GM],
                                          float (&l)[GM], int G) {
    constexpr int V = AD_KB * GM;
    static_assert(V <= 32 && (V & (V - 1)) == 0, "halve_sums takes a power of two of at most 32 values a lane");
    constexpr int LOG_V = V >= 32 ? 5 : V >= 16 ? 4 : V >= 8 ? 3 : V >= 4 ? 2 : V >= 2 ? 1 : 0;
    int lane = threadIdx.x & 31;
    float v[V];
#pragma unroll
    for (int k = 0; k < AD_KB; k++) {
        float kf[D];
        unpack_h(ck[k], kf);
#pragma unroll
        for (int g = 0; g < GM; g++) {
            float s = 0.0f;
#pragma unroll
            for (int i = 0; i < D; i++) s = fmaf(qr[g][i], kf[i], s);
            v[k * GM + g] = s;
        }
    }
    halve_sums<V, V, 16>(v, lane);
    float vf[AD_KB][D];
#pragma unroll
    for (int k = 0; k < AD_KB; k++) unpack_h(cv[k], vf[k]);
#pragma unroll
    for (int g = 0; g < GM; g++) {
        float s[AD_KB];
#pragma unroll
        for (int k = 0; k < AD_KB; k++) s[k] = __shfl_sync(0xffffffffu, v[0], (k * GM + g) << (5 - LOG_V));
        if (g < G) {
            float mn = m[g];
#pragma unroll
            for (int k = 0; k < AD_KB; k++)
                if (k < valid) mn = fmaxf(mn, s[k]);
            float c = expf(m[g] - mn), p[AD_KB], ps = 0.0f;
#pragma unroll
            for (int k = 0; k < AD_KB; k++) {
                p[k] = k < valid ? expf(s[k] - mn) : 0.0f;
                ps += p[k];
            }
            l[g] = fmaf(l[g], c, ps);
#pragma unroll
            for (int i = 0; i < D; i++) {
                float a = acc[g][i] * c;
#pragma unroll
                for (int k = 0; k < AD_KB; k++) a = fmaf(p[k], vf[k][i], a);
                acc[g][i] = a;
            }
            m[g] = mn;
        }
    }
}

// One chunk's partial softmax — numerator pa, (maximum, denominator) ml — into a split row's merge at the row's
// maximum mx (chunks in order, so the same bits whichever block merges); a chunk that saw no key adds nothing.
__device__ __forceinline__ void merge_chunk(float pa, float2 ml, float mx, float& num, float& den) {
    if (ml.x == -INFINITY) return;
    float e = expf(ml.x - mx);
    num = fmaf(pa, e, num);
    den = fmaf(ml.y, e, den);
}

template <int D, int W, int GM>
__device__ void attention_decode_t(const float* __restrict__ qkv, f16_t* k_pages, f16_t* v_pages, float* out,
                                   const float* __restrict__ q_norm, const float* __restrict__ k_norm,
                                   const float* __restrict__ inv_freq, const int* __restrict__ row_pos,
                                   const int* __restrict__ row_seq, const int* __restrict__ tables, int max_pages,
                                   int nh, int nkv, int window, float scale, float eps, signed char* oq,
                                   signed char* oq2, float2* ods, int splits, int kpb, float* part_acc,
                                   float2* part_ml, unsigned* counters) {
    typedef typename HalfRow<D>::T raw_t;
    const int hd = 32 * D;
    __shared__ float sm_m[W][GM], sm_l[W][GM];
    extern __shared__ float sm_acc_d[];  // [W][G * hd]
    int r = blockIdx.x / splits, chunk = blockIdx.x % splits, kvh = blockIdx.y, warp = threadIdx.x >> 5,
        lane = threadIdx.x & 31;
    // Block z of the grid takes query heads z·GM.. of its KV head's group when the host splits the group over
    // blocks (attention.rs's DECODE_HEADS: one head a block, so GM = 1 divides every group): G heads here, the
    // first h0.
    int G = gridDim.z > 1 ? GM : nh / nkv, h0 = kvh * (nh / nkv) + blockIdx.z * GM;
    bool first = (threadIdx.x | blockIdx.x | blockIdx.y | blockIdx.z) == 0;  // the thread that marks the trace
    if (first) trace_mark(910);
    int pos = row_pos[r];
    const int* table = tables + (size_t)row_seq[r] * max_pages;
    int lo = window > 0 ? max(0, pos + 1 - window) : 0;
    // This block's chunk of the row's n keys: [c0, c1), the last one ending with pos.
    int n = pos - lo + 1, S = min(splits, (n + kpb - 1) / kpb);
    if (chunk >= S) return;
    int len = (n + S - 1) / S, c0 = min(lo + chunk * len, pos + 1), c1 = min(c0 + len, pos + 1);
    int pbase = c0 / PAGE;
    int tab = pbase + lane < max_pages ? table[pbase + lane] : 0;
    // This warp's keys before pos: c0 + warp + W·i for i < nk.
    int kend = min(c1, pos);
    int nk = kend - c0 > warp ? (kend - c0 - warp + W - 1) / W : 0;
    raw_t ck[AD_KB] = {}, cv[AD_KB] = {};
#pragma unroll
    for (int j = 0; j < AD_KB; j++) {
        if (j < nk) {
            size_t a = ad_key_at(c0 + warp + W * j, pbase, tab, table, nkv, kvh, hd, lane, D);
            ck[j] = *(const raw_t*)(k_pages + a);
            cv[j] = *(const raw_t*)(v_pages + a);
        }
    }
    float sn[D], cs[D];
#pragma unroll
    for (int i = 0; i < D; i++) {
        sn[i] = 0.0f;
        cs[i] = 1.0f;
        if (inv_freq) sincosf((float)pos * inv_freq[(lane & 15) * D + i], &sn[i], &cs[i]);
    }
    PDL_ENTER_LATE();
    const float* row = qkv + (size_t)r * (nh + 2 * nkv) * hd;
    float qr[GM][D], acc[GM][D], m[GM], l[GM];
    // Every query head's values asked for before any is used: one round trip, not one a head.
#pragma unroll
    for (int g = 0; g < GM; g++) ad_load<D>(row + (size_t)(h0 + min(g, G - 1)) * hd, qr[g]);
    // And the new key and value, by the warp of the last chunk whose stream ends with them.
    bool owner = c1 == pos + 1 && warp == (pos - c0) % W;
    float kf[D], vf[D];
    if (owner) {
        ad_load<D>(row + (size_t)(nh + kvh) * hd, kf);
        ad_load<D>(row + (size_t)(nh + nkv + kvh) * hd, vf);
    }
#pragma unroll
    for (int g = 0; g < GM; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
        ad_head<D>(q_norm, eps, inv_freq != nullptr, sn, cs, qr[g]);
#pragma unroll
        for (int i = 0; i < D; i++) {
            qr[g][i] = g < G ? qr[g][i] * scale : 0.0f;
            acc[g][i] = 0.0f;
        }
    }
    if (first) trace_mark(911);
    for (int base = 0; base < nk; base += AD_KB) {
        raw_t nk_[AD_KB] = {}, nv_[AD_KB] = {};
#pragma unroll
        for (int j = 0; j < AD_KB; j++) {
            if (base + AD_KB + j < nk) {
                size_t a = ad_key_at(c0 + warp + W * (base + AD_KB + j), pbase, tab, table, nkv, kvh, hd, lane, D);
                nk_[j] = *(const raw_t*)(k_pages + a);
                nv_[j] = *(const raw_t*)(v_pages + a);
            }
        }
        keys_step<D, GM>(qr, ck, cv, min(AD_KB, nk - base), acc, m, l, G);
#pragma unroll
        for (int j = 0; j < AD_KB; j++) {
            ck[j] = nk_[j];
            cv[j] = nv_[j];
        }
    }
    if (owner) {
        // The new key and value: into the pages as f16 (by the group's first block; the others read no page at
        // pos), and into this warp's stream as the pages hold them.
        ad_head<D>(k_norm, eps, inv_freq != nullptr, sn, cs, kf);
        int page = table[pos / PAGE];
        size_t a = (((size_t)page * nkv + kvh) * PAGE + pos % PAGE) * hd + (size_t)lane * D;
#pragma unroll
        for (int i = 0; i < D; i++) {
            f16_t kh = f2h(kf[i]), vh = f2h(vf[i]);
            if (blockIdx.z == 0) {
                k_pages[a + i] = kh;
                v_pages[a + i] = vh;
            }
            kf[i] = h2f(kh);
            vf[i] = h2f(vh);
        }
        key_step<D, GM>(qr, kf, vf, acc, m, l, G);
    }
    // The keys are in: the o product may launch (its weight loads no longer delay this kernel's).
    PDL_LATE_TRIGGER();
    if (first) trace_mark(912);
    size_t obase = (size_t)r * nh * hd + (size_t)h0 * hd;
    auto write = [&](int o, float v) {
        out[obase + o] = v;
        if (oq) act8_block(v, obase + o, (obase + o) / 32, oq, oq2, ods);
    };
    if (S == 1) {
        merge_warps<D, W, GM>(acc, m, l, sm_m, sm_l, sm_acc_d, G, write);
        if (first) trace_mark(913);
        return;
    }
    // Split: this chunk's partial softmax of heads h0.. (part_acc [rows][splits][nh·hd], part_ml [rows][splits][nh]
    // as (maximum, denominator)).
    size_t pbase_o = ((size_t)r * splits + chunk) * nh;
    merge_warps_raw<D, W, GM>(acc, m, l, sm_m, sm_l, sm_acc_d, G, [&](int o, float num, float den, float mx) {
        part_acc[(pbase_o + h0) * hd + o] = num;
        if (o % hd == 0) part_ml[pbase_o + h0 + o / hd] = make_float2(mx, den);
    });
    if (first) trace_mark(913);
    unsigned* counter = counters + ((size_t)r * gridDim.y + kvh) * gridDim.z + blockIdx.z;
    if (!arrive_last(counter, (unsigned)S)) return;
    if (threadIdx.x == 0) *counter = 0;  // every chunk has counted: ready for the next launch
    // The chunks' partials in chunk order (a fixed order: the same bits whichever block arrives last). Up to four
    // chunks (the 8B shape's one-row decode below 256 keys a block), each output's numerators and its head's
    // (maximum, denominator) pairs are asked for together: one L2 round trip on the step's critical path, where the
    // pairs first into shared memory took two.
    if (S <= 4) {
        for (int o = threadIdx.x; o < G * hd; o += blockDim.x) {
            int g = o / hd;
            float pa[4];
            float2 ml[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                pa[j] = j < S ? __ldcg(part_acc + (((size_t)r * splits + j) * nh + h0) * hd + o) : 0.0f;
                ml[j] = j < S ? __ldcg(part_ml + ((size_t)r * splits + j) * nh + h0 + g) : make_float2(-INFINITY, 0.0f);
            }
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (j < S) mx = fmaxf(mx, ml[j].x);
            float num = 0.0f, den = 0.0f;
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (j < S) merge_chunk(pa[j], ml[j], mx, num, den);
            write(o, num / den);
        }
        return;
    }
    // More chunks: each head's (maximum, denominator) pairs once into shared memory, then every output's numerators
    // four chunks at a time.
    __shared__ float2 sm_pml[GM][AD_SPLIT_MAX];
    for (int i = threadIdx.x; i < G * S; i += blockDim.x)
        sm_pml[i / S][i % S] = __ldcg(part_ml + ((size_t)r * splits + i % S) * nh + h0 + i / S);
    __syncthreads();
    for (int o = threadIdx.x; o < G * hd; o += blockDim.x) {
        int g = o / hd;
        float mx = -INFINITY;
        for (int c = 0; c < S; c++) mx = fmaxf(mx, sm_pml[g][c].x);
        float num = 0.0f, den = 0.0f;
        for (int cb = 0; cb < S; cb += 4) {
            float pa[4];
#pragma unroll
            for (int j = 0; j < 4; j++)
                pa[j] = cb + j < S ? __ldcg(part_acc + (((size_t)r * splits + cb + j) * nh + h0) * hd + o) : 0.0f;
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (cb + j < S) merge_chunk(pa[j], sm_pml[g][cb + j], mx, num, den);
        }
        write(o, num / den);
    }
}

// Warps a block per (D, GM): as many as the registers allow (the accumulators, queries and two groups of AD_KB
// keys' K and V rows a thread), from 32 down to 8. `decode_warps` in attention.rs says the same.
#define AD_WARPS(D, GM) ((2 * (GM) * (D) + 2 * (GM) + 4 * AD_KB * ((D) > 1 ? (D) / 2 : 1) + 2 * (D) + 30) <= 64 ? 32 \
                         : (2 * (GM) * (D) + 2 * (GM) + 4 * AD_KB * ((D) > 1 ? (D) / 2 : 1) + 2 * (D) + 30) <= 128 ? 16 \
                                                                                                                 : 8)

#define ATT_DECODE(D, GM)                                                                                      \
    extern "C" __global__ void __launch_bounds__(AD_WARPS(D, GM) * 32) attention_decode_##D##_g##GM(          \
        const float* qkv, f16_t* k_pages, f16_t* v_pages, float* out, const float* q_norm, const float* k_norm, \
        const float* inv_freq, const int* row_pos, const int* row_seq, const int* tables, int max_pages, int nh, \
        int nkv, int window, float scale, float eps, signed char* oq, signed char* oq2, float2* ods,            \
        int splits, int kpb, float* part_acc, float2* part_ml, unsigned* counters) {                           \
        attention_decode_t<D, AD_WARPS(D, GM), GM>(qkv, k_pages, v_pages, out, q_norm, k_norm, inv_freq,        \
                                                   row_pos, row_seq, tables, max_pages, nh, nkv, window, scale, \
                                                   eps, oq, oq2, ods, splits, kpb, part_acc, part_ml,           \
                                                   counters);                                                   \
    }
// One query head a block (GM = 1, `DECODE_HEADS` in attention.rs), every head width 32·D.
ATT_DECODE(1, 1) ATT_DECODE(2, 1) ATT_DECODE(4, 1) ATT_DECODE(8, 1)
