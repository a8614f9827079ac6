//! Names of the six backends: the one vocabulary the CLI, the loader and the server share.

use std::fmt;
use std::str::FromStr;

/// The device a backend computes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Device {
    /// The host processor.
    Cpu,
    /// An NVIDIA GPU through CUDA.
    Gpu,
}

/// One of the six (device, precision) pairs a language model can load on.
///
/// Kept as a closed enum so every `match` over it is checked when a backend is added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// CPU, 32-bit floats as published: the reference path.
    CpuF32,
    /// CPU, 8-bit blocks.
    CpuQ8,
    /// CPU, 4-bit blocks.
    CpuQ4,
    /// GPU, bf16.
    GpuBf16,
    /// GPU, weight-only 8-bit.
    GpuQ8,
    /// GPU, weight-only 4-bit.
    GpuQ4,
}

impl BackendKind {
    /// Every backend, in the order `kvad arch` and pickers list them.
    pub const ALL: [BackendKind; 6] = [
        BackendKind::CpuF32,
        BackendKind::CpuQ8,
        BackendKind::CpuQ4,
        BackendKind::GpuBf16,
        BackendKind::GpuQ8,
        BackendKind::GpuQ4,
    ];

    /// The name users type and see, e.g. `cpu-q8`.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::CpuF32 => "cpu-f32",
            BackendKind::CpuQ8 => "cpu-q8",
            BackendKind::CpuQ4 => "cpu-q4",
            BackendKind::GpuBf16 => "gpu-bf16",
            BackendKind::GpuQ8 => "gpu-q8",
            BackendKind::GpuQ4 => "gpu-q4",
        }
    }

    /// Which device the backend computes on.
    pub fn device(self) -> Device {
        match self {
            BackendKind::CpuF32 | BackendKind::CpuQ8 | BackendKind::CpuQ4 => Device::Cpu,
            _ => Device::Gpu,
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A backend name that is not one of the six.
#[derive(Debug, thiserror::Error)]
#[error("backend {0:?} is not one of cpu-f32, cpu-q8, cpu-q4, gpu-bf16, gpu-q8, gpu-q4")]
pub struct BackendParseError(pub String);

impl FromStr for BackendKind {
    type Err = BackendParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        BackendKind::ALL.into_iter().find(|b| b.name() == s).ok_or_else(|| BackendParseError(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for b in BackendKind::ALL {
            assert_eq!(b.name().parse::<BackendKind>().unwrap(), b);
        }
        let err = "cpu-q5".parse::<BackendKind>().unwrap_err();
        assert!(err.to_string().contains("\"cpu-q5\""));
    }
}
