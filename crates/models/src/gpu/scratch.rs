//! The working buffers of a model's passes, sized for the largest pass so far and grown as needed, and the decode
//! passes recorded over them as CUDA graphs.

use super::delta::{DeltaScratch, DeltaShape};
use super::mla::{MlaScratch, MlaShape};
use super::moe::{MoeScratch, MoeShape};
use crate::config::ModelConfig;
use crate::error::ModelError;
use kvad_tensor::cuda::{DevBuf, Gpu, GpuGraph};
use std::collections::HashMap;
use std::sync::Arc;

/// Working buffers for a pass of up to `rows` rows and `sel` logit rows, grown as needed.
pub(crate) struct Scratch {
    pub(crate) rows: usize,
    pub(crate) sel: usize,
    pub(crate) meta_ints: usize,
    pub(crate) x: DevBuf,
    pub(crate) h: DevBuf,
    pub(crate) qkv: DevBuf,
    pub(crate) q: DevBuf,
    pub(crate) att: DevBuf,
    pub(crate) up: DevBuf,
    pub(crate) act: DevBuf,
    pub(crate) hsel: DevBuf,
    pub(crate) logits: DevBuf,
    pub(crate) meta: DevBuf,
    /// Greedy ids out.
    pub(crate) ids: DevBuf,
    /// The block count (zero between launches) of products that norm their own output.
    pub(crate) counter: DevBuf,
    /// bf16 copy of the largest block-format matrix, for cuBLAS (allocated on the first large pass).
    pub(crate) wtmp: Option<DevBuf>,
    /// Decode passes recorded over these buffers, by (rows, logit rows, page-table width, sequences, whether
    /// the logit rows are all rows in order).
    pub(crate) graphs: HashMap<GraphKey, GpuGraph>,
    /// The graph the last pass replayed (None: it ran unrecorded), for greedy steps ahead to replay again.
    pub(crate) last_graph: Option<GraphKey>,
    /// Greedy steps ahead's picks ([`GREEDY_AHEAD_MAX`] ints).
    pub(crate) hist: DevBuf,
    /// The routed layers' buffers (None: no layer routes).
    pub(crate) moe: Option<MoeScratch>,
    /// The latent layers' buffers (None: no layer is latent).
    pub(crate) mla: Option<MlaScratch>,
    /// The delta-net and gated attention layers' buffers (None: no such layer).
    pub(crate) delta: Option<DeltaScratch>,
}

/// A recorded decode pass's key: (rows, logit rows, page-table width, sequences, whether the logit rows are all
/// rows in order).
pub(crate) type GraphKey = (usize, usize, usize, usize, bool);

/// Most greedy steps run ahead in one call ([`CausalLm::forward_greedy_steps`]).
pub(crate) const GREEDY_AHEAD_MAX: usize = 64;

impl Scratch {
    /// Buffers for passes of up to `rows` rows, `sel` logit rows and `meta_ints` metadata; `up_width` is the widest
    /// MLP intermediate row, `moe` the largest routed layer's widths, `mla` the latent layers', `delta` the delta-net
    /// layers'.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        gpu: &Arc<Gpu>,
        c: &ModelConfig,
        up_width: usize,
        moe: Option<MoeShape>,
        mla: Option<MlaShape>,
        delta: Option<DeltaShape>,
        rows: usize,
        sel: usize,
        meta_ints: usize,
    ) -> Result<Scratch, ModelError> {
        let f = 4;
        let widest = c.hidden.max(c.q_dim()).max(c.intermediate);
        Ok(Scratch {
            rows,
            sel,
            meta_ints,
            x: DevBuf::zeros(gpu, rows * c.hidden * f)?,
            h: DevBuf::zeros(gpu, rows * widest * f)?,
            qkv: DevBuf::zeros(gpu, rows * (c.q_dim() + 2 * c.kv_dim()) * f)?,
            q: DevBuf::zeros(gpu, rows * c.q_dim() * f)?,
            att: DevBuf::zeros(gpu, rows * c.q_dim() * f)?,
            up: DevBuf::zeros(gpu, rows * up_width * f)?,
            act: DevBuf::zeros(gpu, rows * c.intermediate * f)?,
            hsel: DevBuf::zeros(gpu, sel * c.hidden * f)?,
            logits: DevBuf::zeros(gpu, sel * c.vocab_size * f)?,
            meta: DevBuf::zeros(gpu, meta_ints * 4)?,
            ids: DevBuf::zeros(gpu, sel * 4)?,
            counter: DevBuf::zeros(gpu, 4)?,
            wtmp: None,
            graphs: HashMap::new(),
            last_graph: None,
            hist: DevBuf::zeros(gpu, GREEDY_AHEAD_MAX * 4)?,
            moe: moe.map(|m| MoeScratch::new(gpu, m, c.hidden, rows)).transpose()?,
            mla: mla.map(|m| MlaScratch::new(gpu, m, rows)).transpose()?,
            delta: delta.map(|d| DeltaScratch::new(gpu, d, c.q_dim(), c.kv_dim(), rows)).transpose()?,
        })
    }
}
