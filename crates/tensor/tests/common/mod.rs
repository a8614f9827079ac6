//! What the CUDA test binaries share: the GPU (or why there is none) and their deterministic test data.

use kvad_tensor::cpu::{QMatrix, QType};
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

/// A host matrix's values in f32.
#[allow(dead_code)] // not every test binary compares products
pub fn dequantized(m: &QMatrix) -> Vec<f32> {
    let mut out = vec![0f32; m.rows() * m.cols()];
    for r in 0..m.rows() {
        m.dequantize_row(r, &mut out[r * m.cols()..(r + 1) * m.cols()]);
    }
    out
}

/// `x · wᵀ` in f64, rounded to f32.
#[allow(dead_code)]
pub fn reference(w: &[f32], x: &[f32], rows: usize, n: usize, k: usize) -> Vec<f32> {
    let mut y = vec![0f32; rows * n];
    for r in 0..rows {
        for j in 0..n {
            y[r * n + j] = (0..k).map(|i| w[j * k + i] as f64 * x[r * k + i] as f64).sum::<f64>() as f32;
        }
    }
    y
}

/// The dp4a GEMVs' arithmetic in f64: each row of `x` in two 8-bit terms per block of 32 (`quant_act8`'s f32
/// arithmetic: d = max/127, t = x/d, q1 = rint(t), q2 = rint((t − q1)·254), ties to even), integer dot products of
/// both against the stored quants, scaled by `d_w · d_x · (Σq1 + Σq2/254)`; Q4_0 adds `m · Σx` over the f32
/// activations (m = −8d, as the device makes it). Read from the host matrix's rows (kvad's layout: f16 scales,
/// then the quants) — Q8_0 or Q4_0, the device's block formats.
#[allow(dead_code)]
pub fn reference8(host: &QMatrix, x: &[f32], rows: usize) -> Vec<f32> {
    let (n, k, t) = (host.rows(), host.cols(), host.qtype());
    let nb = k / 32;
    let f16 = |b: &[u8], i: usize| half::f16::from_le_bytes([b[2 * i], b[2 * i + 1]]).to_f32();
    let mut y = vec![0f32; rows * n];
    for r in 0..rows {
        let xr = &x[r * k..(r + 1) * k];
        let mut q = vec![0f64; k];
        let mut dx = vec![0f32; nb];
        for b in 0..nb {
            let blk = &xr[b * 32..(b + 1) * 32];
            let d = blk.iter().fold(0f32, |a, v| a.max(v.abs())) / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            for j in 0..32 {
                let t = blk[j] * id;
                let q1 = t.round_ties_even().clamp(-127.0, 127.0);
                let q2 = ((t - q1) * 254.0).round_ties_even().clamp(-127.0, 127.0);
                q[b * 32 + j] = q1 as f64 + q2 as f64 / 254.0;
            }
            dx[b] = d;
        }
        for j in 0..n {
            let row = host.row(j);
            let mut acc = 0f64;
            for b in 0..nb {
                let d = f16(row, b);
                let (isum, m): (f64, f64) = match t {
                    QType::Q8_0 => {
                        let qs = &row[nb * 2 + b * 32..nb * 2 + (b + 1) * 32];
                        ((0..32).map(|i| (qs[i] as i8) as f64 * q[b * 32 + i]).sum(), 0.0)
                    }
                    QType::Q4_0 => {
                        let qs = &row[nb * 2 + b * 16..nb * 2 + (b + 1) * 16];
                        let isum = (0..16)
                            .map(|i| (qs[i] & 15) as f64 * q[b * 32 + i] + (qs[i] >> 4) as f64 * q[b * 32 + 16 + i])
                            .sum();
                        (isum, -8.0 * d as f64)
                    }
                    t => panic!("{t:?} is no device block format"),
                };
                let xs: f64 = xr[b * 32..(b + 1) * 32].iter().map(|&v| v as f64).sum();
                acc += d as f64 * dx[b] as f64 * isum + m * xs;
            }
            y[r * n + j] = acc as f32;
        }
    }
    y
}
