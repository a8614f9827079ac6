//! The real engine: models on this machine, loaded through `kvad_engine::open_model` under the memory rule
//! ([`memory`]), several at once; every running sequence's cache, sampler and decoder; and the conversations set
//! aside per model ([`kept`]). A step is one batched `CausalLm::forward` over the parts the scheduler chose.

pub mod kept;
pub mod memory;
pub mod tokens;

use crate::engine::{
    loaded_elsewhere, template_reasons, Begun, Ended, GenParams, Memory, ModelInfo, Piece, Prepared, Prompt, Resident,
    SeqId, Stepped, TokenLogprob,
};
use crate::error::ApiError;
use crate::sched::{Part, Work};
use crate::Engine;
use kept::Kept;
use kvad_engine::{open_model, OpenedModel, Sampled, Sampler};
use kvad_models::weights::GgufFile;
use kvad_models::{LogitsMode, SeqInput, SeqKv};
use kvad_tensor::BackendKind;
use kvad_text::{ChatContext, ChatTemplate, DecoderState, IncrementalDecoder};
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};

struct Entry {
    info: ModelInfo,
    path: PathBuf,
}

/// A model in memory.
struct Slot {
    entry: usize,
    /// The backend it was loaded on (it keeps it until unloaded).
    backend: BackendKind,
    m: OpenedModel,
    stop: Vec<u32>,
    charged: u64,
    context: usize,
    kept: Kept<SeqKv>,
}

/// One running sequence.
struct Seq {
    entry: usize,
    kv: SeqKv,
    prompt: Vec<u32>,
    /// Prompt tokens in the cache.
    read: usize,
    reply: Vec<u32>,
    sampler: Sampler,
    dec: DecoderState,
    params: GenParams,
    /// Tokens it may hold (prompt + max_tokens).
    reserve: usize,
    /// Greedy picks made ahead of the scheduler's stop checks ([`lone_ahead`]), not yet handed out: the cache holds
    /// all but the last, so it is `ahead.len()` tokens past where stepping one at a time would have it.
    ahead: VecDeque<u32>,
}

/// How the local engine sizes things.
#[derive(Debug, Clone, Copy)]
pub struct LocalSettings {
    /// Tokens of KV cache each model is charged for (`[server] context`; None: the model's own context).
    pub context: Option<usize>,
    /// Bytes the server may charge in all (`[server] memory`, else what the machine has available at start).
    pub memory: u64,
}

/// Models by name; those in memory kept with their conversations, each on the backend its load named.
pub struct LocalEngine {
    entries: Vec<Entry>,
    /// `[server] backend`: where a load that names none, and a request for a model not in memory, loads it.
    default_backend: BackendKind,
    settings: LocalSettings,
    slots: Vec<Slot>,
    seqs: HashMap<SeqId, Seq>,
}

/// Reads a model's chat template without loading its weights (GGUF metadata is mapped, not read whole).
fn probe_template(path: &Path) -> Result<Option<ChatTemplate>, String> {
    if path.is_dir() {
        return ChatTemplate::from_dir(path).map_err(|e| e.to_string());
    }
    let g = GgufFile::open(path).map_err(|e| e.to_string())?;
    match g.get("tokenizer.chat_template").and_then(|v| v.as_str()) {
        Some(s) => ChatTemplate::new(s).map(Some).map_err(|e| e.to_string()),
        None => Ok(None),
    }
}

impl LocalEngine {
    /// Resolves every name (fetching the default alias when needed) and reads each template's capabilities.
    /// `backend` is `[server] backend`, the default of every load.
    pub fn new(names: &[String], backend: BackendKind, settings: LocalSettings) -> Result<Self, String> {
        let mut entries = Vec::new();
        for name in names {
            let r = kvad_hub::resolve(name).map_err(|e| e.to_string())?;
            let tpl = probe_template(&r.path).map_err(|e| format!("{name}: {e}"))?;
            let info = ModelInfo {
                id: name.clone(),
                chat: tpl.is_some(),
                tools: tpl.as_ref().is_some_and(ChatTemplate::supports_tools),
                reasoning: tpl.as_ref().is_some_and(|t| template_reasons(t.source())),
                loaded: false,
                backend: backend.to_string(),
                default_backend: backend.to_string(),
            };
            entries.push(Entry { info, path: r.path });
        }
        Ok(LocalEngine { entries, default_backend: backend, settings, slots: Vec::new(), seqs: HashMap::new() })
    }

    fn entry(&self, model: &str) -> Result<usize, ApiError> {
        self.entries.iter().position(|e| e.info.id == model).ok_or_else(|| {
            ApiError::model_not_found(model, &self.entries.iter().map(|e| e.info.id.clone()).collect::<Vec<_>>())
        })
    }

    fn slot(&self, entry: usize) -> Option<&Slot> {
        self.slots.iter().find(|s| s.entry == entry)
    }

    /// `model@backend`: the backend it is on, or the default one while it is not loaded.
    fn name(&self, entry: usize) -> String {
        let backend = self.slot(entry).map_or(self.default_backend, |s| s.backend);
        format!("{}@{backend}", self.entries[entry].info.id)
    }

    /// The model in memory, loading it on `backend` (`None`: the one it is on, else `[server] backend`) under the
    /// memory rule. A model in memory on another backend than the one named is refused (409), never unloaded.
    ///
    /// A request that names a model not in memory (`prepare`) loads it on `[server] backend`, not on the backend it
    /// was last loaded on: a request names no backend, so where it lands (and what it is charged) follows from the
    /// configuration alone rather than from a history an administrator may not see, and the engine keeps no
    /// history across unloads. The backend a model was on is honoured where it was asked for: `[server] autoload`
    /// reloads each model on the backend recorded when it was loaded.
    fn load_entry(&mut self, entry: usize, backend: Option<BackendKind>) -> Result<&Slot, ApiError> {
        if let Some(on) = self.slot(entry).map(|s| s.backend) {
            if let Some(b) = backend.filter(|&b| b != on) {
                return Err(loaded_elsewhere(&self.entries[entry].info.id, on.name(), b.name()));
            }
            return self.slot(entry).ok_or_else(|| ApiError::internal("the model left memory"));
        }
        let backend = backend.unwrap_or(self.default_backend);
        let name = format!("{}@{backend}", self.entries[entry].info.id);
        let m = open_model(&self.entries[entry].path, backend).map_err(|e| match e {
            // No GPU (or its libraries) here: the engine's own words, about the field the load named.
            kvad_engine::EngineError::Model(kvad_models::ModelError::Gpu(why)) => ApiError::unsupported(
                "backend",
                format!("backend = \"{backend}\": {name} cannot load on this machine: GPU: {why}"),
            ),
            e => ApiError::internal(format!("loading {name}: {e}")),
        })?;
        let c = m.model.config();
        let context = self.settings.context.unwrap_or(c.max_position);
        let kv = (context * c.n_layers * 2 * c.kv_dim() * m.model.kv_dtype().bytes()) as u64;
        // What this backend holds: q8/q4 weights are charged as their blocks, f32 as floats.
        let weights = m.model.weight_bytes() as u64;
        let detail =
            format!("{} of weights and {} of KV cache for {context} tokens", memory::human(weights), memory::human(kv));
        let resident = self.memory().resident;
        memory::admit(self.settings.memory, &resident, &name, weights + kv, &detail)
            .map_err(ApiError::insufficient_memory)?;
        let stop = m.stop_ids();
        self.slots.push(Slot { entry, backend, m, stop, charged: weights + kv, context, kept: Kept::default() });
        self.slot(entry).ok_or_else(|| ApiError::internal("the model was not kept after loading"))
    }

    /// Lets go of kept conversations of `entry` until they fit beside the running sequences' reserves.
    fn fit(&mut self, entry: usize) {
        let running: usize = self.seqs.values().filter(|s| s.entry == entry).map(|s| s.reserve).sum();
        if let Some(slot) = self.slots.iter_mut().find(|s| s.entry == entry) {
            let room = slot.context.saturating_sub(running);
            slot.kept.fit(room);
        }
    }
}

fn render(m: &OpenedModel, model: &str, prompt: &Prompt) -> Result<(String, Vec<u32>), ApiError> {
    match prompt {
        Prompt::Chat { messages, tools } => {
            let Some(t) = &m.template else {
                return Err(ApiError::bad_field(
                    "model",
                    format!("model {model} has no chat template; use /v1/completions with a plain prompt"),
                ));
            };
            let ctx = ChatContext {
                messages: messages.clone(),
                tools: tools.clone(),
                add_generation_prompt: true,
                bos_token: m.tokenizer.bos_token().unwrap_or_default().to_string(),
                eos_token: m.tokenizer.eos_token().unwrap_or_default().to_string(),
                extra: Default::default(),
            };
            let text = t.render(&ctx).map_err(|e| ApiError::bad_field("messages", e.to_string()))?;
            let ids = m.tokenizer.encode(&text, false).map_err(|e| ApiError::internal(e.to_string()))?;
            Ok((text, ids))
        }
        Prompt::Text(s) => {
            let ids = m.tokenizer.encode(s, true).map_err(|e| ApiError::internal(e.to_string()))?;
            Ok((s.clone(), ids))
        }
    }
}

impl Engine for LocalEngine {
    fn catalog(&self) -> Vec<ModelInfo> {
        self.entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let on = self.slot(i).map(|s| s.backend.to_string());
                ModelInfo {
                    loaded: on.is_some(),
                    backend: on.unwrap_or_else(|| e.info.backend.clone()),
                    ..e.info.clone()
                }
            })
            .collect()
    }

    fn prepare(&mut self, model: &str, prompt: &Prompt) -> Result<Prepared, ApiError> {
        let entry = self.entry(model)?;
        let loaded = self.slot(entry).is_none();
        let slot = self.load_entry(entry, None)?;
        let backend = slot.backend.to_string();
        let (text, tokens) = render(&slot.m, model, prompt)?;
        let c = slot.m.model.config();
        Ok(Prepared {
            prompt_tokens: tokens.len(),
            tokens,
            text,
            context: c.max_position,
            vocab: c.vocab_size,
            backend,
            model: model.to_string(),
            loaded,
        })
    }

    fn budget(&self, model: &str) -> usize {
        self.entry(model).ok().and_then(|e| self.slot(e)).map_or(0, |s| s.context)
    }

    fn begin(&mut self, seq: SeqId, p: &Prepared, params: &GenParams, fresh: bool) -> Result<Begun, ApiError> {
        params.sampling.validate().map_err(kvad_engine::EngineError::from)?;
        let entry = self.entry(&p.model)?;
        if p.tokens.is_empty() {
            return Err(ApiError::bad_request("the prompt is empty: nothing to continue"));
        }
        let reserve = p.tokens.len() + params.max_tokens;
        let slot = self
            .slots
            .iter_mut()
            .find(|s| s.entry == entry)
            .ok_or_else(|| ApiError::internal(format!("{} was unloaded before its reply began", p.model)))?;
        let (kv, cached) = match fresh {
            true => None,
            false => slot.kept.take(&p.tokens),
        }
        .unwrap_or_else(|| (slot.m.model.new_cache(), 0));
        let sampler = Sampler::new(params.sampling.clone());
        self.seqs.insert(
            seq,
            Seq {
                entry,
                kv,
                prompt: p.tokens.clone(),
                read: cached,
                reply: Vec::new(),
                sampler,
                dec: DecoderState::default(),
                params: params.clone(),
                reserve,
                ahead: VecDeque::new(),
            },
        );
        self.fit(entry);
        Ok(Begun { cached, to_read: p.tokens.len() - cached })
    }

    fn step(&mut self, parts: &[Part]) -> Result<Vec<Option<Stepped>>, ApiError> {
        let mut seqs = Vec::with_capacity(parts.len());
        for p in parts {
            match self.seqs.remove(&p.id) {
                Some(s) => seqs.push(s),
                None => {
                    for (s, q) in seqs.into_iter().zip(parts) {
                        self.seqs.insert(q.id, s);
                    }
                    return Err(ApiError::internal(format!("step: sequence {} is not running", p.id)));
                }
            }
        }
        let result = run_pass(&self.slots, parts, &mut seqs);
        for (s, p) in seqs.into_iter().zip(parts) {
            self.seqs.insert(p.id, s);
        }
        result
    }

    fn end(&mut self, seq: SeqId, keep: bool) -> Ended {
        let Some(mut s) = self.seqs.remove(&seq) else { return Ended::default() };
        // Picks made ahead and never handed out leave the cache (a conversation kept resumes where its reply ended).
        s.kv.truncate(s.kv.len() - s.ahead.len());
        let Some(slot) = self.slots.iter_mut().find(|x| x.entry == s.entry) else { return Ended::default() };
        let rest = IncrementalDecoder::resume(&slot.m.tokenizer, true, s.dec).finish().unwrap_or_default();
        if keep {
            let tokens: Vec<u32> = s.prompt.iter().chain(&s.reply).copied().collect();
            slot.kept.put(tokens, s.kv);
        }
        self.fit(s.entry);
        let held = self.slot(s.entry).map(|x| x.kept.held()).unwrap_or_default();
        Ended { rest, held }
    }

    fn load(&mut self, model: &str, backend: Option<&str>) -> Result<String, ApiError> {
        let entry = self.entry(model)?;
        let backend = backend
            .map(|b| b.parse::<BackendKind>().map_err(|e| ApiError::bad_field("backend", e.to_string())))
            .transpose()?;
        self.load_entry(entry, backend).map(|s| s.backend.to_string())
    }

    fn unload(&mut self, model: Option<&str>) -> Result<Vec<String>, ApiError> {
        let targets: Vec<usize> = match model {
            Some(m) => {
                let e = self.entry(m)?;
                if self.slot(e).is_none() {
                    let loaded: Vec<String> = self.slots.iter().map(|s| self.name(s.entry)).collect();
                    return Err(ApiError::bad_field(
                        "model",
                        format!(
                            "{m} is not loaded; in memory: {}",
                            if loaded.is_empty() { "nothing".into() } else { loaded.join(", ") }
                        ),
                    ));
                }
                vec![e]
            }
            None => self.slots.iter().map(|s| s.entry).collect(),
        };
        if let Some(s) = self.seqs.values().find(|s| targets.contains(&s.entry)) {
            return Err(ApiError::internal(format!("{} has a reply running", self.name(s.entry))));
        }
        let names = targets.iter().map(|&e| self.name(e)).collect();
        self.slots.retain(|s| !targets.contains(&s.entry));
        Ok(names)
    }

    fn memory(&self) -> Memory {
        Memory {
            total: self.settings.memory,
            resident: self
                .slots
                .iter()
                .map(|s| Resident {
                    name: self.name(s.entry),
                    charged: s.charged,
                    context: s.context,
                    held: s.kept.held(),
                })
                .collect(),
        }
    }

    fn tokenizers(&self) -> std::sync::Arc<dyn crate::engine::Tokenize> {
        let paths = self.entries.iter().map(|e| (e.info.id.clone(), e.path.clone())).collect();
        std::sync::Arc::new(tokens::LocalTokenizers::new(paths))
    }
}

/// Rows up to which a pass runs the decode kernels, whose every row computes exactly what it would alone.
const ALONE_ROWS: usize = 8;

/// What a pass gives a part: its logits row for the CPU sampler, the token the device picked (every sampling
/// part of the pass is plain greedy), or nothing (a prompt chunk).
enum Out {
    Logits(Vec<f32>),
    Id(u32),
    Nothing,
}

/// `KVAD_STEP_TRACE=1`: each pass's forward and sampling times on stderr (where a step's time goes).
pub(crate) fn step_trace() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("KVAD_STEP_TRACE").is_ok_and(|v| v == "1"))
}

/// One pass over `batch`: every sampling part's token from the device when all are plain greedy, else logits.
fn one_pass(
    model: &dyn kvad_models::CausalLm,
    batch: &mut [SeqInput<'_>],
    sampling: bool,
    greedy: bool,
) -> Result<Vec<Out>, ApiError> {
    let err = |e: kvad_models::ModelError| ApiError::internal(e.to_string());
    if sampling && greedy {
        let ids = kvad_engine::greedy_picks(model, batch).map_err(|e| ApiError::internal(e.to_string()))?;
        return Ok(ids.into_iter().map(Out::Id).collect());
    }
    let mode = if sampling { LogitsMode::Last } else { LogitsMode::None };
    Ok(model.forward(batch, mode).map_err(err)?.into_iter().map(Out::Logits).collect())
}

/// Greedy steps to run ahead for a pass that is one reply's next token alone, plain greedy and holding no picks
/// made ahead: [`kvad_engine::greedy_ahead`] (8 on a GPU: the host's wait a step saved; 1 on the CPU), no more than
/// its reply may still take or its context hold. None (a step as usual) below 2. Its stop checks stay the
/// scheduler's, a token at a time; a reply that stops early drops the rest (`end`).
fn lone_ahead(model: &dyn kvad_models::CausalLm, parts: &[Part], seqs: &[Seq], ctx: usize) -> Option<usize> {
    let ([p], [s]) = (parts, seqs) else { return None };
    if p.work != Work::Decode
        || !s.ahead.is_empty()
        || !kvad_engine::device_picks(&s.params.sampling, &s.params.options)
    {
        return None;
    }
    let left = s.reserve.saturating_sub(s.prompt.len() + s.reply.len());
    let k = kvad_engine::greedy_ahead(model).min(left).min(ctx.saturating_sub(s.kv.len()));
    (k > 1).then_some(k)
}

/// One step's forward work. Replies that sample (one token each) never share a pass with a prompt chunk when the
/// two together exceed [`ALONE_ROWS`]: the chunk is read in a pass of its own, then the sampling rows in one pass on
/// the decode kernels, so a reply's tokens are the same whoever joins beside it (the determinism rule). Returns
/// what each part gets ([`Out`]).
fn forward_parts(
    model: &dyn kvad_models::CausalLm,
    parts: &[Part],
    seqs: &mut [&mut Seq],
    tokens: &[Vec<u32>],
) -> Result<Vec<Out>, ApiError> {
    let sampling = |p: &Part| !matches!(p.work, Work::Chunk(_));
    let rows: usize = tokens.iter().map(Vec::len).sum();
    let any_chunk = parts.iter().any(|p| !sampling(p));
    let any_sampling = parts.iter().any(sampling);
    // Only the ids cross back when every sampling part is plain greedy: copying and log-softmaxing a full
    // vocabulary row per reply on the engine thread cost more than the GPU's whole pass at 16 replies.
    let greedy = parts
        .iter()
        .zip(seqs.iter())
        .all(|(p, s)| !sampling(p) || kvad_engine::device_picks(&s.params.sampling, &s.params.options));
    let chunk_out = |mut v: Vec<Out>| {
        for (o, p) in v.iter_mut().zip(parts) {
            if !sampling(p) {
                *o = Out::Nothing;
            }
        }
        v
    };
    if !(any_chunk && any_sampling && rows > ALONE_ROWS) {
        let mut batch: Vec<SeqInput<'_>> =
            seqs.iter_mut().zip(tokens).map(|(s, t)| SeqInput { tokens: t, kv: &mut s.kv }).collect();
        return Ok(chunk_out(one_pass(model, &mut batch, any_sampling, greedy)?));
    }
    let mut out: Vec<Out> = parts.iter().map(|_| Out::Nothing).collect();
    for want_sampling in [false, true] {
        let mut idx = Vec::new();
        let mut batch: Vec<SeqInput<'_>> = Vec::new();
        for (i, ((p, s), t)) in parts.iter().zip(seqs.iter_mut()).zip(tokens).enumerate() {
            if sampling(p) == want_sampling {
                idx.push(i);
                batch.push(SeqInput { tokens: t, kv: &mut s.kv });
            }
        }
        let got = one_pass(model, &mut batch, want_sampling, greedy)?;
        for (i, o) in idx.into_iter().zip(got) {
            out[i] = if want_sampling { o } else { Out::Nothing };
        }
    }
    Ok(out)
}

fn run_pass(slots: &[Slot], parts: &[Part], seqs: &mut [Seq]) -> Result<Vec<Option<Stepped>>, ApiError> {
    let entry = seqs.first().map_or(0, |s| s.entry);
    if seqs.iter().any(|s| s.entry != entry) {
        return Err(ApiError::internal("one pass holds sequences of one model"));
    }
    let slot = slots
        .iter()
        .find(|s| s.entry == entry)
        .ok_or_else(|| ApiError::internal("a running sequence's model is not in memory"))?;
    let model = slot.m.model.as_ref();
    let ctx = model.config().max_position;
    let mut tokens: Vec<Vec<u32>> = Vec::with_capacity(parts.len());
    for (p, s) in parts.iter().zip(seqs.iter()) {
        let t = match p.work {
            Work::Chunk(n) => s.prompt[s.read..(s.read + n).min(s.prompt.len().saturating_sub(1))].to_vec(),
            Work::Last => s.prompt[s.prompt.len() - 1..].to_vec(),
            Work::Decode => s.reply.last().map(|&t| vec![t]).unwrap_or_default(),
        };
        if t.is_empty() {
            return Err(ApiError::internal(format!("step: part {:?} of sequence {} has no tokens", p.work, p.id)));
        }
        tokens.push(t);
    }
    let t0 = std::time::Instant::now();
    let rows: usize = tokens.iter().map(Vec::len).sum();
    let outs = if let Some(k) = lone_ahead(model, parts, seqs, ctx) {
        // One reply's next token alone: k greedy steps back to back, the first handed out now.
        let s = &mut seqs[0];
        let picks = kvad_engine::greedy_steps(model, SeqInput { tokens: &tokens[0], kv: &mut s.kv }, k)
            .map_err(|e| ApiError::internal(e.to_string()))?;
        s.ahead.extend(&picks[1..]);
        vec![Out::Id(picks[0])]
    } else {
        // Replies holding picks made ahead take their next from there; the others run the pass.
        let mut outs: Vec<Out> = Vec::with_capacity(parts.len());
        let (mut run_parts, mut run_seqs, mut run_tokens, mut run_at) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (i, ((p, s), t)) in parts.iter().zip(seqs.iter_mut()).zip(&tokens).enumerate() {
            let made = if p.work == Work::Decode { s.ahead.pop_front() } else { None };
            match made {
                Some(id) => outs.push(Out::Id(id)),
                None => {
                    outs.push(Out::Nothing);
                    run_parts.push(*p);
                    run_seqs.push(s);
                    run_tokens.push(t.clone());
                    run_at.push(i);
                }
            }
        }
        if !run_parts.is_empty() {
            for (i, o) in run_at.into_iter().zip(forward_parts(model, &run_parts, &mut run_seqs, &run_tokens)?) {
                outs[i] = o;
            }
        }
        outs
    };
    let t1 = std::time::Instant::now();
    let tok = &slot.m.tokenizer;
    let text_of = |id: u32| tok.decode(&[id], false).unwrap_or_default();
    let mut out = Vec::with_capacity(parts.len());
    for ((p, s), got) in parts.iter().zip(seqs.iter_mut()).zip(outs) {
        match p.work {
            Work::Chunk(_) => {
                s.read += tokens[out.len()].len();
                out.push(None);
                continue;
            }
            Work::Last => s.read = s.prompt.len(),
            Work::Decode => {}
        }
        let sampled = match got {
            Out::Id(id) => Sampled::picked(id),
            Out::Logits(mut row) => {
                for &(id, b) in &s.params.options.logit_bias {
                    if let Some(v) = row.get_mut(id as usize) {
                        *v += b;
                    }
                }
                s.sampler.sample(&row, &s.prompt, &s.reply)
            }
            Out::Nothing => return Err(ApiError::internal(format!("step: no token for sequence {}", p.id))),
        };
        s.reply.push(sampled.id);
        let end = slot.stop.contains(&sampled.id) && !s.params.options.ignore_eos;
        let text = if end {
            String::new()
        } else {
            let mut d = IncrementalDecoder::resume(tok, true, std::mem::take(&mut s.dec));
            let t = d.push(sampled.id).map_err(|e| ApiError::internal(e.to_string()))?;
            s.dec = d.into_state();
            t.unwrap_or_default()
        };
        let logprob = s.params.sampling.top_logprobs.map(|_| TokenLogprob {
            token: text_of(sampled.id),
            logprob: sampled.logprob,
            top: sampled.top.iter().map(|(id, lp)| (text_of(*id), *lp)).collect(),
            in_play: sampled.in_play.clone(),
        });
        // Where the cache would be stepping one token at a time (it is ahead by the picks not handed out).
        let full = s.kv.len() - s.ahead.len() + 1 >= ctx;
        out.push(Some(Stepped { piece: Piece { text, logprob }, end, full }));
    }
    if step_trace() {
        let (f, d) = ((t1 - t0).as_secs_f64() * 1e3, t1.elapsed().as_secs_f64() * 1e3);
        eprintln!("kvad-step parts={} rows={rows} forward_ms={f:.3} sample_ms={d:.3}", parts.len());
    }
    Ok(out)
}
