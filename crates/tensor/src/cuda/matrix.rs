//! Weight matrices on the device in the GPU formats, uploaded from the loader's host matrices.
//!
//! - `Bf16`: `[rows][cols]` bf16.
//! - `Q8`: quants `[rows][cols]` i8 and scales `[rows][cols/32]` f16 (weight = d·q).
//! - `Q4`: quants `[rows][cols/2]` (per block, byte j holds weight j low and j+16 high, as GGUF packs them) and
//!   scales `[rows][cols/32]` f16 (weight = d·(q − 8): Q4_0). 18 bytes a block of 32, read once a decode step: a
//!   minimum beside each scale (Q4_1's form, which the device held until session 20 for Q4_0 too, as m = −8d) made
//!   every q4 product read 11% more bytes. A Q4_1 matrix goes up as Q8 (its values d·q + m into 8-bit blocks on the
//!   host, the CPU quantiser's): 8 bits a weight, not a second 4-bit form every q4 kernel would have to carry.
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
}

impl DevFormat {
    /// The code the `embed` kernel takes.
    pub(crate) fn code(self) -> i32 {
        match self {
            DevFormat::Bf16 => 0,
            DevFormat::Q8 => 1,
            DevFormat::Q4 => 2,
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
    /// Uploads a host matrix. Block formats go up as they are (Q8_0 → Q8, Q4_0 → Q4), Q4_1 as Q8 (above); bf16 and f32 go up as
    /// bf16 and, when `quantize_to` names a block format and the width is whole blocks, are quantised on the device
    /// with the CPU quantiser's arithmetic.
    pub fn upload(gpu: &Arc<Gpu>, m: &QMatrix, quantize_to: Option<DevFormat>) -> Result<DevMatrix, GpuError> {
        let (rows, cols) = (m.rows(), m.cols());
        let nb = cols / 32;
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
            Some(f @ (DevFormat::Q8 | DevFormat::Q4)) if cols.is_multiple_of(32) => gpu.quantize(&dm, f),
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
