//! Opening a model from its files: weights, tokenizer and chat template together, whichever format they are in.

use crate::EngineError;
use kvad_models::weights::GgufFile;
use kvad_models::{load_model_with, CacheUse, CausalLm, LoadOptions, ModelFiles};
use kvad_tensor::BackendKind;
use kvad_text::{ChatTemplate, GgufVocab, Tokenizer};
use std::path::Path;

/// Chat models get their template applied; completion models read the prompt as plain text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelKind {
    /// The model ships a chat template.
    Chat,
    /// No chat template.
    Completion,
}

/// A model ready to generate.
pub struct OpenedModel {
    /// The network.
    pub model: Box<dyn CausalLm>,
    /// Its tokenizer.
    pub tokenizer: Tokenizer,
    /// Its own chat template, when it has one.
    pub template: Option<ChatTemplate>,
    /// Lines the loader wants printed.
    pub notes: Vec<String>,
    /// The backend it runs on.
    pub backend: BackendKind,
    /// What the quantised cache did for this load.
    pub cache: CacheUse,
}

impl OpenedModel {
    /// Chat or completion.
    pub fn kind(&self) -> ModelKind {
        if self.template.is_some() {
            ModelKind::Chat
        } else {
            ModelKind::Completion
        }
    }

    /// Ids that end a reply: the tokenizer's and the config's end-of-sequence ids.
    pub fn stop_ids(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = self.tokenizer.eos_ids().to_vec();
        ids.extend(&self.model.config().eos_token_ids);
        ids.sort_unstable();
        ids.dedup();
        ids
    }
}

/// Loads a model directory (HF layout) or a GGUF file on a backend.
pub fn open_model(path: &Path, backend: BackendKind) -> Result<OpenedModel, EngineError> {
    let files = ModelFiles::detect(path)?;
    let opts = LoadOptions { backend, cache_dir: Some(kvad_hub::kvad_cache_dir()), f32_reference: false };
    // The tokenizer (parsing the GGUF's vocabulary and building its BPE) is built on its own thread while the
    // weights load: on a second load, mapped from the quantised cache, it was half the wait.
    let t0 = std::time::Instant::now();
    let (loaded, text) = std::thread::scope(|s| {
        let text = s.spawn(|| (text_parts(&files, path), t0.elapsed()));
        let loaded = (load_model_with(&files, &opts), t0.elapsed());
        (loaded, text.join())
    });
    let (text, text_time) = text.unwrap_or_else(|p| std::panic::resume_unwind(p));
    let (loaded, weights_time) = loaded;
    // Which of the two threads a load waits for (`KVAD_LOAD_TRACE=1`): the measure behind the cache's
    // second-load goal.
    if crate::config::load_trace() {
        eprintln!("kvad: load trace: weights {weights_time:.1?}, tokenizer and template {text_time:.1?}");
    }
    let loaded = loaded?;
    let (tokenizer, template) = text?;
    let vocab = loaded.model.config().vocab_size;
    if tokenizer.vocab_size() > vocab {
        return Err(EngineError::BadRequest(format!(
            "the tokenizer has {} tokens but the model's embedding has {vocab}",
            tokenizer.vocab_size()
        )));
    }
    Ok(OpenedModel { model: loaded.model, tokenizer, template, notes: loaded.notes, backend, cache: loaded.cache })
}

/// The tokenizer and chat template of a model's files.
fn text_parts(files: &ModelFiles, path: &Path) -> Result<(Tokenizer, Option<ChatTemplate>), EngineError> {
    match files {
        ModelFiles::Gguf(p) => {
            let mut g = GgufFile::open(p).map_err(kvad_models::ModelError::from)?;
            let vocab = take_gguf_vocab(&mut g);
            let tpl = vocab.chat_template.as_deref().map(ChatTemplate::new).transpose()?;
            let tok = Tokenizer::from_gguf_vocab(vocab)?;
            Ok((tok, tpl))
        }
        ModelFiles::HfDir(_) => Ok((Tokenizer::from_dir(path)?, ChatTemplate::from_dir(path)?)),
    }
}

/// `gguf_vocab`, with the token and merge lists moved out of `g` rather than copied (a lower peak at load).
fn take_gguf_vocab(g: &mut GgufFile) -> GgufVocab {
    let tokens = g.take("tokenizer.ggml.tokens").and_then(|v| v.into_string_array());
    let merges = g.take("tokenizer.ggml.merges").and_then(|v| v.into_string_array());
    let mut v = gguf_vocab(g);
    v.tokens = tokens.unwrap_or_default();
    v.merges = merges;
    v
}

/// The tokenizer part of a GGUF's metadata, as plain data for the text crate.
pub fn gguf_vocab(g: &GgufFile) -> GgufVocab {
    let s = |k: &str| g.get(k).and_then(|v| v.as_str()).map(str::to_string);
    let id = |k: &str| g.get(k).and_then(|v| v.as_u64()).map(|v| v as u32);
    let b = |k: &str| g.get(k).and_then(|v| v.as_bool());
    GgufVocab {
        model: s("tokenizer.ggml.model").unwrap_or_default(),
        pre: s("tokenizer.ggml.pre"),
        tokens: g.get("tokenizer.ggml.tokens").and_then(|v| v.as_string_array()).unwrap_or_default(),
        scores: g.get("tokenizer.ggml.scores").and_then(|v| v.as_f32_array()),
        token_types: g
            .get("tokenizer.ggml.token_type")
            .and_then(|v| v.as_i64_array())
            .map(|a| a.into_iter().map(|x| x as i32).collect()),
        merges: g.get("tokenizer.ggml.merges").and_then(|v| v.as_string_array()),
        bos: id("tokenizer.ggml.bos_token_id"),
        eos: id("tokenizer.ggml.eos_token_id"),
        unk: id("tokenizer.ggml.unknown_token_id"),
        pad: id("tokenizer.ggml.padding_token_id"),
        add_bos: b("tokenizer.ggml.add_bos_token"),
        add_eos: b("tokenizer.ggml.add_eos_token"),
        chat_template: s("tokenizer.chat_template"),
        add_space_prefix: b("tokenizer.ggml.add_space_prefix"),
        architecture: s("general.architecture"),
    }
}
