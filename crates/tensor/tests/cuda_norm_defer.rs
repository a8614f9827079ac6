//! The norm deferred to the next product (`NormOut::defer`, `Act::Act8Deferred`; `split_norm_groups` in
//! gemv_split.cu) against the norm tail it replaces, run on the device by `bash scripts/gpu/test.sh`. On a machine
//! with no usable GPU the test says so and returns.

use kvad_tensor::cpu::{QMatrix, QType};
use kvad_tensor::cuda::{Act, DevBuf, DevMatrix, GemvKernel, Gpu, NormOut, NormTo};
use std::sync::Arc;

mod common;
use common::{data, gpu};

/// A producer (accumulating into a residual stream) whose output norm goes to a dp4a consumer (with a bias), once
/// through the norm tail and once deferred, then the consumer: the residual stream equal bit for bit (the deferral
/// does not touch it); the consumer's outputs within 1e-4 of the largest (the 8-bit terms are of `y·g` instead of
/// the normed row: the same up to rounding); rows batched equal to each row alone, bit for bit (a row alone runs the
/// kernel whose blocks hold their group of 32 outputs whole, `_gb`, batched rows the counted groups, `_gn`: this
/// compares the two); and a run after one
/// on other inputs equal to the first (the group counters were left at zero: stuck ones would skip the writes, and
/// the other inputs' planes would show). Widths of 3 groups (a partial warp of group sums), 128 and 256 (the
/// widest), every block format, the producers' block heights for 1, 3 and 8 rows (4 and 8) and height 2; one producer
/// wide enough that its lanes walk several chunks (the fixtures' products are too narrow for that).
#[test]
fn deferred_norm_equals_the_norm_tail() {
    let Some(g) = gpu() else { return };
    // At the narrowest width an epsilon near the rows' mean square (~7.3), so a product taking the wrong one shows.
    // A producer 9,216 wide has its lanes walk several chunks (2–3 at q4, 4–5 at q8), as the down product's do.
    for &(n1, n2, eps, k1) in
        &[(96usize, 40usize, 4.0f32, 64usize), (4096, 72, 1e-5, 64), (8192, 48, 1e-5, 64), (4096, 72, 1e-5, 9216)]
    {
        for qt in [QType::Q8_0, QType::Q4_0] {
            let a = DevMatrix::upload(&g, &QMatrix::quantize(qt, n1, k1, &data(n1 * k1, 61)).unwrap(), None).unwrap();
            let b = DevMatrix::upload(&g, &QMatrix::quantize(qt, n2, n1, &data(n2 * n1, 63)).unwrap(), None).unwrap();
            let ng = DevBuf::from_slice(&g, &data(n1, 65)).unwrap();
            let bias = DevBuf::from_slice(&g, &data(n2, 66)).unwrap();
            let t = Mats { a: &a, b: &b, ng: &ng, bias: &bias, eps };
            for (rows, kern) in [
                (1usize, GemvKernel::SplitDp4a),
                (3, GemvKernel::SplitDp4a),
                (8, GemvKernel::SplitDp4a),
                (2, GemvKernel::Dp4aRows(2)),
            ] {
                let what = format!("{qt:?} {n1}x{k1} ({kern:?}) then {n2}x{n1}, {rows} rows, eps {eps}");
                // Residual rows whose rms after the product is ~2.7 (1/rms far from 1, so a factor left out shows).
                let resid: Vec<f32> = data(rows * n1, 67).iter().map(|v| v * 0.5).collect();
                let x = data(rows * k1, 69 + rows as u64);
                let tail = run(&g, &t, &resid, &x, rows, kern, false);
                let deferred = run(&g, &t, &resid, &x, rows, kern, true);
                assert_eq!(bits(&tail.0), bits(&deferred.0), "residual stream, {what}");
                let scale = tail.1.iter().fold(0f32, |m, v| m.max(v.abs()));
                assert!(scale > 0.1, "{what}: consumer outputs of at most {scale}");
                for (i, (p, q)) in tail.1.iter().zip(&deferred.1).enumerate() {
                    assert!((p - q).abs() <= 1e-4 * scale, "consumer [{i}], {what}: tail {p} vs deferred {q}");
                }
                let other = data(rows * k1, 71 + rows as u64);
                let _ = run(&g, &t, &resid, &other, rows, kern, true);
                let again = run(&g, &t, &resid, &x, rows, kern, true);
                assert_eq!(bits(&deferred.1), bits(&again.1), "a deferred run after other inputs, {what}");
                for r in (0..rows).filter(|_| rows > 1) {
                    let (rr, xr) = (&resid[r * n1..(r + 1) * n1], &x[r * k1..(r + 1) * k1]);
                    let alone = run(&g, &t, rr, xr, 1, GemvKernel::SplitDp4a, true);
                    assert_eq!(bits(&alone.1), bits(&deferred.1[r * n2..(r + 1) * n2]), "row {r} alone, {what}");
                }
            }
            // Only a dp4a product takes deferred rows (the f32-activation kernels say so), and it norms nothing.
            let z = DevBuf::zeros(&g, n2 * 4).unwrap();
            let nout = DevBuf::zeros(&g, n2 * 4).unwrap();
            let counter = DevBuf::zeros(&g, 4).unwrap();
            let norm = NormOut { g: ng.ptr(), out: nout.ptr(), eps: 1e-5, counter: counter.ptr(), to: NormTo::F32 };
            // SAFETY: shapes as allocated above.
            unsafe {
                let f32_family =
                    g.gemv(GemvKernel::SplitRows(4), &b, Act::Act8Deferred { eps: 1e-5 }, 1, z.ptr(), 0, false, None);
                assert!(f32_family.is_err(), "{qt:?}: a deferred input to an f32-activation product");
                let normed = g.gemv(
                    GemvKernel::SplitDp4a,
                    &b,
                    Act::Act8Deferred { eps: 1e-5 },
                    1,
                    z.ptr(),
                    0,
                    false,
                    Some(&norm),
                );
                assert!(normed.is_err(), "{qt:?}: a product of deferred rows norming its own output");
            }
        }
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

/// The producer, the norm's weights and epsilon, and the consumer with its bias.
struct Mats<'a> {
    a: &'a DevMatrix,
    b: &'a DevMatrix,
    ng: &'a DevBuf,
    bias: &'a DevBuf,
    /// The norm's epsilon.
    eps: f32,
}

/// `resid += x · aᵀ` by `kern`, its norm by `ng` to `b` (tail or deferred), `z = norm · bᵀ + bias`: (resid, z).
fn run(
    g: &Arc<Gpu>,
    t: &Mats,
    resid: &[f32],
    x: &[f32],
    rows: usize,
    kern: GemvKernel,
    defer: bool,
) -> (Vec<f32>, Vec<f32>) {
    let (n1, n2) = (t.a.rows(), t.b.rows());
    let xb = DevBuf::from_slice(g, x).unwrap();
    let y = DevBuf::from_slice(g, resid).unwrap();
    let nout = DevBuf::zeros(g, rows * n1 * 4).unwrap();
    let counter = DevBuf::zeros(g, 4).unwrap();
    let z = DevBuf::zeros(g, rows * n2 * 4).unwrap();
    let to = if defer { NormTo::Deferred } else { NormTo::Act8 };
    let norm = NormOut { g: t.ng.ptr(), out: nout.ptr(), eps: t.eps, counter: counter.ptr(), to };
    let next = if defer { Act::Act8Deferred { eps: t.eps } } else { Act::F32Act8(nout.ptr()) };
    // SAFETY: shapes as allocated above.
    unsafe {
        g.gemv(kern, t.a, Act::F32(xb.ptr()), rows, y.ptr(), 0, true, Some(&norm)).unwrap();
        g.gemv(GemvKernel::SplitDp4a, t.b, next, rows, z.ptr(), t.bias.ptr(), false, None).unwrap();
    }
    (y.read::<f32>(g, rows * n1).unwrap(), z.read::<f32>(g, rows * n2).unwrap())
}
