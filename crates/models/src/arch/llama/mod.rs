//! The llama family: Llama 2/3, Mistral, Qwen2, Qwen3, SmolLM2.
//!
//! Pre-norm decoder layers: RMSNorm → attention (GQA, RoPE in the rotate-half layout; Qwen2's q/k/v bias; Qwen3's
//! per-head q/k RMSNorm; Mistral's sliding window) → residual → RMSNorm → SwiGLU MLP, or Qwen3-MoE's routed
//! experts ([`crate::moe`]) → residual. Variants are fields of [`ModelConfig`], not branches per model name.

mod config;
mod gpu;

use crate::arch::entry::ArchEntry;
use crate::batch::PassIn;
use crate::config::ArchKind;
use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::layers::{attention, AttnShape, Embedding, Head, Linear, Rope};
use crate::moe::Ffn;
use crate::state::StateSpec;
use crate::tensors::Tensors;
use crate::{CausalLm, LogitsMode, SeqInput};
use kvad_tensor::cpu::ops;
use kvad_tensor::BackendKind;

/// The registry's line.
pub(crate) static ENTRY: ArchEntry = ArchEntry {
    kind: ArchKind::Llama,
    name: "llama",
    covers: "Llama 2/3, Mistral, Qwen2/2.5, Qwen3, SmolLM2; Qwen3-MoE",
    hf_classes: &[
        "LlamaForCausalLM",
        "MistralForCausalLM",
        "Qwen2ForCausalLM",
        "Qwen3ForCausalLM",
        "Qwen3MoeForCausalLM",
        // Base checkpoints (no head), as embedding models ship them: they pool and cannot generate.
        "LlamaModel",
        "MistralModel",
        "Qwen2Model",
        "Qwen3Model",
    ],
    model_types: &["llama", "mistral", "qwen2", "qwen3", "qwen3_moe"],
    gguf_archs: &["llama", "qwen2", "qwen3", "qwen3moe"],
    backends: &BackendKind::ALL,
    mlp_matrices: 3,
    from_hf: config::from_hf,
    from_gguf: config::from_gguf,
    gguf_name: config::gguf_name,
    gguf_permute: config::gguf_permute,
    build: |cfg, t, gpu| {
        let backend = t.backend;
        let m = Llama::load(cfg, t)?;
        Ok(match gpu {
            None => Box::new(m),
            Some(g) => Box::new(gpu::upload(g, m, backend)?),
        })
    },
};

pub(crate) struct Layer {
    pub(crate) attn_norm: Vec<f32>,
    /// q, k and v stacked: `[q_dim + 2·kv_dim, hidden]`.
    pub(crate) qkv: Linear,
    pub(crate) q_norm: Option<Vec<f32>>,
    pub(crate) k_norm: Option<Vec<f32>>,
    pub(crate) o: Linear,
    pub(crate) mlp_norm: Vec<f32>,
    pub(crate) ffn: Ffn,
}

/// A llama-family model with f32 weights on the CPU.
pub struct Llama {
    pub(crate) cfg: ModelConfig,
    pub(crate) embed: Embedding,
    pub(crate) layers: Vec<Layer>,
    pub(crate) norm: Vec<f32>,
    /// None when the head is the embedding.
    pub(crate) head: Option<Linear>,
    pub(crate) rope: Rope,
    /// Every layer's keys and values, stored as the backend keeps them ([`crate::layers::kv_dtype_for`]).
    pub(crate) spec: StateSpec,
}

impl Llama {
    /// Builds the model from checked tensors.
    pub(crate) fn load(cfg: ModelConfig, t: &mut Tensors<'_>) -> Result<Self, ModelError> {
        let (h, q, kv) = (cfg.hidden, cfg.q_dim(), cfg.kv_dim());
        let embed = t.embedding("model.embed_tokens.weight", cfg.vocab_size, h)?;
        let mut layers = Vec::with_capacity(cfg.n_layers);
        for i in 0..cfg.n_layers {
            let p = format!("model.layers.{i}");
            let a = format!("{p}.self_attn");
            let qkv = t.stacked(
                &format!("{a}.qkv_proj"),
                &[(&format!("{a}.q_proj"), q), (&format!("{a}.k_proj"), kv), (&format!("{a}.v_proj"), kv)],
                h,
                cfg.qkv_bias,
            )?;
            let (q_norm, k_norm) = if cfg.qk_norm {
                (
                    Some(t.vector(&format!("{a}.q_norm.weight"), &[cfg.head_dim])?),
                    Some(t.vector(&format!("{a}.k_norm.weight"), &[cfg.head_dim])?),
                )
            } else {
                (None, None)
            };
            let ffn = t.ffn(&format!("{p}.mlp"), &cfg, i)?;
            layers.push(Layer {
                attn_norm: t.vector(&format!("{p}.input_layernorm.weight"), &[h])?,
                qkv,
                q_norm,
                k_norm,
                o: t.linear(&format!("{a}.o_proj"), h, q, false)?,
                mlp_norm: t.vector(&format!("{p}.post_attention_layernorm.weight"), &[h])?,
                ffn,
            });
        }
        let norm = t.vector("model.norm.weight", &[h])?;
        let head = t.head(&cfg, &embed)?;
        let rope = Rope::new(&cfg);
        let spec = StateSpec::kv(cfg.n_layers, cfg.kv_dim(), crate::layers::kv_dtype_for(t.backend));
        Ok(Llama { cfg, embed, layers, norm, head, rope, spec })
    }
}

impl CausalLm for Llama {
    fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    fn weight_bytes(&self) -> usize {
        let layers: usize = self
            .layers
            .iter()
            .map(|l| {
                let norms = l.attn_norm.len() + l.mlp_norm.len() + l.q_norm.as_ref().map_or(0, Vec::len) * 2;
                l.qkv.bytes() + l.o.bytes() + l.ffn.bytes() + norms * 4
            })
            .sum();
        layers + self.embed.0.bytes().len() + self.head.as_ref().map_or(0, Linear::bytes) + self.norm.len() * 4
    }

    fn state_spec(&self) -> &StateSpec {
        &self.spec
    }

    fn forward(&self, batch: &mut [SeqInput<'_>], mode: LogitsMode) -> Result<Vec<Vec<f32>>, ModelError> {
        if !self.generates() {
            return Err(crate::layers::no_head_error());
        }
        let step = crate::layers::is_decode_step(batch);
        kvad_tensor::cpu::gemv_rows8::decode_step(step, || self.pass(batch, mode, false))
    }

    fn generates(&self) -> bool {
        !crate::layers::headless(&self.cfg, self.head.is_some())
    }

    fn forward_hidden(&self, batch: &mut [SeqInput<'_>], rows: LogitsMode) -> Result<Vec<Vec<f32>>, ModelError> {
        self.pass(batch, rows, true)
    }
}

impl Llama {
    /// One forward pass over the batch (see [`CausalLm::forward`]).
    fn pass(&self, batch: &mut [SeqInput<'_>], mode: LogitsMode, hidden: bool) -> Result<Vec<Vec<f32>>, ModelError> {
        let c = &self.cfg;
        let (h, qd, kvd, hd) = (c.hidden, c.q_dim(), c.kv_dim(), c.head_dim);
        let mut p = PassIn::begin(c, &self.spec, &self.embed, &self.rope, batch)?;
        let rows = p.rows;
        let shape = AttnShape { n_heads: c.n_heads, n_kv_heads: c.n_kv_heads, head_dim: hd, window: c.sliding_window };
        let mut hbuf = vec![0f32; rows * h];
        for (li, l) in self.layers.iter().enumerate() {
            ops::rms_norm(&p.x, &l.attn_norm, c.norm_eps, &mut hbuf);
            let qkv = l.qkv.forward(&hbuf, rows);
            let w = qd + 2 * kvd;
            let mut q = Vec::with_capacity(rows * qd);
            let mut k = Vec::with_capacity(rows * kvd);
            let mut v = Vec::with_capacity(rows * kvd);
            for r in 0..rows {
                let row = &qkv[r * w..(r + 1) * w];
                q.extend_from_slice(&row[..qd]);
                k.extend_from_slice(&row[qd..qd + kvd]);
                v.extend_from_slice(&row[qd + kvd..]);
            }
            if let (Some(qn), Some(kn)) = (&l.q_norm, &l.k_norm) {
                ops::rms_norm_inplace(&mut q, qn, c.norm_eps);
                ops::rms_norm_inplace(&mut k, kn, c.norm_eps);
            }
            for (r, (cos, sin)) in p.tables.iter().enumerate() {
                for head in q[r * qd..(r + 1) * qd].chunks_exact_mut(hd) {
                    ops::rope_half(head, cos, sin);
                }
                for head in k[r * kvd..(r + 1) * kvd].chunks_exact_mut(hd) {
                    ops::rope_half(head, cos, sin);
                }
            }
            let att = attention(shape, li, (&q, &k, &v), &mut p.caches, &p.spans);
            ops::add_inplace(&mut p.x, &l.o.forward(&att, rows));
            ops::rms_norm(&p.x, &l.mlp_norm, c.norm_eps, &mut hbuf);
            ops::add_inplace(&mut p.x, &l.ffn.forward(&hbuf, rows));
        }
        let head = if hidden { Head::Hidden } else { self.head.as_ref().map_or(Head::Tied(&self.embed), Head::Linear) };
        Ok(p.finish(c, &self.norm, head, mode))
    }
}
