//! The shapes the GEMV kernels and their norm tails take, shared by the launches (`ops`) and the deferred norm's
//! scratch (`norm_defer`).

/// Rows up to which a product runs the GEMV kernels (weights read once for all rows); more go to cuBLAS.
pub const GEMV_MAX_ROWS: usize = 8;

/// Columns up to which the norm tail holds a row in registers: `4 · NORM_TAIL_V · 128` in gemv_split.cu.
pub(crate) const NORM_TAIL_MAX_N: usize = 8192;

/// Whether a product's output rows are whole groups of 32 columns up to [`NORM_TAIL_MAX_N`]: what the dp4a norm
/// tail writes in 8-bit form and what the deferred norm takes.
pub(crate) fn whole_groups(n: usize) -> bool {
    n.is_multiple_of(32) && n <= NORM_TAIL_MAX_N
}
