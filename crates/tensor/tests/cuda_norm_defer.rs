//! The norm deferred to the next product (`NormOut::defer`, `Act::Act8Deferred`; `split_norm_groups` in
//! gemv_split.cu) against the norm tail it replaces, run on the device by `bash scripts/gpu/test.sh`. On a machine
//! with no usable GPU the test says so and returns.

use kvad_tensor::cpu::{QMatrix, QType};
use kvad_tensor::cuda::{Act, DevBuf, DevMatrix, GemvKernel, Gpu, NormOut};
use std::sync::Arc;

mod common;
use common::{data, gpu};

/// A producer (accumulating into a residual stream) whose output norm goes to a dp4a consumer, once through the
/// norm tail and once deferred, then the consumer: the residual stream equal bit for bit (the deferral does not
/// touch it); the consumer's outputs within 1e-4 of the largest (the 8-bit terms are of `y·g` instead of the normed
/// row: the same up to rounding); rows batched equal to each row alone, bit for bit; and a second run equal to the
/// first (the group counters were left at zero). Widths of 3 groups (a partial warp of group sums), 128 and 256
/// (the widest), every block format, block heights 4 and 8 (the producers' picks for 1, 3 and 8 rows).
#[test]
fn deferred_norm_equals_the_norm_tail() {
    let Some(g) = gpu() else { return };
    if g.gemv_kernel() != GemvKernel::SplitDp4a {
        eprintln!("KVAD_GPU_GEMV is set: the 8-bit activations are not the default here");
        return;
    }
    let k1 = 64usize;
    for &(n1, n2) in &[(96usize, 40usize), (4096, 72), (8192, 48)] {
        for qt in [QType::Q8_0, QType::Q4_0, QType::Q4_1] {
            let a = DevMatrix::upload(&g, &QMatrix::quantize(qt, n1, k1, &data(n1 * k1, 61)).unwrap(), None).unwrap();
            let b = DevMatrix::upload(&g, &QMatrix::quantize(qt, n2, n1, &data(n2 * n1, 63)).unwrap(), None).unwrap();
            let ng = DevBuf::from_slice(&g, &data(n1, 65)).unwrap();
            for rows in [1usize, 3, 8] {
                let what = format!("{qt:?} {n1}x{k1} then {n2}x{n1}, {rows} rows");
                // Residual rows of rms ~0.3 (1/rms far from 1, so a factor left out shows), inputs in [-1, 1).
                let resid: Vec<f32> = data(rows * n1, 67).iter().map(|v| v * 0.5).collect();
                let x = data(rows * k1, 69 + rows as u64);
                let tail = run(&g, &a, &b, &ng, &resid, &x, rows, false);
                let deferred = run(&g, &a, &b, &ng, &resid, &x, rows, true);
                assert_eq!(bits(&tail.0), bits(&deferred.0), "residual stream, {what}");
                let scale = tail.1.iter().fold(0f32, |m, v| m.max(v.abs()));
                assert!(scale > 0.1, "{what}: consumer outputs of at most {scale}");
                for (i, (p, q)) in tail.1.iter().zip(&deferred.1).enumerate() {
                    assert!((p - q).abs() <= 1e-4 * scale, "consumer [{i}], {what}: tail {p} vs deferred {q}");
                }
                let again = run(&g, &a, &b, &ng, &resid, &x, rows, true);
                assert_eq!(bits(&deferred.1), bits(&again.1), "a second deferred run, {what}");
                if rows > 1 {
                    for r in 0..rows {
                        let alone =
                            run(&g, &a, &b, &ng, &resid[r * n1..(r + 1) * n1], &x[r * k1..(r + 1) * k1], 1, true);
                        assert_eq!(bits(&alone.1), bits(&deferred.1[r * n2..(r + 1) * n2]), "row {r} alone, {what}");
                    }
                }
            }
            // Only a dp4a product takes deferred rows: the f32-activation family says so.
            let z = DevBuf::zeros(&g, n2 * 4).unwrap();
            // SAFETY: shapes as allocated above.
            let err = unsafe { g.gemv(GemvKernel::Split, &b, Act::Act8Deferred, 1, z.ptr(), 0, false, None) };
            assert!(err.is_err(), "{qt:?}: a deferred input to an f32-activation product");
        }
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

/// `resid += x · aᵀ`, its norm by `ng` to `b` (tail or deferred), `z = norm · bᵀ`: (resid, z).
#[allow(clippy::too_many_arguments)]
fn run(
    g: &Arc<Gpu>,
    a: &DevMatrix,
    b: &DevMatrix,
    ng: &DevBuf,
    resid: &[f32],
    x: &[f32],
    rows: usize,
    defer: bool,
) -> (Vec<f32>, Vec<f32>) {
    let (n1, n2) = (a.rows(), b.rows());
    let xb = DevBuf::from_slice(g, x).unwrap();
    let y = DevBuf::from_slice(g, resid).unwrap();
    let nout = DevBuf::zeros(g, rows * n1 * 4).unwrap();
    let counter = DevBuf::zeros(g, 4).unwrap();
    let z = DevBuf::zeros(g, rows * n2 * 4).unwrap();
    let norm = NormOut { g: ng.ptr(), out: nout.ptr(), eps: 1e-5, counter: counter.ptr(), act8: true, defer };
    let next = if defer { Act::Act8Deferred } else { Act::F32Act8(nout.ptr()) };
    let kern = GemvKernel::SplitDp4a;
    // SAFETY: shapes as allocated above.
    unsafe {
        g.gemv(kern, a, Act::F32(xb.ptr()), rows, y.ptr(), 0, true, Some(&norm)).unwrap();
        g.gemv(kern, b, next, rows, z.ptr(), 0, false, None).unwrap();
    }
    (y.read::<f32>(g, rows * n1).unwrap(), z.read::<f32>(g, rows * n2).unwrap())
}
