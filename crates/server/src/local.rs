//! The real engine: models on this machine, loaded through `kvad_engine::open_model`, one in memory at a time.

use crate::engine::{
    template_reasons, EngineFinish, GenParams, Generated, ModelInfo, Piece, Prepared, Prompt, TokenLogprob,
};
use crate::error::ApiError;
use crate::Engine;
use kvad_engine::{generate_with, open_model, FinishReason, GenerateRequest, OpenedModel};
use kvad_models::weights::GgufFile;
use kvad_tensor::BackendKind;
use kvad_text::{ChatContext, ChatTemplate, IncrementalDecoder};
use std::path::{Path, PathBuf};

struct Entry {
    info: ModelInfo,
    path: PathBuf,
}

/// Models by name, the loaded one kept.
pub struct LocalEngine {
    entries: Vec<Entry>,
    backend: BackendKind,
    loaded: Option<(usize, OpenedModel)>,
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
    pub fn new(names: &[String], backend: BackendKind) -> Result<Self, String> {
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
            };
            entries.push(Entry { info, path: r.path });
        }
        Ok(LocalEngine { entries, backend, loaded: None })
    }

    fn load(&mut self, idx: usize) -> Result<&OpenedModel, ApiError> {
        if self.loaded.as_ref().map(|(i, _)| *i) != Some(idx) {
            self.loaded = None; // one model in memory: the old one goes first
            let path = &self.entries[idx].path;
            let m = open_model(path, self.backend)
                .map_err(|e| ApiError::internal(format!("loading {}: {e}", self.entries[idx].info.id)))?;
            self.loaded = Some((idx, m));
        }
        match &self.loaded {
            Some((_, m)) => Ok(m),
            None => Err(ApiError::internal("the model was not kept after loading")),
        }
    }
}

impl Engine for LocalEngine {
    fn catalog(&self) -> Vec<ModelInfo> {
        let loaded = self.loaded.as_ref().map(|(i, _)| *i);
        self.entries
            .iter()
            .enumerate()
            .map(|(i, e)| ModelInfo { loaded: loaded == Some(i), ..e.info.clone() })
            .collect()
    }

    fn prepare(&mut self, model: &str, prompt: &Prompt) -> Result<Prepared, ApiError> {
        let idx = self.entries.iter().position(|e| e.info.id == model).ok_or_else(|| {
            ApiError::model_not_found(model, &self.entries.iter().map(|e| e.info.id.clone()).collect::<Vec<_>>())
        })?;
        let backend = self.backend.to_string();
        let m = self.load(idx)?;
        let (text, tokens) = match prompt {
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
                (text, ids)
            }
            Prompt::Text(s) => {
                let ids = m.tokenizer.encode(s, true).map_err(|e| ApiError::internal(e.to_string()))?;
                (s.clone(), ids)
            }
        };
        let c = m.model.config();
        Ok(Prepared {
            prompt_tokens: tokens.len(),
            tokens,
            text,
            context: c.max_position,
            vocab: c.vocab_size,
            backend,
        })
    }

    fn generate(
        &mut self,
        prepared: &Prepared,
        params: &GenParams,
        on_piece: &mut dyn FnMut(Piece) -> bool,
    ) -> Result<Generated, ApiError> {
        let Some((_, m)) = &self.loaded else {
            return Err(ApiError::internal("generate before prepare"));
        };
        let stop = m.stop_ids();
        let req = GenerateRequest {
            prompt: prepared.tokens.clone(),
            params: params.sampling.clone(),
            max_tokens: params.max_tokens,
            stop_ids: stop.clone(),
        };
        let tok = &m.tokenizer;
        let mut dec = IncrementalDecoder::new(tok, true);
        let mut failed: Option<ApiError> = None;
        let token_text = |id: u32| tok.decode(&[id], false).unwrap_or_default();
        let stats = generate_with(m.model.as_ref(), &req, &params.options, |s| {
            if stop.contains(&s.id) {
                return true;
            }
            let text = match dec.push(s.id) {
                Ok(t) => t.unwrap_or_default(),
                Err(e) => {
                    failed = Some(ApiError::internal(e.to_string()));
                    return false;
                }
            };
            let logprob = params.sampling.top_logprobs.map(|_| TokenLogprob {
                token: token_text(s.id),
                logprob: s.logprob,
                top: s.top.iter().map(|(id, lp)| (token_text(*id), *lp)).collect(),
            });
            on_piece(Piece { text, logprob })
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        let rest = dec.finish().map_err(|e| ApiError::internal(e.to_string()))?;
        if !rest.is_empty() {
            on_piece(Piece { text: rest, logprob: None });
        }
        let finish = match stats.finish {
            FinishReason::Stop => EngineFinish::Stop,
            FinishReason::Length => EngineFinish::Length,
        };
        Ok(Generated { tokens: stats.generated, finish })
    }
}
