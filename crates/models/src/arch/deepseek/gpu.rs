//! DeepSeek on the GPU: RMSNorm, latent attention (`gpu/mla.rs`: the cache holds the latent and the rope key, the
//! up-projections absorbed), a dense SwiGLU in the first layers and routed experts with shared ones after.

use super::mla::{QProj, INNER_EPS};
use super::Deepseek;
use crate::error::ModelError;
use crate::gpu::{AttnBlock, GpuDecoder, Layer, MlaAttn, MlaQ, MlaShape, Norm, Uploader};
use kvad_tensor::cuda::Gpu;
use kvad_tensor::BackendKind;
use std::sync::Arc;

/// Uploads a loaded DeepSeek model; the host copy is dropped layer by layer as it goes up.
pub(crate) fn upload(gpu: Arc<Gpu>, m: Deepseek, backend: BackendKind) -> Result<GpuDecoder, ModelError> {
    let up = Uploader { gpu: &gpu, backend };
    let Deepseek { cfg, embed, layers, norm, head, rope, .. } = m;
    let mla = cfg.mla.clone().expect("a DeepSeek config has latent attention");
    let mut out = Vec::with_capacity(layers.len());
    for l in layers {
        let a = &l.attn;
        let (q, q_rank) = match &a.q {
            QProj::Direct(p) => (MlaQ::Direct(up.matrix(p)?), None),
            QProj::Lora { a, norm, b } => {
                (MlaQ::Lora { a: up.matrix(a)?, norm: up.vector(norm)?, b: up.matrix(b)? }, Some(norm.len()))
            }
        };
        let attn = MlaAttn {
            q,
            kv_a: up.matrix(&a.kv_a)?,
            kv_norm: up.vector(&a.kv_norm)?,
            k_b: up.bf16(&a.k_b)?,
            v_b: up.bf16(&a.v_b)?,
            o: up.matrix(&a.o)?,
            shape: MlaShape::new(&mla, cfg.n_heads, q_rank, INNER_EPS),
        };
        if let Some(why) = attn.unsupported() {
            return Err(ModelError::refused("kv_lora_rank", mla.kv_lora_rank, why));
        }
        let mlp = up.ffn(&l.ffn)?;
        out.push(Layer {
            norm1: Norm::Rms(up.vector(&l.attn_norm)?),
            attn: AttnBlock::Mla(attn),
            norm2: Norm::Rms(up.vector(&l.mlp_norm)?),
            mlp,
        });
    }
    up.rms_decoder(cfg, &embed, out, &norm, head.as_ref(), &rope.inv_freq)
}
