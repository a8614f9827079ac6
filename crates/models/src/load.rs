//! From files to a model: find the format, read the config, check it, read and check every tensor.
//!
//! GGUF is a loader, not a pipeline: its tensor names are mapped to the HF names and llama's q/k rows are
//! un-permuted (llama.cpp's converter interleaves them for its RoPE), so both sources run the same architecture
//! code with the same rotate-half RoPE.

use crate::config::ModelConfig;
use crate::error::ModelError;
pub use crate::files::ModelFiles;
use crate::qcache;
use crate::tensors::{GgufNames, Tensors};
use crate::weights::{GgufFile, SafetensorsSource, WeightSource};
use crate::CausalLm;
use kvad_tensor::BackendKind;
use std::path::PathBuf;

/// How to load: the backend, and where the quantised cache lives (None: no cache).
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// The backend whose formats the weights are stored in.
    pub backend: BackendKind,
    /// kvad's quantised-cache directory; quantised backends write and map their weights there.
    pub cache_dir: Option<PathBuf>,
    /// Measurement mode: the backend's quantised weights, dequantised and computed by the f32 kernels, so a
    /// test can tell the kernels' error apart from the quantisation's. Never cached.
    pub f32_reference: bool,
}

/// What the quantised cache did for this load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheUse {
    /// No cache (cpu-f32, or no directory given).
    None,
    /// Mapped from an existing cache file.
    Mapped(PathBuf),
    /// Quantised now and written to a cache file.
    Written(PathBuf),
    /// Quantised now; writing the cache failed (the reason), so the next load quantises again.
    WriteFailed(String),
}

/// A loaded model with what the loader wants the user to know.
pub struct LoadedModel {
    /// The model.
    pub model: Box<dyn CausalLm>,
    /// Lines to print at load (a scaled RoPE table, a shipped head beside a tied embedding, files not read).
    pub notes: Vec<String>,
    /// What the quantised cache did.
    pub cache: CacheUse,
}

/// Reads and checks a model's config alone (config.json, or a GGUF's metadata), no weight read: what a command
/// checks its flags against (`kvad run --ctx`) before a load that may take minutes.
pub fn read_config(files: &ModelFiles) -> Result<ModelConfig, ModelError> {
    match files {
        ModelFiles::HfDir(dir) => hf_config(dir),
        ModelFiles::Gguf(path) => crate::arch::registry::config_from_gguf(&GgufFile::open(path)?),
    }
}

fn hf_config(dir: &std::path::Path) -> Result<ModelConfig, ModelError> {
    let path = dir.join("config.json");
    let text =
        std::fs::read_to_string(&path).map_err(|e| ModelError::Io { path: path.display().to_string(), source: e })?;
    let json: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| ModelError::Json { path: path.display().to_string(), msg: e.to_string() })?;
    crate::arch::registry::config_from_hf(&json)
}

/// Loads and checks a model from its files, in f32 on the CPU.
pub fn load_model(files: &ModelFiles) -> Result<LoadedModel, ModelError> {
    load_model_with(files, &LoadOptions { backend: BackendKind::CpuF32, cache_dir: None, f32_reference: false })
}

/// Loads and checks a model from its files on a backend, through the quantised cache when it has one.
pub fn load_model_with(files: &ModelFiles, opts: &LoadOptions) -> Result<LoadedModel, ModelError> {
    let backend = opts.backend;
    // A GPU backend finds its GPU (and compiles its kernels) before any weight is read, so "no GPU" is said at once.
    let gpu = match backend.device() {
        kvad_tensor::Device::Gpu => {
            let dir = crate::gpu::kernel_cache_dir(opts.cache_dir.as_deref());
            Some(kvad_tensor::cuda::Gpu::shared(dir.as_deref())?)
        }
        kvad_tensor::Device::Cpu => None,
    };
    let compile_note = gpu.as_ref().and_then(|g| g.take_compile_note());
    let cache = match (&opts.cache_dir, backend) {
        (Some(dir), BackendKind::CpuQ8 | BackendKind::CpuQ4) if !opts.f32_reference => {
            Some(qcache::cache_path(&dir.join("quant"), files, backend))
        }
        _ => None,
    };
    let mut stale = None;
    if let Some(path) = cache.as_ref().filter(|p| p.exists()) {
        match qcache::open(path) {
            Ok(qcache::Opened { file: g, config: cfg, mut notes, types }) => {
                let mut t = Tensors::new(&g, None, Some(types), backend);
                let model = build(cfg, &mut t, None)?;
                t.finish()?;
                notes.append(&mut t.notes);
                return Ok(LoadedModel { model, notes, cache: CacheUse::Mapped(path.clone()) });
            }
            Err(why) => {
                stale = Some(format!("the quantised cache {} cannot be trusted ({why}); rebuilding it", path.display()))
            }
        }
    }
    // For a GGUF: its architecture, which says how its tensors are named and laid out (parsed once; it is also the
    // source).
    let (cfg, src, gguf_arch): (ModelConfig, Box<dyn WeightSource>, Option<String>) = match files {
        ModelFiles::HfDir(dir) => (hf_config(dir)?, Box::new(SafetensorsSource::open_dir(dir)?), None),
        ModelFiles::Gguf(path) => {
            let g = GgufFile::open(path)?;
            let cfg = crate::arch::registry::config_from_gguf(&g)?;
            let arch = g.get("general.architecture").and_then(|v| v.as_str()).unwrap_or_default().to_string();
            (cfg, Box::new(g), Some(arch))
        }
    };
    let mut notes: Vec<String> = Vec::new();
    if let ModelFiles::HfDir(dir) = files {
        let st = SafetensorsSource::open_dir(dir)?;
        if !st.files_not_read().is_empty() {
            let names: Vec<String> = st.files_not_read().iter().map(|p| p.display().to_string()).collect();
            notes.push(format!("reads the weights as transformers loads them; not read: {}", names.join(", ")));
        }
    }
    match cfg.rope_scaling {
        Some(crate::config::RopeScaling::Yarn { .. }) => notes.push("applies YaRN's RoPE scaling".into()),
        Some(_) => notes.push("applies Llama 3's RoPE scaling to the frequency table".into()),
        None => {}
    }
    if let Some(w) = cfg.window_cap {
        notes.push(format!(
            "runs at a context of at most {w} tokens, its sliding window (use_sliding_window), where the window changes nothing"
        ));
    }
    let entry = crate::arch::registry::entry(cfg.arch);
    let names = gguf_arch.map(|a| GgufNames { permute: (entry.gguf_permute)(&cfg, &a), map: entry.gguf_name });
    let mut t = Tensors::new(src.as_ref(), names, None, backend);
    t.f32_reference = opts.f32_reference;
    if names.is_some() && t.has("rope_freqs.weight") {
        t.used.insert("rope_freqs.weight".into());
    }
    let model = build(cfg.clone(), &mut t, gpu)?;
    notes.append(&mut t.notes);
    t.finish()?;
    let cache = match cache {
        None => CacheUse::None,
        Some(path) => match qcache::write(&path, &cfg, &notes, &t.record) {
            Ok(()) => CacheUse::Written(path),
            Err(e) => CacheUse::WriteFailed(format!("{}: {e}", path.display())),
        },
    };
    // Said at this load, not kept in the cache file.
    notes.extend(stale);
    notes.extend(compile_note);
    Ok(LoadedModel { model, notes, cache })
}

/// Builds the model through its registry line (on the GPU when one is given).
fn build(
    cfg: ModelConfig,
    t: &mut Tensors<'_>,
    gpu: Option<std::sync::Arc<kvad_tensor::cuda::Gpu>>,
) -> Result<Box<dyn CausalLm>, ModelError> {
    (crate::arch::registry::entry(cfg.arch).build)(cfg, t, gpu)
}
