//! GPT-2: LayerNorm with bias, learned positions, fused qkv with bias, tanh GELU, tied head.
//!
//! HF stores GPT-2's linears as `Conv1D`, `[in, out]`; they are transposed once at load so the shared
//! [`Linear`] (`[out, in]`) runs them.

mod config;
mod gpu;

use crate::arch::entry::{no_gguf, ArchEntry};
use crate::config::ArchKind;
use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::layers::{attention, final_logits, AttnShape, Embedding, Head, Linear, Spans};
use crate::state::{SeqState, StateSpec};
use crate::tensors::Tensors;
use crate::{CausalLm, LogitsMode, SeqInput};
use kvad_tensor::cpu::ops;
use kvad_tensor::BackendKind;

/// The registry's line.
pub(crate) static ENTRY: ArchEntry = ArchEntry {
    kind: ArchKind::Gpt2,
    name: "gpt2",
    covers: "GPT-2",
    hf_classes: &["GPT2LMHeadModel"],
    model_types: &["gpt2"],
    gguf_archs: &[],
    backends: &BackendKind::ALL,
    mlp_matrices: 2,
    from_hf: config::from_hf,
    from_gguf: no_gguf,
    gguf_name: |hf| hf.to_string(),
    gguf_permute: |_, _| None,
    build: |cfg, t, gpu| {
        let backend = t.backend;
        let m = Gpt2::load(cfg, t)?;
        Ok(match gpu {
            None => Box::new(m),
            Some(g) => Box::new(gpu::upload(g, m, backend)?),
        })
    },
};

pub(crate) struct Block {
    pub(crate) ln1: (Vec<f32>, Vec<f32>),
    pub(crate) c_attn: Linear,
    pub(crate) c_proj: Linear,
    pub(crate) ln2: (Vec<f32>, Vec<f32>),
    pub(crate) fc: Linear,
    pub(crate) proj: Linear,
}

/// GPT-2 with f32 weights on the CPU.
pub struct Gpt2 {
    pub(crate) cfg: ModelConfig,
    pub(crate) wte: Embedding,
    pub(crate) wpe: Vec<f32>,
    pub(crate) blocks: Vec<Block>,
    pub(crate) ln_f: (Vec<f32>, Vec<f32>),
    pub(crate) head: Option<Linear>,
    /// Every layer's keys and values, stored as the backend keeps them ([`crate::layers::kv_dtype_for`]).
    pub(crate) spec: StateSpec,
}

impl Gpt2 {
    /// Builds the model from checked tensors. Checkpoints name tensors with or without a `transformer.` prefix.
    pub(crate) fn load(cfg: ModelConfig, t: &mut Tensors<'_>) -> Result<Self, ModelError> {
        let p = if t.has("transformer.wte.weight") { "transformer." } else { "" };
        let (e, ff) = (cfg.hidden, cfg.intermediate);
        let ln = |t: &mut Tensors<'_>, name: &str| -> Result<(Vec<f32>, Vec<f32>), ModelError> {
            Ok((t.vector(&format!("{name}.weight"), &[e])?, t.vector(&format!("{name}.bias"), &[e])?))
        };
        // Checkpoints name the embedding with or without the `transformer.` prefix.
        let name = if t.has("transformer.wte.weight") { "transformer.wte.weight" } else { "wte.weight" };
        let wte = t.embedding(name, cfg.vocab_size, e)?;
        let wpe = t.vector(&format!("{p}wpe.weight"), &[cfg.max_position, e])?;
        let mut blocks = Vec::with_capacity(cfg.n_layers);
        for i in 0..cfg.n_layers {
            let b = format!("{p}h.{i}");
            blocks.push(Block {
                ln1: ln(t, &format!("{b}.ln_1"))?,
                c_attn: t.conv1d(&format!("{b}.attn.c_attn"), e, 3 * e)?,
                c_proj: t.conv1d(&format!("{b}.attn.c_proj"), e, e)?,
                ln2: ln(t, &format!("{b}.ln_2"))?,
                fc: t.conv1d(&format!("{b}.mlp.c_fc"), e, ff)?,
                proj: t.conv1d(&format!("{b}.mlp.c_proj"), ff, e)?,
            });
        }
        let ln_f = ln(t, &format!("{p}ln_f"))?;
        // GPT-2's head is the embedding; a shipped lm_head.weight of another shape is refused by the loader.
        let head = t.head(&cfg, &wte)?;
        let spec = StateSpec::kv(cfg.n_layers, cfg.kv_dim(), crate::layers::kv_dtype_for(t.backend));
        Ok(Gpt2 { cfg, wte, wpe, blocks, ln_f, head, spec })
    }
}

impl CausalLm for Gpt2 {
    fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    fn weight_bytes(&self) -> usize {
        let blocks: usize = self
            .blocks
            .iter()
            .map(|b| {
                b.c_attn.bytes()
                    + b.c_proj.bytes()
                    + b.fc.bytes()
                    + b.proj.bytes()
                    + (b.ln1.0.len() + b.ln2.0.len()) * 8
            })
            .sum();
        blocks + self.wte.0.bytes().len() + self.wpe.len() * 4 + self.head.as_ref().map_or(0, Linear::bytes)
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

impl Gpt2 {
    /// One forward pass over the batch (see [`CausalLm::forward`]).
    fn pass(&self, batch: &mut [SeqInput<'_>], mode: LogitsMode, hidden: bool) -> Result<Vec<Vec<f32>>, ModelError> {
        let c = &self.cfg;
        let e = c.hidden;
        let counts: Vec<usize> = batch.iter().map(|s| s.tokens.len()).collect();
        let spans = Spans { counts: counts.clone(), starts: batch.iter().map(|s| s.state.len()).collect() };
        let rows: usize = counts.iter().sum();
        let positions = crate::batch::check_batch(c, &self.spec, batch)?;
        let mut x = Vec::with_capacity(rows * e);
        for s in batch.iter() {
            self.wte.lookup(s.tokens, &mut x);
        }
        for (row, &p) in x.chunks_exact_mut(e).zip(&positions) {
            ops::add_inplace(row, &self.wpe[p * e..(p + 1) * e]);
        }
        let shape = AttnShape { n_heads: c.n_heads, n_kv_heads: c.n_heads, head_dim: c.head_dim, window: None };
        let mut caches: Vec<&mut SeqState> = batch.iter_mut().map(|s| &mut *s.state).collect();
        let mut hbuf = vec![0f32; rows * e];
        for (li, b) in self.blocks.iter().enumerate() {
            ops::layer_norm(&x, &b.ln1.0, &b.ln1.1, c.norm_eps, &mut hbuf);
            let qkv = b.c_attn.forward(&hbuf, rows);
            let (mut q, mut k, mut v) =
                (Vec::with_capacity(rows * e), Vec::with_capacity(rows * e), Vec::with_capacity(rows * e));
            for r in qkv.chunks_exact(3 * e) {
                q.extend_from_slice(&r[..e]);
                k.extend_from_slice(&r[e..2 * e]);
                v.extend_from_slice(&r[2 * e..]);
            }
            let att = attention(shape, li, (&q, &k, &v), &mut caches, &spans);
            ops::add_inplace(&mut x, &b.c_proj.forward(&att, rows));
            ops::layer_norm(&x, &b.ln2.0, &b.ln2.1, c.norm_eps, &mut hbuf);
            let mut f = b.fc.forward(&hbuf, rows);
            ops::gelu_tanh(&mut f);
            ops::add_inplace(&mut x, &b.proj.forward(&f, rows));
        }
        for (state, &n) in caches.iter_mut().zip(&counts) {
            state.len += n;
        }
        Ok(final_logits(&x, e, &counts, mode, |rows, n| {
            let mut normed = vec![0f32; n * e];
            ops::layer_norm(rows, &self.ln_f.0, &self.ln_f.1, c.norm_eps, &mut normed);
            let head =
                if hidden { Head::Hidden } else { self.head.as_ref().map_or(Head::Tied(&self.wte), Head::Linear) };
            head.forward(&normed, n)
        }))
    }
}
