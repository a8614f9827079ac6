// Latent attention (DeepSeek's MLA) with the up-projections absorbed, over a paged f16 cache that holds per token
// one row of w = r + rope values: the RMS-normed latent (r = kv_lora_rank) and the rotated shared key. A query head
// becomes a row of w values too (its no-position part through the head's key up-projection, then its rotated part),
// so its scores are one dot product with each cached row and its output the weighted sum of the rows' first r
// values, which the head's value up-projection then takes back to v_head_dim. Every head reads the one cached row a
// token (DeepSeek's 128 heads share it), so attention is split over keys as well (flash decoding): blocks of
// (row, head, split) each fold a range of keys into a partial softmax, and the output kernel merges them.
//
// Widths: w up to 32·MLA_QJ (576: DeepSeek's 512 + 64), r up to 32·MLA_OJ (512); any nope and v_head_dim.
#define MLA_QJ 18
#define MLA_OJ 16
#define MLA_WARPS 4

// Rotates the pair (a, b) by position `pos` at frequency f, YaRN's factor on cos and sin.
__device__ __forceinline__ void mla_rotate(float& a, float& b, int pos, float f, float mscale) {
    float s, c;
    sincosf((float)pos * f, &s, &c);
    c *= mscale;
    s *= mscale;
    float a2 = a * c - b * s, b2 = b * c + a * s;
    a = a2;
    b = b2;
}

// The index of rope pair p's two values within a rotated part of width rope: adjacent (DeepSeek's layout) or the
// two halves.
__device__ __forceinline__ int2 mla_pair(int p, int rope, int interleaved) {
    return interleaved ? make_int2(2 * p, 2 * p + 1) : make_int2(p, p + rope / 2);
}

// The new rows' latents into the cache: kv [R][w] f32 (kv_a_proj's output) → RMSNorm of the first r values by
// kv_norm (epsilon eps), RoPE of the last rope values at the row's position, f16 into the row's page slot.
// Grid R, 128 threads.
extern "C" __global__ void __launch_bounds__(128)
    mla_kv_post(const float* __restrict__ kv, const float* __restrict__ kv_norm, const float* __restrict__ inv_freq,
                const int* __restrict__ row_pos, const int* __restrict__ row_seq, const int* __restrict__ tables,
                int max_pages, f16_t* pages, int r, int rope, float eps, float mscale, int interleaved) {
    PDL_ENTER();
    __shared__ float red[32];
    int row = blockIdx.x, t = threadIdx.x;
    int w = r + rope;
    const float* x = kv + (size_t)row * w;
    float ss = 0.0f;
    for (int i = t; i < r; i += blockDim.x) ss += x[i] * x[i];
    float inv = rsqrtf(block_sum(ss, red) / (float)r + eps);
    int pos = row_pos[row];
    int page = tables[(size_t)row_seq[row] * max_pages + pos / PAGE];
    f16_t* dst = pages + ((size_t)page * PAGE + pos % PAGE) * w;
    for (int i = t; i < r; i += blockDim.x) dst[i] = f2h(kv_norm[i] * (x[i] * inv));
    for (int p = t; p < rope / 2; p += blockDim.x) {
        int2 ij = mla_pair(p, rope, interleaved);
        float a = x[r + ij.x], b = x[r + ij.y];
        mla_rotate(a, b, pos, inv_freq[p], mscale);
        dst[r + ij.x] = f2h(a);
        dst[r + ij.y] = f2h(b);
    }
}

// Queries into latent space: q [R][nh][nope + rope] f32 → qf [R][nh][w] f32, the first r values k_b_h · q_nope
// (k_b [nh][r][nope] bf16: head h's key up-projection, transposed), the last rope the rotated q_rope. Grid
// (R, nh, ceil(r / 64)), 256 threads: each warp 8 of the block's 64 latent values.
extern "C" __global__ void __launch_bounds__(256)
    mla_q_absorb(const float* __restrict__ q, const bf16_t* __restrict__ k_b, const float* __restrict__ inv_freq,
                 const int* __restrict__ row_pos, float* qf, int nh, int r, int nope, int rope, float mscale,
                 int interleaved) {
    PDL_ENTER();
    extern __shared__ float qs[];
    int row = blockIdx.x, h = blockIdx.y, t = threadIdx.x, warp = t >> 5, lane = t & 31;
    int qh = nope + rope, w = r + rope;
    const float* src = q + ((size_t)row * nh + h) * qh;
    float* dst = qf + ((size_t)row * nh + h) * w;
    for (int j = t; j < nope; j += blockDim.x) qs[j] = src[j];
    if (blockIdx.z == 0) {
        int pos = row_pos[row];
        for (int p = t; p < rope / 2; p += blockDim.x) {
            int2 ij = mla_pair(p, rope, interleaved);
            float a = src[nope + ij.x], b = src[nope + ij.y];
            mla_rotate(a, b, pos, inv_freq[p], mscale);
            dst[r + ij.x] = a;
            dst[r + ij.y] = b;
        }
    }
    __syncthreads();
    int i0 = blockIdx.z * 64 + warp * 8;
    for (int i = i0; i < min(i0 + 8, r); i++) {
        const bf16_t* kr = k_b + ((size_t)h * r + i) * nope;
        float s = 0.0f;
        for (int j = lane; j < nope; j += 32) s = fmaf(bf2f(kr[j]), qs[j], s);
        s = warp_sum(s);
        if (lane == 0) dst[i] = s;
    }
}

// Partial attention: block (row, head, split) folds keys [split·per, (split+1)·per) ∩ [0, pos] (per = the row's
// keys divided among nsplit) into a running max m, sum l and unnormalised weighted latent acc[r], written to
// part[((row·nh + h)·nsplit + split)·(r + 2)] as m, l, acc. MLA_WARPS warps take alternate keys, lane l holding dims
// l, l+32, … of the query and of each key row; the warps' partials merge through shared memory.
extern "C" __global__ void __launch_bounds__(MLA_WARPS * 32)
    mla_attention_part(const float* __restrict__ qf, const f16_t* __restrict__ pages, const int* __restrict__ row_pos,
                       const int* __restrict__ row_seq, const int* __restrict__ tables, int max_pages, float* part,
                       int nh, int r, int rope, int nsplit, float scale) {
    PDL_ENTER();
    __shared__ float wm[MLA_WARPS], wl[MLA_WARPS];
    __shared__ float wacc[MLA_WARPS][32 * MLA_OJ];
    int row = blockIdx.x, h = blockIdx.y, sp = blockIdx.z;
    int t = threadIdx.x, warp = t >> 5, lane = t & 31;
    int w = r + rope;
    int pos = row_pos[row], len = pos + 1;
    int per = (len + nsplit - 1) / nsplit;
    int k0 = sp * per, k1 = min(len, k0 + per);
    const int* table = tables + (size_t)row_seq[row] * max_pages;
    const float* qr = qf + ((size_t)row * nh + h) * w;
    float qv[MLA_QJ], acc[MLA_OJ];
#pragma unroll
    for (int j = 0; j < MLA_QJ; j++) {
        int d = lane + 32 * j;
        qv[j] = d < w ? qr[d] * scale : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < MLA_OJ; j++) acc[j] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int key = k0 + warp; key < k1; key += MLA_WARPS) {
        const f16_t* kr = pages + ((size_t)table[key / PAGE] * PAGE + key % PAGE) * w;
        float kv[MLA_QJ];
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < MLA_QJ; j++) {
            int d = lane + 32 * j;
            kv[j] = d < w ? h2f(kr[d]) : 0.0f;
            s = fmaf(qv[j], kv[j], s);
        }
        s = warp_sum(s);
        float m_new = fmaxf(m, s);
        float a = expf(m - m_new), p = expf(s - m_new);
        l = l * a + p;
#pragma unroll
        for (int j = 0; j < MLA_OJ; j++) acc[j] = fmaf(p, lane + 32 * j < r ? kv[j] : 0.0f, acc[j] * a);
        m = m_new;
    }
    if (lane == 0) {
        wm[warp] = m;
        wl[warp] = l;
    }
#pragma unroll
    for (int j = 0; j < MLA_OJ; j++) wacc[warp][lane + 32 * j] = acc[j];
    __syncthreads();
    float M = -INFINITY;
#pragma unroll
    for (int i = 0; i < MLA_WARPS; i++) M = fmaxf(M, wm[i]);
    float f[MLA_WARPS];
    float L = 0.0f;
#pragma unroll
    for (int i = 0; i < MLA_WARPS; i++) {
        f[i] = wm[i] == -INFINITY ? 0.0f : expf(wm[i] - M);
        L += wl[i] * f[i];
    }
    float* out = part + (((size_t)row * nh + h) * nsplit + sp) * (r + 2);
    if (t == 0) {
        out[0] = M;
        out[1] = L;
    }
    for (int i = t; i < r; i += blockDim.x) {
        float v = 0.0f;
#pragma unroll
        for (int k = 0; k < MLA_WARPS; k++) v = fmaf(wacc[k][i], f[k], v);
        out[2 + i] = v;
    }
}

// The splits merged and taken back out of latent space: o_h = v_b_h · (Σ acc / Σ l), v_b [nh][vd][r] bf16, into
// out [R][nh·vd] (f32, or bf16 for a following GEMM). Grid (R, nh), 256 threads; dynamic shared memory r floats.
extern "C" __global__ void __launch_bounds__(256)
    mla_attention_out(const float* __restrict__ part, const bf16_t* __restrict__ v_b, void* out, int nh, int r,
                      int vd, int nsplit, int out_bf16) {
    PDL_ENTER();
    extern __shared__ float lat[];
    int row = blockIdx.x, h = blockIdx.y, t = threadIdx.x, warp = t >> 5, lane = t & 31, nw = blockDim.x >> 5;
    const float* pr = part + ((size_t)row * nh + h) * nsplit * (r + 2);
    float M = -INFINITY;
    for (int s = 0; s < nsplit; s++) M = fmaxf(M, pr[s * (r + 2)]);
    float L = 0.0f;
    for (int s = 0; s < nsplit; s++) {
        float ms = pr[s * (r + 2)];
        if (ms != -INFINITY) L += pr[s * (r + 2) + 1] * expf(ms - M);
    }
    for (int i = t; i < r; i += blockDim.x) {
        float v = 0.0f;
        for (int s = 0; s < nsplit; s++) {
            float ms = pr[s * (r + 2)];
            if (ms != -INFINITY) v = fmaf(pr[s * (r + 2) + 2 + i], expf(ms - M), v);
        }
        lat[i] = v / L;
    }
    __syncthreads();
    for (int i = warp; i < vd; i += nw) {
        const bf16_t* vr = v_b + ((size_t)h * vd + i) * r;
        float s = 0.0f;
        for (int j = lane; j < r; j += 32) s = fmaf(bf2f(vr[j]), lat[j], s);
        s = warp_sum(s);
        if (lane == 0) {
            size_t idx = ((size_t)row * nh + h) * vd + i;
            if (out_bf16) ((bf16_t*)out)[idx] = f2bf(s);
            else ((float*)out)[idx] = s;
        }
    }
}
