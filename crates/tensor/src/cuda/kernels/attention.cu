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
