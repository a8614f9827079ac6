//! Weight matrices on the device in the GPU formats, uploaded from the loader's host matrices.
//!
//! - `Bf16`: `[rows][cols]` bf16.
//! - `Q8`: quants `[rows][cols]` i8 and scales `[rows][cols/32]` f16 (weight = d·q).
//! - `Q4`: quants `[rows][cols/2]` (per block, byte j holds weight j low and j+16 high, as GGUF packs them) and
//!   `[rows][cols/32]` pairs (f16 d, f16 m) with weight = d·q + m, so Q4_0 (m = −8d) and Q4_1 share one kernel.
//!
//! Quants and scales are separate arrays so every row of quants starts 16-byte aligned for the vector loads.

use super::buffer::DevBuf;
use super::{Gpu, GpuError};
use crate::cpu::{QMatrix, QType};
use half::{bf16, f16};
use std::sync::Arc;

/// A device matrix format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DevFormat {
    /// bf16 weights.
    Bf16,
    /// 8-bit blocks of 32 with an f16 scale.
    Q8,
    /// 4-bit blocks of 32 with f16 scale and minimum.
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
    /// Scales (Q8) or scale/minimum pairs (Q4); none for bf16.
    pub(crate) s: Option<DevBuf>,
}

impl DevMatrix {
    /// Uploads a host matrix. Block formats go up as they are (Q8_0 → Q8; Q4_0, Q4_1 → Q4); bf16 and f32 go up as
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
            QType::Q8_0 => {
                let (mut q, mut s) = (Vec::with_capacity(rows * cols), Vec::with_capacity(rows * nb * 2));
                for r in 0..rows {
                    let row = m.row(r);
                    s.extend_from_slice(&row[..nb * 2]);
                    q.extend_from_slice(&row[nb * 2..]);
                }
                return Ok(DevMatrix {
                    format: DevFormat::Q8,
                    rows,
                    cols,
                    q: DevBuf::from_host(gpu, &q)?,
                    s: Some(DevBuf::from_host(gpu, &s)?),
                });
            }
            t @ (QType::Q4_0 | QType::Q4_1) => {
                let (mut q, mut s) = (Vec::with_capacity(rows * cols / 2), Vec::with_capacity(rows * nb * 4));
                for r in 0..rows {
                    let row = m.row(r);
                    let d = &row[..nb * 2];
                    let (mins, quants) =
                        if t == QType::Q4_1 { row[nb * 2..].split_at(nb * 2) } else { (&row[..0], &row[nb * 2..]) };
                    for b in 0..nb {
                        let dv = [d[2 * b], d[2 * b + 1]];
                        let mv = if t == QType::Q4_1 {
                            [mins[2 * b], mins[2 * b + 1]]
                        } else {
                            f16::from_f32(-8.0 * f16::from_le_bytes(dv).to_f32()).to_le_bytes()
                        };
                        s.extend_from_slice(&dv);
                        s.extend_from_slice(&mv);
                    }
                    q.extend_from_slice(quants);
                }
                return Ok(DevMatrix {
                    format: DevFormat::Q4,
                    rows,
                    cols,
                    q: DevBuf::from_host(gpu, &q)?,
                    s: Some(DevBuf::from_host(gpu, &s)?),
                });
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
