//! A scripted engine: replies come from a script, not a model, through exactly the path a model's replies take
//! (the model's real chat template renders the prompt; the reply streams in small pieces through the same stop,
//! reasoning and tool-call parsing). It exists for tests of what a tiny fixture model cannot say, such as a tool
//! call; `kvad-serve --scripted FILE` serves one, and says so in `/v1/models` (`backend: "scripted"`).
//!
//! A script is JSON: `{"models": [{"id", "template": path, "context"?, "delay_ms"?, "rules": [{"when", "reply"}],
//! "default"}]}`.
//! The first rule whose `when` occurs in the rendered prompt gives the reply. A "token" is 3 characters.

use crate::engine::{
    template_reasons, EngineFinish, GenParams, Generated, ModelInfo, Piece, Prepared, Prompt, TokenLogprob,
};
use crate::error::ApiError;
use crate::Engine;
use kvad_text::{ChatContext, ChatTemplate};
use serde::Deserialize;
use std::path::Path;

const CHARS_PER_TOKEN: usize = 3;

#[derive(Deserialize)]
struct Script {
    models: Vec<ScriptModel>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptModel {
    id: String,
    template: Option<String>,
    #[serde(default = "default_context")]
    context: usize,
    #[serde(default)]
    rules: Vec<Rule>,
    /// Milliseconds per token, to make a reply slow enough to cancel.
    #[serde(default)]
    delay_ms: u64,
    default: String,
}

fn default_context() -> usize {
    4096
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Rule {
    when: String,
    reply: String,
}

struct Model {
    spec: ScriptModel,
    template: Option<ChatTemplate>,
}

/// Models that answer from a script.
pub struct ScriptedEngine {
    models: Vec<Model>,
    current: Option<(usize, String)>,
}

fn count_tokens(s: &str) -> usize {
    s.chars().count().div_ceil(CHARS_PER_TOKEN)
}

impl ScriptedEngine {
    /// Reads a script; template paths are relative to the script's directory.
    pub fn from_file(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let script: Script = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let mut models = Vec::new();
        for spec in script.models {
            let template = match &spec.template {
                Some(t) => {
                    let p = base.join(t);
                    let src = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
                    Some(ChatTemplate::new(&src).map_err(|e| format!("{}: {e}", p.display()))?)
                }
                None => None,
            };
            models.push(Model { spec, template });
        }
        Ok(ScriptedEngine { models, current: None })
    }
}

impl Engine for ScriptedEngine {
    fn catalog(&self) -> Vec<ModelInfo> {
        let loaded = self.current.as_ref().map(|(i, _)| *i);
        self.models
            .iter()
            .enumerate()
            .map(|(i, m)| ModelInfo {
                id: m.spec.id.clone(),
                chat: m.template.is_some(),
                tools: m.template.as_ref().is_some_and(ChatTemplate::supports_tools),
                reasoning: m.template.as_ref().is_some_and(|t| template_reasons(t.source())),
                loaded: loaded == Some(i),
                backend: "scripted".into(),
            })
            .collect()
    }

    fn prepare(&mut self, model: &str, prompt: &Prompt) -> Result<Prepared, ApiError> {
        let idx = self.models.iter().position(|m| m.spec.id == model).ok_or_else(|| {
            ApiError::model_not_found(model, &self.models.iter().map(|m| m.spec.id.clone()).collect::<Vec<_>>())
        })?;
        let m = &self.models[idx];
        let text = match prompt {
            Prompt::Chat { messages, tools } => {
                let Some(t) = &m.template else {
                    return Err(ApiError::bad_field("model", format!("model {model} has no chat template")));
                };
                let ctx = ChatContext {
                    messages: messages.clone(),
                    tools: tools.clone(),
                    add_generation_prompt: true,
                    ..Default::default()
                };
                t.render(&ctx).map_err(|e| ApiError::bad_field("messages", e.to_string()))?
            }
            Prompt::Text(s) => s.clone(),
        };
        let reply = m.spec.rules.iter().find(|r| text.contains(&r.when)).map_or(&m.spec.default, |r| &r.reply);
        self.current = Some((idx, reply.clone()));
        Ok(Prepared {
            tokens: Vec::new(),
            prompt_tokens: count_tokens(&text),
            text,
            context: m.spec.context,
            vocab: 256,
            backend: "scripted".into(),
        })
    }

    fn generate(
        &mut self,
        _prepared: &Prepared,
        params: &GenParams,
        on_piece: &mut dyn FnMut(Piece) -> bool,
    ) -> Result<Generated, ApiError> {
        let Some((idx, reply)) = &self.current else {
            return Err(ApiError::internal("generate before prepare"));
        };
        let chars: Vec<char> = reply.chars().collect();
        let mut tokens = 0;
        for chunk in chars.chunks(CHARS_PER_TOKEN) {
            if tokens == params.max_tokens {
                return Ok(Generated { tokens, finish: EngineFinish::Length });
            }
            tokens += 1;
            std::thread::sleep(std::time::Duration::from_millis(self.models[*idx].spec.delay_ms));
            let text: String = chunk.iter().collect();
            let logprob = params.sampling.top_logprobs.map(|_| TokenLogprob {
                token: text.clone(),
                logprob: 0.0,
                top: vec![(text.clone(), 0.0)],
            });
            if !on_piece(Piece { text, logprob }) {
                return Ok(Generated { tokens, finish: EngineFinish::Stop });
            }
        }
        Ok(Generated { tokens: tokens + 1, finish: EngineFinish::Stop })
    }
}
