//! Causal attention for a prompt chunk: many query rows of one sequence against its KV cache at once.
//!
//! Decode attends one row at a time (`ops::attend_group`): dot products and value sums per key, which is what one
//! query needs. A prompt chunk of 64–256 rows has hundreds of queries per KV head, and read that way it spent a
//! quarter of prefill (and most of a long-context chunk) on horizontal sums and stores. Here the queries that share
//! a KV head are packed 16 to a tile, one query per SIMD lane, so scores and value sums become two small register-
//! tiled products (a key or value element broadcast against 16 queries), with the softmax kept online per lane
//! (flash-attention style: running max, running sum, rescaled output) over blocks of keys.

use super::kv_elem::KvElem;
use super::matrix::SyncPtr;
use super::pool;

/// Queries per tile: two AVX2 registers of lanes.
const LANES: usize = 16;
/// Keys per block of the online softmax.
const KB: usize = 64;

/// Where a prompt chunk sits and how its heads are shaped.
#[derive(Debug, Clone, Copy)]
pub struct ChunkShape {
    /// Query rows in the chunk.
    pub rows: usize,
    /// Position of the chunk's first row (keys `0..first_pos + rows` are in the cache).
    pub first_pos: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads (each serves `n_heads / n_kv_heads` query heads).
    pub n_kv_heads: usize,
    /// Head width.
    pub head_dim: usize,
    /// A query at position p sees keys `p - window + 1 ..= p`.
    pub window: Option<usize>,
    /// Score scale, usually `1/sqrt(head_dim)`.
    pub scale: f32,
}

/// Attention of every row of a chunk: `q` and `out` are `rows × n_heads·hd`; key/value row `j` is at
/// `keys[j·kv_dim..]`/`values[j·kv_dim..]` with `kv_dim = n_kv_heads·hd`, and must hold every position up to the
/// chunk's last. Equal to `ops::attend_group` per row and KV head up to float rounding (tested).
///
/// An f16 cache is converted to f32 once for the chunk (every tile reads every key in view, so converting per tile
/// cost a prompt an eighth of its speed; the f32 copy is ~2 MB a layer at 1,500 positions) and then read exactly
/// as an f32 cache holding the same values.
pub fn attend_chunk<T: KvElem>(q: &[f32], keys: &[T], values: &[T], s: &ChunkShape, out: &mut [f32]) {
    let (hd, group) = (s.head_dim, s.n_heads / s.n_kv_heads);
    let (q_dim, kv_dim) = (s.n_heads * hd, s.n_kv_heads * hd);
    let last = s.first_pos + s.rows;
    assert!(q.len() >= s.rows * q_dim && out.len() >= s.rows * q_dim, "attend_chunk: q/out hold rows × q_dim");
    assert!(keys.len() >= last * kv_dim && values.len() >= last * kv_dim, "attend_chunk: cache ends before chunk");
    let (Some(keys), Some(values)) = (T::as_f32(keys), T::as_f32(values)) else {
        // Kept per thread: fresh megabytes every layer and chunk cost page faults worth a twentieth of a prompt.
        thread_local! {
            static F32_COPY: std::cell::RefCell<(Vec<f32>, Vec<f32>)> = const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
        }
        return F32_COPY.with_borrow_mut(|(k, v)| {
            // Both threads convert (a prompt's later chunks convert thousands of rows a layer).
            let n = last * kv_dim;
            for (dst, src) in [(&mut *k, keys), (&mut *v, values)] {
                dst.resize(n, 0.0);
                pool::for_each_piece_mut(&mut dst[..n], 64 * kv_dim, |i, d| {
                    let at = i * 64 * kv_dim;
                    T::convert_to_f32(&src[at..at + d.len()], d);
                });
            }
            attend_chunk(q, &k[..n], &v[..n], s, out)
        });
    };
    let lanes = s.rows * group;
    let tiles = lanes.div_ceil(LANES);
    let o = SyncPtr(out.as_mut_ptr());
    pool::parallel_for(tiles * s.n_kv_heads, |task| {
        let (kvh, tile) = (task / tiles, task % tiles);
        let mut t = Tile::new(hd);
        let first = tile * LANES;
        let n = LANES.min(lanes - first);
        // Lane → (row, query head): row-major over the rows, the group's heads side by side.
        let at = |lane: usize| {
            let (row, g) = ((first + lane) / group, (first + lane) % group);
            row * q_dim + (kvh * group + g) * hd
        };
        for lane in 0..LANES {
            let l = lane.min(n - 1); // spare lanes repeat the last query; their results are not written
            let pos = s.first_pos + (first + l) / group;
            t.hi[lane] = pos as f32;
            t.lo[lane] = s.window.map_or(0, |w| (pos + 1).saturating_sub(w)) as f32;
            let src = &q[at(l)..at(l) + hd];
            for (d, &x) in src.iter().enumerate() {
                t.qt[d * LANES + lane] = x * s.scale;
            }
        }
        let kv = Kv { keys, values, stride: kv_dim, offset: kvh * hd };
        t.run(&kv);
        for lane in 0..n {
            let inv = 1.0 / t.l[lane];
            // SAFETY: each (row, query head) slice belongs to exactly one lane of one task.
            let dst = unsafe { std::slice::from_raw_parts_mut(o.get().add(at(lane)), hd) };
            for (d, v) in dst.iter_mut().enumerate() {
                *v = t.ot[d * LANES + lane] * inv;
            }
        }
    });
}

/// One KV head's keys and values: row `j`'s head slice starts at `j·stride + offset`.
struct Kv<'a> {
    keys: &'a [f32],
    values: &'a [f32],
    stride: usize,
    offset: usize,
}

/// One tile's state: transposed queries, lane positions, the running max/sum and the transposed output.
struct Tile {
    hd: usize,
    /// `[hd][LANES]`, pre-scaled.
    qt: Vec<f32>,
    /// Last and first key each lane sees (as f32 for SIMD compares; exact below 2^24).
    hi: [f32; LANES],
    lo: [f32; LANES],
    m: [f32; LANES],
    l: [f32; LANES],
    /// `[hd][LANES]`, unnormalised.
    ot: Vec<f32>,
    /// `[KB][LANES]` scores, then probabilities.
    s: Vec<f32>,
}

impl Tile {
    fn new(hd: usize) -> Self {
        Tile {
            hd,
            qt: vec![0.0; hd * LANES],
            hi: [0.0; LANES],
            lo: [0.0; LANES],
            m: [f32::NEG_INFINITY; LANES],
            l: [0.0; LANES],
            ot: vec![0.0; hd * LANES],
            s: vec![0.0; KB * LANES],
        }
    }

    /// Walks the keys any lane sees, a block at a time.
    fn run(&mut self, kv: &Kv) {
        let lo = self.lo.iter().fold(f32::INFINITY, |a, &b| a.min(b)) as usize;
        let hi = self.hi.iter().fold(0f32, |a, &b| a.max(b)) as usize;
        let (lo_max, hi_min) =
            (self.lo.iter().fold(0f32, |a, &b| a.max(b)), self.hi.iter().fold(f32::INFINITY, |a, &b| a.min(b)));
        let mut j0 = lo;
        while j0 <= hi {
            let kb = KB.min(hi + 1 - j0);
            self.scores(kv, j0, kb);
            if (j0 as f32) < lo_max || ((j0 + kb - 1) as f32) > hi_min {
                self.mask(j0, kb);
            }
            self.softmax_step(kb);
            self.values(kv, j0, kb);
            j0 += kb;
        }
    }

    fn scores(&mut self, kv: &Kv, j0: usize, kb: usize) {
        #[cfg(target_arch = "x86_64")]
        if super::features::has_avx2() {
            // SAFETY: AVX2/FMA present; rows j0..j0+kb of the cache exist (asserted by the caller's length check).
            unsafe { avx::scores(self, kv, j0, kb) };
            return;
        }
        for jj in 0..kb {
            let k = &kv.keys[(j0 + jj) * kv.stride + kv.offset..][..self.hd];
            for lane in 0..LANES {
                self.s[jj * LANES + lane] = (0..self.hd).map(|d| k[d] * self.qt[d * LANES + lane]).sum();
            }
        }
    }

    /// Scores of keys a lane must not see become -inf.
    fn mask(&mut self, j0: usize, kb: usize) {
        for jj in 0..kb {
            let j = (j0 + jj) as f32;
            for lane in 0..LANES {
                if j > self.hi[lane] || j < self.lo[lane] {
                    self.s[jj * LANES + lane] = f32::NEG_INFINITY;
                }
            }
        }
    }

    /// Online softmax over one block: new running max, scores to probabilities, running sum and output rescaled.
    fn softmax_step(&mut self, kb: usize) {
        #[cfg(target_arch = "x86_64")]
        if super::features::has_avx2() {
            // SAFETY: AVX2/FMA present; `s` holds kb × LANES and `ot` hd × LANES.
            unsafe { avx::softmax_step(self, kb) };
            return;
        }
        for lane in 0..LANES {
            let bm = (0..kb).map(|jj| self.s[jj * LANES + lane]).fold(f32::NEG_INFINITY, f32::max);
            let m_new = self.m[lane].max(bm);
            // A lane that has seen no key yet keeps 0 as its reference so exp never sees -inf - -inf.
            let r = if m_new == f32::NEG_INFINITY { 0.0 } else { m_new };
            let alpha = (self.m[lane] - r).exp();
            self.m[lane] = m_new;
            self.l[lane] *= alpha;
            for d in 0..self.hd {
                self.ot[d * LANES + lane] *= alpha;
            }
            self.s_exp(kb, lane, r);
        }
    }

    fn s_exp(&mut self, kb: usize, lane: usize, r: f32) {
        let mut sum = 0.0;
        for jj in 0..kb {
            let p = &mut self.s[jj * LANES + lane];
            *p = (*p - r).exp();
            sum += *p;
        }
        self.l[lane] += sum;
    }

    fn values(&mut self, kv: &Kv, j0: usize, kb: usize) {
        #[cfg(target_arch = "x86_64")]
        if super::features::has_avx2() {
            // SAFETY: AVX2/FMA present; rows j0..j0+kb of the cache exist.
            unsafe { avx::values(self, kv, j0, kb) };
            return;
        }
        for jj in 0..kb {
            let v = &kv.values[(j0 + jj) * kv.stride + kv.offset..][..self.hd];
            for (d, &x) in v.iter().enumerate() {
                for lane in 0..LANES {
                    self.ot[d * LANES + lane] += self.s[jj * LANES + lane] * x;
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx {
    use super::super::ops::exp8;
    use super::{Kv, Tile, LANES};
    use std::arch::x86_64::*;

    /// `s[jj][lanes] = Σ_d k[j0+jj][d] · qt[d][lanes]`, four keys at a time.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn scores(t: &mut Tile, kv: &Kv, j0: usize, kb: usize) {
        let hd = t.hd;
        assert!(kv.keys.len() >= (j0 + kb - 1) * kv.stride + kv.offset + hd && t.s.len() >= kb * LANES);
        let qp = t.qt.as_ptr();
        let kp = kv.keys.as_ptr().add(kv.offset);
        let sp = t.s.as_mut_ptr();
        let mut jj = 0;
        while jj + 4 <= kb {
            let k: [*const f32; 4] = std::array::from_fn(|i| kp.add((j0 + jj + i) * kv.stride));
            let mut a = [_mm256_setzero_ps(); 4];
            let mut b = [_mm256_setzero_ps(); 4];
            for d in 0..hd {
                let qa = _mm256_loadu_ps(qp.add(d * LANES));
                let qb = _mm256_loadu_ps(qp.add(d * LANES + 8));
                for i in 0..4 {
                    let kv = _mm256_broadcast_ss(&*k[i].add(d));
                    a[i] = _mm256_fmadd_ps(kv, qa, a[i]);
                    b[i] = _mm256_fmadd_ps(kv, qb, b[i]);
                }
            }
            for i in 0..4 {
                _mm256_storeu_ps(sp.add((jj + i) * LANES), a[i]);
                _mm256_storeu_ps(sp.add((jj + i) * LANES + 8), b[i]);
            }
            jj += 4;
        }
        while jj < kb {
            let k = kp.add((j0 + jj) * kv.stride);
            let (mut a, mut b) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            for d in 0..hd {
                let kv = _mm256_broadcast_ss(&*k.add(d));
                a = _mm256_fmadd_ps(kv, _mm256_loadu_ps(qp.add(d * LANES)), a);
                b = _mm256_fmadd_ps(kv, _mm256_loadu_ps(qp.add(d * LANES + 8)), b);
            }
            _mm256_storeu_ps(sp.add(jj * LANES), a);
            _mm256_storeu_ps(sp.add(jj * LANES + 8), b);
            jj += 1;
        }
    }

    /// The online softmax step of `Tile::softmax_step`, eight lanes a register.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn softmax_step(t: &mut Tile, kb: usize) {
        assert!(t.s.len() >= kb * LANES && t.ot.len() >= t.hd * LANES);
        let sp = t.s.as_mut_ptr();
        let op = t.ot.as_mut_ptr();
        let ninf = _mm256_set1_ps(f32::NEG_INFINITY);
        for off in [0, 8] {
            let mut bm = ninf;
            for jj in 0..kb {
                bm = _mm256_max_ps(bm, _mm256_loadu_ps(sp.add(jj * LANES + off)));
            }
            let m_old = _mm256_loadu_ps(t.m.as_ptr().add(off));
            let m_new = _mm256_max_ps(m_old, bm);
            let r = _mm256_blendv_ps(m_new, _mm256_setzero_ps(), _mm256_cmp_ps(m_new, ninf, _CMP_EQ_OQ));
            let alpha = exp8(_mm256_sub_ps(m_old, r));
            _mm256_storeu_ps(t.m.as_mut_ptr().add(off), m_new);
            let mut sum = _mm256_setzero_ps();
            for jj in 0..kb {
                let p = exp8(_mm256_sub_ps(_mm256_loadu_ps(sp.add(jj * LANES + off)), r));
                _mm256_storeu_ps(sp.add(jj * LANES + off), p);
                sum = _mm256_add_ps(sum, p);
            }
            let l = _mm256_loadu_ps(t.l.as_ptr().add(off));
            _mm256_storeu_ps(t.l.as_mut_ptr().add(off), _mm256_fmadd_ps(l, alpha, sum));
            for d in 0..t.hd {
                let o = op.add(d * LANES + off);
                _mm256_storeu_ps(o, _mm256_mul_ps(_mm256_loadu_ps(o), alpha));
            }
        }
    }

    /// `ot[d][lanes] += Σ_jj v[j0+jj][d] · s[jj][lanes]`, four output dimensions at a time.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn values(t: &mut Tile, kv: &Kv, j0: usize, kb: usize) {
        let hd = t.hd;
        assert!(kv.values.len() >= (j0 + kb - 1) * kv.stride + kv.offset + hd && t.s.len() >= kb * LANES);
        let vp = kv.values.as_ptr().add(kv.offset + j0 * kv.stride);
        let sp = t.s.as_ptr();
        let op = t.ot.as_mut_ptr();
        let mut d0 = 0;
        while d0 + 4 <= hd {
            let mut a: [__m256; 4] = std::array::from_fn(|i| _mm256_loadu_ps(op.add((d0 + i) * LANES)));
            let mut b: [__m256; 4] = std::array::from_fn(|i| _mm256_loadu_ps(op.add((d0 + i) * LANES + 8)));
            for jj in 0..kb {
                let pa = _mm256_loadu_ps(sp.add(jj * LANES));
                let pb = _mm256_loadu_ps(sp.add(jj * LANES + 8));
                let v = vp.add(jj * kv.stride + d0);
                for i in 0..4 {
                    let x = _mm256_broadcast_ss(&*v.add(i));
                    a[i] = _mm256_fmadd_ps(x, pa, a[i]);
                    b[i] = _mm256_fmadd_ps(x, pb, b[i]);
                }
            }
            for i in 0..4 {
                _mm256_storeu_ps(op.add((d0 + i) * LANES), a[i]);
                _mm256_storeu_ps(op.add((d0 + i) * LANES + 8), b[i]);
            }
            d0 += 4;
        }
        while d0 < hd {
            let (mut a, mut b) = (_mm256_loadu_ps(op.add(d0 * LANES)), _mm256_loadu_ps(op.add(d0 * LANES + 8)));
            for jj in 0..kb {
                let x = _mm256_broadcast_ss(&*vp.add(jj * kv.stride + d0));
                a = _mm256_fmadd_ps(x, _mm256_loadu_ps(sp.add(jj * LANES)), a);
                b = _mm256_fmadd_ps(x, _mm256_loadu_ps(sp.add(jj * LANES + 8)), b);
            }
            _mm256_storeu_ps(op.add(d0 * LANES), a);
            _mm256_storeu_ps(op.add(d0 * LANES + 8), b);
            d0 += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::ops::attend_group;
    use super::super::testdata::data;
    use super::*;

    /// The chunk's attention by `attend_group`, one row and KV head at a time (the reference).
    fn per_row<T: KvElem>(q: &[f32], k: &[T], v: &[T], s: &ChunkShape) -> Vec<f32> {
        let (hd, nkv, group) = (s.head_dim, s.n_kv_heads, s.n_heads / s.n_kv_heads);
        let (q_dim, kv_dim) = (s.n_heads * hd, nkv * hd);
        let mut want = vec![0f32; s.rows * q_dim];
        for r in 0..s.rows {
            let pos = s.first_pos + r;
            let lo = s.window.map_or(0, |w| (pos + 1).saturating_sub(w));
            for h in 0..nkv {
                let span = r * q_dim + h * group * hd..r * q_dim + (h + 1) * group * hd;
                attend_group(&q[span.clone()], k, v, kv_dim, h * hd, lo..pos + 1, hd, s.scale, &mut want[span]);
            }
        }
        want
    }

    /// The chunk against `attend_group` per row and KV head, over ragged tiles, windows and head widths.
    fn check(rows: usize, first_pos: usize, heads: (usize, usize), hd: usize, window: Option<usize>) {
        let (nh, nkv) = heads;
        let (q_dim, kv_dim) = (nh * hd, nkv * hd);
        let total = first_pos + rows;
        let q = data(rows * q_dim, 1 + rows as u64);
        let k = data(total * kv_dim, 2 + hd as u64);
        let v = data(total * kv_dim, 3 + first_pos as u64);
        // Scores large enough that the softmax is far from uniform.
        let q: Vec<f32> = q.iter().map(|x| x * 8.0).collect();
        let scale = 1.0 / (hd as f32).sqrt();
        let s = ChunkShape { rows, first_pos, n_heads: nh, n_kv_heads: nkv, head_dim: hd, window, scale };
        let mut got = vec![f32::NAN; rows * q_dim];
        attend_chunk(&q, &k, &v, &s, &mut got);
        let want = per_row(&q, &k, &v, &s);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 2e-5 * (1.0 + w.abs()),
                "rows {rows} at {first_pos} {heads:?} hd {hd} {window:?} [{i}]: {g} vs {w}"
            );
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn simd_exp_is_close_to_libm() {
        if !super::super::features::has_avx2() {
            return;
        }
        let xs: Vec<f32> = (-9000..=880).map(|i| i as f32 * 0.01).chain([-1e9, f32::NEG_INFINITY, -87.5]).collect();
        for c in xs.chunks(8) {
            let mut a = [0f32; 8];
            a[..c.len()].copy_from_slice(c);
            let mut got = [0f32; 8];
            // SAFETY: AVX2 checked above.
            unsafe {
                use std::arch::x86_64::*;
                _mm256_storeu_ps(got.as_mut_ptr(), super::super::ops::exp8(_mm256_loadu_ps(a.as_ptr())));
            }
            for (x, g) in a.iter().zip(got) {
                let w = if *x < -87.0 { 0.0 } else { x.exp() };
                assert!((g - w).abs() <= 3e-7 * w, "exp({x}) = {g}, libm {w}");
            }
        }
    }

    #[test]
    fn matches_one_row_attention() {
        for &(rows, first_pos) in &[(1, 0), (5, 0), (16, 3), (37, 70), (64, 129), (130, 0)] {
            for &heads in &[(9, 3), (4, 4), (8, 1), (6, 2)] {
                for &hd in &[64, 16, 36] {
                    check(rows, first_pos, heads, hd, None);
                }
            }
        }
    }

    /// An f16 cache: the chunk equals, bit for bit, the chunk over an f32 cache holding the same (rounded) values,
    /// and the one-row kernel over the f16 cache to rounding.
    fn check_f16(rows: usize, first_pos: usize, heads: (usize, usize), hd: usize, window: Option<usize>) {
        let (nh, nkv) = heads;
        let (q_dim, kv_dim) = (nh * hd, nkv * hd);
        let total = first_pos + rows;
        let q: Vec<f32> = data(rows * q_dim, 5 + rows as u64).iter().map(|x| x * 8.0).collect();
        let mut k16 = Vec::new();
        let mut v16 = Vec::new();
        half::f16::extend_from_f32(&mut k16, &data(total * kv_dim, 6 + hd as u64));
        half::f16::extend_from_f32(&mut v16, &data(total * kv_dim, 7 + first_pos as u64));
        let (k32, v32): (Vec<f32>, Vec<f32>) =
            (k16.iter().map(|x| x.to_f32()).collect(), v16.iter().map(|x| x.to_f32()).collect());
        let scale = 1.0 / (hd as f32).sqrt();
        let s = ChunkShape { rows, first_pos, n_heads: nh, n_kv_heads: nkv, head_dim: hd, window, scale };
        let mut got = vec![f32::NAN; rows * q_dim];
        attend_chunk(&q, &k16, &v16, &s, &mut got);
        let mut same = vec![f32::NAN; rows * q_dim];
        attend_chunk(&q, &k32, &v32, &s, &mut same);
        assert_eq!(
            got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            same.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            "f16 chunk vs f32 chunk on the same values: rows {rows} at {first_pos} {heads:?} hd {hd}"
        );
        let want = per_row(&q, &k16, &v16, &s);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= 2e-5 * (1.0 + w.abs()), "f16 rows {rows} at {first_pos} [{i}]: {g} vs {w}");
        }
    }

    #[test]
    fn an_f16_cache_reads_as_its_values_in_f32() {
        for &(rows, first_pos) in &[(1, 0), (16, 3), (37, 70), (64, 129)] {
            for &heads in &[(9, 3), (8, 1)] {
                for &hd in &[64, 16, 40] {
                    check_f16(rows, first_pos, heads, hd, None);
                }
            }
        }
        check_f16(40, 100, (9, 3), 64, Some(33));
    }

    #[test]
    fn matches_one_row_attention_with_a_sliding_window() {
        for &(rows, first_pos, w) in &[(40, 0, 7), (33, 100, 64), (70, 10, 1), (20, 200, 150)] {
            check(rows, first_pos, (9, 3), 64, Some(w));
            check(rows, first_pos, (8, 2), 32, Some(w));
        }
    }
}
