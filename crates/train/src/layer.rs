//! Layers with parameters — linear (with an optional LoRA adapter) and the two norms — each knowing which tensors
//! are its own, so the network's forward and backward read as the model does.

use crate::ops::{self, LinShape, NormStats, WeightLayout};
use crate::params::{Grads, Params, Source};
use crate::TrainError;

/// Which modules get an adapter, and its size.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LoraSpec {
    /// The rank r.
    pub rank: usize,
    /// α: the update is scaled by α/r.
    pub alpha: f32,
    /// Module names (`q_proj`, `c_attn`, …): a module is adapted when its name is one of these or ends with
    /// `.` and one of these, as PEFT matches a list.
    pub targets: Vec<String>,
    /// rsLoRA's scale α/√r instead of α/r.
    pub rslora: bool,
}

impl LoraSpec {
    /// The update's scale.
    pub fn scale(&self) -> f32 {
        if self.rslora {
            self.alpha / (self.rank as f32).sqrt()
        } else {
            self.alpha / self.rank as f32
        }
    }

    pub(crate) fn matches(&self, module: &str) -> bool {
        self.targets.iter().any(|t| module == t || module.ends_with(&format!(".{t}")))
    }
}

/// A LoRA adapter on a linear layer: `y += scale · (x·Aᵀ)·Bᵀ`, A `[rank][in]`, B `[out][rank]` (PEFT's shapes,
/// whatever the base weight's layout).
#[derive(Debug, Clone, Copy)]
pub struct Lora {
    /// A's index in the parameters.
    pub a: usize,
    /// B's index in the parameters.
    pub b: usize,
    /// The rank.
    pub rank: usize,
    /// `alpha / rank` (or `alpha / √rank` with rsLoRA).
    pub scale: f32,
}

/// A linear layer: its module name (`model.layers.0.self_attn.q_proj`), weight, optional bias, shape and adapter.
#[derive(Debug, Clone)]
pub struct Lin {
    /// The module's name in the checkpoint, without `.weight`.
    pub name: String,
    /// The weight's index.
    pub w: usize,
    /// The bias's index.
    pub b: Option<usize>,
    /// Shape and layout.
    pub s: LinShape,
    /// The adapter, when LoRA is on for this module.
    pub lora: Option<Lora>,
}

/// The gradient buffer of tensor `i`, or a zeroed scratch one of its size when it is frozen (what a norm's
/// backward writes into regardless); give it back with [`put`].
pub fn take(g: &mut Grads, p: &Params, i: usize) -> Vec<f32> {
    if p.trainable(i) {
        std::mem::take(&mut g.g[i])
    } else {
        vec![0.0; p.data(i).len()]
    }
}

/// Returns a buffer from [`take`] (a frozen tensor's scratch is dropped).
pub fn put(g: &mut Grads, p: &Params, i: usize, buf: Vec<f32>) {
    if p.trainable(i) {
        g.g[i] = buf;
    }
}

impl Lin {
    /// Reads `{name}.weight` (and `{name}.bias`) from `src`.
    pub fn take(p: &mut Params, src: &dyn Source, name: &str, s: LinShape, bias: bool) -> Result<Self, TrainError> {
        let shape = match s.layout {
            WeightLayout::OutIn => [s.n_out, s.n_in],
            WeightLayout::InOut => [s.n_in, s.n_out],
        };
        let w = p.take(src, &format!("{name}.weight"), &shape)?;
        let b = if bias { Some(p.take(src, &format!("{name}.bias"), &[s.n_out])?) } else { None };
        Ok(Lin { name: name.to_string(), w, b, s, lora: None })
    }

    fn lora_shapes(&self, rank: usize) -> (LinShape, LinShape) {
        let a = LinShape { n_in: self.s.n_in, n_out: rank, layout: WeightLayout::OutIn };
        let b = LinShape { n_in: rank, n_out: self.s.n_out, layout: WeightLayout::OutIn };
        (a, b)
    }

    /// `x·W(ᵀ) + b` plus the adapter's term.
    pub fn forward(&self, p: &Params, x: &[f32], rows: usize) -> Vec<f32> {
        let mut y = ops::linear(x, rows, p.data(self.w), self.b.map(|b| p.data(b)), self.s);
        if let Some(l) = self.lora {
            let (sa, sb) = self.lora_shapes(l.rank);
            let xa = ops::linear(x, rows, p.data(l.a), None, sa);
            let d = ops::linear(&xa, rows, p.data(l.b), None, sb);
            y.iter_mut().zip(&d).for_each(|(o, &v)| *o += l.scale * v);
        }
        y
    }

    /// Adds `dy`'s input gradient into `dx` (when given) and the gradients of its trained tensors into `g`.
    pub fn backward(&self, p: &Params, g: &mut Grads, x: &[f32], dy: &[f32], rows: usize, mut dx: Option<&mut [f32]>) {
        let mut dw = p.trainable(self.w).then(|| std::mem::take(&mut g.g[self.w]));
        let mut db = self.b.filter(|&b| p.trainable(b)).map(|b| std::mem::take(&mut g.g[b]));
        ops::linear_back(x, dy, rows, p.data(self.w), self.s, dx.as_deref_mut(), dw.as_deref_mut(), db.as_deref_mut());
        if let Some(dw) = dw {
            g.g[self.w] = dw;
        }
        if let (Some(b), Some(db)) = (self.b, db) {
            g.g[b] = db;
        }
        if let Some(l) = self.lora {
            let (sa, sb) = self.lora_shapes(l.rank);
            // With xs = scale·x·Aᵀ: dB += dyᵀ·xs, d(x·Aᵀ) = scale·dy·B, then dA and dx through A.
            let mut xs = ops::linear(x, rows, p.data(l.a), None, sa);
            xs.iter_mut().for_each(|v| *v *= l.scale);
            let mut dxa = vec![0.0; rows * l.rank];
            let mut d_b = std::mem::take(&mut g.g[l.b]);
            ops::linear_back(&xs, dy, rows, p.data(l.b), sb, Some(&mut dxa), Some(&mut d_b), None);
            g.g[l.b] = d_b;
            dxa.iter_mut().for_each(|v| *v *= l.scale);
            let mut d_a = std::mem::take(&mut g.g[l.a]);
            ops::linear_back(x, &dxa, rows, p.data(l.a), sa, dx, Some(&mut d_a), None);
            g.g[l.a] = d_a;
        }
    }

    /// Folds the adapter into the weight (`W += scale·B·A` in W's layout) and drops it.
    pub fn merge(&mut self, p: &mut Params) {
        let Some(l) = self.lora.take() else { return };
        let (a, b) = (p.data(l.a).to_vec(), p.data(l.b).to_vec());
        let (n_in, n_out) = (self.s.n_in, self.s.n_out);
        let layout = self.s.layout;
        let w = &mut p.get_mut(self.w).data;
        for o in 0..n_out {
            for i in 0..n_in {
                let d: f32 = (0..l.rank).map(|r| b[o * l.rank + r] * a[r * n_in + i]).sum();
                let at = match layout {
                    WeightLayout::OutIn => o * n_in + i,
                    WeightLayout::InOut => i * n_out + o,
                };
                w[at] += l.scale * d;
            }
        }
    }
}

/// A norm layer.
#[derive(Debug, Clone, Copy)]
pub enum Norm {
    /// LayerNorm with weight and bias (GPT-2).
    Layer {
        /// Weight index.
        w: usize,
        /// Bias index.
        b: usize,
    },
    /// RMSNorm with a weight (the llama family).
    Rms {
        /// Weight index.
        w: usize,
    },
}

impl Norm {
    /// Reads `{name}.weight` (and, for LayerNorm, `{name}.bias`).
    pub fn take(p: &mut Params, src: &dyn Source, name: &str, width: usize, layer: bool) -> Result<Self, TrainError> {
        let w = p.take(src, &format!("{name}.weight"), &[width])?;
        Ok(if layer { Norm::Layer { w, b: p.take(src, &format!("{name}.bias"), &[width])? } } else { Norm::Rms { w } })
    }

    /// The normed rows and their statistics.
    pub fn forward(&self, p: &Params, x: &[f32], width: usize, eps: f32) -> (Vec<f32>, NormStats) {
        match *self {
            Norm::Layer { w, b } => ops::layer_norm(x, width, p.data(w), p.data(b), eps),
            Norm::Rms { w } => ops::rms_norm(x, width, p.data(w), eps),
        }
    }

    /// The input's gradient; the weight's (and bias's) added into `g` when trained.
    pub fn backward(&self, p: &Params, g: &mut Grads, x: &[f32], dy: &[f32], width: usize, st: &NormStats) -> Vec<f32> {
        let mut dx = vec![0.0; x.len()];
        match *self {
            Norm::Layer { w, b } => {
                let (mut dw, mut db) = (take(g, p, w), take(g, p, b));
                ops::layer_norm_back(x, dy, width, p.data(w), st, &mut dx, &mut dw, &mut db);
                put(g, p, w, dw);
                put(g, p, b, db);
            }
            Norm::Rms { w } => {
                let mut dw = take(g, p, w);
                ops::rms_norm_back(x, dy, width, p.data(w), st, &mut dx, &mut dw);
                put(g, p, w, dw);
            }
        }
        dx
    }
}
