//! Small f32 products on the calling thread, `c (+)= a·b`, on the GEMM's register tile (`gemm::tile`): for work
//! that already runs one block per pool task and would gain nothing from splitting a product again, such as the
//! gated delta rule's 64-token chunks (one value head a task), whose products are 64 × 128 × 128.

use super::gemm::{tile, MR, NR};
use std::cell::RefCell;

/// How the right-hand matrix `b` of [`matmul_f32`] is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BLayout {
    /// Element (kk, j) at `b[kk·ldb + j]`: k rows of n.
    KByN,
    /// Element (kk, j) at `b[j·ldb + kk]`: n rows of k (the product is then `a·Bᵀ` of that matrix).
    NByK,
}

/// The shape of a product: `m` rows of `a` (and `c`), `k` inputs, `n` outputs a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dims {
    /// Rows of `a` and `c`.
    pub m: usize,
    /// Columns of `a`, rows of `b`.
    pub k: usize,
    /// Columns of `b` and `c`.
    pub n: usize,
}

thread_local! {
    /// A 16-column panel of `b`, packed `[k][16]` as the tile reads it.
    static PANEL: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// `c[i·ldc + j] (+)= Σ_kk a[i·lda + kk] · b(kk, j)` for i < m, j < n, kk < k, on this thread (`accumulate` adds to
/// `c`, otherwise overwrites it).
///
/// # Panics
/// When a slice is shorter than its strides and the shape need.
#[allow(clippy::too_many_arguments)]
pub fn matmul_f32(
    a: &[f32],
    lda: usize,
    b: &[f32],
    ldb: usize,
    layout: BLayout,
    c: &mut [f32],
    ldc: usize,
    d: Dims,
    accumulate: bool,
) {
    let Dims { m, k, n } = d;
    if m == 0 || n == 0 {
        return;
    }
    assert!(c.len() >= (m - 1) * ldc + n, "matmul_f32: c holds m rows of n at stride ldc");
    if k == 0 {
        if !accumulate {
            (0..m).for_each(|i| c[i * ldc..i * ldc + n].fill(0.0));
        }
        return;
    }
    assert!(a.len() >= (m - 1) * lda + k, "matmul_f32: a holds m rows of k at stride lda");
    let b_need = match layout {
        BLayout::KByN => (k - 1) * ldb + n,
        BLayout::NByK => (n - 1) * ldb + k,
    };
    assert!(b.len() >= b_need, "matmul_f32: b holds its {layout:?} matrix at stride ldb");
    PANEL.with_borrow_mut(|buf| {
        buf.resize(k * NR, 0.0);
        let mut tmp = [0f32; MR * NR];
        for j0 in (0..n).step_by(NR) {
            let cols = NR.min(n - j0);
            for kk in 0..k {
                let dst = &mut buf[kk * NR..(kk + 1) * NR];
                match layout {
                    BLayout::KByN => dst[..cols].copy_from_slice(&b[kk * ldb + j0..kk * ldb + j0 + cols]),
                    BLayout::NByK => {
                        dst[..cols].iter_mut().enumerate().for_each(|(cc, v)| *v = b[(j0 + cc) * ldb + kk])
                    }
                }
                dst[cols..].fill(0.0);
            }
            let mut i0 = 0;
            while i0 < m {
                let rows = MR.min(m - i0);
                if cols == NR {
                    // SAFETY: rows i0..i0 + rows, columns j0..j0 + 16 of c lie inside it (asserted above), and c is
                    // borrowed mutably here alone.
                    unsafe {
                        tile(&a[i0 * lda..], lda, buf, k, c.as_mut_ptr().add(i0 * ldc + j0), ldc, rows, !accumulate)
                    };
                } else {
                    // SAFETY: tmp holds MR ≥ rows rows of 16.
                    unsafe { tile(&a[i0 * lda..], lda, buf, k, tmp.as_mut_ptr(), NR, rows, true) };
                    for r in 0..rows {
                        let dst = &mut c[(i0 + r) * ldc + j0..(i0 + r) * ldc + j0 + cols];
                        for (v, &t) in dst.iter_mut().zip(&tmp[r * NR..r * NR + cols]) {
                            *v = if accumulate { *v + t } else { t };
                        }
                    }
                }
                i0 += rows;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::testdata::data;

    #[test]
    fn every_shape_and_layout_equals_the_sums_in_f64() {
        // Shapes past a tile's 6 rows and a panel's 16 columns, with ragged ends; strides wider than the matrices.
        for (m, k, n) in [(1, 1, 1), (7, 5, 17), (64, 128, 128), (13, 64, 24), (64, 16, 64)] {
            let (lda, ldb, ldc) = (k + 3, k.max(n) + 5, n + 2);
            let a = data(m * lda, 1);
            let b = data(k.max(n) * ldb, 2);
            for layout in [BLayout::KByN, BLayout::NByK] {
                for accumulate in [false, true] {
                    let start = data(m * ldc, 3);
                    let mut c = start.clone();
                    matmul_f32(&a, lda, &b, ldb, layout, &mut c, ldc, Dims { m, k, n }, accumulate);
                    for i in 0..m {
                        for j in 0..ldc {
                            let got = c[i * ldc + j];
                            if j >= n {
                                assert_eq!(got, start[i * ldc + j], "column {j} past n written");
                                continue;
                            }
                            let mut want = if accumulate { start[i * ldc + j] as f64 } else { 0.0 };
                            for kk in 0..k {
                                let bv = match layout {
                                    BLayout::KByN => b[kk * ldb + j],
                                    BLayout::NByK => b[j * ldb + kk],
                                };
                                want += a[i * lda + kk] as f64 * bv as f64;
                            }
                            assert!(
                                (got as f64 - want).abs() < 1e-5,
                                "{m}×{k}×{n} {layout:?} ({i}, {j}): {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }
}
