//! The real engine: models on this machine, loaded through `crate::open_model` under the memory rule
//! ([`memory`]), several at once; every running sequence's cache, sampler and decoder; and the conversations set
//! aside per model ([`kept`]). A step is one batched `CausalLm::forward` over the parts the scheduler chose.

pub mod kept;
pub mod memory;
mod reader;
pub mod tokens;
mod whole;

use crate::pass::{self, Sequence, Stepping};
use crate::seam::{
    loaded_elsewhere, template_reasons, Begun, Budget, EmbedInput, Embedded, Ended, GenParams, Memory, ModelInfo, Part,
    Piece, Prepared, ReaderFor, Resident, Scored, SeqId, Stepped, TokenLogprob,
};
use crate::system::default_backend_for;
use crate::{open_model, Engine, EngineError, OpenedModel};
use kept::Kept;
use kvad_models::weights::GgufFile;
use kvad_models::SeqState;
use kvad_tensor::BackendKind;
use kvad_text::{ChatTemplate, DecoderState, IncrementalDecoder};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

struct Entry {
    info: ModelInfo,
    path: PathBuf,
    /// Where a load that names no backend puts it: the last backend a load named, else `[server] backend`, else
    /// the seed's choice for this model on this machine (gpu-q8 where the GPU runs its family, else cpu-q8).
    default: BackendKind,
}

/// A model in memory.
struct Slot {
    entry: usize,
    /// The backend it was loaded on (it keeps it until unloaded).
    backend: BackendKind,
    m: OpenedModel,
    /// Reads its prompts off the engine thread (a copy of the tokenizer and template).
    reader: std::sync::Arc<reader::LocalReader>,
    stop: Vec<u32>,
    charged: u64,
    context: usize,
    kept: Kept<SeqState>,
    /// Its vocabulary compiled for grammars, made when the first constrained reply asks.
    grammars: Option<std::sync::Arc<crate::grammar::Grammars>>,
}

impl Slot {
    /// Its vocabulary compiled for grammars (once; a few hundred milliseconds for a large vocabulary).
    fn grammars(&mut self) -> Result<std::sync::Arc<crate::grammar::Grammars>, EngineError> {
        if let Some(g) = &self.grammars {
            return Ok(g.clone());
        }
        let end = self.stop.first().copied().ok_or_else(|| {
            EngineError::unsupported("response_format", "this model names no end token: a grammar could not end it")
        })?;
        let vocab = self.m.model.config().vocab_size;
        let g = std::sync::Arc::new(crate::grammar::Grammars::new(&self.m.tokenizer, vocab, end)?);
        self.grammars = Some(g.clone());
        Ok(g)
    }
}

impl Slot {
    /// The room its replies share: on a GPU the page pool (and recurrent slots) allocated at load, which is what
    /// bounds them there (a context is one sequence's limit, not theirs together); on the host the context charged,
    /// unpaged.
    fn budget(&self) -> Budget {
        match self.m.model.state_room() {
            Some(r) => Budget { tokens: r.tokens, page: r.page, sequences: r.sequences },
            None => Budget::tokens(self.context),
        }
    }
}

/// One running sequence.
struct Seq {
    entry: usize,
    /// Its tokens, cache and sampler.
    seq: Sequence,
    /// The text decoder's state (a character may span tokens).
    dec: DecoderState,
}

/// How the local engine sizes things.
#[derive(Debug, Clone, Copy)]
pub struct LocalSettings {
    /// Tokens of KV cache each model is charged for (`[server] context`; None: the model's own context).
    pub context: Option<usize>,
    /// Bytes the server may charge in all (`[server] memory`, else what the machine has available at start).
    pub memory: u64,
    /// How passes step (`[server] greedy_ahead`).
    pub stepping: Stepping,
    /// Each pass's forward and sampling times on stderr (`[server] step_trace`): where a step's time goes.
    pub step_trace: bool,
}

/// Models by name; those in memory kept with their conversations, each on the backend its load named.
pub struct LocalEngine {
    entries: Vec<Entry>,
    settings: LocalSettings,
    slots: Vec<Slot>,
    seqs: HashMap<SeqId, Seq>,
    /// `[server] backend`, for models found later.
    backend: Option<BackendKind>,
    /// The backends loads chose per model (kept across restarts by the server).
    chosen: HashMap<String, BackendKind>,
    /// Chat templates that replace models' own (`kvad-serve --chat-template`, `[server.chat_templates]`).
    templates: tokens::Templates,
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

/// What the catalog says of a model whose files are at `path`: its template's capabilities, not loaded.
fn info_for(name: &str, path: &Path, default: BackendKind, over: Option<&ChatTemplate>) -> Result<ModelInfo, String> {
    let tpl = match over {
        Some(t) => Some(t.clone()),
        None => probe_template(path)?,
    };
    let mut info = ModelInfo {
        id: name.to_string(),
        chat: false,
        tools: false,
        reasoning: false,
        loaded: false,
        backend: default.to_string(),
        default_backend: default.to_string(),
    };
    capabilities(&mut info, tpl.as_ref());
    Ok(info)
}

/// A catalog entry's flags from the template in force: chat, tools, reasoning.
fn capabilities(info: &mut ModelInfo, tpl: Option<&ChatTemplate>) {
    info.chat = tpl.is_some();
    info.tools = tpl.is_some_and(ChatTemplate::supports_tools);
    info.reasoning = tpl.is_some_and(|t| template_reasons(t.source()));
}

/// A model on this machine that no engine offers yet, described without loading it, for the server to take a
/// request naming it (the engine then finds it, under the memory rule). Never asks the network.
pub fn on_disk_info(name: &str) -> Result<ModelInfo, EngineError> {
    let r = kvad_hub::resolve_on_disk(name).map_err(|e| match e {
        kvad_hub::HubError::Unknown(_) => EngineError::model_not_found(name, &[]),
        e => EngineError::NotOnDisk(e.to_string()),
    })?;
    let default = default_backend_for(&r.path.to_string_lossy()).0;
    info_for(name, &r.path, default, None).map_err(|e| EngineError::bad_field("model", format!("{name}: {e}")))
}

impl LocalEngine {
    /// Resolves every name (fetching the default alias when needed) and reads each template's capabilities.
    /// Each model's default backend is its remembered choice (`chosen`: the backend its last load named, kept by
    /// the server across restarts), else `backend` (`[server] backend`), else the one the CLI picks for it
    /// ([`default_backend_for`]: gpu-q8 where the GPU runs its family, else cpu-q8).
    pub fn new(
        names: &[String],
        backend: Option<BackendKind>,
        chosen: &HashMap<String, BackendKind>,
        settings: LocalSettings,
    ) -> Result<Self, String> {
        let mut engine = LocalEngine {
            entries: Vec::new(),
            settings,
            slots: Vec::new(),
            seqs: HashMap::new(),
            backend,
            chosen: chosen.clone(),
            templates: tokens::Templates::default(),
        };
        for name in names {
            let r = kvad_hub::resolve(name).map_err(|e| e.to_string())?;
            let e = engine.describe(name, r.path).map_err(|e| format!("{name}: {e}"))?;
            engine.entries.push(e);
        }
        engine.rescan();
        Ok(engine)
    }

    /// Renders models' prompts with the server's templates instead of their own (as llama.cpp's and vLLM's
    /// `--chat-template`, and per model): a model whose template knows no tools gets a tool-calling one, say. The
    /// catalog's capabilities follow the template in force.
    pub fn with_chat_templates(mut self, templates: tokens::Templates) -> Self {
        for e in &mut self.entries {
            if let Some(t) = templates.for_model(&e.info.id) {
                capabilities(&mut e.info, Some(t));
            }
        }
        self.templates = templates;
        self
    }

    /// A model's entry: its capabilities from its template (read without its weights) and its default backend.
    fn describe(&self, name: &str, path: PathBuf) -> Result<Entry, String> {
        let default = match (self.chosen.get(name), self.backend) {
            (Some(&b), _) | (None, Some(b)) => b,
            // The files are here: their family decides, nothing is asked of the Hub.
            (None, None) => default_backend_for(&path.to_string_lossy()).0,
        };
        let info = info_for(name, &path, default, self.templates.for_model(name))?;
        Ok(Entry { info, path, default })
    }

    /// The entry for `model`, adding one when it names a model on this machine that is not offered yet (the
    /// seed's third memory rule: a request naming a model on disk loads it). Nothing is downloaded here.
    fn find(&mut self, model: &str) -> Result<usize, EngineError> {
        if let Ok(i) = self.entry(model) {
            return Ok(i);
        }
        let r = kvad_hub::resolve_on_disk(model).map_err(|e| match e {
            kvad_hub::HubError::Unknown(_) => self.entry(model).unwrap_err(),
            e => EngineError::NotOnDisk(e.to_string()),
        })?;
        let e = self.describe(model, r.path).map_err(|e| EngineError::bad_field("model", format!("{model}: {e}")))?;
        self.entries.push(e);
        Ok(self.entries.len() - 1)
    }

    fn entry(&self, model: &str) -> Result<usize, EngineError> {
        self.entries.iter().position(|e| e.info.id == model).ok_or_else(|| {
            EngineError::model_not_found(model, &self.entries.iter().map(|e| e.info.id.clone()).collect::<Vec<_>>())
        })
    }

    fn slot(&self, entry: usize) -> Option<&Slot> {
        self.slots.iter().find(|s| s.entry == entry)
    }

    /// `model@backend`: the backend it is on, or the default one while it is not loaded.
    fn name(&self, entry: usize) -> String {
        let backend = self.slot(entry).map_or(self.entries[entry].default, |s| s.backend);
        format!("{}@{backend}", self.entries[entry].info.id)
    }

    /// The model in memory, loading it on `backend` (`None`: the one it is on, else its default) under the memory
    /// rule. A model in memory on another backend than the one named is refused (409), never unloaded. A load that
    /// names a backend makes it the model's default from then on (the seed: a stored per-model choice wins), so a
    /// request for the model after an unload brings it back where an administrator put it.
    fn load_entry(&mut self, entry: usize, backend: Option<BackendKind>) -> Result<&Slot, EngineError> {
        if let Some(on) = self.slot(entry).map(|s| s.backend) {
            if let Some(b) = backend.filter(|&b| b != on) {
                return Err(loaded_elsewhere(&self.entries[entry].info.id, on.name(), b.name()));
            }
            return self.slot(entry).ok_or_else(|| EngineError::internal("the model left memory"));
        }
        let named = backend.is_some();
        let backend = backend.unwrap_or(self.entries[entry].default);
        let name = format!("{}@{backend}", self.entries[entry].info.id);
        let m = open_model(&self.entries[entry].path, backend).map_err(|e| match e {
            // No GPU (or its libraries) here: the engine's own words, about the field the load named.
            EngineError::Model(kvad_models::ModelError::Gpu(why)) => EngineError::unsupported(
                "backend",
                format!("backend = \"{backend}\": {name} cannot load on this machine: GPU: {why}"),
            ),
            e => EngineError::internal(format!("loading {name}: {e}")),
        })?;
        let c = m.model.config();
        // [server] context caps every model; one whose own context is narrower (a Qwen model's active sliding
        // window, which kvad runs as its context) is charged for what it can hold.
        let context = self.settings.context.map_or(c.max_position, |x| x.min(c.max_position));
        // What a full context of this model's per-layer state takes, as the model says.
        let kv = m.model.state_spec().bytes_for(context) as u64;
        // What this backend holds: q8/q4 weights are charged as their blocks, f32 as floats.
        let weights = m.model.weight_bytes() as u64;
        let detail =
            format!("{} of weights and {} of KV cache for {context} tokens", memory::human(weights), memory::human(kv));
        let resident = self.memory().resident;
        memory::admit(self.settings.memory, &resident, &name, weights + kv, &detail)
            .map_err(EngineError::insufficient_memory)?;
        let mut m = m;
        if let Some(t) = self.templates.for_model(&self.entries[entry].info.id) {
            m.template = Some(t.clone());
        }
        let stop = m.stop_ids();
        if named {
            let e = &mut self.entries[entry];
            e.default = backend;
            e.info.default_backend = backend.to_string();
        }
        let reader = std::sync::Arc::new(reader::LocalReader::new(&self.entries[entry].info.id, &m));
        let charged = weights + kv;
        self.slots.push(Slot {
            entry,
            backend,
            m,
            reader,
            stop,
            charged,
            context,
            kept: Kept::default(),
            grammars: None,
        });
        self.slot(entry).ok_or_else(|| EngineError::internal("the model was not kept after loading"))
    }

    /// Lets go of kept conversations of `entry` until they fit beside the running sequences' reserves (in whole
    /// pages) and, where sequences are bounded (a GPU's recurrent slots), beside the running sequences.
    fn fit(&mut self, entry: usize) {
        let Some(slot) = self.slots.iter_mut().find(|s| s.entry == entry) else { return };
        let b = slot.budget();
        let running = self.seqs.values().filter(|s| s.entry == entry);
        let (reserved, count) = running.fold((0, 0), |(r, n), s| (r + b.reserve(s.seq.reserve), n + 1));
        slot.kept.fit(b.tokens.saturating_sub(reserved), b.page, b.sequences.saturating_sub(count));
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

    fn reader(&mut self, model: &str) -> Result<ReaderFor, EngineError> {
        let entry = self.find(model)?;
        let loaded = self.slot(entry).is_none();
        let slot = self.load_entry(entry, None)?;
        Ok(ReaderFor { reader: slot.reader.clone(), loaded })
    }

    fn budget(&self, model: &str) -> Budget {
        self.entry(model).ok().and_then(|e| self.slot(e)).map_or(Budget::tokens(0), Slot::budget)
    }

    fn begin(&mut self, seq: SeqId, p: &Prepared, params: &GenParams, fresh: bool) -> Result<Begun, EngineError> {
        params.sampling.validate().map_err(EngineError::from)?;
        let entry = self.entry(&p.model)?;
        if p.tokens.is_empty() {
            return Err(EngineError::bad_request("the prompt is empty: nothing to continue"));
        }
        let slot = self
            .slots
            .iter_mut()
            .find(|s| s.entry == entry)
            .ok_or_else(|| EngineError::internal(format!("{} was unloaded before its reply began", p.model)))?;
        if !slot.m.model.generates() {
            return Err(EngineError::bad_field(
                "model",
                format!(
                    "{} is an embedding model (its checkpoint has no lm_head): it answers /v1/embeddings, not \
                     generation",
                    p.model
                ),
            ));
        }
        // A constraint is compiled first: a grammar kvad cannot honour is refused with nothing taken.
        let guide = match &params.options.constraint {
            Some(c) => Some(slot.grammars()?.guide(c)?),
            None => None,
        };
        let (kv, cached) = match fresh {
            true => None,
            false => shared_prefix(&mut slot.kept, self.seqs.values().filter(|s| s.entry == entry), &p.tokens),
        }
        .unwrap_or_else(|| (slot.m.model.new_state(), 0));
        let mut seq_state = Sequence::new(p.tokens.clone(), kv, cached, params.clone());
        seq_state.guide = guide;
        self.seqs.insert(seq, Seq { entry, seq: seq_state, dec: DecoderState::default() });
        self.fit(entry);
        Ok(Begun { cached, to_read: p.tokens.len() - cached })
    }

    fn step(&mut self, parts: &[Part]) -> Result<Vec<Option<Stepped>>, EngineError> {
        let mut seqs = Vec::with_capacity(parts.len());
        for p in parts {
            match self.seqs.remove(&p.id) {
                Some(s) => seqs.push(s),
                None => {
                    for (s, q) in seqs.into_iter().zip(parts) {
                        self.seqs.insert(q.id, s);
                    }
                    return Err(EngineError::internal(format!("step: sequence {} is not running", p.id)));
                }
            }
        }
        let result = run_pass(&self.slots, self.settings, parts, &mut seqs);
        for (s, p) in seqs.into_iter().zip(parts) {
            self.seqs.insert(p.id, s);
        }
        result
    }

    fn embed(
        &mut self,
        model: &str,
        inputs: &[EmbedInput],
        dimensions: Option<usize>,
    ) -> Result<Option<Embedded>, EngineError> {
        self.embed_whole(model, inputs, dimensions)
    }

    fn score(
        &mut self,
        model: &str,
        inputs: &[EmbedInput],
        window: Option<usize>,
    ) -> Result<Option<Scored>, EngineError> {
        self.score_whole(model, inputs, window)
    }

    fn end(&mut self, seq: SeqId, keep: bool) -> Ended {
        let Some(s) = self.seqs.remove(&seq) else { return Ended::default() };
        let Some(slot) = self.slots.iter_mut().find(|x| x.entry == s.entry) else { return Ended::default() };
        let rest = IncrementalDecoder::resume(&slot.m.tokenizer, true, s.dec).finish().unwrap_or_default();
        if keep {
            let tokens: Vec<u32> = s.seq.prompt.iter().chain(&s.seq.reply).copied().collect();
            if let Some(state) = s.seq.into_state() {
                slot.kept.put(tokens, state);
            }
        }
        self.fit(s.entry);
        let held = self.slot(s.entry).map(|x| x.kept.held()).unwrap_or_default();
        Ended { rest, held }
    }

    fn load(&mut self, model: &str, backend: Option<&str>) -> Result<String, EngineError> {
        let entry = self.find(model)?;
        let backend = backend
            .map(|b| b.parse::<BackendKind>().map_err(|e| EngineError::bad_field("backend", e.to_string())))
            .transpose()?;
        self.load_entry(entry, backend).map(|s| s.backend.to_string())
    }

    fn unload(&mut self, model: Option<&str>) -> Result<Vec<String>, EngineError> {
        let targets: Vec<usize> = match model {
            Some(m) => {
                let e = self.entry(m)?;
                if self.slot(e).is_none() {
                    let loaded: Vec<String> = self.slots.iter().map(|s| self.name(s.entry)).collect();
                    return Err(EngineError::bad_field(
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
            return Err(EngineError::internal(format!("{} has a reply running", self.name(s.entry))));
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
                    cache_bytes_per_token: s.m.model.state_spec().bytes_per_token(),
                    held: s.kept.held(),
                })
                .collect(),
        }
    }

    fn rescan(&mut self) {
        for d in kvad_hub::on_disk() {
            let known = self.entries.iter().any(|e| e.info.id == d.name || e.path == d.path);
            if known {
                continue;
            }
            match self.describe(&d.name, d.path) {
                Ok(e) => self.entries.push(e),
                Err(why) => eprintln!("kvad: {} is on disk but not offered: {why}", d.name),
            }
        }
    }

    fn tokenizers(&self) -> std::sync::Arc<dyn crate::seam::Tokenize> {
        let paths = self.entries.iter().map(|e| (e.info.id.clone(), e.path.clone())).collect();
        std::sync::Arc::new(tokens::LocalTokenizers::new(paths, self.templates.clone()))
    }
}

/// The longest usable prefix of `prompt` already in memory: a kept conversation's (taken whole when the prompt
/// continues it, else copied), or a running reply's prompt as far as it has been read, copied. On a GPU a copy
/// shares the whole pages (copy on write), so requests that open with the same system prompt or examples hold its
/// keys and values once, whoever sent them; `cached_tokens` reports what was found. None: read from scratch.
fn shared_prefix<'a>(
    kept: &mut Kept<SeqState>,
    running: impl Iterator<Item = &'a Seq>,
    prompt: &[u32],
) -> Option<(SeqState, usize)> {
    let from_running = running
        .map(|s| (kept::usable(&s.seq.state, &s.seq.prompt[..s.seq.read.min(s.seq.state.len())], prompt), s))
        .max_by_key(|&(n, _)| n);
    match from_running {
        Some((n, s)) if n > 0 && n > kept.longest(prompt) => {
            s.seq.state.copy_prefix(n).filter(|c| c.len() == n).map(|c| (c, n)).or_else(|| kept.take(prompt))
        }
        _ => kept.take(prompt),
    }
}

/// One pass over the parts (all of one model's sequences): the tokens from [`pass::run`], then each sampled one's
/// text, whether it ends the reply, and whether the context is full.
fn run_pass(
    slots: &[Slot],
    settings: LocalSettings,
    parts: &[Part],
    seqs: &mut [Seq],
) -> Result<Vec<Option<Stepped>>, EngineError> {
    let entry = seqs.first().map_or(0, |s| s.entry);
    if seqs.iter().any(|s| s.entry != entry) {
        return Err(EngineError::internal("one pass holds sequences of one model"));
    }
    let slot = slots
        .iter()
        .find(|s| s.entry == entry)
        .ok_or_else(|| EngineError::internal("a running sequence's model is not in memory"))?;
    let model = slot.m.model.as_ref();
    let ctx = model.config().max_position;
    let works: Vec<_> = parts.iter().map(|p| p.work).collect();
    let t0 = std::time::Instant::now();
    let sampled = {
        let mut refs: Vec<&mut Sequence> = seqs.iter_mut().map(|s| &mut s.seq).collect();
        pass::run(model, settings.stepping, &works, &mut refs)?
    };
    let t1 = std::time::Instant::now();
    let tok = &slot.m.tokenizer;
    let text_of = |id: u32| tok.decode(&[id], false).unwrap_or_default();
    let mut out = Vec::with_capacity(parts.len());
    for (s, got) in seqs.iter_mut().zip(sampled) {
        let Some(sampled) = got else {
            out.push(None);
            continue;
        };
        let end = slot.stop.contains(&sampled.id) && !s.seq.params.options.ignore_eos;
        let text = if end {
            String::new()
        } else {
            let mut d = IncrementalDecoder::resume(tok, true, std::mem::take(&mut s.dec));
            let t = d.push(sampled.id).map_err(|e| EngineError::internal(e.to_string()))?;
            s.dec = d.into_state();
            t.unwrap_or_default()
        };
        let logprob = s.seq.params.sampling.top_logprobs.map(|_| TokenLogprob {
            token: text_of(sampled.id),
            logprob: sampled.logprob,
            top: sampled.top.iter().map(|(id, lp)| (text_of(*id), *lp)).collect(),
            in_play: sampled.in_play.clone(),
        });
        // Where the cache would be stepping one token at a time (it is ahead by the picks not handed out).
        let full = s.seq.held() + 1 >= ctx;
        out.push(Some(Stepped { piece: Piece { text, logprob }, end, full }));
    }
    if settings.step_trace {
        let (f, d) = ((t1 - t0).as_secs_f64() * 1e3, t1.elapsed().as_secs_f64() * 1e3);
        eprintln!("kvad-step parts={} pass_ms={f:.3} text_ms={d:.3}", parts.len());
    }
    Ok(out)
}
