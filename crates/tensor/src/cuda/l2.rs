//! Bytes a latency-bound decode kernel asks L2 for while it runs: the next products' weights.
//!
//! A one-stream decode step alternates products that stream their weights at HBM's rate with kernels bound by a
//! chain of round trips over little data (the decode attention, SwiGLU), during which HBM idles. Those kernels take
//! an [`L2Next`]: once the grid before them has ended, their threads ask L2 for these ranges in pieces
//! (`cp.async.bulk.prefetch.L2` on sm_90; common.cuh's `l2_ask`), fire and forget, so the products after them find
//! their first weights in L2. Asking changes no result; it only moves when bytes leave HBM.

use super::DevMatrix;

/// Ranges a kernel hands L2 (address, bytes; bytes 0: none), split across all its threads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct L2Next(pub [(u64, u64); L2_RANGES]);

/// Ranges an [`L2Next`] holds: two matrices' quants and scales.
pub const L2_RANGES: usize = 4;

impl L2Next {
    /// Nothing asked.
    pub fn none() -> L2Next {
        L2Next::default()
    }

    /// The first `bytes` of `m`'s quants (all of them where `bytes` is past its end) and its scales' same share
    /// of rows (a matrix's rows are laid out one after another in both), added to the ranges; more ranges than
    /// [`L2_RANGES`] are dropped.
    pub fn with_rows_of(mut self, m: &DevMatrix, bytes: usize) -> L2Next {
        let (q, s) = rows_share(m.q.len(), m.s.as_ref().map_or(0, |s| s.len()), bytes);
        if q == 0 {
            return self;
        }
        self.push(m.q.ptr(), q);
        if let Some(sb) = m.s.as_ref().filter(|_| s > 0) {
            self.push(sb.ptr(), s);
        }
        self
    }

    /// The same ranges asked a 128-byte line at a time by the load units (`prefetch.global.L2`) rather than by the
    /// bulk copy engine, for measuring (common.cuh's `L2_LINES`).
    pub fn by_lines(mut self) -> L2Next {
        for r in self.0.iter_mut().filter(|r| r.1 > 0) {
            r.1 |= 1 << 63;
        }
        self
    }

    fn push(&mut self, ptr: u64, bytes: usize) {
        if let Some(slot) = self.0.iter_mut().find(|r| r.1 == 0) {
            *slot = (ptr, bytes as u64);
        }
    }
}

/// The bytes of a matrix's quants (`q` of them) and scales (`s`) that its first `bytes` of quants' rows take: the
/// quants up to `bytes`, the scales in the same proportion.
fn rows_share(q: usize, s: usize, bytes: usize) -> (usize, usize) {
    let take = bytes.min(q);
    if take == 0 {
        return (0, 0);
    }
    (take, (s as u128 * take as u128 / q as u128) as usize)
}

#[cfg(test)]
mod tests {
    use super::rows_share;

    #[test]
    fn a_share_of_rows_takes_its_scales_in_proportion() {
        // A Q4 matrix of 4096 × 4096: 8 MiB of quants, 2 MiB of (d, m) pairs.
        let (q, s) = (8 << 20, 2 << 20);
        assert_eq!(rows_share(q, s, 1 << 20), (1 << 20, 256 << 10));
        assert_eq!(rows_share(q, s, usize::MAX), (q, s), "past the end: all of it");
        assert_eq!(rows_share(q, 0, 4096), (4096, 0), "bf16: no scales");
        assert_eq!(rows_share(q, s, 0), (0, 0));
        assert_eq!(rows_share(0, 0, 4096), (0, 0), "an empty matrix");
    }
}
