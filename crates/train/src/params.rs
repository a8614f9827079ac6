//! Trainable tensors by their Hugging Face names, in f32, and a gradient buffer of the same layout.
//!
//! Training keeps f32 master weights whatever the checkpoint stored (bf16 and f16 are widened on load): the
//! optimiser's small updates vanish in bf16. Names stay the checkpoint's own, so saving writes back what
//! transformers reads.

use crate::TrainError;
use kvad_models::weights::WeightSource;
use std::collections::HashMap;

/// Where a network's tensors come from: a checkpoint ([`Stored`]) or a fresh initialisation
/// ([`crate::init::Init`]).
pub trait Source {
    /// Tensor `name` as f32 in `shape`; a missing tensor or another shape is a refusal naming the tensor.
    fn tensor(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, TrainError>;
}

/// Tensors read from a checkpoint's files (f16 and bf16 widened, GGUF blocks dequantised).
pub struct Stored<'a>(pub &'a dyn WeightSource);

impl Source for Stored<'_> {
    fn tensor(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, TrainError> {
        let info = self.0.info(name).ok_or_else(|| TrainError::refused(name, "missing", "the checkpoint lacks it"))?;
        if info.shape != shape {
            return Err(TrainError::refused(name, format!("{:?}", info.shape), format!("expected shape {shape:?}")));
        }
        Ok(self.0.load_f32(name)?)
    }
}

/// One trainable tensor.
#[derive(Debug, Clone)]
pub struct Param {
    /// The checkpoint's name (`model.layers.0.self_attn.q_proj.weight`).
    pub name: String,
    /// Its shape, as stored (row-major).
    pub shape: Vec<usize>,
    /// Its values.
    pub data: Vec<f32>,
    /// Whether the optimiser updates it (a LoRA run freezes the base model).
    pub trainable: bool,
}

impl Param {
    /// Whether weight decay applies: matrices decay, vectors (biases, norms) do not, as nanoGPT and
    /// transformers' Trainer split them.
    pub fn decays(&self) -> bool {
        self.shape.len() >= 2
    }
}

/// Every trainable tensor of a model, in a fixed order (the order the network asks for them).
#[derive(Debug, Clone, Default)]
pub struct Params {
    list: Vec<Param>,
    index: HashMap<String, usize>,
}

impl Params {
    /// Takes `name` from `src` with the `shape` the architecture expects (once: a tied tensor asked for again
    /// returns its first index).
    pub fn take(&mut self, src: &dyn Source, name: &str, shape: &[usize]) -> Result<usize, TrainError> {
        if let Some(&i) = self.index.get(name) {
            return Ok(i);
        }
        let data = src.tensor(name, shape)?;
        Ok(self.push(name, shape.to_vec(), data))
    }

    /// Adds a tensor (a LoRA factor, a freshly initialised weight) and returns its index.
    pub fn push(&mut self, name: &str, shape: Vec<usize>, data: Vec<f32>) -> usize {
        debug_assert_eq!(shape.iter().product::<usize>(), data.len());
        let i = self.list.len();
        self.index.insert(name.to_string(), i);
        self.list.push(Param { name: name.to_string(), shape, data, trainable: true });
        i
    }

    /// The tensor at `i`.
    pub fn get(&self, i: usize) -> &Param {
        &self.list[i]
    }

    /// Drops every tensor from index `n` on (adapters, which come after the model's own).
    pub fn truncate(&mut self, n: usize) {
        for p in self.list.drain(n.min(self.list.len())..) {
            self.index.remove(&p.name);
        }
    }

    /// The tensor at `i`, mutably.
    pub fn get_mut(&mut self, i: usize) -> &mut Param {
        &mut self.list[i]
    }

    /// The values at `i`.
    pub fn data(&self, i: usize) -> &[f32] {
        &self.list[i].data
    }

    /// The index of `name`, if the model has it.
    pub fn find(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// Every tensor, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Param> {
        self.list.iter()
    }

    /// Every tensor, mutably (the optimiser's update).
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Param> {
        self.list.iter_mut()
    }

    /// How many tensors.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The number of values in all tensors.
    pub fn numel(&self) -> usize {
        self.list.iter().map(|p| p.data.len()).sum()
    }

    /// Freezes every tensor present now (what an adapter added later trains alone).
    pub fn freeze_all(&mut self) {
        self.list.iter_mut().for_each(|p| p.trainable = false);
    }

    /// Whether tensor `i` is trained.
    pub fn trainable(&self, i: usize) -> bool {
        self.list[i].trainable
    }

    /// Values in trained tensors.
    pub fn trainable_numel(&self) -> usize {
        self.list.iter().filter(|p| p.trainable).map(|p| p.data.len()).sum()
    }

    /// A zeroed gradient buffer for every trained tensor (frozen ones get an empty buffer).
    pub fn zero_grads(&self) -> Grads {
        Grads { g: self.list.iter().map(|p| vec![0.0; if p.trainable { p.data.len() } else { 0 }]).collect() }
    }
}

/// Gradients, one buffer per [`Param`] at the same index; backward passes add into them.
#[derive(Debug, Clone)]
pub struct Grads {
    /// The buffers.
    pub g: Vec<Vec<f32>>,
}

impl Grads {
    /// The buffer for tensor `i`.
    pub fn at(&mut self, i: usize) -> &mut [f32] {
        &mut self.g[i]
    }

    /// Zeroes every buffer (after an optimiser step).
    pub fn zero(&mut self) {
        self.g.iter_mut().for_each(|g| g.fill(0.0));
    }

    /// Multiplies every gradient by `s` (gradient accumulation's mean, clipping).
    pub fn scale(&mut self, s: f32) {
        self.g.iter_mut().flatten().for_each(|v| *v *= s);
    }

    /// The global L2 norm over every buffer, summed in f64 (what clipping compares).
    pub fn norm(&self) -> f32 {
        self.g.iter().flatten().map(|&v| (v as f64) * (v as f64)).sum::<f64>().sqrt() as f32
    }
}
