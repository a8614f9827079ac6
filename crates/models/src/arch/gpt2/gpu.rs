//! GPT-2 on the GPU: LayerNorm with bias, learned positions added at the embedding, biased linears (transposed
//! from Conv1D by the loader), tanh GELU, no RoPE.

use super::Gpt2;
use crate::error::ModelError;
use crate::gpu::{Activation, AttnBlock, DenseMlp, GpuDecoder, GqaAttn, Layer, MlpBlock, Norm, Parts, Uploader};
use kvad_tensor::cuda::Gpu;
use kvad_tensor::BackendKind;
use std::sync::Arc;

/// Uploads a loaded GPT-2.
pub(crate) fn upload(gpu: Arc<Gpu>, m: Gpt2, backend: BackendKind) -> Result<GpuDecoder, ModelError> {
    let up = Uploader { gpu: &gpu, backend };
    let Gpt2 { cfg, wte, wpe, blocks, ln_f, head, .. } = m;
    let ln =
        |p: &(Vec<f32>, Vec<f32>)| -> Result<Norm, ModelError> { Ok(Norm::Layer(up.vector(&p.0)?, up.vector(&p.1)?)) };
    let mut layers = Vec::with_capacity(blocks.len());
    for b in blocks {
        layers.push(Layer {
            norm1: ln(&b.ln1)?,
            attn: AttnBlock::Gqa(GqaAttn {
                qkv: up.matrix(&b.c_attn)?,
                qkv_bias: up.bias(&b.c_attn)?,
                q_norm: None,
                k_norm: None,
                o: up.matrix(&b.c_proj)?,
                o_bias: up.bias(&b.c_proj)?,
            }),
            norm2: ln(&b.ln2)?,
            mlp: MlpBlock::Dense(DenseMlp {
                act: Activation::Gelu,
                up: up.matrix(&b.fc)?,
                up_bias: up.bias(&b.fc)?,
                down: up.matrix(&b.proj)?,
                down_bias: up.bias(&b.proj)?,
            }),
        });
    }
    let parts = Parts {
        embed: up.embedding(wte.0.clone())?,
        pos_emb: Some(up.vector(&wpe)?),
        layers,
        final_norm: ln(&ln_f)?,
        head: head.map(|h| up.head(h.matrix())).transpose()?,
        inv_freq: None,
        cfg,
    };
    GpuDecoder::new(gpu, parts)
}
