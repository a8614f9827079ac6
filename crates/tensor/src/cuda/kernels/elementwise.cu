// Norms, activations, embeddings, RoPE with the KV-cache write, conversions.

// out[r] = x[r] * rsqrt(mean(x[r]^2) + eps) * w, as PyTorch computes it in f32. One block per row. With `xq`
// (f32 out, H a multiple of 32) the output also in the dp4a products' two 8-bit terms (act8_block), as quant_act8
// would write them: the decode step's first norm spares the q/k/v product that launch.
extern "C" __global__ void __launch_bounds__(1024, 1)
    rms_norm(const float* __restrict__ x, const float* __restrict__ w, void* out, int H, float eps, int out_bf16,
             signed char* xq, signed char* xq2, float2* xds) {
    PDL_ENTER();
    __shared__ float red[32];
    const float* xr = x + (size_t)blockIdx.x * H;
    float ss = 0.0f;
    // Rows of up to RMS_V values a thread (4,096 for the 1,024 threads it is launched with) are loaded whole with
    // their norm weights, one round trip, where the output's loop loaded the weights only after the sum; the same
    // sum in the same order, so the same bits.
    constexpr int RMS_V = 4;
    if (H <= RMS_V * (int)blockDim.x) {
        float xv[RMS_V], wv[RMS_V];
#pragma unroll
        for (int u = 0; u < RMS_V; u++) {
            int i = threadIdx.x + u * blockDim.x;
            xv[u] = i < H ? xr[i] : 0.0f;
            wv[u] = i < H ? w[i] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < RMS_V; u++)
            if (threadIdx.x + u * blockDim.x < H) ss += xv[u] * xv[u];
        ss = block_sum(ss, red);
        float inv = rsqrtf(ss / (float)H + eps);
#pragma unroll
        for (int u = 0; u < RMS_V; u++) {
            int i = threadIdx.x + u * blockDim.x;
            if (i >= H) break;  // the same for the whole warp (H a multiple of 32 where act8 is written)
            float v = xv[u] * inv * wv[u];
            size_t at = (size_t)blockIdx.x * H + i;
            if (out_bf16) ((bf16_t*)out)[at] = f2bf(v);
            else ((float*)out)[at] = v;
            if (xq) act8_block(v, at, at / 32, xq, xq2, xds);
        }
        return;
    }
#pragma unroll 4
    for (int i = threadIdx.x; i < H; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_sum(ss, red);
    float inv = rsqrtf(ss / (float)H + eps);
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
        float v = xr[i] * inv * w[i];
        size_t at = (size_t)blockIdx.x * H + i;
        if (out_bf16) ((bf16_t*)out)[at] = f2bf(v);
        else ((float*)out)[at] = v;
        if (xq) act8_block(v, at, at / 32, xq, xq2, xds);  // whole warps: H is a multiple of 32
    }
}

// GPT-2's LayerNorm with weight and bias, mean and variance in f32 as PyTorch does. One block per row.
extern "C" __global__ void layer_norm(const float* __restrict__ x, const float* __restrict__ w,
                                      const float* __restrict__ b, void* out, int H, float eps, int out_bf16) {
    PDL_ENTER();
    __shared__ float red[32];
    const float* xr = x + (size_t)blockIdx.x * H;
    float s = 0.0f;
    for (int i = threadIdx.x; i < H; i += blockDim.x) s += xr[i];
    float mean = block_sum(s, red) / (float)H;
    float v = 0.0f;
    for (int i = threadIdx.x; i < H; i += blockDim.x) v += (xr[i] - mean) * (xr[i] - mean);
    float inv = rsqrtf(block_sum(v, red) / (float)H + eps);
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
        float o = (xr[i] - mean) * inv * w[i] + b[i];
        if (out_bf16) ((bf16_t*)out)[(size_t)blockIdx.x * H + i] = f2bf(o);
        else ((float*)out)[(size_t)blockIdx.x * H + i] = o;
    }
}

// silu(g) · u, one value: also what silu_mul_act8 (quant.cu) computes.
__device__ __forceinline__ float silu_mul_one(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// act[r][i] = silu(gu[r][i]) * gu[r][F + i].
extern "C" __global__ void silu_mul(const float* __restrict__ gu, void* out, int R, int F, int out_bf16) {
    PDL_ENTER();
    size_t n = (size_t)R * F;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / F, c = i % F;
        float g = gu[r * 2 * F + c], u = gu[r * 2 * F + F + c];
        float v = silu_mul_one(g, u);
        if (out_bf16) ((bf16_t*)out)[i] = f2bf(v);
        else ((float*)out)[i] = v;
    }
}

// GPT-2's tanh GELU, in place or into bf16.
extern "C" __global__ void gelu_tanh(const float* __restrict__ x, void* out, size_t n, int out_bf16) {
    PDL_ENTER();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = x[i];
        float g = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
        if (out_bf16) ((bf16_t*)out)[i] = f2bf(g);
        else ((float*)out)[i] = g;
    }
}

extern "C" __global__ void add_bias(float* y, const float* __restrict__ b, int R, int N) {
    PDL_ENTER();
    size_t n = (size_t)R * N;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] += b[i % N];
}

extern "C" __global__ void f32_to_bf16(const float* __restrict__ x, bf16_t* out, size_t n) {
    PDL_ENTER();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = f2bf(x[i]);
}

// Copies rows `idx[i]` of x [*, H] to out [i, H] (the rows that need logits).
extern "C" __global__ void gather_rows(const float* __restrict__ x, const int* __restrict__ idx, float* out, int H) {
    PDL_ENTER();
    const float* src = x + (size_t)idx[blockIdx.x] * H;
    for (int i = threadIdx.x; i < H; i += blockDim.x) out[(size_t)blockIdx.x * H + i] = src[i];
}

// Embedding rows of token ids, dequantised to f32. fmt: 0 bf16, 1 q8, 2 q4 (the GPU matrix formats).
// `pos_emb` (GPT-2's learned positions, f32 [max_pos][H]) is added when given.
extern "C" __global__ void embed(const void* __restrict__ q, const void* __restrict__ s, int fmt,
                                 const int* __restrict__ ids, const int* __restrict__ pos,
                                 const float* __restrict__ pos_emb, float* out, int H) {
    PDL_ENTER();
    size_t row = (size_t)ids[blockIdx.x];
    float* o = out + (size_t)blockIdx.x * H;
    int nb = H / 32;
    // Grid y spreads a row over blocks: one block of a wide row was slow at the start of every decode step, its
    // threads' 16 loads each waiting on the row one after another.
    for (int i = blockIdx.y * blockDim.x + threadIdx.x; i < H; i += gridDim.y * blockDim.x) {
        float v;
        if (fmt == 0) {
            v = bf2f(((const bf16_t*)q)[row * H + i]);
        } else if (fmt == 1) {
            signed char c = ((const signed char*)q)[row * H + i];
            v = h2f(((const f16_t*)s)[row * nb + i / 32]) * (float)c;
        } else {
            int j = i % 32;
            unsigned char byte = ((const unsigned char*)q)[row * (H / 2) + (i / 32) * 16 + (j & 15)];
            int nib = j < 16 ? (byte & 15) : (byte >> 4);
            float d = h2f(((const f16_t*)s)[row * nb + i / 32]);
            v = d * (float)nib + q4_min(d);
        }
        if (pos_emb) v += pos_emb[(size_t)pos[blockIdx.x] * H + i];
        o[i] = v;
    }
}

// After the q/k/v product of one token row: optional per-head RMSNorm of q and k (Qwen3), rotate-half RoPE at the
// row's position (when inv_freq is given), q into `q_out` [R][nh*hd] f32, k and v into the sequence's KV pages
// (f16, [page][nkv][PAGE][hd] per layer). Grid (R, nh + nkv), one warp per head.
#define PAGE 16
extern "C" __global__ void qkv_post(const float* __restrict__ qkv, float* q_out, f16_t* k_pages, f16_t* v_pages,
                                    const float* __restrict__ q_norm, const float* __restrict__ k_norm,
                                    const float* __restrict__ inv_freq, const int* __restrict__ row_pos,
                                    const int* __restrict__ row_seq, const int* __restrict__ tables, int max_pages,
                                    int nh, int nkv, int hd, float eps) {
    PDL_ENTER();
    int r = blockIdx.x, h = blockIdx.y, lane = threadIdx.x;
    int width = (nh + 2 * nkv) * hd;
    const float* row = qkv + (size_t)r * width;
    int pos = row_pos[r];
    bool is_q = h < nh;
    const float* src = row + (size_t)h * hd;
    const float* nw = is_q ? q_norm : k_norm;
    float inv = 1.0f;
    if (nw) {
        float ss = 0.0f;
        for (int i = lane; i < hd; i += 32) ss += src[i] * src[i];
        inv = rsqrtf(warp_sum(ss) / (float)hd + eps);
    }
    int page = tables[(size_t)row_seq[r] * max_pages + pos / PAGE], slot = pos % PAGE;
    size_t kv_base = (((size_t)page * nkv + (h - nh)) * PAGE + slot) * hd;
    int half = hd / 2;
    for (int i = lane; i < half; i += 32) {
        float a = src[i], b = src[i + half];
        if (nw) {
            a = a * inv * nw[i];
            b = b * inv * nw[i + half];
        }
        if (inv_freq) {
            float s, c;
            sincosf((float)pos * inv_freq[i], &s, &c);
            float a2 = a * c - b * s, b2 = b * c + a * s;
            a = a2;
            b = b2;
        }
        if (is_q) {
            q_out[(size_t)r * nh * hd + (size_t)h * hd + i] = a;
            q_out[(size_t)r * nh * hd + (size_t)h * hd + i + half] = b;
        } else {
            k_pages[kv_base + i] = f2h(a);
            k_pages[kv_base + i + half] = f2h(b);
        }
    }
    if (!is_q) {
        const float* vs = row + (size_t)(nh + nkv) * hd + (size_t)(h - nh) * hd;
        for (int i = lane; i < hd; i += 32) v_pages[kv_base + i] = f2h(vs[i]);
    }
}

// RMSNorm into bf16 (the activations of a cuBLAS or tensor-core product) for widths H = 4·n <= 8192: 256 threads
// a row, each holding up to 8 float4s of it in registers, so the row is read from memory once and the block's
// sum takes 8 warps, not 32 (the kernel above spends most of a 32-row decode norm in its reduction).
extern "C" __global__ void __launch_bounds__(256)
    rms_norm_bf16_v4(const float* __restrict__ x, const float* __restrict__ w, bf16_t* __restrict__ out, int H,
                     float eps) {
    PDL_ENTER();
    __shared__ float red[32];
    const float4* xr = (const float4*)(x + (size_t)blockIdx.x * H);
    const float4* w4 = (const float4*)w;
    int n4 = H >> 2;
    float4 v[8];
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        int i = threadIdx.x + j * 256;
        if (i < n4) {
            v[j] = xr[i];
            ss += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
        }
    }
    ss = block_sum(ss, red);
    float inv = rsqrtf(ss / (float)H + eps);
    bf16_t* o = out + (size_t)blockIdx.x * H;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        int i = threadIdx.x + j * 256;
        if (i < n4) {
            float4 g = w4[i];
            unsigned lo = (unsigned)f2bf(v[j].x * inv * g.x) | ((unsigned)f2bf(v[j].y * inv * g.y) << 16);
            unsigned hi = (unsigned)f2bf(v[j].z * inv * g.z) | ((unsigned)f2bf(v[j].w * inv * g.w) << 16);
            ((uint2*)o)[i] = make_uint2(lo, hi);
        }
    }
}
