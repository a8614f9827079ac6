//! Host weights to the device, in the backend's device formats: what every architecture's GPU upload uses.

use super::{device_format, Activation, DenseMlp, GpuDecoder, Layer, MlpBlock, MoeMlp, Norm, Parts};
use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::layers::{Embedding, Linear};
use crate::moe::Ffn;
use crate::tensors::Role;
use kvad_tensor::cuda::{DevBuf, DevMatrix, Gpu};
use kvad_tensor::BackendKind;
use std::sync::Arc;

/// Uploads host weights in the backend's device formats.
pub(crate) struct Uploader<'a> {
    pub(crate) gpu: &'a Arc<Gpu>,
    pub(crate) backend: BackendKind,
}

impl Uploader<'_> {
    pub(crate) fn vector(&self, v: &[f32]) -> Result<DevBuf, ModelError> {
        Ok(DevBuf::from_slice(self.gpu, v)?)
    }

    pub(crate) fn matrix(&self, l: &Linear) -> Result<DevMatrix, ModelError> {
        Ok(DevMatrix::upload(self.gpu, l.matrix(), device_format(self.backend, Role::Layer))?)
    }

    /// One expert's matrix (a view of its layer's stack), in the format of the layer's other products.
    pub(crate) fn expert(&self, m: &kvad_tensor::cpu::QMatrix) -> Result<DevMatrix, ModelError> {
        Ok(DevMatrix::upload(self.gpu, m, device_format(self.backend, Role::Layer))?)
    }

    pub(crate) fn bias(&self, l: &Linear) -> Result<Option<DevBuf>, ModelError> {
        l.bias().map(|b| self.vector(b)).transpose()
    }

    pub(crate) fn embedding(&self, m: kvad_tensor::cpu::QMatrix) -> Result<DevMatrix, ModelError> {
        Ok(DevMatrix::upload(self.gpu, &m, device_format(self.backend, Role::Embedding))?)
    }

    /// A matrix as plain bf16 values, whatever its host format: the latent kernels' per-head up-projections
    /// (small, and read by kernels of their own rather than the products').
    pub(crate) fn bf16(&self, m: &kvad_tensor::cpu::QMatrix) -> Result<DevBuf, ModelError> {
        let mut row = vec![0f32; m.cols()];
        let mut v: Vec<u16> = Vec::with_capacity(m.rows() * m.cols());
        for r in 0..m.rows() {
            m.dequantize_row(r, &mut row);
            v.extend(row.iter().map(|&x| half::bf16::from_f32(x).to_bits()));
        }
        Ok(DevBuf::from_slice(self.gpu, &v)?)
    }

    /// An output head of its own (6 bits at gpu-q4 where the loader made it so).
    pub(crate) fn head(&self, m: &kvad_tensor::cpu::QMatrix) -> Result<DevMatrix, ModelError> {
        Ok(DevMatrix::upload(self.gpu, m, device_format(self.backend, Role::Head))?)
    }

    /// A decoder layer's feed-forward part: a SwiGLU (gate and up stacked) or routed experts.
    pub(crate) fn ffn(&self, f: &Ffn) -> Result<MlpBlock, ModelError> {
        Ok(match f {
            Ffn::Dense(mlp) => MlpBlock::Dense(DenseMlp {
                act: Activation::SwiGlu,
                up: self.matrix(&mlp.gate_up)?,
                up_bias: self.bias(&mlp.gate_up)?,
                down: self.matrix(&mlp.down)?,
                down_bias: self.bias(&mlp.down)?,
            }),
            Ffn::Moe(moe) => MlpBlock::Moe(MoeMlp::upload(self.gpu, moe, |m| self.expert(m))?),
        })
    }

    /// The decoder of an RMSNorm model with RoPE over its uploaded layers: the embedding, the final norm, the head
    /// (None: tied) and the RoPE frequencies go up here.
    pub(crate) fn rms_decoder(
        &self,
        cfg: ModelConfig,
        embed: &Embedding,
        layers: Vec<Layer>,
        norm: &[f32],
        head: Option<&Linear>,
        inv_freq: &[f32],
    ) -> Result<GpuDecoder, ModelError> {
        let parts = Parts {
            embed: self.embedding(embed.0.clone())?,
            pos_emb: None,
            layers,
            final_norm: Norm::Rms(self.vector(norm)?),
            head: head.map(|h| self.head(h.matrix())).transpose()?,
            inv_freq: Some(self.vector(inv_freq)?),
            cfg,
        };
        GpuDecoder::new(self.gpu.clone(), parts)
    }
}
