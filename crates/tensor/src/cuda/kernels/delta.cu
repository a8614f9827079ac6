// The gated delta net (Qwen3-Next, Qwen3.5) on the device, and the gated attention beside it. The model side
// (kvad-models' gpu/delta.rs) runs the products around these kernels.
//
// A delta-net layer's input product gives each row W = 2·kw + 2·vw + 2·nv values: q, k (kw = key heads · dk each),
// v, z (vw = value heads · dv each), b and a (nv each). q, k and v (ch = 2·kw + vw channels) go through a causal
// depthwise convolution of `taps` taps and SiLU; the convolution's last taps − 1 inputs and the [nv][dk][dv] f32
// state of every sequence live in its slot of the layer (`slots`: [seqs][n_rec] slot ids, `slot_floats` floats a
// slot, the state first and the convolution's inputs after it, oldest first). Each row's sequence starts at row
// seq_start[row_seq[row]] and every sequence's rows are consecutive, so a prompt's earlier inputs are rows before.

__device__ __forceinline__ float dn_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// PyTorch's softplus (β 1, threshold 20).
__device__ __forceinline__ float dn_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__device__ __forceinline__ float* dn_slot(float* base, const int* slots, int seq, int n_rec, int rec,
                                          long long slot_floats) {
    return base + (long long)slots[seq * n_rec + rec] * slot_floats;
}

// mixed[r][c] = silu(Σ taps), the earlier inputs from the prompt's rows or the slot's kept ones. Grid (R, ⌈ch/256⌉).
extern "C" __global__ void delta_conv(const float* __restrict__ proj, int W, float* __restrict__ mixed, int ch,
                                      int taps, const float* __restrict__ conv_w, float* slot_base,
                                      long long slot_floats, int state_floats, const int* __restrict__ slots,
                                      int n_rec, int rec, const int* __restrict__ row_seq,
                                      const int* __restrict__ seq_start) {
    PDL_ENTER();
    int r = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= ch) return;
    int s = row_seq[r], start = seq_start[s], i = r - start, held = taps - 1;
    const float* tail = dn_slot(slot_base, slots, s, n_rec, rec, slot_floats) + state_floats;
    const float* w = conv_w + (size_t)c * taps;
    float acc = w[held] * proj[(size_t)r * W + c];
    for (int j = 0; j < held; j++) {
        int t = i - held + j;
        float x = t >= 0 ? proj[(size_t)(start + t) * W + c] : tail[(size_t)(held + t) * ch + c];
        acc += w[j] * x;
    }
    mixed[(size_t)r * ch + c] = acc * dn_sigmoid(acc);
}

// Each sequence's slot keeps its last taps − 1 inputs (after delta_conv has read the old ones). In place: input j
// of the new tail is the old tail's n + j when it is not one of the n new rows, never one written before it.
// Grid (seqs, ⌈ch/256⌉).
extern "C" __global__ void delta_conv_tail(const float* __restrict__ proj, int W, int ch, int taps, float* slot_base,
                                           long long slot_floats, int state_floats, const int* __restrict__ slots,
                                           int n_rec, int rec, const int* __restrict__ seq_start) {
    PDL_ENTER();
    int s = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    int start = seq_start[s], n = seq_start[s + 1] - start, held = taps - 1;
    if (c >= ch || n == 0) return;
    float* tail = dn_slot(slot_base, slots, s, n_rec, rec, slot_floats) + state_floats;
    for (int j = 0; j < held; j++) {
        int t = n - held + j;
        tail[(size_t)j * ch + c] = t >= 0 ? proj[(size_t)(start + t) * W + c] : tail[(size_t)(n + j) * ch + c];
    }
}

// Per row: q and k of each key head L2-normed (ε 1e-6 inside the root, as transformers' l2norm), q times
// 1/sqrt(dk), into qk [R][2][kh][dk]; β = sigmoid(b) and g = neg_a · softplus(a + dt_bias) per value head into
// bg [R][2][nv]. Grid (R, kh + 1), one warp: y < kh a key head, y = kh the gates.
extern "C" __global__ void delta_prep(const float* __restrict__ proj, int W, const float* __restrict__ mixed, int ch,
                                      float* __restrict__ qk, float* __restrict__ bg, int kh, int dk, int nv, int vw,
                                      const float* __restrict__ neg_a, const float* __restrict__ dt_bias) {
    PDL_ENTER();
    int r = blockIdx.x, h = blockIdx.y, lane = threadIdx.x;
    int kw = kh * dk;
    if (h == kh) {
        const float* b = proj + (size_t)r * W + ch + vw;
        for (int v = lane; v < nv; v += 32) {
            bg[(size_t)r * 2 * nv + v] = dn_sigmoid(b[v]);
            bg[(size_t)r * 2 * nv + nv + v] = neg_a[v] * dn_softplus(b[nv + v] + dt_bias[v]);
        }
        return;
    }
    const float* m = mixed + (size_t)r * ch;
    float sq = 0.0f, sk = 0.0f;
    for (int i = lane; i < dk; i += 32) {
        float a = m[h * dk + i], b = m[kw + h * dk + i];
        sq += a * a;
        sk += b * b;
    }
    float iq = rsqrtf(warp_sum(sq) + 1e-6f) * rsqrtf((float)dk), ik = rsqrtf(warp_sum(sk) + 1e-6f);
    float* out = qk + (size_t)r * 2 * kw;
    for (int i = lane; i < dk; i += 32) {
        out[h * dk + i] = m[h * dk + i] * iq;
        out[kw + h * dk + i] = m[kw + h * dk + i] * ik;
    }
}

// The gated delta rule, token after token, over the rows of each sequence of fewer than min_rows rows (longer ones
// run in chunks, delta_chunk.cu): per token, with S the value head's [dk][dv]
// state, S ← exp(g)·S; S ← S + k ⊗ β(v − kᵀS); o = qᵀS. With S₀ the state before the token and e = exp(g) this is
// δ = β(v − e·kᵀS₀), o = e·qᵀS₀ + (q·k)·δ, S = e·S₀ + k ⊗ δ: the three sums over dk in one reduction a token.
// Block: 4 warps over 32 value columns, warp w holding rows [w·RPT, (w+1)·RPT) of them in registers (dk = 4·RPT);
// grid (seqs, nv, ⌈dv / 32⌉), the columns past dv idle. A token's q and k are staged in shared memory a token ahead (three buffers, so one
// barrier a token orders them), the reduction's partial sums in two. Value head h reads key head h mod kh where
// `tiled` (llama.cpp's qwen35 order), else h / (nv / kh) (the checkpoints' order).
#define DELTA_RULE(RPT)                                                                                              \
    extern "C" __global__ void __launch_bounds__(128) delta_rule_##RPT(                                              \
        const float* __restrict__ qk, const float* __restrict__ bg, const float* __restrict__ mixed, int ch,         \
        float* __restrict__ out, int kh, int nv, int dv, float* slot_base, long long slot_floats,                  \
        const int* __restrict__ slots, int n_rec, int rec, const int* __restrict__ seq_start, int tiled,           \
        int min_rows) {                                                                                              \
        PDL_ENTER();                                                                                                 \
        const int DK = 4 * RPT;                                                                                      \
        __shared__ float sqk[3][2 * DK];                                                                             \
        __shared__ float red[2][3][4][32];                                                                           \
        int s = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, w = tid >> 5, c = tid & 31;                           \
        int col = blockIdx.z * 32 + c, start = seq_start[s], n = seq_start[s + 1] - start;                           \
        bool live = col < dv;                                                                                        \
        if (n == 0 || n >= min_rows) return; /* longer ones: delta_chunk.cu */                                       \
        int key = tiled ? h % kh : h / (nv / kh), kw = kh * DK, vw = nv * dv;                                        \
        float* st = dn_slot(slot_base, slots, s, n_rec, rec, slot_floats) + (size_t)h * DK * dv;                     \
        float S[RPT];                                                                                                \
        _Pragma("unroll") for (int j = 0; j < RPT; j++) S[j] = live ? st[(size_t)(w * RPT + j) * dv + col] : 0.0f;    \
        for (int i = tid; i < 2 * DK; i += 128) {                                                                    \
            int part = i / DK, d = i % DK;                                                                           \
            sqk[0][i] = qk[(size_t)start * 2 * kw + part * kw + key * DK + d];                                       \
        }                                                                                                            \
        __syncthreads();                                                                                             \
        for (int t = 0; t < n; t++) {                                                                                \
            int r = start + t, b3 = t % 3, p = t & 1;                                                                \
            float beta = bg[(size_t)r * 2 * nv + h], e = expf(bg[(size_t)r * 2 * nv + nv + h]);                    \
            float v = live ? mixed[(size_t)r * ch + 2 * kw + h * dv + col] : 0.0f;                                   \
            const float* q = sqk[b3];                                                                                \
            const float* k = sqk[b3] + DK;                                                                           \
            float qs = 0.0f, ks = 0.0f, qq = 0.0f;                                                                   \
            _Pragma("unroll") for (int j = 0; j < RPT; j++) {                                                        \
                float qj = q[w * RPT + j], kj = k[w * RPT + j];                                                      \
                qs += qj * S[j];                                                                                     \
                ks += kj * S[j];                                                                                     \
                qq += qj * kj;                                                                                       \
            }                                                                                                        \
            red[p][0][w][c] = qs;                                                                                    \
            red[p][1][w][c] = ks;                                                                                    \
            red[p][2][w][c] = qq;                                                                                    \
            if (t + 1 < n) {                                                                                         \
                for (int i = tid; i < 2 * DK; i += 128) {                                                            \
                    int part = i / DK, d = i % DK;                                                                   \
                    sqk[(t + 1) % 3][i] = qk[(size_t)(r + 1) * 2 * kw + part * kw + key * DK + d];                   \
                }                                                                                                    \
            }                                                                                                        \
            __syncthreads();                                                                                         \
            float QS = 0.0f, KS = 0.0f, QK = 0.0f;                                                                   \
            _Pragma("unroll") for (int u = 0; u < 4; u++) {                                                          \
                QS += red[p][0][u][c];                                                                               \
                KS += red[p][1][u][c];                                                                               \
                QK += red[p][2][u][c];                                                                               \
            }                                                                                                        \
            float delta = beta * (v - e * KS);                                                                       \
            if (w == 0 && live) out[(size_t)r * vw + h * dv + col] = e * QS + QK * delta;                            \
            _Pragma("unroll") for (int j = 0; j < RPT; j++) S[j] = e * S[j] + k[w * RPT + j] * delta;                \
        }                                                                                                            \
        if (live) {                                                                                                  \
            _Pragma("unroll") for (int j = 0; j < RPT; j++) st[(size_t)(w * RPT + j) * dv + col] = S[j];             \
        }                                                                                                            \
    }
DELTA_RULE(4)
DELTA_RULE(8)
DELTA_RULE(16)
DELTA_RULE(32)
DELTA_RULE(64)

// A decode pass's whole layer between its products in one kernel (every sequence one row, row s its sequence's): the
// convolution of the head's q, k and v channels over the kept inputs, the L2 norms and gates, one step of the rule
// (the layout of delta_rule, four column blocks of 32 side by side: value heads up to 128 wide), the gated norm.
// The kept inputs move on in delta_conv_tail after it. Grid (seqs, nv), 16 warps.
#define DELTA_STEP(RPT)                                                                                              \
    extern "C" __global__ void __launch_bounds__(512) delta_step_##RPT(                                              \
        const float* __restrict__ proj, int W, const float* __restrict__ conv_w, int taps,                         \
        const float* __restrict__ neg_a, const float* __restrict__ dt_bias, const float* __restrict__ nw,          \
        void* out, int out_bf16, int kh, int nv, int dv, float eps, float* slot_base, long long slot_floats,        \
        int state_floats, const int* __restrict__ slots, int n_rec, int rec, int tiled) {                          \
        PDL_ENTER();                                                                                                 \
        const int DK = 4 * RPT;                                                                                      \
        __shared__ float sq[DK], sk[DK], sv[128], so[128], red2[32], gates[2];                                      \
        __shared__ float red[4][4][32][3];                                                                           \
        int s = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;                                                       \
        int key = tiled ? h % kh : h / (nv / kh), kw = kh * DK, vw = nv * dv, ch = 2 * kw + vw, held = taps - 1;     \
        float* slot = dn_slot(slot_base, slots, s, n_rec, rec, slot_floats);                                         \
        const float* tail = slot + state_floats;                                                                     \
        const float* row = proj + (size_t)s * W;                                                                     \
        for (int i = tid; i < 2 * DK + dv; i += blockDim.x) {                                                        \
            int c = i < DK ? key * DK + i : i < 2 * DK ? kw + key * DK + (i - DK) : 2 * kw + h * dv + (i - 2 * DK);  \
            const float* w = conv_w + (size_t)c * taps;                                                              \
            float acc = w[held] * row[c];                                                                            \
            for (int j = 0; j < held; j++) acc += w[j] * tail[(size_t)j * ch + c];                                   \
            float m = acc * dn_sigmoid(acc);                                                                         \
            if (i < DK)                                                                                              \
                sq[i] = m;                                                                                           \
            else if (i < 2 * DK)                                                                                     \
                sk[i - DK] = m;                                                                                      \
            else                                                                                                     \
                sv[i - 2 * DK] = m;                                                                                  \
        }                                                                                                            \
        if (tid == 0) {                                                                                              \
            gates[0] = dn_sigmoid(row[ch + vw + h]);                                                                 \
            gates[1] = neg_a[h] * dn_softplus(row[ch + vw + nv + h] + dt_bias[h]);                                   \
        }                                                                                                            \
        __syncthreads();                                                                                             \
        float nq = block_sum(tid < DK ? sq[tid] * sq[tid] : 0.0f, red2);                                             \
        float nk = block_sum(tid < DK ? sk[tid] * sk[tid] : 0.0f, red2);                                             \
        float iq = rsqrtf(nq + 1e-6f) * rsqrtf((float)DK), ik = rsqrtf(nk + 1e-6f);                                  \
        int wp = tid >> 5, lane = tid & 31, cb = wp & 3, rq = wp >> 2, col = cb * 32 + lane;                         \
        bool live = col < dv;                                                                                        \
        float* st = slot + (size_t)h * DK * dv;                                                                      \
        float S[RPT];                                                                                                \
        _Pragma("unroll") for (int j = 0; j < RPT; j++) S[j] = live ? st[(size_t)(rq * RPT + j) * dv + col] : 0.0f;  \
        float beta = gates[0], e = expf(gates[1]);                                                                   \
        float qs = 0.0f, ks = 0.0f, qq = 0.0f;                                                                       \
        _Pragma("unroll") for (int j = 0; j < RPT; j++) {                                                            \
            float qj = sq[rq * RPT + j] * iq, kj = sk[rq * RPT + j] * ik;                                            \
            qs += qj * S[j];                                                                                         \
            ks += kj * S[j];                                                                                         \
            qq += qj * kj;                                                                                           \
        }                                                                                                            \
        red[rq][cb][lane][0] = qs;                                                                                   \
        red[rq][cb][lane][1] = ks;                                                                                   \
        red[rq][cb][lane][2] = qq;                                                                                   \
        __syncthreads();                                                                                             \
        float QS = 0.0f, KS = 0.0f, QK = 0.0f;                                                                       \
        _Pragma("unroll") for (int u = 0; u < 4; u++) {                                                              \
            QS += red[u][cb][lane][0];                                                                               \
            KS += red[u][cb][lane][1];                                                                               \
            QK += red[u][cb][lane][2];                                                                               \
        }                                                                                                            \
        float delta = beta * ((live ? sv[col] : 0.0f) - e * KS);                                                     \
        if (rq == 0 && live) so[col] = e * QS + QK * delta;                                                          \
        if (live) {                                                                                                  \
            _Pragma("unroll") for (int j = 0; j < RPT; j++) st[(size_t)(rq * RPT + j) * dv + col] =                  \
                e * S[j] + sk[rq * RPT + j] * ik * delta;                                                            \
        }                                                                                                            \
        __syncthreads();                                                                                             \
        float ss = block_sum(tid < dv ? so[tid] * so[tid] : 0.0f, red2);                                             \
        float inv = rsqrtf(ss / (float)dv + eps);                                                                    \
        if (tid < dv) {                                                                                              \
            float zv = row[ch + h * dv + tid];                                                                       \
            float y = nw[tid] * (so[tid] * inv) * (zv * dn_sigmoid(zv));                                             \
            size_t at = (size_t)s * vw + h * dv + tid;                                                               \
            if (out_bf16)                                                                                            \
                ((bf16_t*)out)[at] = f2bf(y);                                                                        \
            else                                                                                                     \
                ((float*)out)[at] = y;                                                                               \
        }                                                                                                            \
    }
DELTA_STEP(4)
DELTA_STEP(8)
DELTA_STEP(16)
DELTA_STEP(32)
DELTA_STEP(64)

// The gated RMSNorm: per row and value head, o normed over the head (ε eps), times the norm's weight and silu(z) (z
// from the input product's row), into out [R][vw] f32 or bf16. Grid (R, nv), 128 threads.
extern "C" __global__ void __launch_bounds__(128)
    delta_gated_norm(const float* __restrict__ o, const float* __restrict__ proj, int W, int ch,
                     const float* __restrict__ nw, void* out, int dv, int vw, float eps, int out_bf16) {
    PDL_ENTER();
    __shared__ float red[32];
    int r = blockIdx.x, h = blockIdx.y;
    const float* x = o + (size_t)r * vw + h * dv;
    const float* z = proj + (size_t)r * W + ch + h * dv;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < dv; i += blockDim.x) ss += x[i] * x[i];
    float inv = rsqrtf(block_sum(ss, red) / (float)dv + eps);
    for (int i = threadIdx.x; i < dv; i += blockDim.x) {
        float zv = z[i];
        float y = nw[i] * (x[i] * inv) * (zv * dn_sigmoid(zv));
        size_t at = (size_t)r * vw + h * dv + i;
        if (out_bf16)
            ((bf16_t*)out)[at] = f2bf(y);
        else
            ((float*)out)[at] = y;
    }
}

// Gated attention's qkv_post: the row holds each head's query and output gate side by side ([nh][2·hd]), then k and
// v. q and k RMS-normed per head (their weights, 1 + w already), RoPE on the first `rope` values of a head (rotate
// half within them), q into q_out [R][nh·hd], the gate into gate [R][nh·hd], k and v into the pages as qkv_post
// writes them. Grid (R, nh + nkv), one warp.
extern "C" __global__ void gated_qkv_post(const float* __restrict__ qkv, float* q_out, float* gate, f16_t* k_pages,
                                          f16_t* v_pages, const float* __restrict__ q_norm,
                                          const float* __restrict__ k_norm, const float* __restrict__ inv_freq,
                                          const int* __restrict__ row_pos, const int* __restrict__ row_seq,
                                          const int* __restrict__ tables, int max_pages, int nh, int nkv, int hd,
                                          int rope, float eps) {
    PDL_ENTER();
    int r = blockIdx.x, h = blockIdx.y, lane = threadIdx.x;
    int width = (2 * nh + 2 * nkv) * hd;
    const float* row = qkv + (size_t)r * width;
    int pos = row_pos[r];
    bool is_q = h < nh;
    const float* src = is_q ? row + (size_t)h * 2 * hd : row + (size_t)2 * nh * hd + (size_t)(h - nh) * hd;
    const float* nw = is_q ? q_norm : k_norm;
    float ss = 0.0f;
    for (int i = lane; i < hd; i += 32) ss += src[i] * src[i];
    float inv = rsqrtf(warp_sum(ss) / (float)hd + eps);
    int page = tables[(size_t)row_seq[r] * max_pages + pos / PAGE], slot = pos % PAGE;
    size_t kv_base = (((size_t)page * nkv + (h - nh)) * PAGE + slot) * hd;
    float* qdst = q_out + (size_t)r * nh * hd + (size_t)h * hd;
    int half = rope / 2;
    for (int i = lane; i < hd; i += 32) {
        if (i >= half && i < rope) continue;
        float a = src[i] * inv * nw[i];
        int j = i + half;
        float b = 0.0f;
        if (i < half) {
            b = src[j] * inv * nw[j];
            float sn, cs;
            sincosf((float)pos * inv_freq[i], &sn, &cs);
            float a2 = a * cs - b * sn, b2 = b * cs + a * sn;
            a = a2;
            b = b2;
        }
        if (is_q) {
            qdst[i] = a;
            if (i < half) qdst[j] = b;
        } else {
            k_pages[kv_base + i] = f2h(a);
            if (i < half) k_pages[kv_base + j] = f2h(b);
        }
    }
    if (is_q) {
        float* g = gate + (size_t)r * nh * hd + (size_t)h * hd;
        for (int i = lane; i < hd; i += 32) g[i] = src[hd + i];
    } else {
        const float* vs = row + (size_t)(2 * nh + nkv) * hd + (size_t)(h - nh) * hd;
        for (int i = lane; i < hd; i += 32) v_pages[kv_base + i] = f2h(vs[i]);
    }
}

// out[i] = att[i] · sigmoid(gate[i]), f32 or bf16 (what the o product reads).
extern "C" __global__ void gate_mul(const float* __restrict__ att, const float* __restrict__ gate, void* out, long long n,
                                    int out_bf16) {
    PDL_ENTER();
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float y = att[i] * dn_sigmoid(gate[i]);
        if (out_bf16)
            ((bf16_t*)out)[i] = f2bf(y);
        else
            ((float*)out)[i] = y;
    }
}
