//! The local models' tokenizers on the HTTP side (`POST /api/tokenize`): read from each model's files on first use
//! (tokenizer.json, or a GGUF's vocabulary) without its weights, and kept, so tokenizing never queues behind a
//! reply or waits for a load.

use crate::seam::{TokenPiece, Tokenize};
use crate::EngineError;
use kvad_models::weights::GgufFile;
use kvad_text::Tokenizer;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Every model's files, and the tokenizers read so far.
pub struct LocalTokenizers {
    paths: Vec<(String, PathBuf)>,
    read: Mutex<HashMap<String, Arc<Tokenizer>>>,
}

impl LocalTokenizers {
    /// The models (id, path) whose tokenizers may be asked for.
    pub fn new(paths: Vec<(String, PathBuf)>) -> Self {
        LocalTokenizers { paths, read: Mutex::new(HashMap::new()) }
    }

    fn get(&self, model: &str) -> Result<Arc<Tokenizer>, EngineError> {
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
        let tok = Arc::new(open(&path).map_err(|e| EngineError::internal(format!("{model}'s tokenizer: {e}")))?);
        read.insert(model.to_string(), tok.clone());
        Ok(tok)
    }
}

fn open(path: &Path) -> Result<Tokenizer, String> {
    if path.is_dir() {
        return Tokenizer::from_dir(path).map_err(|e| e.to_string());
    }
    let g = GgufFile::open(path).map_err(|e| e.to_string())?;
    Tokenizer::from_gguf_vocab(crate::open::gguf_vocab(&g)).map_err(|e| e.to_string())
}

impl Tokenize for LocalTokenizers {
    fn tokenize(&self, model: &str, text: &str) -> Result<Vec<TokenPiece>, EngineError> {
        let tok = self.get(model)?;
        let ids = tok.encode(text, true).map_err(|e| EngineError::internal(e.to_string()))?;
        Ok(ids.into_iter().map(|id| TokenPiece { id, text: tok.decode(&[id], false).unwrap_or_default() }).collect())
    }
}
