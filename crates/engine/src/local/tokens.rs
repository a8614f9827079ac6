//! The local models' tokenizers on the HTTP side (`POST /api/tokenize`): read from each model's files on first use
//! (tokenizer.json, or a GGUF's vocabulary) without its weights, and kept, so tokenizing never queues behind a
//! reply or waits for a load.

use crate::seam::{Prompt, TokenPiece, Tokenize};
use crate::EngineError;
use kvad_models::weights::GgufFile;
use kvad_text::{ChatTemplate, Tokenizer};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A model's tokenizer and the chat template its prompts are rendered with.
type Text = Arc<(Tokenizer, Option<ChatTemplate>)>;

/// The chat templates the server puts in place of models' own: one for every model (`--chat-template`, `[server]
/// chat_template`) and one per model (`[server.chat_templates]`), which wins for its model.
#[derive(Debug, Clone, Default)]
pub struct Templates {
    /// For every model without one of its own here.
    pub all: Option<ChatTemplate>,
    /// By model id.
    pub per_model: HashMap<String, ChatTemplate>,
}

impl Templates {
    /// The template that replaces `model`'s own, if any.
    pub fn for_model(&self, model: &str) -> Option<&ChatTemplate> {
        self.per_model.get(model).or(self.all.as_ref())
    }
}

/// Every model's files, and the tokenizers read so far.
pub struct LocalTokenizers {
    paths: Vec<(String, PathBuf)>,
    /// The templates the server puts in place of models' own.
    templates: Templates,
    read: Mutex<HashMap<String, Text>>,
}

impl LocalTokenizers {
    /// The models (id, path) whose tokenizers may be asked for, and the templates that override theirs.
    pub fn new(paths: Vec<(String, PathBuf)>, templates: Templates) -> Self {
        LocalTokenizers { paths, templates, read: Mutex::new(HashMap::new()) }
    }

    fn get(&self, model: &str) -> Result<Text, EngineError> {
        let path = match self.paths.iter().find(|(id, _)| id == model) {
            Some((_, p)) => p.clone(),
            // A model on disk the engine found after start (a pull): its files are where the hub says.
            None => match kvad_hub::resolve_on_disk(model) {
                Ok(r) => r.path,
                Err(kvad_hub::HubError::Unknown(_)) => {
                    let ids: Vec<String> = self.paths.iter().map(|(id, _)| id.clone()).collect();
                    return Err(EngineError::model_not_found(model, &ids));
                }
                Err(e) => return Err(EngineError::NotOnDisk(e.to_string())),
            },
        };
        let mut read = self.read.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(t) = read.get(model) {
            return Ok(t.clone());
        }
        let (tok, own) = open(&path).map_err(|e| EngineError::internal(format!("{model}'s tokenizer: {e}")))?;
        let text = Arc::new((tok, self.templates.for_model(model).cloned().or(own)));
        read.insert(model.to_string(), text.clone());
        Ok(text)
    }
}

fn open(path: &Path) -> Result<(Tokenizer, Option<ChatTemplate>), String> {
    if path.is_dir() {
        let tok = Tokenizer::from_dir(path).map_err(|e| e.to_string())?;
        return Ok((tok, ChatTemplate::from_dir(path).map_err(|e| e.to_string())?));
    }
    let g = GgufFile::open(path).map_err(|e| e.to_string())?;
    let vocab = crate::open::gguf_vocab(&g);
    let template = vocab.chat_template.as_deref().map(ChatTemplate::new).transpose().map_err(|e| e.to_string())?;
    Ok((Tokenizer::from_gguf_vocab(vocab).map_err(|e| e.to_string())?, template))
}

impl Tokenize for LocalTokenizers {
    fn tokenize(&self, model: &str, text: &str) -> Result<Vec<TokenPiece>, EngineError> {
        let t = self.get(model)?;
        let tok = &t.0;
        let ids = tok.encode(text, true).map_err(|e| EngineError::internal(e.to_string()))?;
        Ok(ids.into_iter().map(|id| TokenPiece { id, text: tok.decode(&[id], false).unwrap_or_default() }).collect())
    }

    fn count(&self, model: &str, prompt: &Prompt) -> Result<usize, EngineError> {
        let t = self.get(model)?;
        Ok(super::reader::render(model, &t.0, t.1.as_ref(), prompt)?.1.len())
    }
}
