// Weight conversions on the device: bf16 to the q8/q4/q6 formats (the CPU quantiser's arithmetic, so both give the
// same blocks), and q8/q4/q6 back to bf16 for the prefill GEMM. One thread per block of 32 weights.

// A block's scale amax/qmax into s[b] (f16) and the reciprocal the quants are made with (0 for a zero block):
// quantize_row's Q8_0 arithmetic and quantize_row_6bit's, __fdiv_rn so no reciprocal approximation enters.
__device__ __forceinline__ float block_scale(const bf16_t* x, float qmax, f16_t* s, size_t b) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(bf2f(x[j])));
    float d = __fdiv_rn(amax, qmax);
    s[b] = f2h(d);
    return d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
}

extern "C" __global__ void quantize_q8(const bf16_t* __restrict__ w, signed char* q, f16_t* s, size_t blocks) {
    PDL_ENTER();
    size_t b = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (b >= blocks) return;
    const bf16_t* x = w + b * 32;
    float id = block_scale(x, 127.0f, s, b);
    // __fmul_rn/__fadd_rn: no contraction into an FMA, so the rounding is the CPU quantiser's, step for step.
    for (int j = 0; j < 32; j++) q[b * 32 + j] = (signed char)roundf(__fmul_rn(bf2f(x[j]), id));
}

extern "C" __global__ void quantize_q4(const bf16_t* __restrict__ w, unsigned char* q, f16_t* s, size_t blocks) {
    PDL_ENTER();
    size_t b = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (b >= blocks) return;
    const bf16_t* x = w + b * 32;
    float vmax = 0.0f;
    for (int j = 0; j < 32; j++) {
        float v = bf2f(x[j]);
        if (fabsf(v) > fabsf(vmax)) vmax = v;
    }
    float d = __fdiv_rn(vmax, -8.0f);
    float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
    // weight = d*(q-8): the scale alone is stored (Q4_0), the kernels make the minimum −8d.
    s[b] = f2h(d);
    for (int j = 0; j < 16; j++) {
        int q0 = min(15, max(0, (int)__fadd_rn(__fmul_rn(bf2f(x[j]), id), 8.5f)));
        int q1 = min(15, max(0, (int)__fadd_rn(__fmul_rn(bf2f(x[j + 16]), id), 8.5f)));
        q[b * 16 + j] = (unsigned char)(q0 | (q1 << 4));
    }
}

// bf16 to Q6 (matrix.rs): quant_row_6bit's arithmetic (scale amax/31, quants −31..=31), each v = q + 32's low nibble
// into the Q4 layout at q, its two high bits into the 8 bytes of block b at q + 16·blocks (q6_word's layout).
extern "C" __global__ void quantize_q6(const bf16_t* __restrict__ w, unsigned char* q, f16_t* s, size_t blocks) {
    PDL_ENTER();
    size_t b = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (b >= blocks) return;
    const bf16_t* x = w + b * 32;
    float id = block_scale(x, 31.0f, s, b);
    unsigned hw[2] = {0u, 0u};
    for (int j = 0; j < 16; j++) {
        int v0 = (int)roundf(__fmul_rn(bf2f(x[j]), id)) + 32;
        int v1 = (int)roundf(__fmul_rn(bf2f(x[j + 16]), id)) + 32;
        q[b * 16 + j] = (unsigned char)((v0 & 15) | ((v1 & 15) << 4));
        int i = j / 4, sh = 8 * (j % 4) + (i & 1) * 4;
        hw[i >> 1] |= (unsigned)(v0 >> 4) << sh;
        hw[i >> 1] |= (unsigned)(v1 >> 4) << (sh + 2);
    }
    *(uint2*)(q + blocks * 16 + b * 8) = make_uint2(hw[0], hw[1]);
}

extern "C" __global__ void dequant_q8(const signed char* __restrict__ q, const f16_t* __restrict__ s, bf16_t* out,
                                      size_t n) {
    PDL_ENTER();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = f2bf(h2f(s[i / 32]) * (float)q[i]);
}

extern "C" __global__ void dequant_q4(const unsigned char* __restrict__ q, const f16_t* __restrict__ s,
                                      bf16_t* out, size_t n) {
    PDL_ENTER();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t b = i / 32;
        int j = i % 32;
        unsigned char byte = q[b * 16 + (j & 15)];
        int nib = j < 16 ? (byte & 15) : (byte >> 4);
        float d = h2f(s[b]);
        out[i] = f2bf(d * (float)nib + q4_min(d));
    }
}

extern "C" __global__ void dequant_q6(const unsigned char* __restrict__ q, const f16_t* __restrict__ s,
                                      bf16_t* out, size_t n) {
    PDL_ENTER();
    const unsigned char* qh = q + n / 2;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t b = i / 32;
        int j = i % 32;
        uint4 w = *(const uint4*)(q + b * 16);
        uint2 h = *(const uint2*)(qh + b * 8);
        unsigned word = q6_word(w, h, j / 4);
        out[i] = f2bf(h2f(s[b]) * (float)((int)((word >> (8 * (j % 4))) & 255u) - 32));
    }
}

// Greedy decoding several steps ahead (decoder.rs's forward_greedy_steps): between two replays of a one-row
// decode graph, the pick (argmax_rows's, in ids[0]) becomes the next step's token (meta[0]), the row's position
// (meta[1]) advances, and the pick is kept for the host (hist[step]) — so the host waits once for k steps. A pick
// outside the vocabulary (argmax_rows's 0x7fffffff for a row of NaNs) is kept for the host to refuse, but not fed
// to the next pass's embedding, which would read past its table.
extern "C" __global__ void greedy_advance(int* meta, const int* ids, int* hist, int step, int vocab) {
    PDL_ENTER();
    if (threadIdx.x == 0) {
        int id = ids[0];
        hist[step] = id;
        meta[0] = id >= 0 && id < vocab ? id : 0;
        meta[1] += 1;
    }
}

// Greedy sampling without copying logits back: the index of the first maximum of each row. Launched with 1,024
// threads; its bounds ask for one block an SM, so its ARGMAX_U float4s a thread get the 64 registers that leaves
// (ptxas: 62; asked for 1,024 threads alone, it held the kernel to 32 and its loads could not all be in flight).
#define ARGMAX_U 12
extern "C" __global__ void __launch_bounds__(1024, 1) argmax_rows(const float* __restrict__ x, int* out, int N) {
    PDL_ENTER();
    __shared__ float bv[32];
    __shared__ int bi[32];
    const float* row = x + (size_t)blockIdx.x * N;
    float best = -INFINITY;
    int idx = 0x7fffffff;
    // ARGMAX_U float4s a thread asked for at once (rows of a multiple of 4): one value at a time, each thread's
    // loop was 48 round trips to L2 one after another for a 49,152-wide vocabulary; four at a time, three. Twelve
    // make a 49,152-wide row one round trip. A thread still sees its values in increasing index order, so the
    // strict > keeps the first maximum.
    int n4 = N % 4 == 0 ? N / 4 : 0;
    const float4* row4 = (const float4*)row;
    for (int base = threadIdx.x; base < n4; base += ARGMAX_U * blockDim.x) {
        float4 v[ARGMAX_U];
#pragma unroll
        for (int u = 0; u < ARGMAX_U; u++) {
            int j = base + u * blockDim.x;
            v[u] = j < n4 ? __ldg(row4 + j) : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
        }
#pragma unroll
        for (int u = 0; u < ARGMAX_U; u++) {
            int j = 4 * (base + u * blockDim.x);
            if (v[u].x > best) { best = v[u].x; idx = j; }
            if (v[u].y > best) { best = v[u].y; idx = j + 1; }
            if (v[u].z > best) { best = v[u].z; idx = j + 2; }
            if (v[u].w > best) { best = v[u].w; idx = j + 3; }
        }
    }
    for (int i = 4 * n4 + threadIdx.x; i < N; i += blockDim.x) {
        float v = row[i];
        if (v > best) { best = v; idx = i; }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, best, o);
        int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        if (ov > best || (ov == best && oi < idx)) { best = ov; idx = oi; }
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) { bv[warp] = best; bi[warp] = idx; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (blockDim.x + 31) / 32; w++)
            if (bv[w] > best || (bv[w] == best && bi[w] < idx)) { best = bv[w]; idx = bi[w]; }
        out[blockIdx.x] = idx;
    }
}

// Decode activations in two 8-bit terms per block of 32 for the dp4a GEMVs (gemv_split.cu): a warp per block,
// scale d = max|x|/127, t = x/d, q1 = rint(t), q2 = rint((t - q1)·254), so x ≈ d·(q1 + q2/254) to 1/64,000 of the
// block's maximum (the CPU's i16 activations: 1/65,534); (d, f32 sum of the block) beside them, the sum for Q4's
// minimums. Both terms go through dp4a: twice the integer products, still a quarter of the f32 kernels' work.
// (act8_block in common.cuh writes one such block.)

extern "C" __global__ void quant_act8(const float* __restrict__ x, signed char* xq, signed char* xq2, float2* xds,
                                      int K, int rows) {
    PDL_ENTER();
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    int nb = K / 32;
    if (warp >= rows * nb) return;
    int r = warp / nb, b = warp % nb;
    size_t at = (size_t)r * K + (size_t)b * 32 + lane;
    act8_block(x[at], at, (size_t)r * nb + b, xq, xq2, xds);
}

// silu_mul (elementwise.cu) straight into the two-term form for the down product, as silu_mul then quant_act8
// would write it, bit for bit: one kernel a layer fewer. A warp per block of 32; f32 `out` too unless 0.
// It lets the down product launch at once, so that product's first weights load beside it (PDL_ENTER): faster
// than the trigger after its loads (PDL_ENTER_LATE), unlike the decode attention, whose early trigger lost.
extern "C" __global__ void silu_mul_act8(const float* __restrict__ gu, float* out, signed char* xq, signed char* xq2,
                                         float2* xds, int R, int F) {
    PDL_ENTER();
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    int nb = F / 32;
    if (warp >= R * nb) return;
    int r = warp / nb, b = warp % nb;
    size_t c = (size_t)b * 32 + lane, at = (size_t)r * F + c;
    float v = silu_mul_one(gu[(size_t)r * 2 * F + c], gu[(size_t)r * 2 * F + F + c]);
    if (out) out[at] = v;
    act8_block(v, at, (size_t)r * nb + b, xq, xq2, xds);
}
