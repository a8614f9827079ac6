//! Qwen3-Next and Qwen3.5's text models (dense and MoE): pre-norm decoder layers whose token mixer is a gated delta net (`delta.rs`, a recurrent state per
//! sequence) or, every few layers, gated full attention (`attn.rs`, a K/V cache); the MLP is routed experts with a
//! gated shared expert ([`crate::moe`]) or, in `mlp_only_layers`, a dense SwiGLU. Every RMSNorm of the decoder
//! multiplies by `1 + w`. Multi-token-prediction weights (`mtp.*`) are skipped by name. On a GPU the same loaded
//! model is uploaded (`gpu.rs`).

mod attn;
mod config;
mod delta;
mod gpu;
mod rule;

use crate::arch::entry::ArchEntry;
use crate::batch::PassIn;
use crate::config::{ArchKind, ModelConfig};
use crate::error::ModelError;
use crate::layers::{Embedding, Head, Linear, Rope};
use crate::moe::Ffn;
use crate::state::{LayerSpec, StateSpec};
use crate::tensors::Tensors;
use crate::{CausalLm, LogitsMode, SeqInput};
use attn::{norm_weights, GatedAttn};
use delta::DeltaNet;
use kvad_tensor::cpu::ops;
use kvad_tensor::BackendKind;

/// The registry's line.
pub(crate) static ENTRY: ArchEntry = ArchEntry {
    kind: ArchKind::Qwen3Next,
    name: "qwen3_next",
    covers: "Qwen3-Next, Qwen3.5 text (gated delta net, gated attention)",
    hf_classes: &["Qwen3NextForCausalLM", "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM"],
    model_types: &["qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"],
    gguf_archs: &["qwen3next", "qwen35", "qwen35moe"],
    backends: &BackendKind::ALL,
    mlp_matrices: 3,
    from_hf: config::from_hf,
    from_gguf: config::from_gguf,
    gguf_name: config::gguf_name,
    gguf_permute: |_, _| None,
    build: |cfg, t, gpu| {
        let backend = t.backend;
        let m = Qwen3Next::load(cfg, t)?;
        Ok(match gpu {
            None => Box::new(m),
            Some(g) => Box::new(gpu::upload(g, m, backend)?),
        })
    },
};

enum Mixer {
    Delta(DeltaNet),
    Attn(GatedAttn),
}

struct Layer {
    /// `1 + input_layernorm.weight`.
    attn_norm: Vec<f32>,
    mixer: Mixer,
    /// `1 + post_attention_layernorm.weight`.
    mlp_norm: Vec<f32>,
    ffn: Ffn,
}

/// A Qwen3-Next model on the CPU.
pub struct Qwen3Next {
    cfg: ModelConfig,
    embed: Embedding,
    layers: Vec<Layer>,
    /// `1 + model.norm.weight`.
    norm: Vec<f32>,
    head: Option<Linear>,
    rope: Rope,
    spec: StateSpec,
}

impl Qwen3Next {
    fn load(cfg: ModelConfig, t: &mut Tensors<'_>) -> Result<Self, ModelError> {
        let h = cfg.hidden;
        let d = cfg.delta.clone().expect("a Qwen3-Next config has delta-net layers");
        let embed = t.embedding("model.embed_tokens.weight", cfg.vocab_size, h)?;
        let dtype = crate::layers::kv_dtype_for(t.backend);
        let mut layers = Vec::with_capacity(cfg.n_layers);
        let mut specs = Vec::with_capacity(cfg.n_layers);
        for i in 0..cfg.n_layers {
            let p = format!("model.layers.{i}");
            let mixer = if d.linear[i] {
                specs.push(LayerSpec::Recurrent {
                    state: d.v_heads * d.k_dim * d.v_dim,
                    conv: d.conv_channels() * (d.conv - 1),
                });
                Mixer::Delta(DeltaNet::load(t, &format!("{p}.linear_attn"), &cfg, &d)?)
            } else {
                specs.push(LayerSpec::Kv { kv_dim: cfg.kv_dim(), dtype });
                Mixer::Attn(GatedAttn::load(t, &format!("{p}.self_attn"), &cfg)?)
            };
            let ffn = t.ffn(&format!("{p}.mlp"), &cfg, i)?;
            layers.push(Layer {
                attn_norm: norm_weights(t, &format!("{p}.input_layernorm.weight"), h)?,
                mixer,
                mlp_norm: norm_weights(t, &format!("{p}.post_attention_layernorm.weight"), h)?,
                ffn,
            });
        }
        skip_prediction_weights(t);
        refuse_vision_tower(t)?;
        let norm = norm_weights(t, "model.norm.weight", h)?;
        let head = t.head(&cfg, &embed)?;
        let rope = Rope::for_dim(&cfg, d.rope_dim);
        Ok(Qwen3Next { cfg, embed, layers, norm, head, rope, spec: StateSpec { layers: specs } })
    }
}

/// Qwen3-Next checkpoints carry a multi-token-prediction module (`mtp.*`) for speculative decoding; one token a
/// step never runs it, so its tensors are marked read and the load says so.
fn skip_prediction_weights(t: &mut Tensors<'_>) {
    let skipped: Vec<String> = t.src.tensor_names().into_iter().filter(|n| n.starts_with("mtp.")).collect();
    if skipped.is_empty() {
        return;
    }
    t.notes.push(format!(
        "skips the multi-token-prediction module (mtp.*, {} tensors): one token a step does not use it",
        skipped.len()
    ));
    t.used.extend(skipped);
}

/// A Qwen3.5 checkpoint may carry its vision tower (`model.visual.*`) beside the text model; images are not read
/// yet, so such a checkpoint is refused by the tower's name rather than run without it unannounced.
fn refuse_vision_tower(t: &Tensors<'_>) -> Result<(), ModelError> {
    match t.src.tensor_names().into_iter().find(|n| n.starts_with("model.visual.")) {
        Some(n) => Err(ModelError::refused(
            "tensor",
            n,
            "a vision tower (model.visual.*): images are not supported by this build",
        )),
        None => Ok(()),
    }
}

impl CausalLm for Qwen3Next {
    fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    fn weight_bytes(&self) -> usize {
        let layers: usize = self
            .layers
            .iter()
            .map(|l| {
                let mixer = match &l.mixer {
                    Mixer::Delta(m) => m.bytes(),
                    Mixer::Attn(a) => a.bytes(),
                };
                mixer + l.ffn.bytes() + (l.attn_norm.len() + l.mlp_norm.len()) * 4
            })
            .sum();
        layers + self.embed.0.bytes().len() + self.head.as_ref().map_or(0, Linear::bytes) + self.norm.len() * 4
    }

    fn state_spec(&self) -> &StateSpec {
        &self.spec
    }

    fn forward(&self, batch: &mut [SeqInput<'_>], mode: LogitsMode) -> Result<Vec<Vec<f32>>, ModelError> {
        let step = crate::layers::is_decode_step(batch);
        kvad_tensor::cpu::gemv_rows8::decode_step(step, || self.pass(batch, mode, false))
    }

    fn forward_hidden(&self, batch: &mut [SeqInput<'_>], rows: LogitsMode) -> Result<Vec<Vec<f32>>, ModelError> {
        self.pass(batch, rows, true)
    }
}

impl Qwen3Next {
    fn pass(&self, batch: &mut [SeqInput<'_>], mode: LogitsMode, hidden: bool) -> Result<Vec<Vec<f32>>, ModelError> {
        let c = &self.cfg;
        let d = c.delta.as_ref().expect("a Qwen3-Next config has delta-net layers");
        let h = c.hidden;
        let mut p = PassIn::begin(c, &self.spec, &self.embed, &self.rope, batch)?;
        let rows = p.rows;
        let mut hbuf = vec![0f32; rows * h];
        for (li, l) in self.layers.iter().enumerate() {
            ops::rms_norm(&p.x, &l.attn_norm, c.norm_eps, &mut hbuf);
            let y = match &l.mixer {
                Mixer::Delta(m) => m.forward(c, d, &hbuf, li, &mut p.caches, &p.spans),
                Mixer::Attn(a) => a.forward(c, &hbuf, &p.tables, li, &mut p.caches, &p.spans),
            };
            ops::add_inplace(&mut p.x, &y);
            ops::rms_norm(&p.x, &l.mlp_norm, c.norm_eps, &mut hbuf);
            let y = l.ffn.forward(&hbuf, rows);
            ops::add_inplace(&mut p.x, &y);
        }
        let head = if hidden { Head::Hidden } else { self.head.as_ref().map_or(Head::Tied(&self.embed), Head::Linear) };
        Ok(p.finish(c, &self.norm, head, mode))
    }
}

#[cfg(test)]
mod tests;
