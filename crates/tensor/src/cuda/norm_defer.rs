//! The residual stream's RMSNorm deferred to the dp4a product that reads it (`split_norm_groups` in
//! gemv_split.cu): the o and down products at q8/q4 normed their whole output rows in one last block, a serial
//! step twice a layer on the decode's critical path. Deferred, each group of 32 columns is quantised by the
//! last of its blocks as `y·g` (the weights applied, the RMS not yet divided out: it scales a block and its 8-bit
//! form alike), with the group's sum of squares; the next product sums those into each row's 1/rms as it stores
//! its outputs and multiplies it in (measured faster than the tail: docs/performance-gpu.md).
//! One-stream decode runs the products whose blocks hold a group whole (`_gb`, [`groups_in_block`]): no counter.

use super::limits::{whole_groups, GEMV_MAX_ROWS, NORM_TAIL_MAX_N};
use super::{DevMatrix, Gpu};

/// Groups of 32 columns the widest deferred row has.
const GROUPS: usize = NORM_TAIL_MAX_N / 32;

/// The scratch's layout in bytes: the groups' counters (`GROUPS` u32, zero between launches), each row's groups'
/// sums of squares, then the 8-bit activations' planes (two terms, then a (scale, sum) pair a block of 32). The
/// planes are the deferring product's own, not the GPU's activation scratch: its blocks still read their input
/// from there while finished groups write their output.
const COUNTERS: usize = 0;
const SUMS: usize = COUNTERS + GROUPS * 4;
const Q1: usize = SUMS + GEMV_MAX_ROWS * GROUPS * 4;
const Q2: usize = Q1 + GEMV_MAX_ROWS * NORM_TAIL_MAX_N;
const DS: usize = Q2 + GEMV_MAX_ROWS * NORM_TAIL_MAX_N;
/// Bytes of the deferred norm's scratch (`Gpu::defer`).
pub(crate) const DEFER_BYTES: usize = DS + GEMV_MAX_ROWS * GROUPS * 8;
// The kernels load the planes as int4 and the pairs as float2.
const _: () = assert!(Q1.is_multiple_of(16) && Q2.is_multiple_of(16) && DS.is_multiple_of(8));

/// Addresses in the deferred norm's scratch that the kernels take.
pub(crate) struct DeferPlanes {
    /// The groups' counters (`GROUPS` u32).
    pub counters: u64,
    /// Each row's groups' sums of squares, `[rows][N/32]`.
    pub sums: u64,
    /// The 8-bit activations: first terms, second terms, (scale, sum) pairs.
    pub q1: u64,
    pub q2: u64,
    pub ds: u64,
}

/// The formats and block heights whose one-input deferring products come with their groups whole in a block (`_gb`,
/// gemv_split.cu's `GS_INSTANCE_GB`): where 32/R sub-blocks fit an SM's registers.
pub(crate) const GROUPS_BLOCK: [(&str, usize); 3] = [("q8", 4), ("q8", 8), ("q4", 8)];

/// Whether a deferring product runs the kernel whose blocks hold whole groups of 32 output rows (`_gb` in
/// gemv_split.cu: each block finishes its group's 8-bit form behind its own barrier, where the `_gn` kernels count
/// the group's blocks on a counter, fence, and read the rows back from L2 — a chain at the end of a one-wave
/// product). One input, [`GROUPS_BLOCK`]'s heights; the same bits as `_gn`.
pub(crate) fn groups_in_block(format: &str, rows: usize, per: usize) -> bool {
    rows == 1 && GROUPS_BLOCK.contains(&(format, per))
}

impl Gpu {
    /// The deferred norm's addresses (fixed for the GPU's life, so CUDA graphs may record them).
    pub(crate) fn defer_planes(&self) -> DeferPlanes {
        let d = &self.defer;
        DeferPlanes { counters: d.at(COUNTERS), sums: d.at(SUMS), q1: d.at(Q1), q2: d.at(Q2), ds: d.at(DS) }
    }

    /// Whether the norm of `producer`'s output, for `next` to read, may be deferred to `next` ([`super::NormTo::Deferred`],
    /// then [`super::Act::Act8Deferred`]): both dp4a products of `rows` rows, the output whole groups of 32 columns
    /// up to `NORM_TAIL_MAX_N`.
    pub fn defers_norm(&self, producer: &DevMatrix, next: &DevMatrix, rows: usize) -> bool {
        whole_groups(producer.rows)
            && next.cols == producer.rows
            && self.takes_act8(producer, rows)
            && self.takes_act8(next, rows)
    }
}

#[cfg(test)]
mod tests {
    use super::groups_in_block;

    /// Only one input at the heights instantiated (`GS_INSTANCE_GB` in gemv_split.cu, [`GROUPS_BLOCK`]): any other name would not
    /// be found when launched.
    #[test]
    fn groups_in_block_only_where_instantiated() {
        for (f, rows, per) in [("q4", 2, 8), ("q8", 8, 8), ("q8", 1, 2), ("q4", 1, 2), ("bf16", 1, 8)] {
            assert!(!groups_in_block(f, rows, per), "{f}, {rows} rows at height {per}");
        }
    }
}
