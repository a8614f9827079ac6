//! The 6-bit device format (the q4 backends' output head, `DevFormat::Q6`) against the same values held at 8 bits
//! and the CPU reference, run on the device by `bash scripts/gpu/test.sh`. On a machine with no usable GPU each test
//! says so and returns.

use kvad_tensor::cpu::{QMatrix, QType};
use kvad_tensor::cuda::{Act, DevBuf, DevFormat, DevMatrix, GemvKernel, NormOut, NormTo, MMA_FEW_TILES, SPLIT_HEIGHTS};
mod common;
use common::{data, dequantized, gpu, reference, reference8};

/// Weights bf16 holds exactly, so the device's quantiser (reading bf16) and the CPU's (reading f32) see one value.
fn bf16_exact(n: usize, seed: u64) -> Vec<f32> {
    data(n, seed).iter().map(|v| half::bf16::from_f32(*v).to_f32()).collect()
}

/// A Q8_0 matrix of 6-bit quants goes up in 6 bits (26 bytes a block), and the device's own quantiser gives it from
/// bf16 byte for byte; a matrix of 8-bit quants (a file's Q8_0) stays at 8 bits though Q6 is asked for.
#[test]
fn six_bit_matrices_go_up_in_six_bits_and_the_device_quantises_as_the_cpu() {
    let Some(g) = gpu() else { return };
    let (rows, cols) = (37, 256);
    let w = bf16_exact(rows * cols, 5);
    let host = QMatrix::quantize_6bit(rows, cols, &w).unwrap();
    let up = DevMatrix::upload(&g, &host, Some(DevFormat::Q6)).unwrap();
    assert_eq!(up.format(), DevFormat::Q6);
    assert_eq!(up.bytes(), rows * cols / 32 * 26);
    let bf = DevMatrix::upload(&g, &QMatrix::quantize(QType::BF16, rows, cols, &w).unwrap(), None).unwrap();
    let on_device = g.quantize(&bf, DevFormat::Q6).unwrap();
    assert_eq!(on_device.download(&g).unwrap(), up.download(&g).unwrap());
    let eight = QMatrix::quantize(QType::Q8_0, rows, cols, &w).unwrap();
    assert_eq!(DevMatrix::upload(&g, &eight, Some(DevFormat::Q6)).unwrap().format(), DevFormat::Q8);
}

/// Every product path of a Q6 matrix — the dp4a GEMV at each height and input count (the f32 families run it too),
/// the tensor-core kernel of 9–32 rows, cuBLAS after dequantisation — against f64 arithmetic on the same values
/// and against the same values at 8 bits; batched rows bit for bit the rows alone; the dequantised weights (so the
/// cuBLAS products) bit for bit Q8's.
#[test]
fn six_bit_products_equal_the_same_values_at_eight_bits() {
    let Some(g) = gpu() else { return };
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    for &(n, k) in &[(67usize, 256usize), (130, 96), (9, 1024), (600, 4096)] {
        let host = QMatrix::quantize_6bit(n, k, &bf16_exact(n * k, 7 + n as u64)).unwrap();
        let m6 = DevMatrix::upload(&g, &host, Some(DevFormat::Q6)).unwrap();
        let m8 = DevMatrix::upload(&g, &host, None).unwrap();
        assert_eq!((m6.format(), m8.format()), (DevFormat::Q6, DevFormat::Q8));
        let wd = dequantized(&host);
        let tol = 1e-4 * (k as f32).sqrt() * 4.0;
        for rows in 1..=8 {
            let x = data(rows * k, 11 + rows as u64);
            let xb = DevBuf::from_slice(&g, &x).unwrap();
            let want8 = reference8(&host, &x, rows);
            let want = reference(&wd, &x, rows, n, k);
            // (The f32-activation heights run the dp4a kernel too: Q6 has no other.)
            let mut kernels = vec![GemvKernel::SplitDp4a, GemvKernel::SplitRows(2)];
            kernels.extend(SPLIT_HEIGHTS.map(GemvKernel::Dp4aRows));
            for kernel in kernels {
                let y = DevBuf::zeros(&g, rows * n * 4).unwrap();
                // SAFETY: shapes as allocated above.
                unsafe { g.gemv(kernel, &m6, Act::F32(xb.ptr()), rows, y.ptr(), 0, false, None) }.unwrap();
                let got: Vec<f32> = y.read(&g, rows * n).unwrap();
                let y8 = DevBuf::zeros(&g, rows * n * 4).unwrap();
                let k8 = if matches!(kernel, GemvKernel::Dp4aRows(_)) { kernel } else { GemvKernel::SplitDp4a };
                // SAFETY: as above.
                unsafe { g.gemv(k8, &m8, Act::F32(xb.ptr()), rows, y8.ptr(), 0, false, None) }.unwrap();
                let got8: Vec<f32> = y8.read(&g, rows * n).unwrap();
                for i in 0..rows * n {
                    let what = format!("{kernel:?} {n}x{k} rows {rows} [{i}]");
                    assert!((got[i] - want8[i]).abs() <= tol, "{what}: {} vs {} (f64, 8-bit acts)", got[i], want8[i]);
                    assert!((got[i] - got8[i]).abs() <= tol, "{what}: {} vs {} (Q8)", got[i], got8[i]);
                    let rel = 2e-2 * want[i].abs().max(1.0);
                    assert!((got[i] - want[i]).abs() <= rel, "{what}: {} vs {} (f32 acts)", got[i], want[i]);
                }
                for r in 0..rows {
                    let xr = DevBuf::from_slice(&g, &x[r * k..(r + 1) * k]).unwrap();
                    let yr = DevBuf::zeros(&g, n * 4).unwrap();
                    let alone = match kernel {
                        GemvKernel::Dp4aRows(h) => GemvKernel::Dp4aRows(SPLIT_HEIGHTS[(h + rows) % 3]),
                        k => k,
                    };
                    // SAFETY: as above.
                    unsafe { g.gemv(alone, &m6, Act::F32(xr.ptr()), 1, yr.ptr(), 0, false, None) }.unwrap();
                    let a: Vec<f32> = yr.read(&g, n).unwrap();
                    assert_eq!(bits(&a), bits(&got[r * n..(r + 1) * n]), "{kernel:?} {n}x{k} row {r} of {rows}");
                }
            }
        }
        // 9–32 rows of bf16 activations: the tensor-core kernel where K is whole steps of 128, else cuBLAS.
        let wb: Vec<f32> = wd.iter().map(|v| half::bf16::from_f32(*v).to_f32()).collect();
        let tmp = DevBuf::zeros(&g, n * k * 2).unwrap();
        for rows in [9, 16, 32, 40] {
            let x: Vec<f32> = bf16_exact(rows * k, 42 + rows as u64);
            let xb16: Vec<u16> = x.iter().map(|v| half::bf16::from_f32(*v).to_bits()).collect();
            let xb = DevBuf::from_slice(&g, &xb16).unwrap();
            let want = reference(&wb, &x, rows, n, k);
            let (y6, y8) = (DevBuf::zeros(&g, rows * n * 4).unwrap(), DevBuf::zeros(&g, rows * n * 4).unwrap());
            // SAFETY: shapes as allocated above; tmp holds N·K bf16.
            unsafe {
                g.matmul(&m6, Act::Bf16(xb.ptr()), rows, y6.ptr(), 0, false, Some(&tmp)).unwrap();
                g.matmul(&m8, Act::Bf16(xb.ptr()), rows, y8.ptr(), 0, false, Some(&tmp)).unwrap();
            }
            let (got, got8) = (y6.read::<f32>(&g, rows * n).unwrap(), y8.read::<f32>(&g, rows * n).unwrap());
            let few = g.few_rows_tiles(&m6, rows).is_some();
            for i in 0..rows * n {
                let what = format!("{n}x{k} rows {rows} (tensor-core kernel: {few}) [{i}]");
                assert!((got[i] - want[i]).abs() <= 1e-3 * want[i].abs().max(1.0), "{what}: {} vs {}", got[i], want[i]);
            }
            if !few && g.few_rows_tiles(&m8, rows).is_none() {
                assert_eq!(bits(&got), bits(&got8), "cuBLAS on the dequantised weights, {n}x{k} rows {rows}");
            }
            // Every tile count of the tensor-core kernel (the 8B head's 49,152 rows take 2: ops.rs).
            for mt in MMA_FEW_TILES.into_iter().filter(|_| few) {
                let y = DevBuf::zeros(&g, rows * n * 4).unwrap();
                // SAFETY: as above.
                unsafe { g.mma_few_tiles(&m6, xb.ptr(), rows, y.ptr(), 0, false, mt) }.unwrap();
                let got = y.read::<f32>(&g, rows * n).unwrap();
                for i in 0..rows * n {
                    let tol = 1e-3 * want[i].abs().max(1.0);
                    assert!((got[i] - want[i]).abs() <= tol, "{n}x{k} rows {rows}, {mt} tiles [{i}]: {}", got[i]);
                }
            }
        }
    }
}

/// A Q6 product takes no norm of its output (it has no such kernels): a clear error.
#[test]
fn six_bit_products_refuse_a_norm() {
    let Some(g) = gpu() else { return };
    let (n, k) = (64, 128);
    let m =
        DevMatrix::upload(&g, &QMatrix::quantize_6bit(n, k, &data(n * k, 3)).unwrap(), Some(DevFormat::Q6)).unwrap();
    let x = DevBuf::from_slice(&g, &data(k, 4)).unwrap();
    let (y, out, counter) =
        (DevBuf::zeros(&g, n * 4).unwrap(), DevBuf::zeros(&g, n * 4).unwrap(), DevBuf::zeros(&g, 4).unwrap());
    let ng = DevBuf::from_slice(&g, &data(n, 5)).unwrap();
    let norm = NormOut { g: ng.ptr(), out: out.ptr(), eps: 1e-5, counter: counter.ptr(), to: NormTo::F32 };
    // SAFETY: shapes as allocated above.
    let e = unsafe { g.gemv(GemvKernel::SplitDp4a, &m, Act::F32(x.ptr()), 1, y.ptr(), 0, false, Some(&norm)) };
    assert!(e.unwrap_err().to_string().contains("6-bit product"));
}
