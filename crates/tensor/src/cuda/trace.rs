//! The kernel trace: with `KVAD_GPU_TRACE=path` ([`super::Tuning::trace`]) the kernels are compiled with their
//! trace code (`KVAD_TRACE`; without it they carry none), every kernel's first block records when it passed its PDL
//! wait (common.cuh's `trace_entry`), and [`Gpu::trace_dump`] writes the records to `path` as text, one kernel a
//! line: `ns grid_x grid_y block_x`. The gap from one record to the next is that kernel's time on the critical path
//! inside a CUDA graph, with programmatic dependent launch — what a profiler that launches each kernel alone (ncu)
//! cannot measure. `scripts/gpu/trace.py` sums a decode step's records by kernel shape.

use super::{Gpu, GpuError};
use cudarc::driver::{CudaModule, CudaSlice};
use std::sync::{Arc, Mutex};

/// Records the trace buffer holds (16 bytes each).
const CAP: u32 = 1 << 20;

/// The trace buffer: the record count in its first word (shared by every compile unit's kernels), then the records.
pub(crate) struct Trace {
    buf: Mutex<CudaSlice<u64>>,
    path: String,
}

impl Trace {
    /// Sets every module's trace pointer when `path` names the trace's file; None otherwise.
    pub(crate) fn open(
        gpu_stream: &Arc<cudarc::driver::CudaStream>,
        modules: &[Arc<CudaModule>],
        path: Option<&str>,
    ) -> Result<Option<Trace>, GpuError> {
        let Some(path) = path.map(str::to_string) else { return Ok(None) };
        let buf = gpu_stream.alloc_zeros::<u64>(2 * CAP as usize + 2)?;
        let (ptr, _) = cudarc::driver::DevicePtr::device_ptr(&buf, gpu_stream);
        for module in modules {
            let mut at = module.get_global("kvad_trace", gpu_stream)?;
            gpu_stream.memcpy_htod(&ptr.to_le_bytes(), &mut at)?;
            let mut cap = module.get_global("kvad_trace_cap", gpu_stream)?;
            gpu_stream.memcpy_htod(&CAP.to_le_bytes(), &mut cap)?;
        }
        gpu_stream.synchronize()?;
        Ok(Some(Trace { buf: Mutex::new(buf), path }))
    }
}

impl Gpu {
    /// Writes the kernel trace so far to the `KVAD_GPU_TRACE` file and starts it afresh; does nothing when not
    /// tracing. Returns the records written.
    pub fn trace_dump(&self) -> Result<usize, GpuError> {
        let Some(t) = &self.trace else { return Ok(0) };
        self.stream.synchronize()?;
        let mut buf = t.buf.lock().unwrap_or_else(|e| e.into_inner());
        let all: Vec<u64> = self.stream.clone_dtoh(&*buf)?;
        let n = ((all[0] & 0xffff_ffff) as u32).min(CAP);
        let mut text = String::with_capacity(n as usize * 32);
        for r in all[2..].chunks(2).take(n as usize) {
            let shape = r[1];
            text.push_str(&format!("{} {} {} {}\n", r[0], shape & 0xff_ffff, (shape >> 24) & 0xff_ffff, shape >> 48));
        }
        std::fs::write(&t.path, text).map_err(|err| GpuError::Trace { path: t.path.clone(), err })?;
        self.stream.memset_zeros(&mut buf.slice_mut(0..1))?;
        self.stream.synchronize()?;
        Ok(n as usize)
    }
}
