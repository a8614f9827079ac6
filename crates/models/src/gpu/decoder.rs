//! The decoder every GPU architecture runs: pre-norm layers of attention and MLP over the residual stream, kept in
//! f32 on the device. Products of up to [`GEMV_MAX_ROWS`] rows (decode) run kvad's GEMV kernels on f32
//! activations; up to [`MMA_FEW_MAX_ROWS`] (a decode step of many replies) kvad's tensor-core kernel on bf16
//! activations, each weight read once; larger ones (prefill) cuBLAS on bf16 activations, block formats
//! dequantised per product.

use super::blocks::{norm_bytes, Layer, Norm, PassCtx};
use super::moe::largest;
use super::pages::{PagePool, Pages, Store};
use super::plan::{norm_steps, NormStep, Plan};
use super::scratch::{Scratch, GREEDY_AHEAD_MAX};
use super::slots::{Slot, SlotPool};
use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::layers::logit_rows;
use crate::state::{DeviceSlot, KvDtype, LayerSpec, LayerState, Recurrence, SeqState, StateSpec};
use crate::{CausalLm, LogitsMode, SeqInput};
use kvad_tensor::cuda::{
    flash_takes, Act, DevBuf, DevFormat, DevMatrix, GemvKernel, Gpu, NormOut, NormTo, SlotTable, FLASH_TILE,
    GEMV_MAX_ROWS, KV_PAGE, MMA_FEW_MAX_ROWS,
};
use std::sync::{Arc, Mutex};

/// The parts an architecture file assembles.
pub(crate) struct Parts {
    pub(crate) cfg: ModelConfig,
    pub(crate) embed: DevMatrix,
    /// Learned positions `[max_position][hidden]` f32 (GPT-2).
    pub(crate) pos_emb: Option<DevBuf>,
    pub(crate) layers: Vec<Layer>,
    pub(crate) final_norm: Norm,
    /// None: the head is the embedding.
    pub(crate) head: Option<DevMatrix>,
    /// RoPE inverse frequencies (None: no RoPE).
    pub(crate) inv_freq: Option<DevBuf>,
}

/// A model on the GPU.
pub(crate) struct GpuDecoder {
    gpu: Arc<Gpu>,
    p: Parts,
    /// The KV pages (`[layers][pages][nkv][PAGE][hd]` f16, K and V) and which are free.
    pool: Arc<PagePool>,
    /// Every layer's keys and values, f16 in the pages; a recurrent layer's state in a slot.
    spec: StateSpec,
    /// The recurrent layers' slots (None: no recurrent layer).
    slots: Option<Arc<SlotPool>>,
    /// Recurrent layers.
    n_rec: usize,
    scratch: Mutex<Option<Scratch>>,
    /// Passes with cuBLAS calls may be recorded as graphs (cleared when such a capture fails).
    blas_graph: std::sync::atomic::AtomicBool,
}

/// Greedy steps a GPU model runs ahead of the caller's stop checks: 8 (it saves the host's wait between steps; a
/// reply's last run may go up to 7 steps past its stop, its tokens dropped). The server's `[server] greedy_ahead`
/// (`kvad_engine::pass::Stepping`) runs another count (1: one at a time; past [`GREEDY_AHEAD_MAX`], a step at a
/// time).
const GREEDY_AHEAD: usize = 8;

/// Prompt tokens a GPU pass reads at once: block formats are dequantised once per pass for cuBLAS, so smaller
/// chunks repeat that work (and give the tensor cores less to chew on); the scratch for 4,096 rows of an 8B model
/// is about 1 GB.
const GPU_PREFILL_CHUNK: usize = 4096;

/// Tokens the page pool holds at least unless `KVAD_GPU_KV_TOKENS` (the GPU's `Tuning`) says otherwise; at most
/// half the free memory.
const DEFAULT_KV_TOKENS: usize = 65_536;

/// Share of the device memory free at load the page pool takes unless `KVAD_GPU_KV_TOKENS` names a count: a server
/// runs together as many replies as their pages hold (each reserved as it joins), so the pool is sized from memory
/// (vLLM's `gpu_memory_utilization` is the same idea); the rest is left for the pass scratch, cuBLAS and the
/// recurrent slots. No more than 64 full contexts of the model.
const KV_SHARE_OF_FREE: f64 = 0.4;

/// Sequences and snapshots a recurrent model's slots hold (each takes one slot a recurrent layer); at most a quarter
/// of the memory free after the pages. 256 sets of a Qwen3-Next-80B-shaped model (36 delta-net layers of 2.1 MB)
/// take about 20 GB; the engine's admission counts what is held.
const DEFAULT_RECURRENT_SETS: usize = 256;

impl GpuDecoder {
    /// Refuses generation where the checkpoint has no head ([`crate::layers::headless`]).
    fn has_head(&self) -> Result<(), ModelError> {
        match self.generates() {
            false => Err(crate::layers::no_head_error()),
            true => Ok(()),
        }
    }
}

impl GpuDecoder {
    /// Takes the uploaded parts and allocates the page pool.
    pub(crate) fn new(gpu: Arc<Gpu>, p: Parts) -> Result<GpuDecoder, ModelError> {
        let c = &p.cfg;
        // Each layer's page: keys and values, or a latent layer's one row a token.
        let widths: Vec<(usize, usize)> = p.layers.iter().map(|l| l.attn.page_bytes(c)).collect();
        let page_bytes: usize = widths.iter().map(|(k, v)| k + v).sum();
        let (free, _) = gpu.memory()?;
        let by_memory = (free as f64 * KV_SHARE_OF_FREE) as usize / page_bytes.max(1) * KV_PAGE;
        let want_tokens =
            gpu.tuning().kv_tokens.unwrap_or(by_memory.max(DEFAULT_KV_TOKENS)).min(c.max_position.max(KV_PAGE) * 64);
        let pages = (want_tokens.div_ceil(KV_PAGE)).min(free / 2 / page_bytes.max(1)).max(1);
        let store = Store::new(&gpu, pages, &widths)?;
        let pool = PagePool::new(pages, page_bytes, Some(store));
        let spec = StateSpec {
            layers: p
                .layers
                .iter()
                .map(|l| match (l.attn.mla_shape(), l.attn.delta_shape()) {
                    (Some(m), _) => LayerSpec::Latent { latent_dim: m.r, rope_dim: m.rope, dtype: KvDtype::F16 },
                    (_, Some(d)) => {
                        LayerSpec::Recurrent { state: d.nv * d.dk * d.dv, conv: d.slot_floats() - d.nv * d.dk * d.dv }
                    }
                    _ => LayerSpec::Kv { kv_dim: c.kv_dim(), dtype: KvDtype::F16 },
                })
                .collect(),
        };
        let delta = p.layers.iter().find_map(|l| l.attn.delta_shape());
        let n_rec = p.layers.iter().filter(|l| l.attn.delta_shape().is_some()).count();
        let slots = match delta {
            Some(d) => {
                let slot_bytes = d.slot_floats() * 4;
                let (free, _) = gpu.memory()?;
                let sets = DEFAULT_RECURRENT_SETS.min(free / 4 / (slot_bytes * n_rec)).max(1);
                Some(SlotPool::new(&gpu, sets * n_rec, slot_bytes)?)
            }
            None => None,
        };
        Ok(GpuDecoder {
            gpu,
            pool,
            spec,
            slots,
            n_rec,
            scratch: Mutex::new(None),
            p,
            blas_graph: std::sync::atomic::AtomicBool::new(true),
        })
    }

    fn layer_pages(&self, li: usize) -> (u64, u64) {
        self.pool.page_addr(li, 0).expect("a GPU pool has a store")
    }

    fn norm(&self, n: &Norm, x: u64, out: u64, rows: usize, bf16: bool) -> Result<(), ModelError> {
        let c = &self.p.cfg;
        // SAFETY: x and out hold rows × hidden (checked by the scratch sizes).
        unsafe {
            match n {
                Norm::Rms(w) => self.gpu.rms_norm(x, w.ptr(), out, rows, c.hidden, c.norm_eps, bf16)?,
                Norm::Layer(w, b) => self.gpu.layer_norm(x, w.ptr(), b.ptr(), out, rows, c.hidden, c.norm_eps, bf16)?,
            }
        }
        Ok(())
    }

    /// The activations a product after norm `n` reads: the norm kernel writes `out` (f32 for the GEMV path, bf16
    /// for cuBLAS).
    fn normed(&self, n: &Norm, x: u64, out: &DevBuf, rows: usize, gemv: bool) -> Result<Act, ModelError> {
        self.norm(n, x, out.ptr(), rows, !gemv)?;
        Ok(Act::rows(out.ptr(), gemv))
    }

    /// Whether every product of a pass of `rows` rows and `sel` logit rows runs the tensor-core kernel
    /// (mma_few.cu) or a GEMV: a pass with no cuBLAS call, whose recording cannot fail on cuBLAS.
    fn few_takes_all(&self, rows: usize, sel: usize) -> bool {
        let p = &self.p;
        let head = p.head.as_ref().unwrap_or(&p.embed);
        let takes = |m: &DevMatrix| self.gpu.few_rows_tiles(m, rows).is_some();
        (sel <= GEMV_MAX_ROWS || self.gpu.few_rows_tiles(head, sel).is_some())
            && p.layers.iter().all(|l| l.attn.products().into_iter().chain(l.mlp.products()).all(takes))
    }

    /// Whether a capture of a pass with cuBLAS in it has failed (such passes then run unrecorded).
    fn blas_graph_failed(&self) -> bool {
        !self.blas_graph.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn largest_block_matrix(&self) -> usize {
        let p = &self.p;
        let mut m = [Some(&p.embed), p.head.as_ref()]
            .into_iter()
            .flatten()
            .filter(|m| m.format() != DevFormat::Bf16)
            .map(|m| m.rows() * m.cols())
            .max()
            .unwrap_or(0);
        for l in &p.layers {
            for w in l.attn.products().into_iter().chain(l.mlp.products()) {
                if w.format() != DevFormat::Bf16 {
                    m = m.max(w.rows() * w.cols());
                }
            }
        }
        m
    }
}

impl CausalLm for GpuDecoder {
    fn config(&self) -> &ModelConfig {
        &self.p.cfg
    }

    fn state_spec(&self) -> &StateSpec {
        &self.spec
    }

    fn new_state(&self) -> SeqState {
        let pages = Box::new(Pages::new(self.pool.clone()));
        // A recurrent layer's state in a slot; with every slot held, a state on the host, which a pass refuses
        // saying so (`slot_ids`).
        let slotted = self.slots.as_ref().and_then(|pool| {
            SeqState::with_slots(&self.spec, |_| pool.take().map(|s| Box::new(s) as Box<dyn DeviceSlot>))
        });
        match slotted {
            Some(s) => SeqState { pages: Some(pages), ..s },
            None => SeqState::with_pages(&self.spec, pages),
        }
    }

    fn weight_bytes(&self) -> usize {
        let p = &self.p;
        let layers: usize = p.layers.iter().map(Layer::bytes).sum();
        let pos = p.pos_emb.as_ref().map_or(0, DevBuf::len);
        layers + p.embed.bytes() + p.head.as_ref().map_or(0, DevMatrix::bytes) + pos + norm_bytes(&p.final_norm)
    }

    fn prefill_chunk(&self) -> usize {
        GPU_PREFILL_CHUNK
    }

    fn state_room(&self) -> Option<crate::StateRoom> {
        // A sequence of a recurrent model holds one slot a recurrent layer (its snapshots more, when free).
        let sequences = self.slots.as_ref().map_or(usize::MAX, |s| s.total() / self.n_rec.max(1));
        Some(crate::StateRoom { tokens: self.pool.total * KV_PAGE, page: KV_PAGE, sequences })
    }

    fn forward(&self, batch: &mut [SeqInput<'_>], mode: LogitsMode) -> Result<Vec<Vec<f32>>, ModelError> {
        self.has_head()?;
        let vocab = self.p.cfg.vocab_size;
        let mut guard = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let Some(spans) = self.run(batch, mode, &mut guard)? else { return Ok(vec![Vec::new(); batch.len()]) };
        let s = guard.as_ref().expect("run allocates the scratch");
        let n: usize = spans.iter().map(|s| s.1).sum();
        let logits: Vec<f32> = if n == 0 {
            self.gpu.synchronize()?;
            Vec::new()
        } else {
            s.logits.read(&self.gpu, n * vocab)?
        };
        let mut out = Vec::with_capacity(batch.len());
        let mut r = 0;
        for &(_, n) in &spans {
            out.push(logits[r * vocab..(r + n) * vocab].to_vec());
            r += n;
        }
        Ok(out)
    }

    fn generates(&self) -> bool {
        !crate::layers::headless(&self.p.cfg, self.p.head.is_some())
    }

    /// The pass runs as a prompt chunk's (no head); the residual stream of the rows asked comes back and takes
    /// the final norm on the host: a few rows of `hidden` values, next to the pass itself nothing.
    fn forward_hidden(&self, batch: &mut [SeqInput<'_>], rows: LogitsMode) -> Result<Vec<Vec<f32>>, ModelError> {
        let h = self.p.cfg.hidden;
        let counts: Vec<usize> = batch.iter().map(|s| s.tokens.len()).collect();
        let mut guard = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        if self.run(batch, LogitsMode::None, &mut guard)?.is_none() {
            return Ok(vec![Vec::new(); batch.len()]);
        }
        let s = guard.as_ref().expect("run allocates the scratch");
        let x: Vec<f32> = s.x.read(&self.gpu, counts.iter().sum::<usize>() * h)?;
        let eps = self.p.cfg.norm_eps;
        let norm = match &self.p.final_norm {
            Norm::Rms(w) => (w.read::<f32>(&self.gpu, h)?, None),
            Norm::Layer(w, b) => (w.read::<f32>(&self.gpu, h)?, Some(b.read::<f32>(&self.gpu, h)?)),
        };
        Ok(crate::layers::final_logits(&x, h, &counts, rows, |r, n| {
            let mut out = vec![0f32; n * h];
            match &norm {
                (w, None) => kvad_tensor::cpu::ops::rms_norm(r, w, eps, &mut out),
                (w, Some(b)) => kvad_tensor::cpu::ops::layer_norm(r, w, b, eps, &mut out),
            }
            out
        }))
    }

    fn forward_greedy(&self, batch: &mut [SeqInput<'_>]) -> Result<Vec<u32>, ModelError> {
        self.has_head()?;
        let mut guard = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let Some(spans) = self.run(batch, LogitsMode::Last, &mut guard)? else { return Ok(Vec::new()) };
        let s = guard.as_ref().expect("run allocates the scratch");
        let n: usize = spans.iter().map(|s| s.1).sum();
        if n != batch.len() {
            return Err(ModelError::BadInput("greedy decoding needs at least one new token per sequence".into()));
        }
        self.picks(s, n)
    }

    fn greedy_ahead(&self) -> usize {
        // A recurrent state cannot be cut back to the step where a reply stopped (only to a snapshot), so a model
        // with one runs a step at a time.
        if self.n_rec > 0 {
            1
        } else {
            GREEDY_AHEAD
        }
    }

    /// One sequence's greedy steps back to back on the device: the first pass as [`CausalLm::forward_greedy`]'s,
    /// then its recorded graph replayed, each pick turned into the next pass's token and position on the device
    /// (`greedy_advance`), the picks read once at the end — the host no longer waits between steps. The pages
    /// for every step are taken first, so one page table (one graph) serves them all. A pass that ran
    /// unrecorded goes on a step at a time.
    fn forward_greedy_steps(&self, seq: SeqInput<'_>, steps: usize) -> Result<Vec<u32>, ModelError> {
        self.has_head()?;
        let SeqInput { tokens, state } = seq;
        if steps <= 1
            || tokens.len() != 1
            || steps > GREEDY_AHEAD_MAX
            || state.len + steps > self.p.cfg.max_position
            || self.n_rec > 0
        {
            return crate::greedy_one_by_one(self, SeqInput { tokens, state }, steps);
        }
        // Pages for every step first: the replays read the table run() writes now. Where the pool cannot give them
        // all, a step at a time (which says so at the step that lacks one).
        let (held, need) = (state.len, state.len + steps);
        let reserved = match state.pages_as_mut::<Pages>() {
            Some(p) if Arc::ptr_eq(&p.pool, &self.pool) => p.ensure(held, need),
            _ => false,
        };
        if !reserved {
            return crate::greedy_one_by_one(self, SeqInput { tokens, state }, steps);
        }
        let vocab = self.p.cfg.vocab_size;
        let gpu = &self.gpu;
        let mut guard = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let mut b = [SeqInput { tokens, state }];
        if self.run(&mut b, LogitsMode::Last, &mut guard)?.is_none() {
            return Ok(Vec::new());
        }
        let s = guard.as_mut().expect("run allocates the scratch");
        let Some(key) = s.last_graph else {
            let mut picks = self.picks(s, 1)?;
            drop(guard);
            let [SeqInput { state, .. }] = b;
            let first = [picks[0]];
            picks.extend(crate::greedy_one_by_one(self, SeqInput { tokens: &first, state }, steps - 1)?);
            return Ok(picks);
        };
        // SAFETY: logits holds one row of vocab, ids one int, hist GREEDY_AHEAD_MAX ints, meta a one-row pass's
        // metadata (token, then position); the graph was recorded over this scratch.
        let picks: Vec<i32> = unsafe {
            for step in 0..steps {
                if step > 0 {
                    s.graphs.get(&key).expect("the graph just replayed").launch()?;
                }
                gpu.argmax_rows(s.logits.ptr(), s.ids.ptr(), 1, vocab)?;
                gpu.greedy_advance(s.meta.ptr(), s.ids.ptr(), s.hist.ptr(), step, vocab)?;
            }
            s.hist.read(gpu, steps)?
        };
        b[0].state.len += steps - 1;
        Ok(picks.into_iter().map(|i| i as u32).collect())
    }
}

impl GpuDecoder {
    /// Runs the pass; the logits of the selected rows stay in the scratch. None: no rows at all.
    ///
    /// A pass of up to [`MMA_FEW_MAX_ROWS`] rows that runs no prompt tiles (decode) is recorded
    /// once as a CUDA graph per (rows, logit rows, page-table width, sequences, logit layout) and replayed:
    /// everything that changes from step to step (tokens, positions, page tables) is in the metadata buffer the
    /// kernels read, and the tables are padded to a power of two so one graph serves a sequence for many steps.
    fn run(
        &self,
        batch: &mut [SeqInput<'_>],
        mode: LogitsMode,
        guard: &mut Option<Scratch>,
    ) -> Result<Option<Vec<(usize, usize)>>, ModelError> {
        let c = &self.p.cfg;
        let positions = crate::batch::check_batch(c, &self.spec, batch)?;
        let counts: Vec<usize> = batch.iter().map(|s| s.tokens.len()).collect();
        let rows: usize = counts.iter().sum();
        if rows == 0 {
            return Ok(None);
        }
        // Pages for every new position, all or nothing.
        for s in batch.iter_mut() {
            let (held, need) = (s.state.len(), s.state.len() + s.tokens.len());
            let pages = s.state.pages_as_mut::<Pages>().ok_or_else(|| {
                ModelError::BadInput("this state was not made by this GPU model (use its new_state)".into())
            })?;
            if !Arc::ptr_eq(&pages.pool, &self.pool) {
                return Err(ModelError::BadInput("this cache belongs to another model's page pool".into()));
            }
            if !pages.ensure(held, need) {
                return Err(ModelError::BadInput(format!(
                    "the GPU KV cache is full: {need} tokens asked, {} pages of {KV_PAGE} free of {} \
                     (KVAD_GPU_KV_TOKENS sets its size)",
                    self.pool.available(),
                    self.pool.total
                )));
            }
        }
        let sel_spans = logit_rows(&counts, mode);
        let sel: Vec<i32> = sel_spans.iter().flat_map(|&(r0, n)| (r0..r0 + n).map(|r| r as i32)).collect();
        let max_pages = batch.iter().map(|s| s.state.pages_as::<Pages>().map_or(0, |p| p.ids.len())).max().unwrap_or(1);
        let gemv = rows <= GEMV_MAX_ROWS;
        // Prompt rows cut into tiles for the tensor-core attention; decode rows (one per sequence) keep the
        // key-stream kernels, where a 64-row tile would hold one row.
        let mut tiles: Vec<i32> = Vec::new();
        if !gemv && flash_takes(c.head_dim) && self.p.layers.iter().all(|l| l.attn.mla_shape().is_none()) {
            let mut r = 0;
            for &n in &counts {
                for t0 in (0..n).step_by(FLASH_TILE) {
                    tiles.extend([(r + t0) as i32, (n - t0).min(FLASH_TILE) as i32]);
                }
                r += n;
            }
            if rows < 8 * (tiles.len() / 2) {
                tiles.clear();
            }
        }
        // Passes of up to MMA_FEW_MAX_ROWS rows whose attention is the key-stream kernel (decode) are recorded as
        // graphs, cuBLAS calls included (its workspace comes from the stream-ordered allocator under capture since
        // CUDA 12.2); should a capture with cuBLAS fail, such passes run unrecorded from then on.
        let few = !gemv && rows <= MMA_FEW_MAX_ROWS;
        let blas = few && !self.few_takes_all(rows, sel.len());
        let graph = (gemv || few) && tiles.is_empty() && !(blas && self.blas_graph_failed());
        let width = if graph { max_pages.next_power_of_two().max(16) } else { max_pages };
        let all_rows = sel.iter().enumerate().all(|(i, &r)| r as usize == i) && sel.len() == rows;
        let head = self.p.head.as_ref().unwrap_or(&self.p.embed);
        let norms = norm_steps(&self.gpu, &self.p.layers, &self.p.final_norm, head, rows, all_rows);
        let slots_at = 3 * rows + sel.len() + batch.len() * width + tiles.len();
        let plan = Plan { rows, sel: sel.len(), width, n_tiles: tiles.len() / 2, all_rows, norms, slots_at };
        let mut meta: Vec<i32> = Vec::with_capacity(3 * rows + sel.len() + batch.len() * width + tiles.len());
        for s in batch.iter() {
            meta.extend(s.tokens.iter().map(|&t| t as i32));
        }
        meta.extend(positions.iter().map(|&p| p as i32));
        for (i, &n) in counts.iter().enumerate() {
            meta.extend(std::iter::repeat_n(i as i32, n));
        }
        meta.extend_from_slice(&sel);
        for s in batch.iter() {
            let ids = &s.state.pages_as::<Pages>().map_or(&[][..], |p| &p.ids[..]);
            meta.extend(ids.iter().map(|&i| i as i32));
            meta.extend(std::iter::repeat_n(0, width - ids.len()));
        }
        meta.extend_from_slice(&tiles);
        debug_assert_eq!(meta.len(), slots_at, "the slot table where the plan says");
        if let Some(pool) = &self.slots {
            let mut r = 0;
            for &n in &counts {
                meta.push(r as i32);
                r += n;
            }
            meta.push(r as i32);
            for s in batch.iter() {
                meta.extend(self.slot_ids(pool, s.state)?);
            }
        }

        let gpu = &self.gpu;
        let fits = guard.as_ref().is_some_and(|s| s.rows >= rows && s.sel >= sel.len() && s.meta_ints >= meta.len());
        if !fits {
            let old = guard.take();
            let r = rows.next_power_of_two().max(old.as_ref().map_or(0, |s| s.rows));
            let n = sel.len().next_power_of_two().max(old.as_ref().map_or(0, |s| s.sel));
            let m = meta.len().next_power_of_two().max(old.as_ref().map_or(0, |s| s.meta_ints)).max(1024);
            let up = self.p.layers.iter().map(|l| l.mlp.up_width()).max().unwrap_or(0);
            let moe = largest(self.p.layers.iter().filter_map(|l| l.mlp.moe_shape()));
            let mla = self.p.layers.iter().find_map(|l| l.attn.mla_shape());
            let delta = self.p.layers.iter().find_map(|l| l.attn.delta_shape());
            let mut fresh = Scratch::new(gpu, &self.p.cfg, up, moe, mla, delta, r, n, m)?;
            fresh.wtmp = old.and_then(|s| s.wtmp);
            *guard = Some(fresh);
        }
        let s = guard.as_mut().expect("scratch allocated above");
        if !gemv && s.wtmp.is_none() {
            let n = self.largest_block_matrix();
            if n > 0 {
                s.wtmp = Some(DevBuf::zeros(gpu, n * 2)?);
            }
        }
        s.meta.write_slice(gpu, &meta)?;
        s.last_graph = None;
        if graph {
            let key = (rows, sel.len(), width, batch.len(), all_rows);
            if !s.graphs.contains_key(&key) {
                match gpu.capture(|| self.issue(s, &plan, batch.len())) {
                    Ok(g) => {
                        s.graphs.insert(key, g);
                    }
                    Err(e) if blas => {
                        eprintln!("kvad: a decode pass with cuBLAS could not be recorded as a graph ({e}); such passes run unrecorded");
                        self.blas_graph.store(false, std::sync::atomic::Ordering::Relaxed);
                        self.issue(s, &plan, batch.len())?;
                    }
                    Err(e) => return Err(e),
                }
            }
            if let Some(g) = s.graphs.get(&key) {
                g.launch()?;
                s.last_graph = Some(key);
            }
        } else {
            self.issue(s, &plan, batch.len())?;
        }
        for (sq, &n) in batch.iter_mut().zip(&counts) {
            sq.state.len += n;
        }
        Ok(Some(sel_spans))
    }

    /// The slot ids of a sequence's recurrent layers, in layer order (the pass's slot table row).
    fn slot_ids(&self, pool: &Arc<SlotPool>, s: &SeqState) -> Result<Vec<i32>, ModelError> {
        let mut ids = Vec::with_capacity(self.n_rec);
        for l in s.layers() {
            let LayerState::Recurrent(r) = l else { continue };
            let slot = match &r.now {
                Recurrence::Device(d) => d.as_any().downcast_ref::<Slot>().filter(|s| s.of(pool)),
                Recurrence::Host { .. } => None,
            };
            let slot = slot.ok_or_else(|| {
                ModelError::BadInput(format!(
                    "no GPU slot for this sequence's recurrent state: all {} slots are held by other sequences and \
                     snapshots (or the state is another model's)",
                    pool.total()
                ))
            })?;
            ids.push(slot.id() as i32);
        }
        Ok(ids)
    }

    /// The greedy picks of the pass just run: the argmax of each of its `n` logit rows, on the device, and only
    /// the ids copied back.
    fn picks(&self, s: &Scratch, n: usize) -> Result<Vec<u32>, ModelError> {
        // SAFETY: the scratch's logits hold the pass's n rows of vocab, its ids room for n ints.
        let ids: Vec<i32> = unsafe {
            self.gpu.argmax_rows(s.logits.ptr(), s.ids.ptr(), n, self.p.cfg.vocab_size)?;
            s.ids.read(&self.gpu, n)?
        };
        Ok(ids.into_iter().map(|i| i as u32).collect())
    }

    /// Queues the pass's kernels: every address and size comes from the scratch and the plan, so a recording of
    /// this is valid for as long as the scratch lives. Each layer's blocks queue their own kernels; between them
    /// the residual products and the norms run as the plan's norm steps say.
    fn issue(&self, s: &Scratch, plan: &Plan, seqs: usize) -> Result<(), ModelError> {
        let c = &self.p.cfg;
        let gpu = &self.gpu;
        let rows = plan.rows;
        let gemv = rows <= GEMV_MAX_ROWS;
        let ctx = PassCtx {
            gpu,
            cfg: c,
            rows,
            seqs,
            gemv,
            meta: plan.meta(&s.meta),
            tiles: (if plan.n_tiles > 0 { plan.tiles_ptr(&s.meta, seqs) } else { 0 }, plan.n_tiles),
            inv_freq: self.p.inv_freq.as_ref().map_or(0, DevBuf::ptr),
            wtmp: s.wtmp.as_ref(),
            qkv: s.qkv.ptr(),
            q: s.q.ptr(),
            att: &s.att,
            up: s.up.ptr(),
            act: &s.act,
            x: s.x.ptr(),
            moe: s.moe.as_ref(),
            mla: s.mla.as_ref(),
            slots: SlotTable {
                base: self.slots.as_ref().map_or(0, |p| p.base()),
                slot_floats: self.p.layers.iter().find_map(|l| l.attn.delta_shape()).map_or(0, |d| d.slot_floats()),
                slots: s.meta.at((plan.slots_at + seqs + 1) * 4),
                n_rec: self.n_rec,
                rec: 0,
                seq_start: s.meta.at(plan.slots_at * 4),
                seqs,
            },
            delta: s.delta.as_ref(),
        };
        let layers = &self.p.layers;
        let head = self.p.head.as_ref().unwrap_or(&self.p.embed);
        // What the product after a norm reads when the product before it normed its output (its tail).
        let mut tailed: Option<Act> = None;
        // SAFETY: every buffer below was sized for `rows` rows of its width, the metadata for this batch, and the
        // page tables cover every new position (ensured by `run`).
        unsafe {
            gpu.embed(
                &self.p.embed,
                s.meta.ptr(),
                ctx.meta.row_pos,
                self.p.pos_emb.as_ref().map_or(0, DevBuf::ptr),
                s.x.ptr(),
                rows,
            )?;
            for (li, l) in layers.iter().enumerate() {
                let next_norm = layers.get(li + 1).map_or(&self.p.final_norm, |n| &n.norm1);
                let a = self.norm_in(s, &l.norm1, l.attn.input(), plan.norms[2 * li], tailed, gemv, rows)?;
                let att = l.attn.issue(&ctx, a, self.layer_pages(li))?;
                tailed = self.residual(s, l.attn.output(), att, &l.norm2, plan.norms[2 * li + 1], rows)?;
                let f32_in = gemv || l.mlp.reads_f32();
                let a = self.norm_in(s, &l.norm2, l.mlp.input(), plan.norms[2 * li + 1], tailed, f32_in, rows)?;
                tailed = match (l.mlp.issue(&ctx, a)?, l.mlp.output()) {
                    (Some(mid), Some(out)) => self.residual(s, out, mid, next_norm, plan.norms[2 * li + 2], rows)?,
                    // A routed block added its output itself (the plan runs the next norm's kernel).
                    _ => None,
                };
            }
            let n = plan.sel;
            if n > 0 {
                let h = c.hidden;
                let a = match (plan.norms[2 * layers.len()], tailed) {
                    // h holds every row final-normed (and their 8-bit form where the head reads it).
                    (NormStep::Tail(_), Some(a)) if plan.all_rows => a,
                    (NormStep::Tail(_), _) => {
                        gpu.gather_rows(s.h.ptr(), plan.sel_ptr(&s.meta), s.hsel.ptr(), n, h)?;
                        Act::F32(s.hsel.ptr())
                    }
                    _ => {
                        gpu.gather_rows(s.x.ptr(), plan.sel_ptr(&s.meta), s.hsel.ptr(), n, h)?;
                        self.normed(&self.p.final_norm, s.hsel.ptr(), &s.h, n, n <= GEMV_MAX_ROWS)?
                    }
                };
                gpu.matmul(head, a, n, s.logits.ptr(), 0, false, s.wtmp.as_ref())?;
            }
        }
        Ok(())
    }

    /// What the product after norm `norm` (its consumer `next`) reads: from the norm kernel, or from the product
    /// before it (`tailed`).
    ///
    /// # Safety
    /// The scratch holds `rows` rows.
    #[allow(clippy::too_many_arguments)]
    unsafe fn norm_in(
        &self,
        s: &Scratch,
        norm: &Norm,
        next: &DevMatrix,
        step: NormStep,
        tailed: Option<Act>,
        gemv: bool,
        rows: usize,
    ) -> Result<Act, ModelError> {
        let c = &self.p.cfg;
        match (step, norm.rms_weight()) {
            (NormStep::Tail(_), _) => {
                tailed.ok_or_else(|| ModelError::Gpu("a norm planned in a tail had no product before it".into()))
            }
            (NormStep::FirstAct8, Some(w)) if self.gpu.takes_act8(next, rows) => {
                // SAFETY: x and h hold rows × hidden; the 8-bit scratch is the GPU's own.
                unsafe { self.gpu.rms_norm_act8(s.x.ptr(), w, s.h.ptr(), rows, c.hidden, c.norm_eps)? };
                Ok(Act::F32Act8(s.h.ptr()))
            }
            (NormStep::First | NormStep::FirstAct8, _) => {
                self.norm(norm, s.x.ptr(), s.h.ptr(), rows, false)?;
                Ok(Act::F32(s.h.ptr()))
            }
            (NormStep::Kernel, _) => self.normed(norm, s.x.ptr(), &s.h, rows, gemv),
        }
    }

    /// The residual product `(w, bias)` adding `input`'s product to the stream; where the plan says so it also
    /// norms its output with `next_norm` for the product after it, whose input it returns.
    ///
    /// # Safety
    /// The scratch holds `rows` rows.
    unsafe fn residual(
        &self,
        s: &Scratch,
        (w, bias): (&DevMatrix, u64),
        input: Act,
        next_norm: &Norm,
        step: NormStep,
        rows: usize,
    ) -> Result<Option<Act>, ModelError> {
        let c = &self.p.cfg;
        // SAFETY: x holds rows × hidden, h the normed rows, the counter one u32 (the caller's contract).
        unsafe {
            match step {
                NormStep::Tail(to) => {
                    let o = NormOut {
                        g: next_norm.rms_weight().unwrap_or(0),
                        out: s.h.ptr(),
                        eps: c.norm_eps,
                        counter: s.counter.ptr(),
                        to,
                    };
                    self.gpu.gemv(GemvKernel::SplitDp4a, w, input, rows, s.x.ptr(), bias, true, Some(&o))?;
                    Ok(Some(match to {
                        NormTo::Deferred => Act::Act8Deferred { eps: o.eps },
                        NormTo::Act8 => Act::F32Act8(o.out),
                        NormTo::F32 => Act::F32(o.out),
                    }))
                }
                _ => {
                    self.gpu.matmul(w, input, rows, s.x.ptr(), bias, true, s.wtmp.as_ref())?;
                    Ok(None)
                }
            }
        }
    }
}
