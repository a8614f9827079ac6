//! A weight matrix in any of the CPU formats, and `y = x·Wᵀ` over it.
//!
//! Weights are `[rows = outputs, cols = inputs]`, row-major, each row a whole number of blocks. The bytes are owned
//! or borrowed from a memory map (the quantised cache, a GGUF file), so a cached model costs no copy to load.
//! One row of `x` (decode) runs the GEMV kernels (weights widened to i16 in registers, activations in i16 per
//! block); 2–8 rows (a scheduler step of several replies) run the few-row GEMV, which reads the weights once for
//! all of them and gives each row the one-row GEMV's bits; more rows (prefill) run the panel GEMM.

use super::quant::QType;
use super::{gemm, gemm_q, gemv_rows, pool};
use std::ops::Range;
use std::sync::Arc;

/// Bytes a matrix reads from: its own, or a range of a shared buffer (a memory map).
#[derive(Clone)]
pub enum Bytes {
    /// Owned.
    Owned(Arc<Vec<u8>>),
    /// A range of a shared, immutable buffer.
    Shared(Arc<dyn AsRef<[u8]> + Send + Sync>, Range<usize>),
}

impl Bytes {
    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Owned(v) => v,
            Bytes::Shared(b, r) => &(**b).as_ref()[r.clone()],
        }
    }
}

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bytes::Owned(v) => write!(f, "Owned({} bytes)", v.len()),
            Bytes::Shared(_, r) => write!(f, "Shared({r:?})"),
        }
    }
}

/// A matrix of weights in one storage format.
#[derive(Debug, Clone)]
pub struct QMatrix {
    qtype: QType,
    rows: usize,
    cols: usize,
    row_bytes: usize,
    data: Bytes,
}

/// A matrix whose byte length does not fit its shape and format.
#[derive(Debug, thiserror::Error)]
#[error("a {rows}×{cols} {qtype} matrix needs {need} bytes, got {got}")]
pub struct MatrixError {
    /// Format.
    pub qtype: &'static str,
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Bytes the shape needs (0 when the columns are not whole blocks).
    pub need: usize,
    /// Bytes given.
    pub got: usize,
}

impl QMatrix {
    /// Wraps stored bytes, checking their length against the shape.
    pub fn new(qtype: QType, rows: usize, cols: usize, data: Bytes) -> Result<Self, MatrixError> {
        let got = data.as_slice().len();
        let row_bytes = qtype.row_bytes(cols).unwrap_or(0);
        let need = row_bytes.saturating_mul(rows);
        if (row_bytes == 0 && cols > 0) || need != got {
            return Err(MatrixError {
                qtype: qtype.name(),
                rows,
                cols,
                need: if row_bytes == 0 { 0 } else { need },
                got,
            });
        }
        Ok(QMatrix { qtype, rows, cols, row_bytes, data })
    }

    /// Quantises f32 weights `[rows, cols]` into `qtype`.
    pub fn quantize(qtype: QType, rows: usize, cols: usize, w: &[f32]) -> Result<Self, MatrixError> {
        Self::quantize_with(qtype, rows, cols, w, |x, o| super::quant::quantize_row(qtype, x, o))
    }

    /// Quantises f32 weights `[rows, cols]` into Q8_0 blocks holding 6-bit quants (the q4 backends' output head:
    /// `quant::quantize_row_6bit`), which the GPU keeps in 6 bits.
    pub fn quantize_6bit(rows: usize, cols: usize, w: &[f32]) -> Result<Self, MatrixError> {
        Self::quantize_with(QType::Q8_0, rows, cols, w, super::quant::quantize_row_6bit)
    }

    /// Whether a Q8_0 matrix's quants all lie in 6 bits ([`QMatrix::quantize_6bit`]'s, or a file's that happen to).
    pub fn is_6bit(&self) -> bool {
        let nb = self.cols / super::quant::BLOCK;
        self.qtype == QType::Q8_0 && (0..self.rows).all(|r| super::quant::q8_row_is_6bit(self.row(r), nb))
    }

    fn quantize_with(
        qtype: QType,
        rows: usize,
        cols: usize,
        w: &[f32],
        row_fn: impl Fn(&[f32], &mut [u8]) + Sync,
    ) -> Result<Self, MatrixError> {
        let row_bytes =
            qtype.row_bytes(cols).ok_or(MatrixError { qtype: qtype.name(), rows, cols, need: 0, got: 0 })?;
        let mut out = vec![0u8; row_bytes * rows];
        if w.len() != rows * cols {
            return Err(MatrixError { qtype: "F32", rows, cols, need: rows * cols * 4, got: w.len() * 4 });
        }
        let tasks = pool::threads() * 4;
        let ptr = SyncPtr(out.as_mut_ptr());
        pool::parallel_for(tasks.min(rows.max(1)), |t| {
            for r in pool::chunk(rows, tasks.min(rows.max(1)), t) {
                // SAFETY: each task writes only its own rows.
                let o = unsafe { std::slice::from_raw_parts_mut(ptr.get().add(r * row_bytes), row_bytes) };
                row_fn(&w[r * cols..(r + 1) * cols], o);
            }
        });
        QMatrix::new(qtype, rows, cols, Bytes::Owned(Arc::new(out)))
    }

    /// Converts GGUF blocks (`rows × cols/32` blocks, GGUF's byte layout) into a matrix, value for value.
    pub fn from_ggml(qtype: QType, rows: usize, cols: usize, ggml: &[u8]) -> Result<Self, MatrixError> {
        let row_bytes =
            qtype.row_bytes(cols).ok_or(MatrixError { qtype: qtype.name(), rows, cols, need: 0, got: 0 })?;
        let ggml_row = match qtype {
            QType::F32 | QType::BF16 => row_bytes,
            _ => cols / super::quant::BLOCK * qtype.ggml_block_bytes(),
        };
        if ggml.len() != ggml_row * rows {
            return Err(MatrixError { qtype: qtype.name(), rows, cols, need: ggml_row * rows, got: ggml.len() });
        }
        let mut out = vec![0u8; row_bytes * rows];
        for (o, g) in out.chunks_exact_mut(row_bytes).zip(ggml.chunks_exact(ggml_row)) {
            super::quant::from_ggml(qtype, g, o);
        }
        QMatrix::new(qtype, rows, cols, Bytes::Owned(Arc::new(out)))
    }

    /// Stacks matrices of one format and width into one (q/k/v, gate/up), so one pass reads all of them.
    pub fn stack(parts: &[QMatrix]) -> Result<Self, MatrixError> {
        let (qtype, cols) = (parts[0].qtype, parts[0].cols);
        let rows = parts.iter().map(|p| p.rows).sum();
        let mut out = Vec::with_capacity(parts.iter().map(|p| p.data.as_slice().len()).sum());
        for p in parts {
            if p.qtype != qtype || p.cols != cols {
                return Err(MatrixError { qtype: p.qtype.name(), rows: p.rows, cols: p.cols, need: 0, got: 0 });
            }
            out.extend_from_slice(p.data.as_slice());
        }
        QMatrix::new(qtype, rows, cols, Bytes::Owned(Arc::new(out)))
    }

    /// Rows `r` of this matrix as a matrix of their own, sharing the bytes (one expert of a stacked expert tensor).
    ///
    /// # Panics
    /// When `r` reaches past the last row: callers own the shapes.
    pub fn rows_view(&self, r: Range<usize>) -> QMatrix {
        assert!(r.start <= r.end && r.end <= self.rows, "rows_view {r:?} of {} rows", self.rows);
        let bytes = r.start * self.row_bytes..r.end * self.row_bytes;
        let data = match &self.data {
            Bytes::Owned(v) => {
                let shared: Arc<dyn AsRef<[u8]> + Send + Sync> = v.clone();
                Bytes::Shared(shared, bytes)
            }
            Bytes::Shared(b, outer) => Bytes::Shared(b.clone(), outer.start + bytes.start..outer.start + bytes.end),
        };
        QMatrix { qtype: self.qtype, rows: r.len(), cols: self.cols, row_bytes: self.row_bytes, data }
    }

    /// Storage format.
    pub fn qtype(&self) -> QType {
        self.qtype
    }

    /// Output count.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input count.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The stored bytes (for the quantised cache).
    pub fn bytes(&self) -> &[u8] {
        self.data.as_slice()
    }

    /// One stored row.
    pub fn row(&self, r: usize) -> &[u8] {
        &self.data.as_slice()[r * self.row_bytes..(r + 1) * self.row_bytes]
    }

    /// Row `r` as f32 (an embedding lookup).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        super::quant::dequantize_row(self.qtype, self.row(r), &mut out[..self.cols]);
    }

    /// The same values in another format: each row dequantised and quantised again (the GPU holds Q4_1 as Q8_0,
    /// having no 4-bit form with a minimum).
    pub fn requantize(&self, qtype: QType) -> Result<QMatrix, MatrixError> {
        let mut w = vec![0f32; self.rows * self.cols];
        for (r, o) in w.chunks_exact_mut(self.cols.max(1)).enumerate().take(self.rows) {
            self.dequantize_row(r, o);
        }
        QMatrix::quantize(qtype, self.rows, self.cols, &w)
    }

    /// `out[n, rows] = x[n, cols] · selfᵀ`.
    ///
    /// # Panics
    /// When a slice is shorter than its shape says: callers own the shapes, and a mismatch is a bug, not input.
    pub fn matmul(&self, x: &[f32], n: usize, out: &mut [f32]) {
        assert!(x.len() >= n * self.cols && out.len() >= n * self.rows, "matmul shapes");
        if n == 0 || self.rows == 0 {
            return;
        }
        // bf16 is a GPU format; on the CPU it only runs through the GEMM's dequantised panels.
        match n {
            _ if self.qtype == QType::BF16 => gemm::gemm(self, x, n, out),
            1 => gemv_rows::gemv(self, &x[..self.cols], &mut out[..self.rows]),
            // Weights read once for all rows: with i16 activations each row is the one-row GEMV's bits; a decode
            // step's rows over quantised weights on AVX-VNNI take 8-bit ones (a few rows are compute-bound).
            2..=gemv_rows::MAX_ROWS => gemv_rows::gemv_rows(self, x, n, out),
            // A short prompt chunk (or a step of more than 8 replies) over quantised weights: passes of up to 8 rows,
            // each row again the one-row GEMV's bits (a decode step's, 8-bit on AVX-VNNI).
            _ if self.qtype != QType::F32 && n <= FEW_ROWS_SPLIT_MAX => {
                let (k, m) = (self.cols, self.rows);
                let mut i = 0;
                while i < n {
                    let c = (n - i).min(gemv_rows::MAX_ROWS);
                    let (xs, os) = (&x[i * k..(i + c) * k], &mut out[i * m..(i + c) * m]);
                    if c == 1 {
                        gemv_rows::gemv(self, xs, os);
                    } else {
                        gemv_rows::gemv_rows(self, xs, c, os);
                    }
                    i += c;
                }
            }
            // Quantised weights against i16 activations in integer pair products: twice the f32 FMA rate.
            _ if self.qtype != QType::F32 => gemm_q::gemm_q(self, x, n, out),
            _ => gemm::gemm(self, x, n, out),
        }
    }
}

/// Rows up to which a product over quantised weights runs as passes of up to 8 rows (each weight read once a pass)
/// rather than the panel GEMM, whose per-panel widening of the weights to i16 pays off only over more rows: up to
/// 32 the split is faster on SmolLM2's matrices, from 48 the GEMM (`examples/gemv_rows.rs`; docs/performance.md).
pub const FEW_ROWS_SPLIT_MAX: usize = 32;

/// A raw pointer that tasks of one parallel region may share, each writing its own part.
#[derive(Clone, Copy)]
pub(crate) struct SyncPtr<T>(pub(crate) *mut T);
// SAFETY: used only where tasks write disjoint ranges and the region ends before the buffer is touched again.
unsafe impl<T> Sync for SyncPtr<T> {}
// SAFETY: as for Sync: the pointer crosses to the region's tasks, which write disjoint ranges.
unsafe impl<T> Send for SyncPtr<T> {}
impl<T> SyncPtr<T> {
    pub(crate) fn get(self) -> *mut T {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::super::gemv_rows8;
    use super::super::testdata::data;
    use super::*;

    /// An expert's rows of a stacked tensor compute what the same rows as a matrix of their own do, whether the
    /// stack owns its bytes or borrows them.
    #[test]
    fn a_rows_view_is_those_rows() {
        let (m, k) = (12, 64);
        for t in [QType::F32, QType::Q8_0, QType::Q4_0] {
            let w = QMatrix::quantize(t, m, k, &data(m * k, 5)).unwrap();
            let part = QMatrix::quantize(t, 4, k, &data(m * k, 5)[4 * k..8 * k]).unwrap();
            let view = w.rows_view(4..8);
            assert_eq!(view.bytes(), part.bytes(), "{t:?}");
            let nested = w.rows_view(2..10).rows_view(2..6);
            assert_eq!(nested.bytes(), part.bytes(), "{t:?} view of a view");
            let x = data(3 * k, 6);
            let (mut a, mut b) = (vec![0f32; 12], vec![0f32; 12]);
            view.matmul(&x, 3, &mut a);
            part.matmul(&x, 3, &mut b);
            assert_eq!(a, b, "{t:?}");
        }
    }

    #[test]
    fn matmul_gives_a_few_rows_their_one_row_bits_a_decode_step_its_kernel_and_more_rows_the_gemm() {
        // (Quantised weights: up to FEW_ROWS_SPLIT_MAX rows are passes of up to 8, each row its one-row bits.)
        let (m, k) = (45, 320);
        for t in [QType::F32, QType::Q8_0, QType::Q4_0, QType::Q4_1] {
            let w = QMatrix::quantize(t, m, k, &data(m * k, 21)).unwrap();
            for n in (1..=11).chain([16, 32, 33]) {
                let x = data(n * k, 22 + n as u64);
                let mut got = vec![0f32; n * m];
                w.matmul(&x, n, &mut got);
                if (2..=FEW_ROWS_SPLIT_MAX).contains(&n) && t != QType::F32 && gemv_rows8::active() {
                    // In a decode step, 8-bit activations: the few-row kernel's own result on passes of up to 8 rows
                    // (a lone last row: the one-row GEMV), not the one-row bits.
                    let mut step = vec![0f32; n * m];
                    gemv_rows8::decode_step(true, || w.matmul(&x, n, &mut step));
                    let mut want = vec![0f32; n * m];
                    for i in (0..n).step_by(gemv_rows::MAX_ROWS) {
                        let c = (n - i).min(gemv_rows::MAX_ROWS);
                        let (xs, os) = (&x[i * k..(i + c) * k], &mut want[i * m..(i + c) * m]);
                        if c == 1 {
                            gemv_rows::gemv(&w, xs, os);
                        } else {
                            gemv_rows8::gemv_rows8(&w, xs, c, os);
                        }
                    }
                    assert_eq!(step, want, "{t:?} n{n}");
                }
                if n <= gemv_rows::MAX_ROWS || (t != QType::F32 && n <= FEW_ROWS_SPLIT_MAX) {
                    for i in 0..n {
                        let mut alone = vec![0f32; m];
                        w.matmul(&x[i * k..(i + 1) * k], 1, &mut alone);
                        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                        assert_eq!(bits(&got[i * m..(i + 1) * m]), bits(&alone), "{t:?} n{n} row {i}");
                    }
                } else {
                    let mut want = vec![0f32; n * m];
                    if t == QType::F32 {
                        gemm::gemm(&w, &x, n, &mut want);
                    } else {
                        gemm_q::gemm_q(&w, &x, n, &mut want);
                    }
                    assert_eq!(got, want, "{t:?} n{n}");
                }
            }
        }
    }
}
