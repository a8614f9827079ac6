//! Device memory as raw bytes with its address, which is what the kernels take.

use super::{Gpu, GpuError};
use cudarc::driver::{CudaSlice, DevicePtr};
use std::sync::Arc;

/// A device allocation. Kernels receive its address; the allocation lives as long as this value.
pub struct DevBuf {
    slice: CudaSlice<u8>,
    ptr: u64,
    len: usize,
}

impl std::fmt::Debug for DevBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DevBuf({} bytes at {:#x})", self.len, self.ptr)
    }
}

impl DevBuf {
    /// `len` bytes, zeroed (at least one byte, so every buffer has an address).
    pub fn zeros(gpu: &Arc<Gpu>, len: usize) -> Result<DevBuf, GpuError> {
        let slice = gpu.stream.alloc_zeros::<u8>(len.max(1))?;
        Ok(DevBuf::wrap(gpu, slice, len))
    }

    /// A copy of host bytes.
    pub fn from_host(gpu: &Arc<Gpu>, bytes: &[u8]) -> Result<DevBuf, GpuError> {
        if bytes.is_empty() {
            return DevBuf::zeros(gpu, 0);
        }
        let slice = gpu.stream.clone_htod(bytes)?;
        Ok(DevBuf::wrap(gpu, slice, bytes.len()))
    }

    /// A copy of host values of any plain type (f32, i32, u16).
    pub fn from_slice<T: bytemuck_free::Plain>(gpu: &Arc<Gpu>, v: &[T]) -> Result<DevBuf, GpuError> {
        DevBuf::from_host(gpu, bytemuck_free::bytes(v))
    }

    fn wrap(gpu: &Arc<Gpu>, slice: CudaSlice<u8>, len: usize) -> DevBuf {
        DevBuf::wrap_on(&gpu.stream, slice, len)
    }

    /// A buffer made while the `Gpu` itself is being opened (its own scratch), on its stream.
    pub(crate) fn wrap_on(stream: &Arc<cudarc::driver::CudaStream>, slice: CudaSlice<u8>, len: usize) -> DevBuf {
        let ptr = {
            let (ptr, _sync) = slice.device_ptr(stream);
            ptr
        };
        DevBuf { slice, ptr, len }
    }

    /// The device address.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// The address `offset` bytes in.
    pub fn at(&self, offset: usize) -> u64 {
        debug_assert!(offset <= self.len);
        self.ptr + offset as u64
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies host bytes into the start of the buffer.
    pub fn write(&mut self, gpu: &Gpu, bytes: &[u8]) -> Result<(), GpuError> {
        if bytes.len() > self.len {
            return Err(GpuError::Shape(format!("write of {} bytes into a buffer of {}", bytes.len(), self.len)));
        }
        if bytes.is_empty() {
            return Ok(());
        }
        let mut view = self.slice.slice_mut(..bytes.len());
        gpu.stream.memcpy_htod(bytes, &mut view)?;
        Ok(())
    }

    /// Copies host values into the start of the buffer.
    pub fn write_slice<T: bytemuck_free::Plain>(&mut self, gpu: &Gpu, v: &[T]) -> Result<(), GpuError> {
        self.write(gpu, bytemuck_free::bytes(v))
    }

    /// The first `n` values, copied to the host (waits for the stream).
    pub fn read<T: bytemuck_free::Plain + Default + Clone>(&self, gpu: &Gpu, n: usize) -> Result<Vec<T>, GpuError> {
        let bytes = n * std::mem::size_of::<T>();
        if bytes > self.len {
            return Err(GpuError::Shape(format!("read of {bytes} bytes from a buffer of {}", self.len)));
        }
        let mut out = vec![T::default(); n];
        if n > 0 {
            let view = self.slice.slice(..bytes);
            gpu.stream.memcpy_dtoh(&view, bytemuck_free::bytes_mut(&mut out))?;
        }
        Ok(out)
    }
}

/// Plain-old-data views, for the few types kvad moves to and from the device.
pub mod bytemuck_free {
    /// A type with no padding and every bit pattern valid.
    ///
    /// # Safety
    /// Implement only for such types.
    pub unsafe trait Plain: Copy + 'static {}
    /// Implements [`Plain`] for primitive numbers, which have no padding and no invalid bit patterns.
    macro_rules! plain {
        ($($t:ty),*) => {$(
            // SAFETY: a primitive number: no padding, every bit pattern a value.
            unsafe impl Plain for $t {}
        )*};
    }
    plain!(f32, i32, u32, u64, u16, u8, i8);

    /// The bytes of a slice.
    pub fn bytes<T: Plain>(v: &[T]) -> &[u8] {
        // SAFETY: Plain types have no padding.
        unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), std::mem::size_of_val(v)) }
    }

    /// The bytes of a mutable slice.
    pub fn bytes_mut<T: Plain>(v: &mut [T]) -> &mut [u8] {
        // SAFETY: every bit pattern is valid for Plain types.
        unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), std::mem::size_of_val(v)) }
    }
}
