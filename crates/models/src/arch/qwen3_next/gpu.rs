//! Qwen3-Next and Qwen3.5 on the GPU: `1 + w` RMSNorms (made at load, as on the CPU), gated delta-net layers with
//! their state in device slots and gated attention layers over the pages (`gpu/delta.rs`), dense SwiGLU or routed
//! experts with a gated shared expert.

use super::{Mixer, Qwen3Next};
use crate::error::ModelError;
use crate::gpu::{AttnBlock, DeltaAttn, DeltaShape, GatedAttn, GpuDecoder, Layer, Norm, Uploader};
use kvad_tensor::cuda::Gpu;
use kvad_tensor::BackendKind;
use std::sync::Arc;

/// Uploads a loaded model; the host copy is dropped layer by layer as it goes up.
pub(crate) fn upload(gpu: Arc<Gpu>, m: Qwen3Next, backend: BackendKind) -> Result<GpuDecoder, ModelError> {
    let up = Uploader { gpu: &gpu, backend };
    let Qwen3Next { cfg, embed, layers, norm, head, rope, .. } = m;
    let d = cfg.delta.clone().expect("a Qwen3-Next config has delta-net layers");
    let (kh, nv, dk, dv, taps, eps, tiled) = (d.k_heads, d.v_heads, d.k_dim, d.v_dim, d.conv, cfg.norm_eps, d.tiled);
    let shape = DeltaShape { kh, nv, dk, dv, taps, eps, tiled };
    let mut out = Vec::with_capacity(layers.len());
    let mut rec = 0;
    for l in layers {
        let attn = match &l.mixer {
            Mixer::Delta(n) => {
                let a = DeltaAttn {
                    in_proj: up.matrix(&n.in_proj)?,
                    conv_w: up.vector(&n.conv)?,
                    neg_a: up.vector(&n.neg_a)?,
                    dt_bias: up.vector(&n.dt_bias)?,
                    norm_w: up.vector(&n.norm)?,
                    out: up.matrix(&n.out)?,
                    shape,
                    rec,
                };
                if let Some(why) = a.unsupported() {
                    return Err(ModelError::refused("linear_key_head_dim", d.k_dim, why));
                }
                rec += 1;
                AttnBlock::Delta(a)
            }
            Mixer::Attn(a) => AttnBlock::Gated(GatedAttn {
                qkv: up.matrix(&a.qkv)?,
                q_norm: up.vector(&a.q_norm)?,
                k_norm: up.vector(&a.k_norm)?,
                o: up.matrix(&a.o)?,
                rope: d.rope_dim,
            }),
        };
        out.push(Layer {
            norm1: Norm::Rms(up.vector(&l.attn_norm)?),
            attn,
            norm2: Norm::Rms(up.vector(&l.mlp_norm)?),
            mlp: up.ffn(&l.ffn)?,
        });
    }
    up.rms_decoder(cfg, &embed, out, &norm, head.as_ref(), &rope.inv_freq)
}
