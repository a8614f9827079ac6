//! The llama family on the GPU: RMSNorm, stacked q/k/v (Qwen2's bias, Qwen3's per-head q/k norm), rotate-half
//! RoPE, sliding window, SwiGLU with gate and up stacked, or Qwen3-MoE's routed experts.

use super::Llama;
use crate::error::ModelError;
use crate::gpu::{AttnBlock, GpuDecoder, GqaAttn, Layer, Norm, Uploader};
use kvad_tensor::cuda::Gpu;
use kvad_tensor::BackendKind;
use std::sync::Arc;

/// Uploads a loaded llama-family model; the host copy is dropped layer by layer as it goes up.
pub(crate) fn upload(gpu: Arc<Gpu>, m: Llama, backend: BackendKind) -> Result<GpuDecoder, ModelError> {
    let up = Uploader { gpu: &gpu, backend };
    let Llama { cfg, embed, layers, norm, head, rope, .. } = m;
    let mut out = Vec::with_capacity(layers.len());
    for l in layers {
        let mlp = up.ffn(&l.ffn)?;
        out.push(Layer {
            norm1: Norm::Rms(up.vector(&l.attn_norm)?),
            attn: AttnBlock::Gqa(GqaAttn {
                qkv: up.matrix(&l.qkv)?,
                qkv_bias: up.bias(&l.qkv)?,
                q_norm: l.q_norm.as_deref().map(|v| up.vector(v)).transpose()?,
                k_norm: l.k_norm.as_deref().map(|v| up.vector(v)).transpose()?,
                o: up.matrix(&l.o)?,
                o_bias: up.bias(&l.o)?,
            }),
            norm2: Norm::Rms(up.vector(&l.mlp_norm)?),
            mlp,
        });
    }
    up.rms_decoder(cfg, &embed, out, &norm, head.as_ref(), &rope.inv_freq)
}
