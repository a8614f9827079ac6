//! The forward and backward of each layer a training step runs, in f32, row-major `[rows][width]`.
//!
//! Products go through the GEMM's register tile (`kvad_tensor::cpu::matmul`) split by rows over the worker pool;
//! the rest is row-wise and small beside them. Backward functions add into their gradient buffers, so tied weights
//! and accumulated micro-batches need no extra pass.

use kvad_tensor::cpu::matmul::{matmul_f32, BLayout, Dims};
use kvad_tensor::cpu::pool;

/// Rows of a product one pool task takes (a multiple of the tile's 6 rows keeps tiles whole).
const ROWS_PER_TASK: usize = 48;

/// `c (+)= a·b` over the pool: `a` is m rows of k at stride `lda`, `c` is m rows of n (contiguous), `b` as
/// `layout` says at stride `ldb`.
#[allow(clippy::too_many_arguments)]
pub fn matmul(a: &[f32], lda: usize, b: &[f32], ldb: usize, layout: BLayout, c: &mut [f32], d: Dims, acc: bool) {
    let Dims { m, k, n } = d;
    if m == 0 || n == 0 {
        return;
    }
    let rows = ROWS_PER_TASK.max(m.div_ceil(pool::threads() * 8) / 6 * 6);
    pool::for_each_piece_mut(&mut c[..m * n], rows * n, |i, piece| {
        let r0 = i * rows;
        let mr = piece.len() / n;
        matmul_f32(&a[r0 * lda..], lda, b, ldb, layout, piece, n, Dims { m: mr, k, n }, acc);
    });
}

/// `src` (rows × cols) transposed into a new cols × rows matrix.
pub fn transpose(src: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; rows * cols];
    const B: usize = 32;
    for r0 in (0..rows).step_by(B) {
        for c0 in (0..cols).step_by(B) {
            for r in r0..(r0 + B).min(rows) {
                for c in c0..(c0 + B).min(cols) {
                    out[c * rows + r] = src[r * cols + c];
                }
            }
        }
    }
    out
}

/// How a linear layer's weight is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightLayout {
    /// `[out][in]`, `y = x·Wᵀ` (torch.nn.Linear).
    OutIn,
    /// `[in][out]`, `y = x·W` (GPT-2's Conv1D).
    InOut,
}

/// A linear layer's shape and layout.
#[derive(Debug, Clone, Copy)]
pub struct LinShape {
    /// Inputs a row.
    pub n_in: usize,
    /// Outputs a row.
    pub n_out: usize,
    /// How the weight is stored.
    pub layout: WeightLayout,
}

/// `y = x·W(ᵀ) + b` for `rows` rows.
pub fn linear(x: &[f32], rows: usize, w: &[f32], b: Option<&[f32]>, s: LinShape) -> Vec<f32> {
    let mut y = vec![0.0; rows * s.n_out];
    if let Some(b) = b {
        y.chunks_mut(s.n_out).for_each(|r| r.copy_from_slice(b));
    }
    let (ldb, layout) = match s.layout {
        WeightLayout::OutIn => (s.n_in, BLayout::NByK),
        WeightLayout::InOut => (s.n_out, BLayout::KByN),
    };
    matmul(x, s.n_in, w, ldb, layout, &mut y, Dims { m: rows, k: s.n_in, n: s.n_out }, b.is_some());
    y
}

/// The backward of [`linear`]: adds `dy·W` into `dx` (when given), `dW` into `dw` (when given) and the column sums
/// of `dy` into `db` (when given).
#[allow(clippy::too_many_arguments)]
pub fn linear_back(
    x: &[f32],
    dy: &[f32],
    rows: usize,
    w: &[f32],
    s: LinShape,
    dx: Option<&mut [f32]>,
    dw: Option<&mut [f32]>,
    db: Option<&mut [f32]>,
) {
    if let Some(dx) = dx {
        // dx[r][i] += Σ_o dy[r][o] · W(o, i)
        let (ldb, layout) = match s.layout {
            WeightLayout::OutIn => (s.n_in, BLayout::KByN),
            WeightLayout::InOut => (s.n_out, BLayout::NByK),
        };
        matmul(dy, s.n_out, w, ldb, layout, dx, Dims { m: rows, k: s.n_out, n: s.n_in }, true);
    }
    if let Some(dw) = dw {
        match s.layout {
            // dW[o][i] += Σ_r dy[r][o] · x[r][i]
            WeightLayout::OutIn => {
                let dyt = transpose(dy, rows, s.n_out);
                matmul(&dyt, rows, x, s.n_in, BLayout::KByN, dw, Dims { m: s.n_out, k: rows, n: s.n_in }, true);
            }
            // dW[i][o] += Σ_r x[r][i] · dy[r][o]
            WeightLayout::InOut => {
                let xt = transpose(x, rows, s.n_in);
                matmul(&xt, rows, dy, s.n_out, BLayout::KByN, dw, Dims { m: s.n_in, k: rows, n: s.n_out }, true);
            }
        }
    }
    if let Some(db) = db {
        for r in dy.chunks(s.n_out) {
            db.iter_mut().zip(r).for_each(|(d, &g)| *d += g);
        }
    }
}

/// A norm's per-row statistics, kept for its backward: `mean` (LayerNorm only) and `rstd` = 1/√(var + eps).
#[derive(Debug, Clone, Default)]
pub struct NormStats {
    /// Row means (empty for RMSNorm).
    pub mean: Vec<f32>,
    /// Reciprocal standard deviations (RMSNorm: reciprocal root mean square).
    pub rstd: Vec<f32>,
}

/// RMSNorm as transformers' Llama computes it in f32: `w · x / √(mean(x²) + eps)`, over rows of `width`.
pub fn rms_norm(x: &[f32], width: usize, w: &[f32], eps: f32) -> (Vec<f32>, NormStats) {
    let mut y = vec![0.0; x.len()];
    let mut rstd = Vec::with_capacity(x.len() / width);
    for (xr, yr) in x.chunks(width).zip(y.chunks_mut(width)) {
        let ms = xr.iter().map(|v| v * v).sum::<f32>() / width as f32;
        let r = 1.0 / (ms + eps).sqrt();
        rstd.push(r);
        for ((o, &v), &g) in yr.iter_mut().zip(xr).zip(w) {
            *o = g * (v * r);
        }
    }
    (y, NormStats { mean: Vec::new(), rstd })
}

/// The backward of [`rms_norm`]: adds into `dx` and `dw`.
pub fn rms_norm_back(x: &[f32], dy: &[f32], width: usize, w: &[f32], st: &NormStats, dx: &mut [f32], dw: &mut [f32]) {
    for (row, ((xr, gr), dxr)) in x.chunks(width).zip(dy.chunks(width)).zip(dx.chunks_mut(width)).enumerate() {
        let r = st.rstd[row];
        // ĝ = w·dy; dx = r·(ĝ − x̂·mean(ĝ·x̂)), x̂ = x·r
        let mut dot = 0.0f32;
        for ((&v, &g), (&wi, dwi)) in xr.iter().zip(gr).zip(w.iter().zip(dw.iter_mut())) {
            let xh = v * r;
            *dwi += g * xh;
            dot += wi * g * xh;
        }
        let c = dot / width as f32;
        for ((&v, &g), (&wi, d)) in xr.iter().zip(gr).zip(w.iter().zip(dxr.iter_mut())) {
            *d += r * (wi * g - v * r * c);
        }
    }
}

/// LayerNorm: `w · (x − mean) / √(var + eps) + b` over rows of `width` (biased variance, as torch).
pub fn layer_norm(x: &[f32], width: usize, w: &[f32], b: &[f32], eps: f32) -> (Vec<f32>, NormStats) {
    let mut y = vec![0.0; x.len()];
    let rows = x.len() / width;
    let mut st = NormStats { mean: Vec::with_capacity(rows), rstd: Vec::with_capacity(rows) };
    for (xr, yr) in x.chunks(width).zip(y.chunks_mut(width)) {
        let mean = xr.iter().sum::<f32>() / width as f32;
        let var = xr.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / width as f32;
        let r = 1.0 / (var + eps).sqrt();
        st.mean.push(mean);
        st.rstd.push(r);
        for (i, o) in yr.iter_mut().enumerate() {
            *o = (xr[i] - mean) * r * w[i] + b[i];
        }
    }
    (y, st)
}

/// The backward of [`layer_norm`]: adds into `dx`, `dw` and `db`.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_back(
    x: &[f32],
    dy: &[f32],
    width: usize,
    w: &[f32],
    st: &NormStats,
    dx: &mut [f32],
    dw: &mut [f32],
    db: &mut [f32],
) {
    for (row, ((xr, gr), dxr)) in x.chunks(width).zip(dy.chunks(width)).zip(dx.chunks_mut(width)).enumerate() {
        let (mean, r) = (st.mean[row], st.rstd[row]);
        // ĝ = w·dy; dx = r·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂))
        let (mut sum_g, mut sum_gx) = (0.0f32, 0.0f32);
        for i in 0..width {
            let xh = (xr[i] - mean) * r;
            let g = w[i] * gr[i];
            dw[i] += gr[i] * xh;
            db[i] += gr[i];
            sum_g += g;
            sum_gx += g * xh;
        }
        let (mg, mgx) = (sum_g / width as f32, sum_gx / width as f32);
        for i in 0..width {
            let xh = (xr[i] - mean) * r;
            dxr[i] += r * (w[i] * gr[i] - mg - xh * mgx);
        }
    }
}

const GELU_C: f32 = 0.797_884_6; // √(2/π)

/// GPT-2's tanh GELU (`gelu_new`): `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`.
pub fn gelu(x: &[f32]) -> Vec<f32> {
    x.iter().map(|&v| 0.5 * v * (1.0 + (GELU_C * (v + 0.044715 * v * v * v)).tanh())).collect()
}

/// The backward of [`gelu`], given its input `x`: `dx = dy · gelu'(x)`, written (not added).
pub fn gelu_back(x: &[f32], dy: &[f32]) -> Vec<f32> {
    x.iter()
        .zip(dy)
        .map(|(&v, &g)| {
            let u = GELU_C * (v + 0.044715 * v * v * v);
            let t = u.tanh();
            let du = GELU_C * (1.0 + 3.0 * 0.044715 * v * v);
            g * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du)
        })
        .collect()
}

fn sigmoid(v: f32) -> f32 {
    1.0 / (1.0 + (-v).exp())
}

/// SwiGLU's gate: `silu(g) · u`, elementwise.
pub fn swiglu(g: &[f32], u: &[f32]) -> Vec<f32> {
    g.iter().zip(u).map(|(&a, &b)| a * sigmoid(a) * b).collect()
}

/// The backward of [`swiglu`]: `(dg, du)`, written.
pub fn swiglu_back(g: &[f32], u: &[f32], dy: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let mut dg = Vec::with_capacity(g.len());
    let mut du = Vec::with_capacity(g.len());
    for ((&a, &b), &d) in g.iter().zip(u).zip(dy) {
        let s = sigmoid(a);
        du.push(d * a * s);
        dg.push(d * b * s * (1.0 + a * (1.0 - s)));
    }
    (dg, du)
}

/// Rotate-half RoPE in place on `heads` heads of `hd` values a row, each row at its own position's `cos`/`sin`
/// (`hd / 2` values each, row-major by row). `inverse` rotates back (the backward of a rotation is its inverse).
pub fn rope(x: &mut [f32], heads: usize, hd: usize, cos: &[f32], sin: &[f32], inverse: bool) {
    let half = hd / 2;
    let sign = if inverse { -1.0 } else { 1.0 };
    for (row, xr) in x.chunks_mut(heads * hd).enumerate() {
        let (c, s) = (&cos[row * half..(row + 1) * half], &sin[row * half..(row + 1) * half]);
        for h in xr.chunks_mut(hd) {
            for i in 0..half {
                let (a, b) = (h[i], h[i + half]);
                let si = sign * s[i];
                h[i] = a * c[i] - b * si;
                h[i + half] = b * c[i] + a * si;
            }
        }
    }
}

/// The mean cross-entropy of `logits` (rows × vocab) against `targets` (None: not counted), over `count` counted
/// rows of the whole batch; `logits` becomes its gradient (`(softmax − onehot) / count`, zero on uncounted rows).
/// Returns the summed loss of these rows (the caller divides by `count`).
pub fn cross_entropy(logits: &mut [f32], vocab: usize, targets: &[Option<u32>], count: usize) -> f64 {
    let mut total = 0.0f64;
    let scale = 1.0 / count.max(1) as f32;
    for (row, t) in logits.chunks_mut(vocab).zip(targets) {
        let Some(t) = *t else {
            row.fill(0.0);
            continue;
        };
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f32 = row.iter().map(|&v| (v - max).exp()).sum();
        let lse = max + sum.ln();
        total += (lse - row[t as usize]) as f64;
        for v in row.iter_mut() {
            *v = (*v - lse).exp() * scale;
        }
        row[t as usize] -= scale;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Finite differences in f64 of a scalar function of one input, against the analytic gradient.
    fn check(f: impl Fn(&[f32]) -> f64, x: &[f32], analytic: &[f32], tol: f64) {
        for i in 0..x.len() {
            let mut p = x.to_vec();
            let mut m = x.to_vec();
            let h = 1e-2f32;
            p[i] += h;
            m[i] -= h;
            let num = (f(&p) - f(&m)) / (2.0 * h as f64);
            assert!((num - analytic[i] as f64).abs() < tol * (1.0 + num.abs()), "i {i}: {num} vs {}", analytic[i]);
        }
    }

    fn vals(n: usize, seed: u32) -> Vec<f32> {
        (0..n).map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 500.0 - 1.0).collect()
    }

    #[test]
    fn linear_backs_match_finite_differences_in_both_layouts() {
        for layout in [WeightLayout::OutIn, WeightLayout::InOut] {
            let s = LinShape { n_in: 5, n_out: 7, layout };
            let (x, w, b, gy) = (vals(15, 1), vals(35, 2), vals(7, 3), vals(21, 4));
            let loss = |x: &[f32], w: &[f32], b: &[f32]| {
                linear(x, 3, w, Some(b), s).iter().zip(&gy).map(|(a, g)| (a * g) as f64).sum::<f64>()
            };
            let (mut dx, mut dw, mut db) = (vec![0.0; 15], vec![0.0; 35], vec![0.0; 7]);
            linear_back(&x, &gy, 3, &w, s, Some(&mut dx), Some(&mut dw), Some(&mut db));
            check(|x| loss(x, &w, &b), &x, &dx, 1e-3);
            check(|w| loss(&x, w, &b), &w, &dw, 1e-3);
            check(|b| loss(&x, &w, b), &b, &db, 1e-3);
        }
    }

    #[test]
    fn norm_and_activation_backs_match_finite_differences() {
        let (x, w, b, gy) = (vals(24, 5), vals(8, 6), vals(8, 7), vals(24, 8));
        let dot = |y: &[f32]| y.iter().zip(&gy).map(|(a, g)| (a * g) as f64).sum::<f64>();
        let (_, st) = rms_norm(&x, 8, &w, 1e-5);
        let (mut dx, mut dw) = (vec![0.0; 24], vec![0.0; 8]);
        rms_norm_back(&x, &gy, 8, &w, &st, &mut dx, &mut dw);
        check(|x| dot(&rms_norm(x, 8, &w, 1e-5).0), &x, &dx, 2e-3);
        check(|w| dot(&rms_norm(&x, 8, w, 1e-5).0), &w, &dw, 2e-3);

        let (_, st) = layer_norm(&x, 8, &w, &b, 1e-5);
        let (mut dx, mut dw, mut db) = (vec![0.0; 24], vec![0.0; 8], vec![0.0; 8]);
        layer_norm_back(&x, &gy, 8, &w, &st, &mut dx, &mut dw, &mut db);
        check(|x| dot(&layer_norm(x, 8, &w, &b, 1e-5).0), &x, &dx, 2e-3);
        check(|w| dot(&layer_norm(&x, 8, w, &b, 1e-5).0), &w, &dw, 2e-3);
        check(|b| dot(&layer_norm(&x, 8, &w, b, 1e-5).0), &b, &db, 2e-3);

        check(|x| dot(&gelu(x)), &x, &gelu_back(&x, &gy), 2e-3);
        let u = vals(24, 9);
        let (dg, du) = swiglu_back(&x, &u, &gy);
        check(|g| dot(&swiglu(g, &u)), &x, &dg, 2e-3);
        check(|u| dot(&swiglu(&x, u)), &u, &du, 2e-3);
    }

    #[test]
    fn rope_inverse_undoes_it_and_cross_entropy_gradient_is_softmax_minus_onehot() {
        let x = vals(2 * 2 * 8, 10);
        let (cos, sin): (Vec<f32>, Vec<f32>) = (0..8).map(|i| ((i as f32).cos(), (i as f32).sin())).unzip();
        let mut y = x.clone();
        rope(&mut y, 2, 8, &cos, &sin, false);
        assert_ne!(y, x);
        rope(&mut y, 2, 8, &cos, &sin, true);
        y.iter().zip(&x).for_each(|(a, b)| assert!((a - b).abs() < 1e-5));

        let logits = vals(12, 11);
        let targets = [Some(1), None, Some(3)];
        let loss = |l: &[f32]| {
            let mut l = l.to_vec();
            cross_entropy(&mut l, 4, &targets, 2) / 2.0
        };
        let mut g = logits.clone();
        cross_entropy(&mut g, 4, &targets, 2);
        check(loss, &logits, &g, 1e-3);
        assert!(g[4..8].iter().all(|&v| v == 0.0));
    }
}
