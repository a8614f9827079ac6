// Shared helpers: the number formats by bit pattern, so no CUDA header is needed at NVRTC time.
#define INFINITY __int_as_float(0x7f800000)
typedef unsigned short bf16_t;
typedef unsigned short f16_t;

// Q4 blocks hold their scale d alone (Q4_0: weight = d·(q − 8) = d·q + m): the minimum m = −8d, made here, exact
// in f32 (the value the f16 minimum of the (d, m) pairs the device once held gave, without reading 2 more bytes a
// block).
__device__ __forceinline__ float q4_min(float d) { return -8.0f * d; }

// Word m (0..7) of a q6 block (matrix.rs's Q6) as four bytes v = q + 32 (0..63: signed bytes too, for dp4a):
// weights 4m..4m+3 (m < 4: the low nibbles of word m of the 16 nibble bytes) or 16 + 4(m − 4).. (m ≥ 4: the high
// nibbles of word m − 4), each with its two high bits from h — h.x holds words 0 and 1's, h.y words 2 and 3's:
// byte b of the word bits 0–1 for weight 4i + b, 2–3 for 16 + 4i + b, 4–5 and 6–7 for word i + 1's.
__device__ __forceinline__ unsigned q6_word(uint4 w, uint2 h, int m) {
    int i = m & 3;
    unsigned wq = i == 0 ? w.x : i == 1 ? w.y : i == 2 ? w.z : w.w;
    unsigned lo = m < 4 ? wq & 0x0f0f0f0fu : (wq >> 4) & 0x0f0f0f0fu;
    unsigned hh = i < 2 ? h.x : h.y;
    int sh = (i & 1) * 4 + (m < 4 ? 0 : 2);
    return lo | (((hh >> sh) & 0x03030303u) << 4);
}

// The minimum of a q6 block of scale d: weight = d·v − 32d.
__device__ __forceinline__ float q6_min(float d) { return -32.0f * d; }

__device__ __forceinline__ float bf2f(bf16_t b) { return __uint_as_float(((unsigned)b) << 16); }

// Round to nearest even, as PyTorch and the CPU loader round f32 to bf16.
__device__ __forceinline__ bf16_t f2bf(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16_t)(u >> 16);
}

__device__ __forceinline__ float h2f(f16_t h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ f16_t f2h(float f) {
    f16_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

// Byte j of w (0..255) as a float, through the 2^23 magic number: one PRMT and one FADD, no I2F.
__device__ __forceinline__ float byte_f(unsigned w, int j) {
    return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7440 + j)) - 8388608.0f;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over a block of up to 1024 threads; every thread gets the result. `red` holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float* red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float t = lane < nw ? red[lane] : 0.0f;
    return warp_sum(t);
}

// Programmatic dependent launch (Hopper; launch.rs): a kernel may be launched while the one before it on the stream
// still runs. Every kernel therefore waits for the grid before it (pdl_wait) before it touches memory that grid may
// write or read, reading only constants (a product's weights) before that; then it lets the next kernel be
// launched (pdl_trigger), so at most two grids overlap. Both are no-ops before sm_90 and for a plain launch.
__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// cp.async (sm_80+): 16 bytes from global memory into shared memory without passing through registers (cached in
// L2 only), in groups a thread commits and then waits for until at most N are still in flight.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    unsigned a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(gmem) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Asks L2 for the line holding p, without waiting for it: a product's first weights, fetched from HBM while the
// kernel before it ends (before pdl_wait), and found in L2 by the loads after it.
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// A split kernel's count of its blocks, called by every thread once the block has written its part: whether this
// block is the `of`-th to arrive at `counter` (in every thread). The barrier orders the block's writes before its
// first thread's add, whose release publishes them at GPU scope (cumulative through the barrier); the last block's
// acquire, passed to its threads by the barrier after, orders their reads of every part after the writes. The
// pattern's __threadfence() took a sequentially consistent fence in every block and another in the last, on the
// step's critical path (the decode attention's merge, the norm tails).
__device__ __forceinline__ bool arrive_last(unsigned* counter, unsigned of) {
    __shared__ unsigned last;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned old;
        asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(counter) : "memory");
        last = old == of - 1;
    }
    __syncthreads();
    return last;
}

// The kernel trace (`KVAD_GPU_TRACE`, trace.rs): when kvad_trace is set, the first thread of every kernel's first
// block records, past pdl_wait, the global timer and the launch's shape ([time, grid.x | grid.y << 24 | block.x <<
// 48] a record), in the order kernels run. The kernel before has ended by then, so the gaps between records are each
// kernel's time inside a graph, overlap with its neighbours included — what ncu, launching each alone, cannot see.
// The record count is the buffer's first word and the records follow it, so the kernels of every compile unit (each
// its own module, with its own copy of these variables) count in one place.
extern "C" {
__device__ unsigned long long* kvad_trace;
__device__ unsigned kvad_trace_cap;
}

// One record by the calling thread: the global timer and `what` (a launch's shape, or a mark). Compiled in only
// with KVAD_TRACE (compile.rs, when KVAD_GPU_TRACE is set): otherwise every kernel would load kvad_trace first.
__device__ __forceinline__ void trace_record(unsigned long long what) {
#ifdef KVAD_TRACE
    unsigned long long* t = *(unsigned long long* volatile*)&kvad_trace;
    if (t) {
        unsigned long long now;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        unsigned i = atomicAdd((unsigned*)t, 1u);
        if (i < kvad_trace_cap) {
            t[2 * i + 2] = now;
            t[2 * i + 3] = what;
        }
    }
#endif
}

__device__ __forceinline__ void trace_entry() {
    if ((threadIdx.x | threadIdx.y | blockIdx.x | blockIdx.y | blockIdx.z) == 0)
        trace_record((unsigned long long)gridDim.x | ((unsigned long long)gridDim.y << 24) |
                     ((unsigned long long)blockDim.x << 48));
}

// A point inside a kernel, for the trace: recorded as the shape (id, 0, 0) by whichever thread calls it, so
// scripts/gpu/trace.py shows the time from the kernel's record to each of its marks.
__device__ __forceinline__ void trace_mark(unsigned id) { trace_record(id); }

#define PDL_ENTER()     \
    do {                \
        pdl_wait();     \
        trace_entry();  \
        pdl_trigger();  \
    } while (0)

// The entry of kernels whose time past the wait is a chain of dependent loads in few blocks (decode attention, the
// norm tails): they let the next kernel launch only once their own loads are back
// (PDL_LATE_TRIGGER), because that kernel's blocks start by loading their first weights — megabytes across the
// GPU — which would queue in the memory system ahead of the few loads this kernel waits on. The early trigger
// everywhere measured slower with the deferred norm; SwiGLU (silu_mul_act8) gains from it and no longer waits
// (quant.cu; figures: docs/performance-gpu.md).
#define PDL_ENTER_LATE() \
    do {                 \
        pdl_wait();      \
        trace_entry();   \
    } while (0)
#define PDL_LATE_TRIGGER() pdl_trigger()

// The decode activations' two 8-bit terms (quant_act8 in quant.cu): the block's scale d = max|x|/127 and its
// inverse, then x/d = t ≈ q1 + q2/254. Every kernel that writes them goes through these, so all round alike.
__device__ __forceinline__ void act8_scale(float amax, float& d, float& id) {
    d = __fdiv_rn(amax, 127.0f);
    id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
}

__device__ __forceinline__ void act8_terms(float v, float id, signed char& q1, signed char& q2) {
    float t = __fmul_rn(v, id);
    float a = fminf(127.0f, fmaxf(-127.0f, rintf(t)));
    q1 = (signed char)a;
    q2 = (signed char)fminf(127.0f, fmaxf(-127.0f, rintf(__fmul_rn(__fsub_rn(t, a), 254.0f))));
}

// One block of 32 in the two terms, a value a lane (the whole warp calls it); `blk` indexes its (d, sum) pair.
// quant_act8, silu_mul_act8, the decode attention and rms_norm write through it (and the norm tail in
// gemv_split.cu through act8_scale/act8_terms), so all round alike.
__device__ __forceinline__ void act8_block(float v, size_t at, size_t blk, signed char* xq, signed char* xq2,
                                           float2* xds) {
    float d, id;
    act8_scale(warp_max(fabsf(v)), d, id);
    act8_terms(v, id, xq[at], xq2[at]);
    float s = warp_sum(v);
    if ((threadIdx.x & 31) == 0) xds[blk] = make_float2(d, s);
}
