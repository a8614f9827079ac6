//! Weight matrices on the device in the GPU formats, uploaded from the loader's host matrices.
//!
//! - `Bf16`: `[rows][cols]` bf16.
//! - `Q8`: quants `[rows][cols]` i8 and scales `[rows][cols/32]` f16 (weight = d·q).
//! - `Q4`: quants `[rows][cols/2]` (per block, byte j holds weight j low and j+16 high, as GGUF packs them) and
//!   scales `[rows][cols/32]` f16 (weight = d·(q − 8): Q4_0). 18 bytes a block of 32, read once a decode step: a
//!   minimum beside each scale (Q4_1's form, which the device once held for Q4_0 too, as m = −8d) made every q4
//!   product read 2 more bytes a block. A Q4_1 matrix goes up as Q8 (its values d·q + m into 8-bit blocks on the
//!   host, the CPU quantiser's): 8 bits a weight, not a second 4-bit form every q4 kernel would have to carry.
//!
//! - `Q6`: the q4 backends' output head (a Q8_0 matrix whose quants all lie in −31..=31, which the loader makes
//!   for it: `QMatrix::quantize_6bit`): low nibbles `[rows][cols/2]` as Q4's, then their two high bits
//!   `[rows][cols/4]` (8 bytes a block, `q6_word` in common.cuh) of v = q + 32, and scales `[rows][cols/32]` f16
//!   (weight = d·(v − 32)).
//!   26 bytes a block where Q8_0 takes 34: the 8B shape's head 214 → 164 MB, read every decode step.
//!
//! Quants and scales are separate arrays so every row of quants starts 16-byte aligned for the vector loads.

use super::buffer::DevBuf;
use super::{Gpu, GpuError};
use crate::cpu::{QMatrix, QType};
use half::bf16;
use std::sync::Arc;

/// A device matrix format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DevFormat {
    /// bf16 weights.
    Bf16,
    /// 8-bit blocks of 32 with an f16 scale.
    Q8,
    /// 4-bit blocks of 32 with an f16 scale (Q4_0).
    Q4,
    /// 6-bit blocks of 32 with an f16 scale: a q4 backend's output head (products only, never embedded).
    Q6,
}

impl DevFormat {
    /// The code the `embed` kernel takes (None: a format it does not read).
    pub(crate) fn code(self) -> Option<i32> {
        match self {
            DevFormat::Bf16 => Some(0),
            DevFormat::Q8 => Some(1),
            DevFormat::Q4 => Some(2),
            DevFormat::Q6 => None,
        }
    }

    /// The kernels' name for the format.
    pub(crate) fn name(self) -> &'static str {
        match self {
            DevFormat::Bf16 => "bf16",
            DevFormat::Q8 => "q8",
            DevFormat::Q4 => "q4",
            DevFormat::Q6 => "q6",
        }
    }
}

/// A weight matrix `[rows = outputs][cols = inputs]` on the device.
#[derive(Debug)]
pub struct DevMatrix {
    pub(crate) format: DevFormat,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    /// bf16 values or quants.
    pub(crate) q: DevBuf,
    /// Scales (Q8, Q4); none for bf16.
    pub(crate) s: Option<DevBuf>,
}

impl DevMatrix {
    /// Uploads a host matrix. Block formats go up as they are (Q8_0 → Q8, Q4_0 → Q4), Q4_1 as Q8 (above), and a
    /// Q8_0 matrix of 6-bit quants as Q6 when `quantize_to` asks for Q6 (one of 8-bit quants, a file's, stays Q8);
    /// bf16 and f32 go up as bf16 and, when `quantize_to` names a block format and the width is whole blocks, are
    /// quantised on the device with the CPU quantiser's arithmetic.
    pub fn upload(gpu: &Arc<Gpu>, m: &QMatrix, quantize_to: Option<DevFormat>) -> Result<DevMatrix, GpuError> {
        let (rows, cols) = (m.rows(), m.cols());
        let nb = cols / 32;
        if quantize_to == Some(DevFormat::Q6) && m.is_6bit() {
            let (q, s) = pack_q6(m);
            let (q, s) = (DevBuf::from_host(gpu, &q)?, Some(DevBuf::from_host(gpu, &s)?));
            return Ok(DevMatrix { format: DevFormat::Q6, rows, cols, q, s });
        }
        let dm = match m.qtype() {
            QType::BF16 => DevMatrix::bf16(rows, cols, DevBuf::from_host(gpu, m.bytes())?),
            QType::F32 => {
                let v: Vec<u16> = m
                    .bytes()
                    .chunks_exact(4)
                    .map(|c| bf16::from_f32(f32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_bits())
                    .collect();
                DevMatrix::bf16(rows, cols, DevBuf::from_slice(gpu, &v)?)
            }
            QType::Q4_1 => {
                let q8 = m.requantize(QType::Q8_0).map_err(|e| GpuError::Shape(e.to_string()))?;
                return DevMatrix::upload(gpu, &q8, quantize_to);
            }
            // kvad's rows hold a block format's f16 scales, then its quants: the device keeps them apart.
            t @ (QType::Q8_0 | QType::Q4_0) => {
                let (mut q, mut s) = (Vec::with_capacity(m.bytes().len()), Vec::with_capacity(rows * nb * 2));
                for r in 0..rows {
                    let row = m.row(r);
                    s.extend_from_slice(&row[..nb * 2]);
                    q.extend_from_slice(&row[nb * 2..]);
                }
                let format = if t == QType::Q8_0 { DevFormat::Q8 } else { DevFormat::Q4 };
                let (q, s) = (DevBuf::from_host(gpu, &q)?, Some(DevBuf::from_host(gpu, &s)?));
                return Ok(DevMatrix { format, rows, cols, q, s });
            }
        };
        match quantize_to {
            Some(f @ (DevFormat::Q8 | DevFormat::Q4 | DevFormat::Q6)) if cols.is_multiple_of(32) => {
                gpu.quantize(&dm, f)
            }
            _ => Ok(dm),
        }
    }

    fn bf16(rows: usize, cols: usize, q: DevBuf) -> DevMatrix {
        DevMatrix { format: DevFormat::Bf16, rows, cols, s: None, q }
    }

    /// Format.
    pub fn format(&self) -> DevFormat {
        self.format
    }

    /// Outputs.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Inputs.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Device bytes held.
    pub fn bytes(&self) -> usize {
        self.q.len() + self.s.as_ref().map_or(0, DevBuf::len)
    }

    /// The matrix as host bytes in its device layout (quants, then scales), for tests.
    pub fn download(&self, gpu: &Gpu) -> Result<(Vec<u8>, Vec<u8>), GpuError> {
        let s = match &self.s {
            Some(s) => s.read(gpu, s.len())?,
            None => Vec::new(),
        };
        Ok((self.q.read(gpu, self.q.len())?, s))
    }
}

/// A Q8_0 matrix of 6-bit quants in the device's Q6 layout: (low nibbles, then high bits; scales), each quant q
/// held as v = q + 32 (1..=63), so the kernels' bytes are non-negative. Byte j of a block's 16 holds v_j's low
/// nibble and v_(j+16)'s above it (Q4's packing); of its 8 high-bit bytes, word i/2 (little-endian) holds at bit
/// 8·(j mod 4) + 4·(i mod 2) the two high bits of v_j, j = 4i + (j mod 4), and two bits above those v_(j+16)'s
/// (`q6_word` in common.cuh reads them; `quantize_q6` writes them).
pub(crate) fn pack_q6(m: &QMatrix) -> (Vec<u8>, Vec<u8>) {
    let (rows, nb) = (m.rows(), m.cols() / 32);
    let (mut lo, mut hi, mut s) =
        (Vec::with_capacity(rows * nb * 16), Vec::with_capacity(rows * nb * 8), Vec::with_capacity(rows * nb * 2));
    for r in 0..rows {
        let row = m.row(r);
        s.extend_from_slice(&row[..nb * 2]);
        for blk in row[nb * 2..].chunks_exact(32) {
            let v = |j: usize| (blk[j] as i8 as i32 + 32) as u32;
            let mut words = [0u32; 2];
            for j in 0..16 {
                lo.push(((v(j) & 15) | ((v(j + 16) & 15) << 4)) as u8);
                let (i, b) = (j / 4, j % 4);
                let sh = 8 * b + 4 * (i % 2);
                words[i / 2] |= (v(j) >> 4) << sh | (v(j + 16) >> 4) << (sh + 2);
            }
            hi.extend_from_slice(&words[0].to_le_bytes());
            hi.extend_from_slice(&words[1].to_le_bytes());
        }
    }
    lo.extend_from_slice(&hi);
    (lo, s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layout `q6_word` reads, unpacked here the way it does (the device test checks the kernel's own bytes
    /// against these): every quant comes back, sign and all.
    #[test]
    fn q6_packing_keeps_every_quant() {
        let (rows, cols) = (3, 64);
        let w: Vec<f32> = (0..rows * cols).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
        let m = QMatrix::quantize_6bit(rows, cols, &w).unwrap();
        let (q, s) = pack_q6(&m);
        let nb = cols / 32;
        assert_eq!((q.len(), s.len()), (rows * nb * 24, rows * nb * 2));
        let (lo, hi) = q.split_at(rows * nb * 16);
        for r in 0..rows {
            let row = m.row(r);
            assert_eq!(&s[r * nb * 2..(r + 1) * nb * 2], &row[..nb * 2]);
            for b in 0..nb {
                let g = r * nb + b;
                let word = |i: usize| u32::from_le_bytes(hi[g * 8 + 4 * i..g * 8 + 4 * i + 4].try_into().unwrap());
                for j in 0..32 {
                    let (jj, up) = (j % 16, j >= 16);
                    let nib = if up { lo[g * 16 + jj] >> 4 } else { lo[g * 16 + jj] & 15 } as u32;
                    let (i, bb) = (jj / 4, jj % 4);
                    let sh = 8 * bb + 4 * (i % 2) + if up { 2 } else { 0 };
                    let v = nib | ((word(i / 2) >> sh) & 3) << 4;
                    let q = (v as i32 - 32) as i8;
                    assert_eq!(q, row[nb * 2 + b * 32 + j] as i8, "row {r} block {b} quant {j}");
                }
            }
        }
    }
}
