//! What this machine can run: the GPU (if any, and why not), and the default backend that follows from it.

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
    let gpu_runs = arch.is_none_or(|a| kvad_models::gpu::backends_for(a).contains(&BackendKind::GpuQ8));
    if gpu_runs && gpu_unavailable().is_none() {
        BackendKind::GpuQ8
    } else {
        BackendKind::CpuQ8
    }
}

/// The lines `kvad doctor` prints.
pub fn report() -> Vec<String> {
    let mut out = vec![format!(
        "cpu: {} threads (physical cores), {}",
        kvad_tensor::cpu::pool::threads(),
        if kvad_tensor::cpu::gemm::has_avx2() { "AVX2+FMA+F16C" } else { "no AVX2: scalar kernels" }
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
    out
}
