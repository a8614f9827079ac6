//! CUDA: the GPU found at run time, its kernels compiled by NVRTC on first use, and the launches the GPU backends
//! are built from.
//!
//! Nothing of CUDA is needed to build: cudarc loads `libcuda`, `libnvrtc` and `libcublas` when a GPU backend is
//! first asked for, and every way of not having them ([`GpuError`]) is an error that says which part is missing, so
//! one binary runs everywhere. Kernel sources are the `.cu` files beside this one; NVRTC compiles them to the GPU's
//! own code (CUBIN; PTX where it cannot), cached on disk keyed by a hash of the source, the options and the GPU's
//! architecture.

mod attention;
mod blas;
mod buffer;
mod compile;
mod config;
mod delta;
mod elementwise;
mod launch;
mod limits;
mod matrix;
mod mla;
mod moe;
mod norm_defer;
mod ops;
mod trace;

pub use attention::{flash_takes, Attn, FLASH_TILE};
pub use buffer::DevBuf;
pub use config::Tuning;
pub use delta::{DeltaArgs, SlotTable, DELTA_CHUNK, DELTA_CHUNK_MIN_ROWS, DELTA_KEY_DIMS};
pub use matrix::{DevFormat, DevMatrix};
pub use mla::{mla_splits, MlaArgs, MLA_MAX_LATENT, MLA_MAX_WIDTH};
pub use moe::{ExpertTable, RouteArgs, MOE_MAX_GROUPS, MOE_MAX_K, MOE_MAX_K_WIDTH};
pub use ops::{
    mma_few_takes, Act, GemvKernel, Meta, NormOut, NormTo, QkvPost, ACT8_MAX_K, GEMV_MAX_ROWS, KV_PAGE,
    MMA_FEW_MAX_ROWS, MMA_FEW_TILES, SPLIT_HEIGHTS,
};

use cudarc::driver::{CudaContext, CudaFunction, CudaStream};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

/// Why no GPU backend can run here, or why a GPU call failed.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// A CUDA library could not be loaded.
    #[error("no CUDA: {lib} could not be loaded (no NVIDIA driver or CUDA runtime on this machine)")]
    NoLibrary {
        /// The library: libcuda (the driver), libnvrtc, libcublas.
        lib: &'static str,
    },
    /// The driver loaded but sees no device.
    #[error("no CUDA device: the driver found {0} GPUs")]
    NoDevice(i32),
    /// The GPU's architecture is older than the kernels need.
    #[error("GPU {name} has compute capability {major}.{minor}; kvad's kernels need 8.0 or newer")]
    TooOld {
        /// Device name.
        name: String,
        /// Major version.
        major: i32,
        /// Minor version.
        minor: i32,
    },
    /// A driver call failed.
    #[error("CUDA driver: {0}")]
    Driver(#[from] cudarc::driver::DriverError),
    /// NVRTC refused a kernel source.
    #[error("NVRTC compile failed: {0}")]
    Compile(String),
    /// cuBLAS failed.
    #[error("cuBLAS: {0}")]
    Blas(String),
    /// A shape or format the kernels do not take.
    #[error("{0}")]
    Shape(String),
    /// The kernel trace file could not be written.
    #[error("KVAD_GPU_TRACE={path}: {err}")]
    Trace {
        /// The file.
        path: String,
        /// Why.
        err: std::io::Error,
    },
}

/// What this machine's GPU is, for `kvad doctor` and backend choice.
#[derive(Debug, Clone)]
pub struct GpuInfo {
    /// Device name, e.g. "NVIDIA H200".
    pub name: String,
    /// Compute capability.
    pub capability: (i32, i32),
    /// Total memory in bytes.
    pub total_memory: usize,
    /// Free memory in bytes now.
    pub free_memory: usize,
    /// CUDA driver version as (major, minor).
    pub driver: (i32, i32),
    /// Multiprocessors.
    pub sms: i32,
}

/// One GPU with its stream, compiled kernels and cuBLAS handle. Cheap to share (`Arc`); all work goes to one
/// stream, so operations are ordered without events.
pub struct Gpu {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    funcs: HashMap<String, CudaFunction>,
    pub(crate) blas: Mutex<blas::Blas>,
    info: GpuInfo,
    /// Scratch for decode activations in two 8-bit terms (`quant_act8`, read by the dp4a GEMVs): allocated once
    /// with the GPU, so a product recorded into a CUDA graph always names the same address.
    pub(crate) act8: DevBuf,
    /// Scratch of the norm deferred to the next product (`norm_defer.rs`): allocated once (and zeroed: its counters
    /// start and end at zero), like `act8`.
    pub(crate) defer: DevBuf,
    /// Scratch of the decode attention split over blocks (`attention.rs`'s `decode_splits`): partial softmaxes
    /// and counters, allocated once and zeroed, like `defer`.
    pub(crate) att_split: DevBuf,
    /// Whether launches carry programmatic dependent launch (`launch::pdl_wanted`).
    pub(crate) pdl: bool,
    /// The settings the GPU was opened with ([`Tuning`]).
    tuning: Tuning,
    /// The kernel trace, when [`Tuning::trace`] asks for one.
    trace: Option<trace::Trace>,
    /// How long NVRTC took at open, when it compiled (not all from the cache), until a loader takes it.
    compile_note: Mutex<Option<String>>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Gpu({})", self.info.name)
    }
}

/// The helpers every kernel file uses, first in every compile unit.
const COMMON: &str = include_str!("kernels/common.cuh");

/// The split products in order (their shared part, the f32 and the 8-bit activation products, their instances),
/// also compiled as units of their own ([`compile::units`]).
const GEMV_SPLIT: [&str; 4] = [
    include_str!("kernels/gemv_split.cuh"),
    include_str!("kernels/gemv_split_f32.cu"),
    include_str!("kernels/gemv_split_dp4a.cu"),
    include_str!("kernels/gemv_split.cu"),
];

/// The kernel sources in order (a file may use what the files before it define).
const SOURCES: [&str; 18] = [
    COMMON,
    include_str!("kernels/elementwise.cu"),
    include_str!("kernels/gemv.cu"),
    GEMV_SPLIT[0],
    GEMV_SPLIT[1],
    GEMV_SPLIT[2],
    GEMV_SPLIT[3],
    include_str!("kernels/attention.cu"),
    include_str!("kernels/flash.cu"),
    include_str!("kernels/attention_chunks.cu"),
    include_str!("kernels/attention_split.cu"),
    include_str!("kernels/quant.cu"),
    include_str!("kernels/attention_decode.cu"),
    include_str!("kernels/mma_few.cu"),
    include_str!("kernels/moe.cu"),
    include_str!("kernels/mla.cu"),
    include_str!("kernels/delta.cu"),
    include_str!("kernels/delta_chunk.cu"),
];

/// Every kernel entry point, loaded once.
const KERNELS: &[&str] = &[
    "rms_norm",
    "rms_norm_bf16_v4",
    "layer_norm",
    "silu_mul",
    "gelu_tanh",
    "add_bias",
    "f32_to_bf16",
    "gather_rows",
    "embed",
    "qkv_post",
    "attention",
    "attention_keys_8",
    "flash_attention_16",
    "flash_attention_32",
    "flash_attention_64",
    "flash_attention_128",
    "quantize_q8",
    "quantize_q4",
    "dequant_q8",
    "dequant_q4",
    "quantize_q6",
    "dequant_q6",
    "argmax_rows",
    "greedy_advance",
    "quant_act8",
    "silu_mul_act8",
    "moe_router",
    "moe_route",
    "moe_gemv_bf16",
    "moe_gemv_q",
    "moe_order",
    "moe_gather_bf16",
    "moe_combine",
    "moe_shared_gate_add",
    "mla_kv_post",
    "mla_q_absorb",
    "mla_attention_part",
    "mla_attention_out",
    "delta_conv",
    "delta_conv_tail",
    "delta_prep",
    "delta_rule_4",
    "delta_rule_8",
    "delta_rule_16",
    "delta_rule_32",
    "delta_rule_64",
    "delta_step_4",
    "delta_step_8",
    "delta_step_16",
    "delta_step_32",
    "delta_step_64",
    "delta_chunk_prep",
    "delta_chunk_scan",
    "delta_gated_norm",
    "gated_qkv_post",
    "gate_mul",
];

/// The kernels' PTX for a GPU of this compute capability, one text per compile unit, compiled by NVRTC (no GPU
/// needed): what CI checks, so a kernel that does not compile is found without the device. `defines` name the
/// measuring variant (`KVAD_TRACE`; none for the kernels kvad runs).
pub fn compile_kernels(capability: (i32, i32), defines: &[&str]) -> Result<Vec<String>, GpuError> {
    let (ptx, _) = compile::code_units(&compile_units(), capability, None, defines, compile::Target::Ptx)?;
    Ok(ptx.iter().map(|p| p.to_src()).collect())
}

/// [`compile::units`] of these sources.
fn compile_units() -> Vec<(String, &'static str)> {
    compile::units(&SOURCES, COMMON, &GEMV_SPLIT)
}

/// The key-stream attention instances with more warps (attention.cu), those `attention_warps` picks: (D, query
/// heads per KV head, warps).
const ATT_WARPS_INSTANCES: [(usize, &[usize], usize); 6] = [
    (1, &[1, 2, 4, 8], 32),
    (2, &[1, 2, 4, 8], 32),
    (4, &[1, 2, 4], 32),
    (8, &[1, 2], 32),
    (4, &[8], 16),
    (8, &[4], 16),
];

/// The kernel entry points the binary loads: the fixed ones, the attention instances, and the products (format ×
/// input rows × block height × what they do with their output rows).
pub fn kernel_names() -> Vec<String> {
    let mut names: Vec<String> = KERNELS.iter().map(|s| s.to_string()).collect();
    for (d, gms, w) in ATT_WARPS_INSTANCES {
        for gm in gms {
            names.push(format!("attention_keys_{d}_w{w}_g{gm}"));
        }
    }
    for d in [1, 2, 4, 8] {
        names.push(format!("attention_decode_{d}_g1"));
    }
    for hd in [32, 64, 128] {
        names.push(format!("attention_split_{hd}"));
    }
    for gm in [1, 2, 4, 8] {
        names.push(format!("attention_chunks_256_g{gm}"));
    }
    // The per-warp product, for bf16 widths that are not whole blocks of 32.
    for b in 1..=ops::GEMV_MAX_ROWS {
        names.push(format!("gemv_bf16_{b}"));
    }
    for f in ["bf16", "q8", "q4"] {
        for b in 1..=ops::GEMV_MAX_ROWS {
            for r in ops::SPLIT_HEIGHTS {
                for nn in ["", "_nn"] {
                    names.push(format!("gemvs_{f}_{b}_r{r}{nn}"));
                    if f != "bf16" {
                        names.push(format!("gemvs_{f}d_{b}_r{r}{nn}"));
                    }
                }
                if f != "bf16" {
                    names.push(format!("gemvs_{f}d_{b}_r{r}_gn"));
                    // One input, whole groups a block (gemv_split.cu's GS_INSTANCE_GB).
                    if b == 1 && norm_defer::GROUPS_BLOCK.contains(&(f, r)) {
                        names.push(format!("gemvs_{f}d_{b}_r{r}_gb"));
                    }
                }
            }
        }
        for nt in 1..=ops::MMA_FEW_MAX_ROWS / 8 {
            for mt in ops::MMA_FEW_TILES {
                names.push(format!("mmf_{f}_{nt}_m{mt}"));
            }
        }
    }
    // The q4 backends' 6-bit head: norm-free dp4a products and the tensor-core kernel.
    for b in 1..=ops::GEMV_MAX_ROWS {
        for r in ops::SPLIT_HEIGHTS {
            names.push(format!("gemvs_q6d_{b}_r{r}_nn"));
        }
    }
    for nt in 1..=ops::MMA_FEW_MAX_ROWS / 8 {
        for mt in ops::MMA_FEW_TILES {
            names.push(format!("mmf_q6_{nt}_m{mt}"));
        }
    }
    names
}

/// Whether the CUDA driver library can be loaded at all (no device is touched).
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the library.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Which of the CUDA libraries beyond the driver (NVRTC, cuBLAS) cannot be loaded, if any.
pub fn libraries_missing() -> Option<String> {
    // SAFETY: only try to dlopen the libraries.
    let (nvrtc, blas) = unsafe { (cudarc::nvrtc::sys::is_culib_present(), cudarc::cublas::sys::is_culib_present()) };
    match (nvrtc, blas) {
        (true, true) => None,
        (false, true) => Some("libnvrtc (CUDA's runtime compiler) could not be loaded".into()),
        (true, false) => Some("libcublas could not be loaded".into()),
        (false, false) => Some("libnvrtc and libcublas could not be loaded".into()),
    }
}

/// The GPU's properties, or why there is none. Loads only the driver.
pub fn probe() -> Result<GpuInfo, GpuError> {
    if !driver_present() {
        return Err(GpuError::NoLibrary { lib: "libcuda (the NVIDIA driver)" });
    }
    let n = CudaContext::device_count()?;
    if n < 1 {
        return Err(GpuError::NoDevice(n));
    }
    let ctx = CudaContext::new(0)?;
    info_of(&ctx)
}

fn info_of(ctx: &Arc<CudaContext>) -> Result<GpuInfo, GpuError> {
    use cudarc::driver::sys::CUdevice_attribute as A;
    let (free, total) = ctx.mem_get_info()?;
    let mut v = 0i32;
    // SAFETY: writes one int.
    unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) }.result()?;
    Ok(GpuInfo {
        name: ctx.name()?,
        capability: ctx.compute_capability()?,
        total_memory: total,
        free_memory: free,
        driver: (v / 1000, (v % 1000) / 10),
        sms: ctx.attribute(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
    })
}

static SHARED: OnceLock<Mutex<Option<Arc<Gpu>>>> = OnceLock::new();

impl Gpu {
    /// The process's GPU (device 0), opened once: driver, kernels (compiled or read from `kernel_cache`), cuBLAS,
    /// with the settings the environment gives ([`Tuning::from_env`], read here once).
    pub fn shared(kernel_cache: Option<&Path>) -> Result<Arc<Gpu>, GpuError> {
        let cell = SHARED.get_or_init(|| Mutex::new(None));
        let mut g = cell.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(gpu) = g.as_ref() {
            return Ok(gpu.clone());
        }
        let gpu = Arc::new(Gpu::with_tuning(kernel_cache, Tuning::from_env())?);
        *g = Some(gpu.clone());
        Ok(gpu)
    }

    /// Device 0 opened anew with these settings, not shared ([`Gpu::shared`] is the process's one): for a test that
    /// needs settings other than the environment's.
    pub fn with_tuning(kernel_cache: Option<&Path>, tuning: Tuning) -> Result<Gpu, GpuError> {
        let info = probe()?;
        if info.capability.0 < 8 {
            return Err(GpuError::TooOld { name: info.name, major: info.capability.0, minor: info.capability.1 });
        }
        let ctx = CudaContext::new(0)?;
        // One stream orders everything; cudarc's per-buffer events would only add work to every launch.
        // SAFETY: kvad uses a single stream per context (made below, before any allocation).
        unsafe { ctx.disable_event_tracking() };
        // A stream of its own, not the legacy default stream: only such a stream can be captured into a graph.
        let stream = ctx.new_stream()?;
        let started = std::time::Instant::now();
        let units = compile_units();
        let defines = compile::defines(tuning.trace.is_some());
        // The GPU's own code (CUBINs, compiled side by side and cached whole); PTX, which the driver compiles one
        // module after another at load, where that fails (an NVRTC that does not know this GPU's architecture, a
        // driver older than NVRTC's code).
        let load = |target| -> Result<_, GpuError> {
            let (code, compiled) = compile::code_units(&units, info.capability, kernel_cache, &defines, target)?;
            let modules = code.into_iter().map(|c| ctx.load_module(c)).collect::<Result<Vec<_>, _>>()?;
            Ok((modules, compiled))
        };
        // Why the GPU's code was not taken, where it was tried and failed: said in the note on every load, since
        // such a machine pays for the attempt and the driver's compile each time.
        let ((modules, compiled), form, cubin_failed) = match load(compile::Target::Cubin) {
            Ok(m) => (m, "the GPU's code".to_string(), false),
            Err(e) => (load(compile::Target::Ptx)?, format!("PTX (the GPU's code failed: {e})"), true),
        };
        // What the first load on this GPU says about the pause (a note, taken once: `take_compile_note`).
        let compile_note = (compiled > 0 || cubin_failed).then(|| {
            let cached = kernel_cache.map_or("not cached: no cache directory".to_string(), |d| {
                format!("cached in {}; later runs skip this", d.display())
            });
            format!(
                "compiled {compiled} of {} GPU kernel units to {form} with NVRTC and loaded them in {:.1}s ({cached})",
                units.len(),
                started.elapsed().as_secs_f64()
            )
        });
        let mut funcs = HashMap::new();
        for name in kernel_names() {
            // From the unit that holds it (each kernel is in exactly one).
            let mut found = modules.iter().filter_map(|m| m.load_function(&name).ok());
            let f = found.next().ok_or_else(|| GpuError::Compile(format!("kernel {name} in no compile unit")))?;
            funcs.insert(name, f);
        }
        let blas = blas::Blas::new(stream.clone())?;
        let act8 = DevBuf::wrap_on(&stream, stream.alloc_zeros::<u8>(ops::ACT8_BYTES)?, ops::ACT8_BYTES);
        let defer_bytes = norm_defer::DEFER_BYTES;
        let defer = DevBuf::wrap_on(&stream, stream.alloc_zeros::<u8>(defer_bytes)?, defer_bytes);
        let split_bytes = attention::ATT_SPLIT_BYTES;
        let att_split = DevBuf::wrap_on(&stream, stream.alloc_zeros::<u8>(split_bytes)?, split_bytes);
        let pdl = launch::pdl_wanted(info.capability);
        let trace = trace::Trace::open(&stream, &modules, tuning.trace.as_deref())?;
        let compile_note = Mutex::new(compile_note);
        Ok(Gpu {
            ctx,
            stream,
            funcs,
            blas: Mutex::new(blas),
            info,
            act8,
            defer,
            att_split,
            pdl,
            tuning,
            trace,
            compile_note,
        })
    }

    /// The settings the GPU was opened with.
    pub fn tuning(&self) -> &Tuning {
        &self.tuning
    }

    /// The note on compiling the kernels at open, once (None when they came from the cache or were taken): the
    /// first GPU load of a machine pauses for NVRTC, and the user should know why and that it will not again.
    pub fn take_compile_note(&self) -> Option<String> {
        self.compile_note.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// The device's properties as found at open.
    pub fn info(&self) -> &GpuInfo {
        &self.info
    }

    /// Free and total device memory now.
    pub fn memory(&self) -> Result<(usize, usize), GpuError> {
        Ok(self.ctx.mem_get_info()?)
    }

    pub(crate) fn func(&self, name: &str) -> &CudaFunction {
        self.funcs.get(name).unwrap_or_else(|| panic!("kernel {name} is not in KERNELS"))
    }

    /// Waits for all queued work.
    pub fn synchronize(&self) -> Result<(), GpuError> {
        Ok(self.stream.synchronize()?)
    }

    /// Copies `bytes` from device address `src` to `dst`, in stream order.
    pub fn copy_device(&self, src: u64, dst: u64, bytes: usize) -> Result<(), GpuError> {
        self.ctx.bind_to_thread()?;
        // SAFETY: the caller's addresses come from live DevBufs of at least `bytes` past them.
        unsafe { cudarc::driver::result::memcpy_dtod_async(dst, src, bytes, self.stream.cu_stream()) }?;
        Ok(())
    }

    /// The stream everything runs on (for graphs and events).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Records the launches `f` makes into a graph instead of running them, so a decode step of ~300 launches
    /// costs one launch (and no CPU time between kernels) when replayed. `f` must only launch kernels on this
    /// GPU's stream (no allocation, copy from the host or synchronisation), with arguments that stay valid and
    /// mean the same for every replay: what changes between steps must be read by the kernels from device memory.
    pub fn capture<E: From<GpuError>>(&self, f: impl FnOnce() -> Result<(), E>) -> Result<GpuGraph, E> {
        use cudarc::driver::sys::{CUgraphInstantiate_flags as Flags, CUstreamCaptureMode as Mode};
        self.stream.begin_capture(Mode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).map_err(GpuError::from)?;
        let recorded = f();
        // The capture always ends, so a failed recording leaves the stream usable.
        let graph = self.stream.end_capture(Flags(0));
        recorded?;
        match graph.map_err(GpuError::from)? {
            Some(g) => Ok(GpuGraph(g)),
            None => Err(GpuError::Shape("a graph capture recorded nothing".into()).into()),
        }
    }
}

/// Launches recorded by [`Gpu::capture`], replayed as one on the GPU's stream.
pub struct GpuGraph(cudarc::driver::CudaGraph);

// SAFETY: CUDA graphs may be used from any thread as long as calls on one graph are serialised; kvad keeps each
// graph beside the buffers it uses, behind the model's scratch mutex.
unsafe impl Send for GpuGraph {}

impl GpuGraph {
    /// Queues the recorded launches on the stream.
    pub fn launch(&self) -> Result<(), GpuError> {
        Ok(self.0.launch()?)
    }
}

impl std::fmt::Debug for GpuGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GpuGraph")
    }
}
