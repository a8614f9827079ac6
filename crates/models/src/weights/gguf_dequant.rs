//! GGML tensor types: their ids, names and block layouts, and the f32 dequantisers for the block types kvad reads.
//!
//! A GGML block type stores `block_len` consecutive weights (along `ne[0]`, the innermost dimension) in
//! `block_bytes` bytes. The decoders below are plain loops over blocks; `dequantize` runs them over chunks of blocks
//! in parallel because a whole model is dequantised at every load.

use rayon::prelude::*;

use super::StoredType;

/// A GGML tensor type id as stored in a GGUF tensor info (0 = F32, 1 = F16, 2 = Q4_0, ..., 30 = BF16).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GgmlType(pub u32);

/// (id, name, weights per block, bytes per block) for every type id ggml has assigned and not withdrawn.
/// Sizes follow the block structs of ggml; knowing them lets us bounds-check tensors we cannot decode.
const TYPES: &[(u32, &str, usize, usize)] = &[
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 36),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
];

impl GgmlType {
    /// The ggml name ("Q4_K"), or `None` for an id ggml never assigned or has withdrawn.
    pub fn name(self) -> Option<&'static str> {
        TYPES.iter().find(|t| t.0 == self.0).map(|t| t.1)
    }

    /// (weights per block, bytes per block), or `None` for an unknown id (whose size we then cannot check).
    pub fn block_layout(self) -> Option<(usize, usize)> {
        TYPES.iter().find(|t| t.0 == self.0).map(|t| (t.2, t.3))
    }

    /// The type as the weight-source API names it; unknown ids become `Other("ggml_type_<id>")`.
    pub fn stored_type(self) -> StoredType {
        match self.0 {
            0 => StoredType::F32,
            1 => StoredType::F16,
            2 => StoredType::Q4_0,
            3 => StoredType::Q4_1,
            8 => StoredType::Q8_0,
            12 => StoredType::Q4_K,
            14 => StoredType::Q6_K,
            30 => StoredType::BF16,
            id => StoredType::Other(self.name().map_or_else(|| format!("ggml_type_{id}"), str::to_string)),
        }
    }
}

/// (weights per block, bytes per block) of the types `dequantize` decodes.
fn readable_layout(dtype: &StoredType) -> Option<(usize, usize)> {
    Some(match dtype {
        StoredType::F32 => (1, 4),
        StoredType::F16 | StoredType::BF16 => (1, 2),
        StoredType::Q8_0 => (32, 34),
        StoredType::Q4_0 => (32, 18),
        StoredType::Q4_1 => (32, 20),
        StoredType::Q4_K => (256, 144),
        StoredType::Q6_K => (256, 210),
        StoredType::Other(_) => return None,
    })
}

/// Blocks handed to one rayon task: large enough that task overhead is noise, small enough to balance 2-64 cores.
const BLOCKS_PER_TASK: usize = 1024;

/// Decodes `bytes` (a whole number of blocks of `dtype`) into f32 values in stored order.
///
/// Returns `None` when the type is not readable or `bytes` is not a whole number of blocks, so callers turn that
/// into a typed error with the file and tensor name. Public so quantised backends can decode a row on demand.
pub fn dequantize(dtype: &StoredType, bytes: &[u8]) -> Option<Vec<f32>> {
    let (block_len, block_bytes) = readable_layout(dtype)?;
    if bytes.len().checked_rem(block_bytes) != Some(0) {
        return None;
    }
    let n_values = (bytes.len() / block_bytes).checked_mul(block_len)?;
    let mut out = vec![0f32; n_values];
    let decode: fn(&[u8], &mut [f32]) = match dtype {
        StoredType::F32 => super::f32_bytes_to_f32,
        StoredType::F16 => super::f16_bytes_to_f32,
        StoredType::BF16 => super::bf16_bytes_to_f32,
        StoredType::Q8_0 => q8_0,
        StoredType::Q4_0 => q4_0,
        StoredType::Q4_1 => q4_1,
        StoredType::Q4_K => q4_k,
        StoredType::Q6_K => q6_k,
        StoredType::Other(_) => return None,
    };
    let task_values = BLOCKS_PER_TASK * block_len;
    let task_bytes = BLOCKS_PER_TASK * block_bytes;
    out.par_chunks_mut(task_values).zip(bytes.par_chunks(task_bytes)).for_each(|(o, b)| decode(b, o));
    Some(out)
}

/// Reads the little-endian f16 at `b[at..at + 2]` as f32.
fn f16_at(b: &[u8], at: usize) -> f32 {
    half::f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// Q8_0: f16 d, then 32 i8; value q*d.
fn q8_0(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(34).zip(out.chunks_exact_mut(32)) {
        let d = f16_at(b, 0);
        for (y, &q) in y.iter_mut().zip(&b[2..34]) {
            *y = f32::from(q as i8) * d;
        }
    }
}

/// Q4_0: f16 d, then 16 bytes; weight j < 16 in the low nibble of byte j, weight j + 16 in its high nibble;
/// value (q - 8) * d.
fn q4_0(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(18).zip(out.chunks_exact_mut(32)) {
        let d = f16_at(b, 0);
        let (lo, hi) = y.split_at_mut(16);
        for ((&q, l), h) in b[2..18].iter().zip(lo).zip(hi) {
            *l = f32::from(i16::from(q & 0x0f) - 8) * d;
            *h = f32::from(i16::from(q >> 4) - 8) * d;
        }
    }
}

/// Q4_1: f16 d, f16 m, then 16 bytes of nibbles laid out as in Q4_0; value q * d + m.
fn q4_1(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(20).zip(out.chunks_exact_mut(32)) {
        let (d, m) = (f16_at(b, 0), f16_at(b, 2));
        let (lo, hi) = y.split_at_mut(16);
        for ((&q, l), h) in b[4..20].iter().zip(lo).zip(hi) {
            *l = f32::from(q & 0x0f) * d + m;
            *h = f32::from(q >> 4) * d + m;
        }
    }
}

/// The 6-bit scale and min of sub-block `j` (0..8) of a Q4_K super-block, from its 12 packed bytes.
///
/// Bytes 0-3 hold the scales of sub-blocks 0-3 in their low 6 bits, bytes 4-7 the mins of sub-blocks 0-3 likewise.
/// Sub-blocks 4-7 keep their low 4 bits in bytes 8-11 (scale in the low nibble, min in the high nibble) and their
/// top 2 bits in the spare top bits of bytes 0-3 (scales) and 4-7 (mins).
fn q4_k_scale_min(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        let scale = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        let min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
        (scale, min)
    }
}

/// Q4_K: f16 d, f16 dmin, 12 bytes of scales/mins, 128 bytes of nibbles. Each 64 weights share 32 bytes: the first
/// 32 weights in the low nibbles (sub-block 2c), the next 32 in the high nibbles (sub-block 2c+1); value
/// d*scale*q - dmin*min.
fn q4_k(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(144).zip(out.chunks_exact_mut(256)) {
        let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
        let scales = &b[4..16];
        for (c, (q, y)) in b[16..144].chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
            let (sc1, m1) = q4_k_scale_min(2 * c, scales);
            let (sc2, m2) = q4_k_scale_min(2 * c + 1, scales);
            let (d1, min1) = (d * f32::from(sc1), dmin * f32::from(m1));
            let (d2, min2) = (d * f32::from(sc2), dmin * f32::from(m2));
            let (lo, hi) = y.split_at_mut(32);
            for ((&q, l), h) in q.iter().zip(lo).zip(hi) {
                *l = d1 * f32::from(q & 0x0f) - min1;
                *h = d2 * f32::from(q >> 4) - min2;
            }
        }
    }
}

/// Q6_K: 128 bytes ql (low 4 bits), 64 bytes qh (high 2 bits), 16 i8 scales (one per 16 weights), f16 d.
/// Each half of 128 weights uses 64 ql bytes and 32 qh bytes: for l in 0..32, ql[l] low/high nibble give weights
/// l and l+64, ql[l+32] low/high give l+32 and l+96, and qh[l] bits 0-1, 2-3, 4-5, 6-7 top up l, l+32, l+64, l+96.
/// Value d * scale * (q - 32).
fn q6_k(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(210).zip(out.chunks_exact_mut(256)) {
        let d = f16_at(b, 208);
        for half in 0..2 {
            let ql = &b[64 * half..64 * half + 64];
            let qh = &b[128 + 32 * half..128 + 32 * half + 32];
            let sc = &b[192 + 8 * half..192 + 8 * half + 8];
            let y = &mut y[128 * half..128 * half + 128];
            for l in 0..32 {
                let is = l / 16;
                let h = qh[l];
                let q1 = i32::from((ql[l] & 0x0f) | ((h & 3) << 4)) - 32;
                let q2 = i32::from((ql[l + 32] & 0x0f) | (((h >> 2) & 3) << 4)) - 32;
                let q3 = i32::from((ql[l] >> 4) | (((h >> 4) & 3) << 4)) - 32;
                let q4 = i32::from((ql[l + 32] >> 4) | (((h >> 6) & 3) << 4)) - 32;
                let scale = |k: usize| d * f32::from(sc[is + k] as i8);
                // q is in -32..=31, exact in f32.
                y[l] = scale(0) * q1 as f32;
                y[l + 32] = scale(2) * q2 as f32;
                y[l + 64] = scale(4) * q3 as f32;
                y[l + 96] = scale(6) * q4 as f32;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f16(v: f32) -> [u8; 2] {
        half::f16::from_f32(v).to_le_bytes()
    }

    #[test]
    fn q8_0_block() {
        let mut b = f16(0.5).to_vec();
        b.extend((0..32).map(|i| (i as i8 - 16) as u8));
        let y = dequantize(&StoredType::Q8_0, &b).unwrap();
        let want: Vec<f32> = (0..32).map(|i| (i as f32 - 16.0) * 0.5).collect();
        assert_eq!(y, want);
    }

    #[test]
    fn q4_0_and_q4_1_nibble_order() {
        // weight j < 16 low nibble of byte j; weight j >= 16 high nibble of byte j - 16.
        let qs: Vec<u8> = (0..16u8).map(|j| j | ((15 - j) << 4)).collect();
        let mut b = f16(2.0).to_vec();
        b.extend(&qs);
        let y = dequantize(&StoredType::Q4_0, &b).unwrap();
        for (j, &got) in y.iter().enumerate() {
            let q = if j < 16 { j as f32 } else { 15.0 - (j - 16) as f32 };
            assert_eq!(got, (q - 8.0) * 2.0, "Q4_0 weight {j}");
        }
        let mut b = f16(0.25).to_vec();
        b.extend(f16(-1.0));
        b.extend(&qs);
        let y = dequantize(&StoredType::Q4_1, &b).unwrap();
        for (j, &got) in y.iter().enumerate() {
            let q = if j < 16 { j as f32 } else { 15.0 - (j - 16) as f32 };
            assert_eq!(got, q * 0.25 - 1.0, "Q4_1 weight {j}");
        }
    }

    /// Packs 8 (scale, min) pairs of 6 bits the way Q4_K stores them, written from the layout description rather
    /// than from the decoder, so the two cross-check each other.
    fn pack_q4_k_scales(sm: &[(u8, u8); 8]) -> [u8; 12] {
        let mut s = [0u8; 12];
        for j in 0..4 {
            s[j] = sm[j].0 | ((sm[j + 4].0 >> 4) << 6);
            s[j + 4] = sm[j].1 | ((sm[j + 4].1 >> 4) << 6);
            s[j + 8] = (sm[j + 4].0 & 15) | ((sm[j + 4].1 & 15) << 4);
        }
        s
    }

    #[test]
    fn q4_k_scales_and_nibbles() {
        let sm = [(1, 63), (2, 0), (63, 5), (17, 33), (40, 62), (3, 48), (63, 63), (32, 16)];
        let mut b = f16(0.5).to_vec();
        b.extend(f16(0.25));
        b.extend(pack_q4_k_scales(&sm));
        // byte i of chunk c: low nibble = i % 16, high nibble = 15 - i % 16
        b.extend((0..128).map(|i| ((i % 16) | ((15 - i % 16) << 4)) as u8));
        let y = dequantize(&StoredType::Q4_K, &b).unwrap();
        for (k, &got) in y.iter().enumerate() {
            let sub = k / 32;
            let i = k % 32;
            let q = if sub & 1 == 0 { i % 16 } else { 15 - i % 16 };
            let (sc, m) = sm[sub];
            let want = 0.5 * f32::from(sc) * q as f32 - 0.25 * f32::from(m);
            assert_eq!(got, want, "weight {k}");
        }
    }

    #[test]
    fn q6_k_bits() {
        // Give weight k the 6-bit value (k * 7) % 64 and write it into ql/qh by the layout description.
        let want_q: Vec<u8> = (0..256).map(|k| ((k * 7) % 64) as u8).collect();
        let (mut ql, mut qh) = ([0u8; 128], [0u8; 64]);
        for (k, &q) in want_q.iter().enumerate() {
            let (half, r) = (k / 128, k % 128);
            let (quarter, l) = (r / 32, r % 32);
            let ql_idx = 64 * half + l + if quarter % 2 == 1 { 32 } else { 0 };
            let shift = if quarter >= 2 { 4 } else { 0 };
            ql[ql_idx] |= (q & 15) << shift;
            qh[32 * half + l] |= (q >> 4) << (2 * quarter);
        }
        let scales: Vec<i8> = (0..16i32).map(|i| (i * 9 - 70) as i8).collect();
        let mut b = ql.to_vec();
        b.extend(qh);
        b.extend(scales.iter().map(|&s| s as u8));
        b.extend(f16(0.125));
        let y = dequantize(&StoredType::Q6_K, &b).unwrap();
        for k in 0..256 {
            let want = 0.125 * f32::from(scales[k / 16]) * (f32::from(want_q[k]) - 32.0);
            assert_eq!(y[k], want, "weight {k}");
        }
    }

    #[test]
    fn partial_blocks_and_unreadable_types_are_refused() {
        assert!(dequantize(&StoredType::Q8_0, &[0u8; 33]).is_none());
        assert!(dequantize(&StoredType::Other("Q5_K".into()), &[0u8; 176]).is_none());
        assert_eq!(dequantize(&StoredType::F32, &[]), Some(vec![]));
    }

    #[test]
    fn parallel_split_matches_block_order() {
        // More than one rayon task's worth of Q8_0 blocks, each with its own scale.
        let n = BLOCKS_PER_TASK * 2 + 3;
        let mut b = Vec::new();
        for i in 0..n {
            b.extend(f16((i % 100) as f32));
            b.extend([1u8; 32]);
        }
        let y = dequantize(&StoredType::Q8_0, &b).unwrap();
        assert_eq!(y.len(), n * 32);
        for i in 0..n {
            assert_eq!(y[i * 32 + 31], (i % 100) as f32, "block {i}");
        }
    }

    #[test]
    fn type_names() {
        assert_eq!(GgmlType(13).stored_type(), StoredType::Other("Q5_K".into()));
        assert_eq!(GgmlType(12).stored_type(), StoredType::Q4_K);
        assert_eq!(GgmlType(4).stored_type(), StoredType::Other("ggml_type_4".into()));
        assert_eq!(GgmlType(26).block_layout(), Some((1, 4)));
    }
}
