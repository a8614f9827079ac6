//! cuBLAS for the products of many rows (prefill, large batches): bf16 inputs, f32 accumulation and output.

use super::GpuError;
use cudarc::cublas::sys::{cublasComputeType_t, cublasOperation_t, cudaDataType};
use cudarc::cublas::CudaBlas;
use cudarc::driver::CudaStream;
use std::sync::Arc;

/// The cuBLAS handle, bound to the GPU's stream.
pub(crate) struct Blas(CudaBlas);

impl Blas {
    pub(crate) fn new(stream: Arc<CudaStream>) -> Result<Blas, GpuError> {
        // SAFETY: only tries to dlopen the library.
        if !unsafe { cudarc::cublas::sys::is_culib_present() } {
            return Err(GpuError::NoLibrary { lib: "libcublas" });
        }
        Ok(Blas(CudaBlas::new(stream).map_err(|e| GpuError::Blas(format!("{e:?}")))?))
    }

    /// `y[rows][n] (+)= x[rows][k] · w[n][k]ᵀ`, all row-major; x and w bf16, y f32.
    ///
    /// # Safety
    /// The addresses must hold the shapes given, on this handle's device.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn gemm_bf16(
        &self,
        w: u64,
        x: u64,
        y: u64,
        rows: usize,
        n: usize,
        k: usize,
        accumulate: bool,
    ) -> Result<(), GpuError> {
        let (alpha, beta) = (1.0f32, if accumulate { 1.0f32 } else { 0.0f32 });
        // Column-major view: yᵀ (n × rows) = w (k × n)ᵀ · xᵀ (k × rows).
        cudarc::cublas::result::gemm_ex(
            *self.0.handle(),
            cublasOperation_t::CUBLAS_OP_T,
            cublasOperation_t::CUBLAS_OP_N,
            n as i32,
            rows as i32,
            k as i32,
            (&alpha as *const f32).cast(),
            w as *const _,
            cudaDataType::CUDA_R_16BF,
            k as i32,
            x as *const _,
            cudaDataType::CUDA_R_16BF,
            k as i32,
            (&beta as *const f32).cast(),
            y as *mut _,
            cudaDataType::CUDA_R_32F,
            n as i32,
            cublasComputeType_t::CUBLAS_COMPUTE_32F,
            cudarc::cublas::sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
        .map_err(|e| GpuError::Blas(format!("{e:?}")))
    }
}
