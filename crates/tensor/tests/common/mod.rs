//! What the CUDA test binaries share: the GPU (or why there is none) and their deterministic test data.

use kvad_tensor::cuda::Gpu;
use std::sync::Arc;

/// The GPU, or None after saying why not: on a machine without one the CUDA tests pass without running.
pub fn gpu() -> Option<Arc<Gpu>> {
    match Gpu::shared(None) {
        Ok(g) => Some(g),
        Err(e) => {
            eprintln!("no GPU found ({e}): the CUDA kernel tests run on the device (scripts/gpu/test.sh)");
            None
        }
    }
}

/// The GPU where its decode products take the default two-term 8-bit activations, or None after saying why not
/// (no GPU, or `KVAD_GPU_GEMV` asks for another product family): for the tests of the kernels that write them.
#[allow(dead_code)] // not every test binary tests those kernels
pub fn gpu_dp4a() -> Option<Arc<Gpu>> {
    let g = gpu()?;
    if g.gemv_kernel() != kvad_tensor::cuda::GemvKernel::SplitDp4a {
        eprintln!("KVAD_GPU_GEMV is set: the 8-bit activations are not the default here");
        return None;
    }
    Some(g)
}

/// `n` values in [-1, 1) from an LCG seeded with `seed`: the same data on every machine.
pub fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 33) as f32 / (1u64 << 31) as f32 - 0.5) * 2.0
        })
        .collect()
}
