//! DeepSeek-V2 and V3 (and V2-Lite): pre-norm decoder layers of latent attention (`mla.rs`) and an MLP that is
//! dense in the first `first_k_dense_replace` layers and routed after ([`crate::moe`]: softmax or sigmoid routing,
//! groups, shared experts). The cache holds latents ([`crate::state::LayerSpec::Latent`]). Multi-token-prediction
//! layers in a checkpoint are skipped by name.

mod config;
mod gpu;
mod mla;

use crate::arch::entry::ArchEntry;
use crate::batch::PassIn;
use crate::config::{ArchKind, ModelConfig};
use crate::error::ModelError;
use crate::layers::{Embedding, Head, Linear, Rope};
use crate::moe::Ffn;
use crate::state::{LayerSpec, StateSpec};
use crate::tensors::Tensors;
use crate::{CausalLm, LogitsMode, SeqInput};
use kvad_tensor::cpu::ops;
use kvad_tensor::BackendKind;
use mla::Mla;

/// The registry's line.
pub(crate) static ENTRY: ArchEntry = ArchEntry {
    kind: ArchKind::Deepseek,
    name: "deepseek",
    covers: "DeepSeek-V2, V2-Lite, V3 (latent attention, experts)",
    hf_classes: &["DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM"],
    model_types: &["deepseek_v2", "deepseek_v3"],
    gguf_archs: &["deepseek2"],
    backends: &BackendKind::ALL,
    mlp_matrices: 3,
    from_hf: config::from_hf,
    from_gguf: config::from_gguf,
    gguf_name: config::gguf_name,
    gguf_permute: |_, _| None,
    build: |cfg, t, gpu| {
        let backend = t.backend;
        let m = Deepseek::load(cfg, t)?;
        Ok(match gpu {
            None => Box::new(m),
            Some(g) => Box::new(gpu::upload(g, m, backend)?),
        })
    },
};

struct Layer {
    attn_norm: Vec<f32>,
    attn: Mla,
    mlp_norm: Vec<f32>,
    ffn: Ffn,
}

/// A DeepSeek model on the CPU.
pub struct Deepseek {
    cfg: ModelConfig,
    embed: Embedding,
    layers: Vec<Layer>,
    norm: Vec<f32>,
    head: Option<Linear>,
    rope: Rope,
    spec: StateSpec,
}

impl Deepseek {
    fn load(cfg: ModelConfig, t: &mut Tensors<'_>) -> Result<Self, ModelError> {
        let h = cfg.hidden;
        let m = cfg.mla.clone().expect("a DeepSeek config has latent attention");
        let embed = t.embedding("model.embed_tokens.weight", cfg.vocab_size, h)?;
        let mut layers = Vec::with_capacity(cfg.n_layers);
        for i in 0..cfg.n_layers {
            let p = format!("model.layers.{i}");
            let ffn = t.ffn(&format!("{p}.mlp"), &cfg, i)?;
            layers.push(Layer {
                attn_norm: t.vector(&format!("{p}.input_layernorm.weight"), &[h])?,
                attn: Mla::load(t, &format!("{p}.self_attn"), &cfg)?,
                mlp_norm: t.vector(&format!("{p}.post_attention_layernorm.weight"), &[h])?,
                ffn,
            });
        }
        skip_prediction_layers(t, cfg.n_layers);
        let norm = t.vector("model.norm.weight", &[h])?;
        let head = t.head(&cfg, &embed)?;
        let rope = Rope::for_dim(&cfg, m.rope_dim);
        let dtype = crate::layers::kv_dtype_for(t.backend);
        let spec = StateSpec {
            layers: vec![LayerSpec::Latent { latent_dim: m.kv_lora_rank, rope_dim: m.rope_dim, dtype }; cfg.n_layers],
        };
        Ok(Deepseek { cfg, embed, layers, norm, head, rope, spec })
    }
}

/// DeepSeek-V3 publishes its multi-token-prediction module as layers past the last (`model.layers.<n>.*`); one
/// token a step never runs them, so they are marked read and said so.
fn skip_prediction_layers(t: &mut Tensors<'_>, n_layers: usize) {
    let past = |name: &str| {
        let idx = name.strip_prefix("model.layers.").or_else(|| name.strip_prefix("blk."));
        idx.and_then(|r| r.split_once('.')).and_then(|(i, _)| i.parse::<usize>().ok()).is_some_and(|i| i >= n_layers)
    };
    let skipped: Vec<String> = t.src.tensor_names().into_iter().filter(|n| past(n)).collect();
    if skipped.is_empty() {
        return;
    }
    let mut layers: Vec<String> =
        skipped.iter().filter_map(|n| n.splitn(3, '.').take(2).last().map(str::to_string)).collect();
    layers.sort();
    layers.dedup();
    t.notes.push(format!(
        "skips the multi-token-prediction layer{} {} ({} tensors): one token a step does not use them",
        if layers.len() == 1 { "" } else { "s" },
        layers.join(", "),
        skipped.len()
    ));
    t.used.extend(skipped);
}

impl CausalLm for Deepseek {
    fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    fn weight_bytes(&self) -> usize {
        let layers: usize = self
            .layers
            .iter()
            .map(|l| l.attn.bytes() + l.ffn.bytes() + (l.attn_norm.len() + l.mlp_norm.len()) * 4)
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

impl Deepseek {
    fn pass(&self, batch: &mut [SeqInput<'_>], mode: LogitsMode, hidden: bool) -> Result<Vec<Vec<f32>>, ModelError> {
        let c = &self.cfg;
        let m = c.mla.as_ref().expect("a DeepSeek config has latent attention");
        let h = c.hidden;
        let mut p = PassIn::begin(c, &self.spec, &self.embed, &self.rope, batch)?;
        let rows = p.rows;
        let mut hbuf = vec![0f32; rows * h];
        for (li, l) in self.layers.iter().enumerate() {
            ops::rms_norm(&p.x, &l.attn_norm, c.norm_eps, &mut hbuf);
            let att = l.attn.forward(m, c.n_heads, &hbuf, rows, &p.tables, li, &mut p.caches, &p.spans);
            ops::add_inplace(&mut p.x, &att);
            ops::rms_norm(&p.x, &l.mlp_norm, c.norm_eps, &mut hbuf);
            let y = l.ffn.forward(&hbuf, rows);
            ops::add_inplace(&mut p.x, &y);
        }
        let head = if hidden { Head::Hidden } else { self.head.as_ref().map_or(Head::Tied(&self.embed), Head::Linear) };
        Ok(p.finish(c, &self.norm, head, mode))
    }
}
