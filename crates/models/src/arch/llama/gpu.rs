//! The llama family on the GPU: RMSNorm, stacked q/k/v (Qwen2's bias, Qwen3's per-head q/k norm), rotate-half
//! RoPE, sliding window, SwiGLU with gate and up stacked, or Qwen3-MoE's routed experts.

use super::Llama;
use crate::error::ModelError;
use crate::gpu::{
    Activation, AttnBlock, DenseMlp, GpuDecoder, GqaAttn, Layer, MlpBlock, MoeMlp, Norm, Parts, Uploader,
};
use crate::moe::Ffn;
use kvad_tensor::cuda::Gpu;
use kvad_tensor::BackendKind;
use std::sync::Arc;

/// Uploads a loaded llama-family model; the host copy is dropped layer by layer as it goes up.
pub(crate) fn upload(gpu: Arc<Gpu>, m: Llama, backend: BackendKind) -> Result<GpuDecoder, ModelError> {
    let up = Uploader { gpu: &gpu, backend };
    let Llama { cfg, embed, layers, norm, head, rope, .. } = m;
    let mut out = Vec::with_capacity(layers.len());
    for l in layers {
        let mlp = match &l.ffn {
            Ffn::Dense(mlp) => MlpBlock::Dense(DenseMlp {
                act: Activation::SwiGlu,
                up: up.matrix(&mlp.gate_up)?,
                up_bias: up.bias(&mlp.gate_up)?,
                down: up.matrix(&mlp.down)?,
                down_bias: up.bias(&mlp.down)?,
            }),
            Ffn::Moe(moe) => MlpBlock::Moe(MoeMlp::upload(&gpu, moe, |m| up.expert(m))?),
        };
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
