//! The llama family on the GPU: RMSNorm, stacked q/k/v (Qwen2's bias, Qwen3's per-head q/k norm), rotate-half
//! RoPE, sliding window, SwiGLU with gate and up stacked.

use super::{Ffn, Llama};
use crate::error::ModelError;
use crate::gpu::{Activation, AttnBlock, DenseMlp, GpuDecoder, GqaAttn, Layer, MlpBlock, Norm, Parts, Uploader};
use kvad_tensor::cuda::Gpu;
use kvad_tensor::BackendKind;
use std::sync::Arc;

/// Uploads a loaded llama-family model; the host copy is dropped layer by layer as it goes up.
pub(crate) fn upload(gpu: Arc<Gpu>, m: Llama, backend: BackendKind) -> Result<GpuDecoder, ModelError> {
    let up = Uploader { gpu: &gpu, backend };
    let Llama { cfg, embed, layers, norm, head, rope, .. } = m;
    if layers.iter().any(|l| matches!(l.ffn, Ffn::Moe(_))) {
        return Err(ModelError::refused(
            "backend",
            backend,
            "routed experts (Qwen3-MoE) run on the CPU backends in this build; the GPU's grouped expert kernels are not in yet",
        ));
    }
    let mut out = Vec::with_capacity(layers.len());
    for l in layers {
        let Ffn::Dense(mlp) = &l.ffn else { unreachable!("refused above") };
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
            mlp: MlpBlock::Dense(DenseMlp {
                act: Activation::SwiGlu,
                up: up.matrix(&mlp.gate_up)?,
                up_bias: up.bias(&mlp.gate_up)?,
                down: up.matrix(&mlp.down)?,
                down_bias: up.bias(&mlp.down)?,
            }),
        });
    }
    let parts = Parts {
        embed: up.embedding(embed.0.clone())?,
        pos_emb: None,
        layers: out,
        final_norm: Norm::Rms(up.vector(&norm)?),
        head: head.map(|h| up.head(h.matrix())).transpose()?,
        inv_freq: Some(up.vector(&rope.inv_freq)?),
        cfg,
    };
    GpuDecoder::new(gpu, parts)
}
