//! Kernel launches through `cuLaunchKernelEx`, so that each may carry programmatic dependent launch (Hopper): the
//! next kernel on the stream is launched while this one's last blocks still run, reads what does not depend on
//! it (a product's weights), and waits in `pdl_wait` (common.cuh) only for what does. A decode step is ~350 small
//! kernels; without it each pays the launch gap and its loads' first round trip after the one before ends.

use super::{Gpu, GpuError};
use cudarc::driver::sys;
use cudarc::driver::{CudaFunction, LaunchConfig};

/// Most arguments a kvad kernel takes.
const MAX_ARGS: usize = 24;

/// One launch being put together: the function and its arguments by value, each in an 8-byte slot (the driver
/// reads as many bytes of a slot as the parameter has, little-endian).
pub(crate) struct Launch<'a> {
    gpu: &'a Gpu,
    func: &'a CudaFunction,
    slots: [u64; MAX_ARGS],
    n: usize,
}

impl<'a> Launch<'a> {
    pub(crate) fn new(gpu: &'a Gpu, func: &'a CudaFunction) -> Launch<'a> {
        Launch { gpu, func, slots: [0; MAX_ARGS], n: 0 }
    }

    /// Appends an argument: a device address, an int or a float (at most 8 bytes).
    pub(crate) fn arg<T: Copy>(&mut self, v: &T) -> &mut Self {
        assert!(std::mem::size_of::<T>() <= 8, "kernel argument wider than 8 bytes");
        assert!(self.n < MAX_ARGS, "more than {MAX_ARGS} kernel arguments");
        // SAFETY: T is Copy and at most 8 bytes; the slot is 8 bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                v as *const T as *const u8,
                &mut self.slots[self.n] as *mut u64 as *mut u8,
                std::mem::size_of::<T>(),
            )
        };
        self.n += 1;
        self
    }

    /// Queues the kernel on the GPU's stream, with programmatic dependent launch where the GPU takes it.
    ///
    /// # Safety
    /// The arguments must be the kernel's, in order, and every address must hold what the kernel reads and writes.
    pub(crate) unsafe fn launch(&mut self, cfg: LaunchConfig) -> Result<(), GpuError> {
        self.gpu.ctx.bind_to_thread()?;
        let mut ptrs: [*mut std::ffi::c_void; MAX_ARGS] = [std::ptr::null_mut(); MAX_ARGS];
        for (p, s) in ptrs.iter_mut().zip(self.slots.iter_mut()).take(self.n) {
            *p = s as *mut u64 as *mut std::ffi::c_void;
        }
        // SAFETY: a plain C struct; zero is a valid value of every field of the union.
        let mut attr: sys::CUlaunchAttribute = std::mem::zeroed();
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        let config = sys::CUlaunchConfig {
            gridDimX: cfg.grid_dim.0,
            gridDimY: cfg.grid_dim.1,
            gridDimZ: cfg.grid_dim.2,
            blockDimX: cfg.block_dim.0,
            blockDimY: cfg.block_dim.1,
            blockDimZ: cfg.block_dim.2,
            sharedMemBytes: cfg.shared_mem_bytes,
            hStream: self.gpu.stream.cu_stream(),
            attrs: &mut attr,
            numAttrs: u32::from(self.gpu.pdl),
        };
        sys::cuLaunchKernelEx(&config, self.func.cu_function(), ptrs.as_mut_ptr(), std::ptr::null_mut()).result()?;
        Ok(())
    }
}

impl Gpu {
    /// A launch of the kernel `name` (one of [`super::kernel_names`]).
    pub(crate) fn launch(&self, name: &str) -> Launch<'_> {
        Launch::new(self, self.func(name))
    }
}

/// Whether launches carry programmatic dependent launch: on compute capability 9.0 and newer.
pub(crate) fn pdl_wanted(capability: (i32, i32)) -> bool {
    capability.0 >= 9
}
