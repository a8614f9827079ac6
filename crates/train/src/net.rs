//! The decoder stacks training runs — GPT-2 and the llama family (Llama, Mistral, Qwen2, Qwen3, SmolLM2) — as one
//! network over named parameters, with a forward that keeps what its backward needs (a [`Tape`]).
//!
//! The two families differ in parts, not in shape: LayerNorm with bias or RMSNorm, learned positions or RoPE, a fused
//! Conv1D qkv or three projections (with Qwen2's biases, Qwen3's per-head norms), GELU or SwiGLU. Inference keeps its
//! own per-architecture code (kvad-models), tuned for quantised weights and caches; training wants f32 and every
//! activation, so it has this one.

use crate::attn::{self, Shape};
use crate::batch::Batch;
use crate::layer::{put, take, Lin, Norm};
use crate::ops::{self, LinShape, NormStats, WeightLayout};
use crate::params::{Grads, Params, Source};
use crate::TrainError;
use kvad_models::layers::Rope;
use kvad_models::{ArchKind, ModelConfig, RopeScaling};

/// Rows of the output head computed at once: the logits of a chunk (rows × vocab) are the step's largest buffer.
const HEAD_ROWS: usize = 256;

/// The attention's input projections.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // one a layer, built once: boxing would only add an indirection
enum Qkv {
    /// GPT-2's c_attn: one Conv1D to q|k|v.
    Fused(Lin),
    /// Llama's q_proj, k_proj, v_proj.
    Split(Lin, Lin, Lin),
}

#[derive(Debug, Clone)]
enum Mlp {
    Gelu { fc: Lin, proj: Lin },
    SwiGlu { gate: Lin, up: Lin, down: Lin },
}

#[derive(Debug, Clone)]
struct Block {
    n1: Norm,
    qkv: Qkv,
    /// Qwen3's per-head RMSNorm of q and k, before RoPE.
    qk_norm: Option<(usize, usize)>,
    o: Lin,
    n2: Norm,
    mlp: Mlp,
}

/// What a layer's forward keeps for its backward.
struct LayerTape {
    x: Vec<f32>,
    n1: Vec<f32>,
    st1: NormStats,
    /// q and k before their per-head norms (empty without them), and the norms' statistics.
    q_raw: Vec<f32>,
    k_raw: Vec<f32>,
    qst: NormStats,
    kst: NormStats,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    lse: Vec<f32>,
    x_mid: Vec<f32>,
    n2: Vec<f32>,
    st2: NormStats,
    /// The GELU's input, or SwiGLU's gate.
    h1: Vec<f32>,
    /// SwiGLU's up projection (empty for GELU).
    h2: Vec<f32>,
}

/// A forward pass's kept activations.
pub struct Tape {
    layers: Vec<LayerTape>,
    x_final: Vec<f32>,
    nf: Vec<f32>,
    stf: NormStats,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

/// A trainable decoder: its config, parameters and how they are wired.
pub struct Net {
    cfg: ModelConfig,
    /// The parameters (f32 master weights), in the order the network takes them.
    pub params: Params,
    wte: usize,
    wpe: Option<usize>,
    blocks: Vec<Block>,
    norm_f: Norm,
    head: usize,
    rope: Option<Rope>,
    /// The LoRA adapter on this network, when one is on.
    pub(crate) lora: Option<crate::layer::LoraSpec>,
}

impl Net {
    /// Builds the network for `cfg` from `src`'s tensors; architectures training does not cover are refused by
    /// name.
    pub fn load(cfg: &ModelConfig, src: &dyn Source) -> Result<Self, TrainError> {
        check(cfg)?;
        let gpt2 = cfg.arch == ArchKind::Gpt2;
        let (d, ff, hd) = (cfg.hidden, cfg.intermediate, cfg.head_dim);
        let (qd, kvd) = (cfg.q_dim(), cfg.kv_dim());
        let mut p = Params::default();
        let (pre, wte_name) = if gpt2 { ("transformer", "transformer.wte") } else { ("model", "model.embed_tokens") };
        let wte = p.take(src, &format!("{wte_name}.weight"), &[cfg.vocab_size, d])?;
        let wpe = if gpt2 { Some(p.take(src, "transformer.wpe.weight", &[cfg.max_position, d])?) } else { None };
        let lin = |n_in, n_out| LinShape {
            n_in,
            n_out,
            layout: if gpt2 { WeightLayout::InOut } else { WeightLayout::OutIn },
        };
        let mut blocks = Vec::with_capacity(cfg.n_layers);
        for l in 0..cfg.n_layers {
            let b = if gpt2 { format!("{pre}.h.{l}") } else { format!("{pre}.layers.{l}") };
            let block = if gpt2 {
                Block {
                    n1: Norm::take(&mut p, src, &format!("{b}.ln_1"), d, true)?,
                    qkv: Qkv::Fused(Lin::take(&mut p, src, &format!("{b}.attn.c_attn"), lin(d, 3 * d), true)?),
                    qk_norm: None,
                    o: Lin::take(&mut p, src, &format!("{b}.attn.c_proj"), lin(d, d), true)?,
                    n2: Norm::take(&mut p, src, &format!("{b}.ln_2"), d, true)?,
                    mlp: Mlp::Gelu {
                        fc: Lin::take(&mut p, src, &format!("{b}.mlp.c_fc"), lin(d, ff), true)?,
                        proj: Lin::take(&mut p, src, &format!("{b}.mlp.c_proj"), lin(ff, d), true)?,
                    },
                }
            } else {
                let a = format!("{b}.self_attn");
                let n1 = Norm::take(&mut p, src, &format!("{b}.input_layernorm"), d, false)?;
                let q = Lin::take(&mut p, src, &format!("{a}.q_proj"), lin(d, qd), cfg.qkv_bias)?;
                let k = Lin::take(&mut p, src, &format!("{a}.k_proj"), lin(d, kvd), cfg.qkv_bias)?;
                let v = Lin::take(&mut p, src, &format!("{a}.v_proj"), lin(d, kvd), cfg.qkv_bias)?;
                let qk_norm = if cfg.qk_norm {
                    Some((
                        p.take(src, &format!("{a}.q_norm.weight"), &[hd])?,
                        p.take(src, &format!("{a}.k_norm.weight"), &[hd])?,
                    ))
                } else {
                    None
                };
                let o = Lin::take(&mut p, src, &format!("{a}.o_proj"), lin(qd, d), false)?;
                let n2 = Norm::take(&mut p, src, &format!("{b}.post_attention_layernorm"), d, false)?;
                let m = format!("{b}.mlp");
                let mlp = Mlp::SwiGlu {
                    gate: Lin::take(&mut p, src, &format!("{m}.gate_proj"), lin(d, ff), false)?,
                    up: Lin::take(&mut p, src, &format!("{m}.up_proj"), lin(d, ff), false)?,
                    down: Lin::take(&mut p, src, &format!("{m}.down_proj"), lin(ff, d), false)?,
                };
                Block { n1, qkv: Qkv::Split(q, k, v), qk_norm, o, n2, mlp }
            };
            blocks.push(block);
        }
        let norm_f = Norm::take(&mut p, src, if gpt2 { "transformer.ln_f" } else { "model.norm" }, d, gpt2)?;
        let head = if cfg.tie_embeddings { wte } else { p.take(src, "lm_head.weight", &[cfg.vocab_size, d])? };
        let rope = (!gpt2).then(|| Rope::new(cfg));
        Ok(Net { cfg: cfg.clone(), params: p, wte, wpe, blocks, norm_f, head, rope, lora: None })
    }

    /// The model's config.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// Whether this is GPT-2 (whose LoRA targets are c_attn, c_proj and c_fc).
    pub fn is_gpt2(&self) -> bool {
        self.cfg.arch == ArchKind::Gpt2
    }

    /// The parameters and every linear layer of the blocks (what LoRA may target), in order.
    pub(crate) fn parts_mut(&mut self) -> (&mut Params, Vec<&mut Lin>) {
        let mut out = Vec::new();
        for b in &mut self.blocks {
            match &mut b.qkv {
                Qkv::Fused(l) => out.push(l),
                Qkv::Split(q, k, v) => out.extend([q, k, v]),
            }
            out.push(&mut b.o);
            match &mut b.mlp {
                Mlp::Gelu { fc, proj } => out.extend([fc, proj]),
                Mlp::SwiGlu { gate, up, down } => out.extend([gate, up, down]),
            }
        }
        (&mut self.params, out)
    }

    fn shape(&self, b: &Batch) -> Shape {
        Shape {
            seqs: b.seqs,
            len: b.len,
            heads: self.cfg.n_heads,
            kv_heads: self.cfg.n_kv_heads,
            hd: self.cfg.head_dim,
        }
    }

    /// The batch's tokens checked against this model: ids inside the vocabulary, rows inside the positions GPT-2
    /// learned.
    pub fn check_batch(&self, b: &Batch) -> Result<(), TrainError> {
        if let Some(&t) = b.ids.iter().find(|&&t| t as usize >= self.cfg.vocab_size) {
            return Err(TrainError::refused("token id", t, format!("the vocabulary has {}", self.cfg.vocab_size)));
        }
        if self.wpe.is_some() && b.len > self.cfg.max_position {
            return Err(TrainError::refused(
                "sequence length",
                b.len,
                format!("n_positions is {}", self.cfg.max_position),
            ));
        }
        if let Some(w) = self.cfg.sliding_window.filter(|&w| b.len > w) {
            return Err(TrainError::refused("sequence length", b.len, format!("longer than sliding_window {w}")));
        }
        Ok(())
    }

    /// The forward pass up to the final norm, keeping every activation.
    pub fn forward(&self, b: &Batch) -> Tape {
        let (cfg, p) = (&self.cfg, &self.params);
        let (d, rows, eps) = (cfg.hidden, b.ids.len(), cfg.norm_eps);
        let mut x = vec![0.0; rows * d];
        let wte = p.data(self.wte);
        for (r, &t) in b.ids.iter().enumerate() {
            x[r * d..(r + 1) * d].copy_from_slice(&wte[t as usize * d..(t as usize + 1) * d]);
            if let Some(wpe) = self.wpe {
                let pos = r % b.len;
                x[r * d..(r + 1) * d].iter_mut().zip(&p.data(wpe)[pos * d..]).for_each(|(a, &e)| *a += e);
            }
        }
        let (mut cos, mut sin) = (Vec::new(), Vec::new());
        if let Some(rope) = &self.rope {
            for r in 0..rows {
                let (c, s) = rope.table(r % b.len);
                cos.extend(c);
                sin.extend(s);
            }
        }
        let sh = self.shape(b);
        let scale = 1.0 / (cfg.head_dim as f32).sqrt();
        let mut layers = Vec::with_capacity(self.blocks.len());
        for blk in &self.blocks {
            let (n1, st1) = blk.n1.forward(p, &x, d, eps);
            let (mut q, mut k, v) = match &blk.qkv {
                Qkv::Fused(l) => {
                    let qkv = l.forward(p, &n1, rows);
                    split3(&qkv, rows, d)
                }
                Qkv::Split(lq, lk, lv) => {
                    (lq.forward(p, &n1, rows), lk.forward(p, &n1, rows), lv.forward(p, &n1, rows))
                }
            };
            let (mut q_raw, mut k_raw, mut qst, mut kst) =
                (Vec::new(), Vec::new(), NormStats::default(), NormStats::default());
            if let Some((qn, kn)) = blk.qk_norm {
                let (qq, s1) = ops::rms_norm(&q, cfg.head_dim, p.data(qn), eps);
                let (kk, s2) = ops::rms_norm(&k, cfg.head_dim, p.data(kn), eps);
                q_raw = std::mem::replace(&mut q, qq);
                k_raw = std::mem::replace(&mut k, kk);
                (qst, kst) = (s1, s2);
            }
            if self.rope.is_some() {
                ops::rope(&mut q, cfg.n_heads, cfg.head_dim, &cos, &sin, false);
                ops::rope(&mut k, cfg.n_kv_heads, cfg.head_dim, &cos, &sin, false);
            }
            let (att, lse) = attn::forward(&q, &k, &v, sh, scale);
            let mut x_mid = blk.o.forward(p, &att, rows);
            x_mid.iter_mut().zip(&x).for_each(|(a, &r)| *a += r);
            let (n2, st2) = blk.n2.forward(p, &x_mid, d, eps);
            let (h1, h2, y) = match &blk.mlp {
                Mlp::Gelu { fc, proj } => {
                    let h = fc.forward(p, &n2, rows);
                    let y = proj.forward(p, &ops::gelu(&h), rows);
                    (h, Vec::new(), y)
                }
                Mlp::SwiGlu { gate, up, down } => {
                    let (g, u) = (gate.forward(p, &n2, rows), up.forward(p, &n2, rows));
                    let y = down.forward(p, &ops::swiglu(&g, &u), rows);
                    (g, u, y)
                }
            };
            let mut x_out = y;
            x_out.iter_mut().zip(&x_mid).for_each(|(a, &r)| *a += r);
            let x_in = std::mem::replace(&mut x, x_out);
            layers.push(LayerTape {
                x: x_in,
                n1,
                st1,
                q_raw,
                k_raw,
                qst,
                kst,
                q,
                k,
                v,
                att,
                lse,
                x_mid,
                n2,
                st2,
                h1,
                h2,
            });
        }
        let (nf, stf) = self.norm_f.forward(p, &x, d, eps);
        Tape { layers, x_final: x, nf, stf, cos, sin }
    }

    /// The logits of every row (rows × vocab), for tests and scoring.
    pub fn logits(&self, b: &Batch) -> Vec<f32> {
        let t = self.forward(b);
        self.head_lin().forward(&self.params, &t.nf, b.ids.len())
    }

    fn head_lin(&self) -> Lin {
        let s = LinShape { n_in: self.cfg.hidden, n_out: self.cfg.vocab_size, layout: WeightLayout::OutIn };
        Lin { name: "lm_head".into(), w: self.head, b: None, s, lora: None }
    }

    /// The batch's mean cross-entropy over its counted targets, without gradients.
    pub fn loss(&self, b: &Batch) -> f64 {
        let tape = self.forward(b);
        let count = b.counted().max(1);
        let mut total = 0.0;
        let head = self.head_lin();
        for (c0, nf) in tape.nf.chunks(HEAD_ROWS * self.cfg.hidden).enumerate() {
            let rows = nf.len() / self.cfg.hidden;
            let mut logits = head.forward(&self.params, nf, rows);
            total += ops::cross_entropy(&mut logits, self.cfg.vocab_size, &b.targets[c0 * HEAD_ROWS..][..rows], count);
        }
        total / count as f64
    }

    /// The batch's mean cross-entropy, and its gradient times `weight` added into `g` (`weight` = 1/micro-batches
    /// for gradient accumulation).
    pub fn loss_and_grads(&self, b: &Batch, g: &mut Grads, weight: f32) -> f64 {
        let (cfg, p) = (&self.cfg, &self.params);
        let (d, rows) = (cfg.hidden, b.ids.len());
        let tape = self.forward(b);
        let count = b.counted().max(1);
        let head = self.head_lin();
        let mut dnf = vec![0.0; rows * d];
        let mut total = 0.0;
        for (c0, (nf, dn)) in tape.nf.chunks(HEAD_ROWS * d).zip(dnf.chunks_mut(HEAD_ROWS * d)).enumerate() {
            let n = nf.len() / d;
            let mut logits = head.forward(p, nf, n);
            let targets = &b.targets[c0 * HEAD_ROWS..][..n];
            total += ops::cross_entropy(&mut logits, cfg.vocab_size, targets, count);
            if weight != 1.0 {
                logits.iter_mut().for_each(|v| *v *= weight);
            }
            head.backward(p, g, nf, &logits, n, Some(dn));
        }
        let mut dx = self.norm_f.backward(p, g, &tape.x_final, &dnf, d, &tape.stf);
        let sh = self.shape(b);
        let scale = 1.0 / (cfg.head_dim as f32).sqrt();
        for (blk, t) in self.blocks.iter().zip(&tape.layers).rev() {
            // MLP: x_out = x_mid + mlp(n2)
            let mut dn2 = vec![0.0; rows * d];
            match &blk.mlp {
                Mlp::Gelu { fc, proj } => {
                    let a = ops::gelu(&t.h1);
                    let mut da = vec![0.0; a.len()];
                    proj.backward(p, g, &a, &dx, rows, Some(&mut da));
                    let dh = ops::gelu_back(&t.h1, &da);
                    fc.backward(p, g, &t.n2, &dh, rows, Some(&mut dn2));
                }
                Mlp::SwiGlu { gate, up, down } => {
                    let a = ops::swiglu(&t.h1, &t.h2);
                    let mut da = vec![0.0; a.len()];
                    down.backward(p, g, &a, &dx, rows, Some(&mut da));
                    let (dg, du) = ops::swiglu_back(&t.h1, &t.h2, &da);
                    gate.backward(p, g, &t.n2, &dg, rows, Some(&mut dn2));
                    up.backward(p, g, &t.n2, &du, rows, Some(&mut dn2));
                }
            }
            let dmid = blk.n2.backward(p, g, &t.x_mid, &dn2, d, &t.st2);
            dx.iter_mut().zip(&dmid).for_each(|(a, &b)| *a += b);
            // Attention: x_mid = x + o(attn(q, k, v))
            let mut datt = vec![0.0; t.att.len()];
            blk.o.backward(p, g, &t.att, &dx, rows, Some(&mut datt));
            let (mut dq, mut dk, dv) = attn::backward(&t.q, &t.k, &t.v, &t.att, &t.lse, &datt, sh, scale);
            if self.rope.is_some() {
                ops::rope(&mut dq, cfg.n_heads, cfg.head_dim, &tape.cos, &tape.sin, true);
                ops::rope(&mut dk, cfg.n_kv_heads, cfg.head_dim, &tape.cos, &tape.sin, true);
            }
            if let Some((qn, kn)) = blk.qk_norm {
                let mut dq_raw = vec![0.0; dq.len()];
                let mut dk_raw = vec![0.0; dk.len()];
                let (mut gq, mut gk) = (take(g, p, qn), take(g, p, kn));
                ops::rms_norm_back(&t.q_raw, &dq, cfg.head_dim, p.data(qn), &t.qst, &mut dq_raw, &mut gq);
                ops::rms_norm_back(&t.k_raw, &dk, cfg.head_dim, p.data(kn), &t.kst, &mut dk_raw, &mut gk);
                put(g, p, qn, gq);
                put(g, p, kn, gk);
                (dq, dk) = (dq_raw, dk_raw);
            }
            let mut dn1 = vec![0.0; rows * d];
            match &blk.qkv {
                Qkv::Fused(l) => l.backward(p, g, &t.n1, &join3(&dq, &dk, &dv, rows, d), rows, Some(&mut dn1)),
                Qkv::Split(lq, lk, lv) => {
                    lq.backward(p, g, &t.n1, &dq, rows, Some(&mut dn1));
                    lk.backward(p, g, &t.n1, &dk, rows, Some(&mut dn1));
                    lv.backward(p, g, &t.n1, &dv, rows, Some(&mut dn1));
                }
            }
            let dxin = blk.n1.backward(p, g, &t.x, &dn1, d, &t.st1);
            dx.iter_mut().zip(&dxin).for_each(|(a, &b)| *a += b);
        }
        let wpe = self.wpe.filter(|&i| p.trainable(i));
        for (r, &tok) in b.ids.iter().enumerate() {
            let dr = &dx[r * d..(r + 1) * d];
            if p.trainable(self.wte) {
                g.g[self.wte][tok as usize * d..][..d].iter_mut().zip(dr).for_each(|(a, &v)| *a += v);
            }
            if let Some(wpe) = wpe {
                g.g[wpe][(r % b.len) * d..][..d].iter_mut().zip(dr).for_each(|(a, &v)| *a += v);
            }
        }
        total / count as f64
    }
}

/// Splits rows of q|k|v (each `d` wide) into three matrices.
fn split3(qkv: &[f32], rows: usize, d: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let mut out = [Vec::with_capacity(rows * d), Vec::with_capacity(rows * d), Vec::with_capacity(rows * d)];
    for r in qkv.chunks(3 * d) {
        for (i, o) in out.iter_mut().enumerate() {
            o.extend_from_slice(&r[i * d..(i + 1) * d]);
        }
    }
    let [q, k, v] = out;
    (q, k, v)
}

/// The inverse of [`split3`].
fn join3(q: &[f32], k: &[f32], v: &[f32], rows: usize, d: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(rows * 3 * d);
    for r in 0..rows {
        for m in [q, k, v] {
            out.extend_from_slice(&m[r * d..(r + 1) * d]);
        }
    }
    out
}

/// Refuses what this network does not compute, naming the config field.
pub(crate) fn check(cfg: &ModelConfig) -> Result<(), TrainError> {
    if !matches!(cfg.arch, ArchKind::Llama | ArchKind::Gpt2)
        || cfg.moe.is_some()
        || cfg.delta.is_some()
        || cfg.mla.is_some()
    {
        return Err(TrainError::refused(
            "architectures",
            &cfg.arch_name,
            "training covers GPT-2 and the llama family (Llama, Mistral, Qwen2, Qwen3, SmolLM2)",
        ));
    }
    if let Some(RopeScaling::Yarn { .. }) = cfg.rope_scaling {
        return Err(TrainError::refused("rope_scaling", "yarn", "YaRN scales attention too; not trained here"));
    }
    if cfg.n_kv_heads == 0 || !cfg.n_heads.is_multiple_of(cfg.n_kv_heads) {
        return Err(TrainError::refused("num_key_value_heads", cfg.n_kv_heads, "must divide num_attention_heads"));
    }
    Ok(())
}
