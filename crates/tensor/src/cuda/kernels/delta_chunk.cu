// The gated delta rule over a prompt in chunks of 64 tokens (the "WY" form transformers' chunked rule computes),
// on the tensor cores: the sequential part is one step a chunk, not one a token. With c the cumulative log-decay
// within a chunk, Γ = exp(c), L[i][j] = β_i·(k_i·k_j)·exp(c_i − c_j) for j < i and T = (I + L)⁻¹:
//   U = T·(β v), W = T·(β Γ k)                    (delta_chunk_prep: every chunk at once)
//   Δ = U − W·S, O = (Γ q)·S + P·Δ,  P[i][j] = (q_i·k_j)·exp(c_i − c_j) for j ≤ i
//   S ← exp(c_last)·S + (exp(c_last − c) k)ᵀ·Δ     (delta_chunk_scan: the chunks of a sequence in order)
// which is the recurrence of delta.cu's delta_rule, token after token, regrouped (the CPU's rule.rs derives it).
// Every exponent is ≤ 0 (g ≤ 0), so nothing overflows.
//
// The products are m16n8k8 TF32 mma with each f32 operand split into two TF32 parts (hi + lo, the lo·lo term
// dropped): f32's precision on the tensor cores, where plain TF32 (10 bits) would drift the f32 state over a long
// prompt.
//
// A sequence runs here when it has at least `min_rows` rows (delta_rule's recurrence takes the others, for which
// a chunk's fixed cost is more than their few steps). U overwrites v in `mixed`, c overwrites g in `bg` (each chunk's
// block owns its rows of one value head); W ([rows][nv][dk]) and P ([rows][nv][64]) go to scratch of their own.

#define DC 64
#define DC_LD 68  // row stride of the 64×64 matrices in shared memory

__device__ __forceinline__ void dc_split(float x, unsigned& hi, unsigned& lo) {
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(hi) : "f"(x));
    float r = x - __uint_as_float(hi);
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(lo) : "f"(r));
}

__device__ __forceinline__ void dc_mma(float* d, const unsigned* a, const unsigned* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// One warp's 16×8 tile d += A·B over k in [0, K) (K a multiple of 8), both f32 in shared memory: A's (m, k) at
// a[m·sam + k·sak], B's (k, n) at b[k·sbk + n·sbn], so either may be read transposed. d's elements are (g, 2t),
// (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1) for lane 4g + t.
__device__ __forceinline__ void dc_tile(float* d, const float* a, int sam, int sak, const float* b, int sbk, int sbn,
                                        int K) {
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    for (int k = 0; k < K; k += 8) {
        unsigned ah[4], al[4], bh[2], bl[2];
        dc_split(a[g * sam + (k + t) * sak], ah[0], al[0]);
        dc_split(a[(g + 8) * sam + (k + t) * sak], ah[1], al[1]);
        dc_split(a[g * sam + (k + t + 4) * sak], ah[2], al[2]);
        dc_split(a[(g + 8) * sam + (k + t + 4) * sak], ah[3], al[3]);
        dc_split(b[(k + t) * sbk + g * sbn], bh[0], bl[0]);
        dc_split(b[(k + t + 4) * sbk + g * sbn], bh[1], bl[1]);
        dc_mma(d, al, bh);
        dc_mma(d, ah, bl);
        dc_mma(d, ah, bh);
    }
}

// The tile element e's row and column within its 16×8 tile.
__device__ __forceinline__ int dc_row(int e) { return ((threadIdx.x & 31) >> 2) + (e >> 1) * 8; }
__device__ __forceinline__ int dc_col(int e) { return 2 * (threadIdx.x & 3) + (e & 1); }

// Per chunk and value head: c, P, T, U and W. Grid (seqs, nv, ⌈rows / 64⌉) (blocks past their sequence's chunks
// return), 256 threads; shared memory: delta_chunk_prep_smem floats.
extern "C" __global__ void __launch_bounds__(256)
    delta_chunk_prep(const float* __restrict__ qk, float* bg, float* mixed, int ch, float* __restrict__ wbuf,
                     float* __restrict__ pbuf, int kh, int nv, int dk, int dv, const int* __restrict__ seq_start,
                     int tiled, int min_rows) {
    PDL_ENTER();
    int s = blockIdx.x, h = blockIdx.y, c = blockIdx.z, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    int start = seq_start[s], n = seq_start[s + 1] - start;
    if (n < min_rows || c * DC >= n) return;
    int r0 = start + c * DC, L = min(DC, n - c * DC);
    int key = tiled ? h % kh : h / (nv / kh), kw = kh * dk;
    int lk = dk + 4, lx = max(dk, dv) + 8;
    extern __shared__ float sm[];
    float *K = sm, *X = K + DC * lk, *A = X + DC * lx, *T = A + DC * DC_LD, *cs = T + DC * DC_LD, *bs = cs + DC;
    if (tid < DC) {
        bool in = tid < L;
        bs[tid] = in ? bg[(size_t)(r0 + tid) * 2 * nv + h] : 0.0f;
        cs[tid] = in ? bg[(size_t)(r0 + tid) * 2 * nv + nv + h] : 0.0f;  // padding decays nothing
    }
    __syncthreads();
    if (warp == 0) {  // inclusive prefix sum of the 64 gates, two a lane
        float a = cs[2 * lane], b = a + cs[2 * lane + 1], x = b;
        for (int o = 1; o < 32; o <<= 1) {
            float y = __shfl_up_sync(0xffffffffu, x, o);
            if (lane >= o) x += y;
        }
        cs[2 * lane] = x - b + a;
        cs[2 * lane + 1] = x;
    }
    for (int i = tid; i < DC * dk; i += 256) {
        int r = i / dk, d = i - r * dk;
        const float* q = qk + (size_t)(r0 + r) * 2 * kw + key * dk + d;
        bool in = r < L;
        X[r * lx + d] = in ? q[0] : 0.0f;
        K[r * lk + d] = in ? q[kw] : 0.0f;
    }
    __syncthreads();
    // K·Kᵀ into L (as A) and Q·Kᵀ into P: 4 × 8 tiles, a warp one row of tiles' half; those above the diagonal
    // are zeros.
    {
        int mt = warp & 3;
        for (int u = 0; u < 4; u++) {
            int nt = (warp >> 2) * 4 + u;
            float kk[4] = {0.0f, 0.0f, 0.0f, 0.0f}, qq[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            if (nt * 8 <= mt * 16 + 15) {
                dc_tile(kk, K + mt * 16 * lk, lk, 1, K + nt * 8 * lk, 1, lk, dk);
                dc_tile(qq, X + mt * 16 * lx, lx, 1, K + nt * 8 * lk, 1, lk, dk);
            }
            for (int e = 0; e < 4; e++) {
                int i = mt * 16 + dc_row(e), j = nt * 8 + dc_col(e);
                float dec = j <= i ? expf(cs[i] - cs[j]) : 0.0f;
                A[i * DC_LD + j] = j < i ? bs[i] * dec * kk[e] : 0.0f;
                if (i < L) pbuf[((size_t)(r0 + i) * nv + h) * DC + j] = qq[e] * dec;
            }
        }
    }
    __syncthreads();
    // T = (I + L)⁻¹ (unit lower triangular) by forward substitution, a row at a time: thread (j, p) sums the
    // terms m ≡ p (mod 4) of column j.
    {
        int j = tid >> 2, p = tid & 3;
        for (int i = 0; i < DC; i++) {
            float sum = 0.0f;
            for (int m = j + p; m < i; m += 4) sum += A[i * DC_LD + m] * T[m * DC_LD + j];
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            if (p == 0) T[i * DC_LD + j] = j < i ? -sum : (j == i ? 1.0f : 0.0f);
            __syncthreads();
        }
    }
    // β v into X (q is done with), β Γ k in place of k.
    for (int i = tid; i < DC * dv; i += 256) {
        int r = i / dv, d = i - r * dv;
        X[r * lx + d] = r < L ? bs[r] * mixed[(size_t)(r0 + r) * ch + 2 * kw + h * dv + d] : 0.0f;
    }
    for (int i = tid; i < DC * dk; i += 256) {
        int r = i / dk;
        K[i + r * 4] *= bs[r] * expf(cs[r]);
    }
    __syncthreads();
    // U = T·(β v) over v's place in mixed, W = T·(β Γ k) into wbuf; T's row tile mt is zero past column 16·mt + 15.
    {
        int ntv = dv / 8, ntk = dk / 8;
        for (int tile = warp; tile < 4 * (ntv + ntk); tile += 8) {
            int mt = tile & 3, nt = tile >> 2;
            bool isu = nt < ntv;
            if (!isu) nt -= ntv;
            float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            dc_tile(d, T + mt * 16 * DC_LD, DC_LD, 1, (isu ? X : K) + nt * 8, isu ? lx : lk, 1, (mt + 1) * 16);
            for (int e = 0; e < 4; e++) {
                int i = mt * 16 + dc_row(e), col = nt * 8 + dc_col(e);
                if (i >= L) continue;
                if (isu)
                    mixed[(size_t)(r0 + i) * ch + 2 * kw + h * dv + col] = d[e];
                else
                    wbuf[((size_t)(r0 + i) * nv + h) * dk + col] = d[e];
            }
        }
    }
    if (tid < L) bg[(size_t)(r0 + tid) * 2 * nv + nv + h] = cs[tid];
}

// Per sequence, value head and 32 of its columns: the chunks in order from the state in the sequence's slot, the
// outputs into out [rows][vw], the state back. Grid (seqs, nv, ⌈dv / 32⌉), 256 threads (8 warps: Δ and O as 4 row
// tiles × 2 column tiles, S's update as dk/16 × 4 tiles); shared memory: delta_chunk_scan_smem floats.
extern "C" __global__ void __launch_bounds__(256)
    delta_chunk_scan(const float* __restrict__ qk, const float* __restrict__ bg, const float* __restrict__ mixed,
                     int ch, const float* __restrict__ wbuf, const float* __restrict__ pbuf, float* __restrict__ out,
                     int kh, int nv, int dk, int dv, float* slot_base, long long slot_floats,
                     const int* __restrict__ slots, int n_rec, int rec, const int* __restrict__ seq_start, int tiled,
                     int min_rows) {
    PDL_ENTER();
    int s = blockIdx.x, h = blockIdx.y, col0 = blockIdx.z * 32, tid = threadIdx.x, warp = tid >> 5;
    int start = seq_start[s], n = seq_start[s + 1] - start;
    if (n < min_rows) return;
    int key = tiled ? h % kh : h / (nv / kh), kw = kh * dk, vw = nv * dv, lx = dk + 4;
    extern __shared__ float sm[];
    float *S = sm, *X = S + dk * 40, *D = X + DC * lx, *P = D + DC * 40, *cs = P + DC * DC_LD;
    float* st = dn_slot(slot_base, slots, s, n_rec, rec, slot_floats) + (size_t)h * dk * dv;
    for (int i = tid; i < dk * 32; i += 256) {
        int d = i >> 5, c = i & 31;
        S[d * 40 + c] = col0 + c < dv ? st[(size_t)d * dv + col0 + c] : 0.0f;
    }
    int mt = warp & 3, nt0 = (warp >> 2) * 2;
    for (int c0 = 0; c0 < n; c0 += DC) {
        int r0 = start + c0, L = min(DC, n - c0);
        __syncthreads();  // the last chunk's readers of X, D, P and cs are done
        if (tid < DC) cs[tid] = tid < L ? bg[(size_t)(r0 + tid) * 2 * nv + nv + h] : 0.0f;
        for (int i = tid; i < DC * dk; i += 256) {
            int r = i / dk, d = i - r * dk;
            X[r * lx + d] = r < L ? wbuf[((size_t)(r0 + r) * nv + h) * dk + d] : 0.0f;
        }
        __syncthreads();
        // Δ = U − W·S.
        for (int u = 0; u < 2; u++) {
            int nt = nt0 + u;
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            dc_tile(acc, X + mt * 16 * lx, lx, 1, S + nt * 8, 40, 1, dk);
            for (int e = 0; e < 4; e++) {
                int i = mt * 16 + dc_row(e), cc = nt * 8 + dc_col(e);
                bool in = i < L && col0 + cc < dv;
                float uv = in ? mixed[(size_t)(r0 + i) * ch + 2 * kw + h * dv + col0 + cc] : 0.0f;
                D[i * 40 + cc] = in ? uv - acc[e] : 0.0f;
            }
        }
        __syncthreads();
        // Γ q into X, P's rows.
        for (int i = tid; i < DC * dk; i += 256) {
            int r = i / dk, d = i - r * dk;
            X[r * lx + d] = r < L ? qk[(size_t)(r0 + r) * 2 * kw + key * dk + d] * expf(cs[r]) : 0.0f;
        }
        for (int i = tid; i < DC * DC; i += 256) {
            int r = i >> 6, j = i & 63;
            P[r * DC_LD + j] = r < L ? pbuf[((size_t)(r0 + r) * nv + h) * DC + j] : 0.0f;
        }
        __syncthreads();
        // O = (Γ q)·S + P·Δ (P's row tile mt is zero past column 16·mt + 15).
        for (int u = 0; u < 2; u++) {
            int nt = nt0 + u;
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            dc_tile(acc, X + mt * 16 * lx, lx, 1, S + nt * 8, 40, 1, dk);
            dc_tile(acc, P + mt * 16 * DC_LD, DC_LD, 1, D + nt * 8, 40, 1, (mt + 1) * 16);
            for (int e = 0; e < 4; e++) {
                int i = mt * 16 + dc_row(e), cc = nt * 8 + dc_col(e);
                if (i < L && col0 + cc < dv) out[(size_t)(r0 + i) * vw + h * dv + col0 + cc] = acc[e];
            }
        }
        __syncthreads();
        // exp(c_last − c) k into X.
        float cl = cs[L - 1];
        for (int i = tid; i < DC * dk; i += 256) {
            int r = i / dk, d = i - r * dk;
            X[r * lx + d] = r < L ? qk[(size_t)(r0 + r) * 2 * kw + kw + key * dk + d] * expf(cl - cs[r]) : 0.0f;
        }
        __syncthreads();
        // S ← exp(c_last)·S + Xᵀ·Δ, each warp its tiles of S (nothing else reads S now).
        float el = expf(cl);
        for (int tile = warp; tile < (dk / 16) * 4; tile += 8) {
            int m = tile >> 2, nn = tile & 3;
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            dc_tile(acc, X + m * 16, 1, lx, D + nn * 8, 40, 1, DC);
            for (int e = 0; e < 4; e++) {
                int at = (m * 16 + dc_row(e)) * 40 + nn * 8 + dc_col(e);
                S[at] = el * S[at] + acc[e];
            }
        }
    }
    __syncthreads();
    for (int i = tid; i < dk * 32; i += 256) {
        int d = i >> 5, c = i & 31;
        if (col0 + c < dv) st[(size_t)d * dv + col0 + c] = S[d * 40 + c];
    }
}
