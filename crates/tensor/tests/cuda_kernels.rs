//! The CUDA kernels against the CPU reference, run on the device by `bash scripts/gpu/test.sh`. On a machine with
//! no usable GPU each test says so and returns: the CPU suite is what runs there.

use kvad_tensor::cpu::{QMatrix, QType};
use kvad_tensor::cuda::{Act, DevBuf, DevFormat, DevMatrix, Gpu};
use std::sync::Arc;

fn gpu() -> Option<Arc<Gpu>> {
    match Gpu::shared(None) {
        Ok(g) => Some(g),
        Err(e) => {
            eprintln!("no GPU found ({e}): the CUDA kernel tests run on the device (scripts/gpu/test.sh)");
            None
        }
    }
}

fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 33) as f32 / (1u64 << 31) as f32 - 0.5) * 2.0
        })
        .collect()
}

/// bf16 matrix of these values, as the loader would hold it.
fn bf16_matrix(rows: usize, cols: usize, w: &[f32]) -> QMatrix {
    QMatrix::quantize(QType::BF16, rows, cols, w).unwrap()
}

fn dequantized(m: &QMatrix) -> Vec<f32> {
    let mut out = vec![0f32; m.rows() * m.cols()];
    for r in 0..m.rows() {
        m.dequantize_row(r, &mut out[r * m.cols()..(r + 1) * m.cols()]);
    }
    out
}

fn reference(w: &[f32], x: &[f32], rows: usize, n: usize, k: usize) -> Vec<f32> {
    let mut y = vec![0f32; rows * n];
    for r in 0..rows {
        for j in 0..n {
            y[r * n + j] = (0..k).map(|i| w[j * k + i] as f64 * x[r * k + i] as f64).sum::<f64>() as f32;
        }
    }
    y
}

#[test]
fn device_quantisation_gives_the_cpu_quantisers_blocks() {
    let Some(g) = gpu() else { return };
    let (rows, cols) = (37, 96);
    let w = data(rows * cols, 5);
    let host = bf16_matrix(rows, cols, &w);
    let on_device = DevMatrix::upload(&g, &host, None).unwrap();
    for (fmt, qt) in [(DevFormat::Q8, QType::Q8_0), (DevFormat::Q4, QType::Q4_0)] {
        let q = g.quantize(&on_device, fmt).unwrap();
        // The CPU quantiser on the same (bf16) values, uploaded: the bytes must be identical.
        let cpu = QMatrix::quantize(qt, rows, cols, &dequantized(&host)).unwrap();
        let want = DevMatrix::upload(&g, &cpu, None).unwrap();
        assert_eq!(q.download(&g).unwrap(), want.download(&g).unwrap(), "{fmt:?}");
    }
}

#[test]
fn gemv_of_every_format_and_row_count_equals_the_reference() {
    let Some(g) = gpu() else { return };
    // Odd sizes: a partial last warp of rows, and widths that are and are not multiples of the vector loads.
    for &(n, k) in &[(67usize, 256usize), (130, 96), (9, 1024), (11, 100)] {
        let w = data(n * k, 7 + n as u64);
        let bias = data(n, 3);
        for qt in [QType::BF16, QType::Q8_0, QType::Q4_0, QType::Q4_1] {
            if qt != QType::BF16 && !k.is_multiple_of(32) {
                continue;
            }
            let host = QMatrix::quantize(qt, n, k, &w).unwrap();
            let wd = dequantized(&host);
            let m = DevMatrix::upload(&g, &host, None).unwrap();
            for rows in 1..=8 {
                let x = data(rows * k, 11 + rows as u64);
                let xb = DevBuf::from_slice(&g, &x).unwrap();
                let start = data(rows * n, 13);
                let mut yb = DevBuf::from_slice(&g, &start).unwrap();
                let bb = DevBuf::from_slice(&g, &bias).unwrap();
                // SAFETY: shapes as allocated above.
                unsafe { g.matmul(&m, Act::F32(xb.ptr()), rows, yb.ptr(), bb.ptr(), true, None) }.unwrap();
                let got: Vec<f32> = yb.read(&g, rows * n).unwrap();
                let want = reference(&wd, &x, rows, n, k);
                for i in 0..rows * n {
                    let w = start[i] + want[i] + bias[i % n];
                    let tol = 1e-4 * (k as f32).sqrt() * 4.0;
                    assert!((got[i] - w).abs() <= tol, "{qt:?} {n}x{k} rows {rows} [{i}]: {} vs {w}", got[i]);
                }
                yb.write_slice(&g, &start).unwrap();
                // The same product with RMSNorm folded in: against the CPU norm, then the reference product.
                let gw = data(k, 17);
                let gb = DevBuf::from_slice(&g, &gw).unwrap();
                let act = Act::F32Rms { x: xb.ptr(), g: gb.ptr(), eps: 1e-5 };
                // SAFETY: shapes as allocated above.
                unsafe { g.matmul(&m, act, rows, yb.ptr(), 0, false, None) }.unwrap();
                let got: Vec<f32> = yb.read(&g, rows * n).unwrap();
                let mut normed = vec![0f32; rows * k];
                kvad_tensor::cpu::ops::rms_norm(&x, &gw, 1e-5, &mut normed);
                let want = reference(&wd, &normed, rows, n, k);
                for i in 0..rows * n {
                    let tol = 1e-4 * (k as f32).sqrt() * 4.0 * want[i].abs().max(1.0);
                    assert!(
                        (got[i] - want[i]).abs() <= tol,
                        "{qt:?} rms {n}x{k} rows {rows} [{i}]: {} vs {}",
                        got[i],
                        want[i]
                    );
                }
                yb.write_slice(&g, &start).unwrap();
            }
        }
    }
}

#[test]
fn gemm_path_equals_the_reference_on_bf16_activations() {
    let Some(g) = gpu() else { return };
    let (rows, n, k) = (40, 72, 128);
    let w = data(n * k, 21);
    // Activations that bf16 holds exactly, so the only difference left is summation order.
    let x: Vec<f32> = data(rows * k, 22).iter().map(|v| half::bf16::from_f32(*v).to_f32()).collect();
    let xb16: Vec<u16> = x.iter().map(|v| half::bf16::from_f32(*v).to_bits()).collect();
    for qt in [QType::BF16, QType::Q8_0, QType::Q4_1] {
        let host = QMatrix::quantize(qt, n, k, &w).unwrap();
        // cuBLAS reads bf16 weights: the block formats are dequantised to bf16 first.
        let wd: Vec<f32> = dequantized(&host).iter().map(|v| half::bf16::from_f32(*v).to_f32()).collect();
        let m = DevMatrix::upload(&g, &host, None).unwrap();
        let xb = DevBuf::from_slice(&g, &xb16).unwrap();
        let yb = DevBuf::zeros(&g, rows * n * 4).unwrap();
        let tmp = DevBuf::zeros(&g, n * k * 2).unwrap();
        // SAFETY: shapes as allocated above.
        unsafe { g.matmul(&m, Act::Bf16(xb.ptr()), rows, yb.ptr(), 0, false, Some(&tmp)) }.unwrap();
        let got: Vec<f32> = yb.read(&g, rows * n).unwrap();
        let want = reference(&wd, &x, rows, n, k);
        for i in 0..rows * n {
            assert!((got[i] - want[i]).abs() <= 1e-3, "{qt:?} [{i}]: {} vs {}", got[i], want[i]);
        }
    }
}

#[test]
fn norms_and_activations_equal_the_cpu_ops() {
    let Some(g) = gpu() else { return };
    let (rows, h) = (3, 200);
    let x = data(rows * h, 31);
    let w = data(h, 32);
    let xb = DevBuf::from_slice(&g, &x).unwrap();
    let wb = DevBuf::from_slice(&g, &w).unwrap();
    let out = DevBuf::zeros(&g, rows * h * 4).unwrap();
    // SAFETY: shapes as allocated above.
    unsafe { g.rms_norm(xb.ptr(), wb.ptr(), out.ptr(), rows, h, 1e-5, false) }.unwrap();
    let got: Vec<f32> = out.read(&g, rows * h).unwrap();
    let mut want = vec![0f32; rows * h];
    kvad_tensor::cpu::ops::rms_norm(&x, &w, 1e-5, &mut want);
    for (a, b) in got.iter().zip(&want) {
        assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "rms_norm {a} vs {b}");
    }
    let f = h / 2;
    // SAFETY: x holds rows × 2f.
    unsafe { g.silu_mul(xb.ptr(), out.ptr(), rows, f, false) }.unwrap();
    let got: Vec<f32> = out.read(&g, rows * f).unwrap();
    for r in 0..rows {
        let mut gate = x[r * h..r * h + f].to_vec();
        kvad_tensor::cpu::ops::silu_mul(&mut gate, &x[r * h + f..(r + 1) * h]);
        for (a, b) in got[r * f..(r + 1) * f].iter().zip(&gate) {
            assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "silu_mul {a} vs {b}");
        }
    }
}

#[test]
fn argmax_takes_the_first_maximum() {
    let Some(g) = gpu() else { return };
    let mut x = data(2 * 5000, 41);
    x[1234] = 9.0;
    x[4321] = 9.0;
    x[5000 + 77] = -0.0 + 3.0;
    let xb = DevBuf::from_slice(&g, &x).unwrap();
    let out = DevBuf::zeros(&g, 8).unwrap();
    // SAFETY: shapes as allocated above.
    unsafe { g.argmax_rows(xb.ptr(), out.ptr(), 2, 5000) }.unwrap();
    let got: Vec<i32> = out.read(&g, 2).unwrap();
    assert_eq!(got, vec![1234, 77]);
}

/// Compiles the kernels with NVRTC for Hopper and checks every entry point the binary loads is there. Needs only
/// libnvrtc (scripts/test.sh installs NVIDIA's wheel for it), not a GPU, so CI catches a kernel that does not build.
#[test]
fn every_kernel_compiles_with_nvrtc() {
    // SAFETY: only tries to dlopen the library.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        eprintln!("libnvrtc not found: scripts/test.sh installs it (nvidia-cuda-nvrtc) and sets LD_LIBRARY_PATH");
        return;
    }
    let ptx = kvad_tensor::cuda::compile_kernels((9, 0)).unwrap_or_else(|e| panic!("{e}"));
    for name in kvad_tensor::cuda::kernel_names() {
        assert!(ptx.contains(&format!(".entry {name}(")), "kernel {name} missing from the PTX");
    }
}
