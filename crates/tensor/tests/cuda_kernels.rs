//! The CUDA kernels against the CPU reference, run on the device by `bash scripts/gpu/test.sh`. On a machine with
//! no usable GPU each test says so and returns: the CPU suite is what runs there.

use kvad_tensor::cpu::{QMatrix, QType};
use kvad_tensor::cuda::{
    mma_few_takes, Act, DevBuf, DevFormat, DevMatrix, GemvKernel, NormOut, NormTo, MMA_FEW_TILES, SPLIT_HEIGHTS,
};
mod common;
use common::{data, dequantized, gpu, reference, reference8};

/// bf16 matrix of these values, as the loader would hold it.
fn bf16_matrix(rows: usize, cols: usize, w: &[f32]) -> QMatrix {
    QMatrix::quantize(QType::BF16, rows, cols, w).unwrap()
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

/// A host matrix as the device holds it: Q4_1 as its Q8_0 requantisation (`DevMatrix::upload`), the rest as is.
fn as_on_device(host: QMatrix) -> QMatrix {
    if host.qtype() == QType::Q4_1 {
        host.requantize(QType::Q8_0).unwrap()
    } else {
        host
    }
}

/// Q4_1 (a minimum beside each scale) goes up as Q8: the bytes of the CPU's Q8_0 requantisation of its values,
/// so the device's one 4-bit form stays Q4_0's 18 bytes a block.
#[test]
fn q4_1_goes_up_as_its_q8_requantisation() {
    let Some(g) = gpu() else { return };
    let (rows, cols) = (37, 96);
    let host = QMatrix::quantize(QType::Q4_1, rows, cols, &data(rows * cols, 5)).unwrap();
    let m = DevMatrix::upload(&g, &host, None).unwrap();
    assert_eq!(m.format(), DevFormat::Q8);
    let want = DevMatrix::upload(&g, &host.requantize(QType::Q8_0).unwrap(), None).unwrap();
    assert_eq!(m.download(&g).unwrap(), want.download(&g).unwrap());
    // And the values are the Q4_1 ones to within Q8_0's rounding: half a step s (a block's largest magnitude /
    // 127), and the scale's own rounding to f16 (2⁻¹¹ of s) over up to 127 steps.
    let (a, b) = (dequantized(&host), dequantized(&host.requantize(QType::Q8_0).unwrap()));
    for (blk_a, blk_b) in a.chunks(32).zip(b.chunks(32)) {
        let step = blk_a.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
        let bound = step * (0.5 + 127.0 / 2048.0) * 1.001;
        for (x, y) in blk_a.iter().zip(blk_b) {
            assert!((x - y).abs() <= bound, "{x} vs {y}: more than {bound}");
        }
    }
}

#[test]
fn gemv_of_every_format_and_row_count_equals_the_reference() {
    let Some(g) = gpu() else { return };
    // Odd sizes: a partial last warp of rows, and widths that are and are not multiples of the vector loads; and a
    // wide one, where the split kernels' lanes each walk several chunks (q4: 2, q8: 4, bf16: 8 a lane). bf16 widths
    // that are not whole blocks of 32 (100, 104) run gemv.cu's per-warp kernel, its scalar and its vector loop.
    for &(n, k) in &[(67usize, 256usize), (130, 96), (9, 1024), (11, 100), (11, 104), (9, 8192)] {
        let w = data(n * k, 7 + n as u64);
        let bias = data(n, 3);
        for qt in [QType::BF16, QType::Q8_0, QType::Q4_0, QType::Q4_1] {
            if qt != QType::BF16 && !k.is_multiple_of(32) {
                continue;
            }
            let host = as_on_device(QMatrix::quantize(qt, n, k, &w).unwrap());
            let wd = dequantized(&host);
            let m = DevMatrix::upload(&g, &host, None).unwrap();
            for rows in 1..=8 {
                let x = data(rows * k, 11 + rows as u64);
                let xb = DevBuf::from_slice(&g, &x).unwrap();
                let start = data(rows * n, 13);
                let mut yb = DevBuf::from_slice(&g, &start).unwrap();
                let bb = DevBuf::from_slice(&g, &bias).unwrap();
                let want = reference(&wd, &x, rows, n, k);
                let want8 = if qt == QType::BF16 { Vec::new() } else { reference8(&host, &x, rows) };
                let mut families = vec![GemvKernel::SplitDp4a];
                families.extend(SPLIT_HEIGHTS.map(GemvKernel::SplitRows));
                if qt != QType::BF16 {
                    families.extend(SPLIT_HEIGHTS.map(GemvKernel::Dp4aRows));
                }
                // The norm of the output rows, written by the product (the residual stream's next norm).
                let ng = data(n, 19);
                let ngb = DevBuf::from_slice(&g, &ng).unwrap();
                let nout = DevBuf::zeros(&g, rows * n * 4).unwrap();
                let counter = DevBuf::zeros(&g, 4).unwrap();
                let norm =
                    NormOut { g: ngb.ptr(), out: nout.ptr(), eps: 1e-5, counter: counter.ptr(), to: NormTo::F32 };
                for kernel in families {
                    let xa = Act::F32(xb.ptr());
                    // SAFETY: shapes as allocated above.
                    unsafe { g.gemv(kernel, &m, xa, rows, yb.ptr(), bb.ptr(), true, Some(&norm)) }.unwrap();
                    let got: Vec<f32> = yb.read(&g, rows * n).unwrap();
                    let normed: Vec<f32> = nout.read(&g, rows * n).unwrap();
                    let mut want_norm = vec![0f32; rows * n];
                    kvad_tensor::cpu::ops::rms_norm(&got, &ng, 1e-5, &mut want_norm);
                    for (i, (a, b)) in normed.iter().zip(&want_norm).enumerate() {
                        assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{kernel:?} {qt:?} norm [{i}]: {a} vs {b}");
                    }
                    assert_eq!(counter.read::<u32>(&g, 1).unwrap(), [0], "the block counter is left zeroed");
                    // 8-bit activations (q8/q4 through SplitDp4a or Dp4aRows) against their own f64 arithmetic.
                    let int8 = qt != QType::BF16 && matches!(kernel, GemvKernel::SplitDp4a | GemvKernel::Dp4aRows(_));
                    for i in 0..rows * n {
                        let w = start[i] + if int8 { want8[i] } else { want[i] } + bias[i % n];
                        let tol = 1e-4 * (k as f32).sqrt() * 4.0;
                        assert!(
                            (got[i] - w).abs() <= tol,
                            "{kernel:?} {qt:?} {n}x{k} rows {rows} [{i}]: {} vs {w}",
                            got[i]
                        );
                    }
                    // Each row of the batch is bit for bit the row alone; for the split kernels, alone at any block
                    // height (the height picked per input count must not change a row's sum).
                    let other = SPLIT_HEIGHTS[(rows + 1) % SPLIT_HEIGHTS.len()];
                    let alone_kernel = if int8 { GemvKernel::Dp4aRows(other) } else { GemvKernel::SplitRows(other) };
                    for r in 0..rows {
                        let xr = DevBuf::from_slice(&g, &x[r * k..(r + 1) * k]).unwrap();
                        let yr = DevBuf::from_slice(&g, &start[r * n..(r + 1) * n]).unwrap();
                        let xa = Act::F32(xr.ptr());
                        // SAFETY: shapes as allocated above.
                        unsafe { g.gemv(alone_kernel, &m, xa, 1, yr.ptr(), bb.ptr(), true, None) }.unwrap();
                        let alone: Vec<f32> = yr.read(&g, n).unwrap();
                        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                        assert_eq!(bits(&alone), bits(&got[r * n..(r + 1) * n]), "{kernel:?} {qt:?} row {r} of {rows}");
                    }
                    yb.write_slice(&g, &start).unwrap();
                }
            }
        }
    }
}

/// The kernels that write a dp4a product's 8-bit activations themselves — the folded norm's tail
/// (`NormOut::act8`, in registers up to 8,192 columns, by a separate `quant_act8` beyond) and `silu_mul_act8` —
/// against the same products fed f32 and quantised by `quant_act8`: the f32 outputs bit for bit, the products
/// bit for bit on q8 and on q4 after SwiGLU, and within 1e-5 on q4 after the norm (whose block sums add in
/// another order). The tail leaves the block count at zero.
#[test]
fn kernels_writing_8bit_activations_equal_a_separate_quantisation() {
    let Some(g) = gpu() else { return };
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    for &(n1, k1, n2) in &[(256usize, 128usize, 96usize), (4096, 64, 48), (8224, 64, 40)] {
        for qt in [QType::Q8_0, QType::Q4_0] {
            let a = DevMatrix::upload(&g, &QMatrix::quantize(qt, n1, k1, &data(n1 * k1, 41)).unwrap(), None).unwrap();
            let b = DevMatrix::upload(&g, &QMatrix::quantize(qt, n2, n1, &data(n2 * n1, 43)).unwrap(), None).unwrap();
            let bf = DevMatrix::upload(&g, &bf16_matrix(n2, n1, &data(n2 * n1, 43)), None).unwrap();
            assert!(g.takes_act8(&b, 1) && g.takes_act8(&b, 8) && !g.takes_act8(&b, 9) && !g.takes_act8(&bf, 1));
            // The producer with dp4a writes them in its norm tail; with f32 activations, by quant_act8 after.
            for (rows, kern) in
                [(1usize, GemvKernel::SplitDp4a), (3, GemvKernel::SplitRows(4)), (8, GemvKernel::SplitDp4a)]
            {
                let x = DevBuf::from_slice(&g, &data(rows * k1, 45 + rows as u64)).unwrap();
                let ng = DevBuf::from_slice(&g, &data(n1, 47)).unwrap();
                let counter = DevBuf::zeros(&g, 4).unwrap();
                let mut got = Vec::new();
                // f32 then 8-bit activations by the tail.
                for act8 in [false, true] {
                    // The 8-bit scratch filled with other rows first, so 8-bit terms a kernel failed to write show.
                    let junk = DevBuf::from_slice(&g, &data(rows * n1, 51)).unwrap();
                    let zj = DevBuf::zeros(&g, rows * n2 * 4).unwrap();
                    // SAFETY: shapes as allocated above.
                    unsafe { g.gemv(GemvKernel::SplitDp4a, &b, Act::F32(junk.ptr()), rows, zj.ptr(), 0, false, None) }
                        .unwrap();
                    let y = DevBuf::zeros(&g, rows * n1 * 4).unwrap();
                    let nout = DevBuf::zeros(&g, rows * n1 * 4).unwrap();
                    let z = DevBuf::zeros(&g, rows * n2 * 4).unwrap();
                    let to = if act8 { NormTo::Act8 } else { NormTo::F32 };
                    let norm = NormOut { g: ng.ptr(), out: nout.ptr(), eps: 1e-5, counter: counter.ptr(), to };
                    let next = if act8 { Act::F32Act8(nout.ptr()) } else { Act::F32(nout.ptr()) };
                    // SAFETY: shapes as allocated above.
                    unsafe {
                        g.gemv(kern, &a, Act::F32(x.ptr()), rows, y.ptr(), 0, false, Some(&norm)).unwrap();
                        g.gemv(GemvKernel::SplitDp4a, &b, next, rows, z.ptr(), 0, false, None).unwrap();
                    }
                    got.push((nout.read::<f32>(&g, rows * n1).unwrap(), z.read::<f32>(&g, rows * n2).unwrap()));
                    assert_eq!(counter.read::<u32>(&g, 1).unwrap(), [0], "the block count is left zeroed");
                }
                let what = format!("{qt:?} {n1}x{k1} ({kern:?}) then {n2}x{n1}, {rows} rows");
                assert_eq!(bits(&got[0].0), bits(&got[1].0), "norm output, {what}");
                if qt == QType::Q8_0 {
                    assert_eq!(bits(&got[0].1), bits(&got[1].1), "product after the norm, {what}");
                }
                for (p, q) in got[0].1.iter().zip(&got[1].1) {
                    assert!((p - q).abs() <= 1e-5 * p.abs().max(1.0), "product after the norm, {what}: {p} vs {q}");
                }
                // SwiGLU of [gate | up] rows of 2·n1, into the product by b.
                let gu = DevBuf::from_slice(&g, &data(rows * 2 * n1, 49)).unwrap();
                let mut got = Vec::new();
                for fused in [false, true] {
                    let act = DevBuf::zeros(&g, rows * n1 * 4).unwrap();
                    let z = DevBuf::zeros(&g, rows * n2 * 4).unwrap();
                    // SAFETY: shapes as allocated above.
                    unsafe {
                        let next = if fused {
                            g.silu_mul_act8(gu.ptr(), act.ptr(), rows, n1).unwrap();
                            Act::F32Act8(act.ptr())
                        } else {
                            g.silu_mul(gu.ptr(), act.ptr(), rows, n1, false).unwrap();
                            Act::F32(act.ptr())
                        };
                        g.gemv(GemvKernel::SplitDp4a, &b, next, rows, z.ptr(), 0, false, None).unwrap();
                    }
                    got.push((act.read::<f32>(&g, rows * n1).unwrap(), z.read::<f32>(&g, rows * n2).unwrap()));
                }
                assert_eq!(bits(&got[0].0), bits(&got[1].0), "SwiGLU output, {what}");
                assert_eq!(bits(&got[0].1), bits(&got[1].1), "product after SwiGLU, {what}");
                // The first norm of a decode step: rms_norm then quantised by the product, or writing the 8-bit
                // terms itself.
                let xr = DevBuf::from_slice(&g, &data(rows * n1, 53)).unwrap();
                let mut got = Vec::new();
                for fused in [false, true] {
                    let normed = DevBuf::zeros(&g, rows * n1 * 4).unwrap();
                    let z = DevBuf::zeros(&g, rows * n2 * 4).unwrap();
                    // SAFETY: shapes as allocated above.
                    unsafe {
                        let next = if fused {
                            g.rms_norm_act8(xr.ptr(), ng.ptr(), normed.ptr(), rows, n1, 1e-5).unwrap();
                            Act::F32Act8(normed.ptr())
                        } else {
                            g.rms_norm(xr.ptr(), ng.ptr(), normed.ptr(), rows, n1, 1e-5, false).unwrap();
                            Act::F32(normed.ptr())
                        };
                        g.gemv(GemvKernel::SplitDp4a, &b, next, rows, z.ptr(), 0, false, None).unwrap();
                    }
                    got.push((normed.read::<f32>(&g, rows * n1).unwrap(), z.read::<f32>(&g, rows * n2).unwrap()));
                }
                assert_eq!(bits(&got[0].0), bits(&got[1].0), "norm output, {what}");
                assert_eq!(bits(&got[0].1), bits(&got[1].1), "product after the first norm, {what}");
            }
        }
    }
}

/// Embedding rows (a row spread over blocks of 256 columns, the last one partial) are the CPU's dequantised rows
/// bit for bit, in every format, with GPT-2's learned positions added where given.
#[test]
fn embedding_rows_equal_the_cpu_rows() {
    let Some(g) = gpu() else { return };
    let (n, cols) = (50usize, 4160usize);
    let ids = [7i32, 0, 49, 7];
    let pos = [3i32, 0, 1, 5];
    let pe = data(8 * cols, 61);
    for qt in [QType::BF16, QType::Q8_0, QType::Q4_0, QType::Q4_1] {
        let q = as_on_device(QMatrix::quantize(qt, n, cols, &data(n * cols, 59)).unwrap());
        let m = DevMatrix::upload(&g, &q, None).unwrap();
        let rows = dequantized(&q);
        let (idb, posb, peb) = (
            DevBuf::from_slice(&g, &ids).unwrap(),
            DevBuf::from_slice(&g, &pos).unwrap(),
            DevBuf::from_slice(&g, &pe).unwrap(),
        );
        for learned in [false, true] {
            let out = DevBuf::zeros(&g, ids.len() * cols * 4).unwrap();
            let pe_ptr = if learned { peb.ptr() } else { 0 };
            // SAFETY: ids index the matrix's rows, positions the table's; out holds the rows.
            unsafe { g.embed(&m, idb.ptr(), posb.ptr(), pe_ptr, out.ptr(), ids.len()) }.unwrap();
            let got = out.read::<f32>(&g, ids.len() * cols).unwrap();
            for (k, (&id, &p)) in ids.iter().zip(&pos).enumerate() {
                let want: Vec<u32> = (0..cols)
                    .map(|c| {
                        let v = rows[id as usize * cols + c];
                        (if learned { v + pe[p as usize * cols + c] } else { v }).to_bits()
                    })
                    .collect();
                let have: Vec<u32> = got[k * cols..(k + 1) * cols].iter().map(|v| v.to_bits()).collect();
                assert_eq!(have, want, "{qt:?} row {k} (id {id}), learned positions {learned}");
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
    for qt in [QType::BF16, QType::Q8_0, QType::Q4_0] {
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

/// The tensor-core kernel of 9–32 rows (mma_few.cu) against f64 arithmetic on the same bf16 values: every format,
/// every tile count, partial tiles of rows and of output rows, more steps than warps and fewer, bias and
/// accumulation.
#[test]
fn few_row_tensor_core_product_equals_the_reference() {
    let Some(g) = gpu() else { return };
    for (n, k) in [(72, 256), (37, 128), (600, 1024)] {
        let w = data(n * k, 41);
        for qt in [QType::BF16, QType::Q8_0, QType::Q4_0] {
            let host = QMatrix::quantize(qt, n, k, &w).unwrap();
            // The kernel turns the blocks into bf16 (d·q, d·q + m) before the product, as cuBLAS reads them.
            let wd: Vec<f32> = dequantized(&host).iter().map(|v| half::bf16::from_f32(*v).to_f32()).collect();
            let m = DevMatrix::upload(&g, &host, None).unwrap();
            for rows in [1, 8, 9, 13, 16, 24, 31, 32] {
                let x: Vec<f32> =
                    data(rows * k, 42 + rows as u64).iter().map(|v| half::bf16::from_f32(*v).to_f32()).collect();
                let xb16: Vec<u16> = x.iter().map(|v| half::bf16::from_f32(*v).to_bits()).collect();
                let bias = data(n, 43);
                let start = data(rows * n, 44);
                let xb = DevBuf::from_slice(&g, &xb16).unwrap();
                let yb = DevBuf::from_slice(&g, &start).unwrap();
                let bb = DevBuf::from_slice(&g, &bias).unwrap();
                assert!(mma_few_takes(&m, rows), "{qt:?} {n}×{k} {rows} rows");
                // Every tile count of output rows a warp (the launch picks by the matrix's height).
                let mt = MMA_FEW_TILES[rows % MMA_FEW_TILES.len()];
                // SAFETY: shapes as allocated above.
                unsafe { g.mma_few_tiles(&m, xb.ptr(), rows, yb.ptr(), bb.ptr(), true, mt) }.unwrap();
                let got: Vec<f32> = yb.read(&g, rows * n).unwrap();
                let want = reference(&wd, &x, rows, n, k);
                for i in 0..rows * n {
                    let want = want[i] + bias[i % n] + start[i];
                    let tol = 1e-4 * (k as f32).sqrt() + 1e-5 * want.abs();
                    assert!((got[i] - want).abs() <= tol, "{qt:?} {n}×{k} {rows} rows [{i}]: {} vs {want}", got[i]);
                }
            }
        }
    }
    // Shapes it does not take are refused, not computed wrongly.
    let m = DevMatrix::upload(&g, &bf16_matrix(8, 48, &data(8 * 48, 45)), None).unwrap();
    assert!(!mma_few_takes(&m, 9));
    // SAFETY: refused before any launch.
    assert!(unsafe { g.mma_few(&m, 0, 9, 0, 0, false) }.is_err());
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
    // Into bf16 (passes over 8 rows): the float4 kernel where the width allows it, the first one otherwise.
    for h in [200usize, 202, 576, 4096, 8192] {
        let x = data(rows * h, 33 + h as u64);
        let w = data(h, 34 + h as u64);
        let xb = DevBuf::from_slice(&g, &x).unwrap();
        let wb = DevBuf::from_slice(&g, &w).unwrap();
        let ob = DevBuf::zeros(&g, rows * h * 2).unwrap();
        // SAFETY: shapes as allocated above.
        unsafe { g.rms_norm(xb.ptr(), wb.ptr(), ob.ptr(), rows, h, 1e-5, true) }.unwrap();
        let got: Vec<u16> = ob.read(&g, rows * h).unwrap();
        let mut want = vec![0f32; rows * h];
        kvad_tensor::cpu::ops::rms_norm(&x, &w, 1e-5, &mut want);
        for (a, b) in got.iter().zip(&want) {
            let a = half::bf16::from_bits(*a).to_f32();
            assert!((a - b).abs() <= 4e-3 * b.abs() + 1e-6, "rms_norm into bf16, width {h}: {a} vs {b}");
        }
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
    // A vocabulary's width (float4s, four a thread in flight): ties within a float4, within one thread's
    // values, and across threads where the later index sits in an earlier thread; and a width not a multiple of 4.
    for (n, ties) in [(49152usize, [[8, 4100], [5, 7], [100, 4196]]), (4999, [[3, 4998], [17, 1041], [0, 4000]])] {
        let mut x = data(3 * n, 43);
        for (r, t) in ties.iter().enumerate() {
            for &i in t {
                x[r * n + i] = 9.0;
            }
        }
        let (xb, out) = (DevBuf::from_slice(&g, &x).unwrap(), DevBuf::zeros(&g, 3 * 4).unwrap());
        // SAFETY: shapes as allocated above.
        unsafe { g.argmax_rows(xb.ptr(), out.ptr(), 3, n) }.unwrap();
        let got: Vec<i32> = out.read(&g, 3).unwrap();
        let want: Vec<i32> = ties.iter().map(|t| t[0] as i32).collect();
        assert_eq!(got, want, "width {n}");
    }
}

/// Compiles the kernels with NVRTC for Hopper and Ampere and checks every entry point the binary loads is there. Needs only
/// libnvrtc (scripts/test.sh installs NVIDIA's wheel for it), not a GPU, so CI catches a kernel that does not build.
#[test]
fn every_kernel_compiles_with_nvrtc() {
    // SAFETY: only tries to dlopen the library.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        eprintln!("libnvrtc not found: scripts/test.sh installs it (nvidia-cuda-nvrtc) and sets LD_LIBRARY_PATH");
        return;
    }
    // Hopper (with programmatic dependent launch) and Ampere (the oldest kvad takes, where it compiles away; with
    // the measuring variant compiled in — the kernel trace — so that code is checked too), side
    // by side: each takes a minute on one core.
    let caps = [(9, 0), (8, 0)];
    let ptxs: Vec<Vec<String>> = std::thread::scope(|s| {
        let jobs: Vec<_> = caps
            .map(|cap| {
                let defines: &'static [&'static str] = if cap.0 < 9 { &["KVAD_TRACE"] } else { &[] };
                s.spawn(move || kvad_tensor::cuda::compile_kernels(cap, defines))
            })
            .into();
        jobs.into_iter()
            .zip(caps)
            .map(|(j, cap)| j.join().unwrap().unwrap_or_else(|e| panic!("{cap:?}: {e}")))
            .collect()
    });
    for (units, cap) in ptxs.iter().zip(caps) {
        for name in kvad_tensor::cuda::kernel_names() {
            let entry = format!(".entry {name}(");
            let n = units.iter().filter(|p| p.contains(&entry)).count();
            assert_eq!(n, 1, "kernel {name} in {n} compile units for {cap:?} (one wanted)");
        }
        for ptx in units {
            assert_eq!(ptx.contains("griddepcontrol"), cap.0 >= 9, "griddepcontrol only from sm_90, {cap:?}");
            assert_eq!(ptx.contains("globaltimer"), cap.0 < 9, "the trace only where asked for, {cap:?}");
        }
    }
}
