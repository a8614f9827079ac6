//! A scripted engine: replies come from a script, not a model, through exactly the path a model's replies take
//! (the model's real chat template renders the prompt; the reply streams in small pieces through the same stop,
//! reasoning and tool-call parsing). It exists for tests of what a tiny fixture model cannot say, such as a tool
//! call; `kvad-serve --scripted FILE` serves one, and says so in `/v1/models` (`backend: "scripted"`).
//!
//! A script is JSON: `{"models": [{"id", "template": path, "context"?, "delay_ms"?, "read_ms"?, "bytes"?,
//! "rules": [{"when", "reply"}], "default", "repeat"?}]}`.
//! The first rule whose `when` occurs in the rendered prompt gives the reply. A "token" is 3 characters.
//!
//! Backends are names here, kept as the real engine keeps them: a model loads on `scripted` unless the load names
//! one of the six (`cpu-q8`, ...), keeps it until unloaded (`model@backend` in `/api/ps`), and a load naming another
//! while it is in memory is refused (409) as the real engine refuses it.

use crate::sched::{Part, Work};
use kvad_engine::local::memory;
use kvad_engine::seam::{
    loaded_elsewhere, template_reasons, Begun, Budget, Ended, GenParams, Memory, ModelInfo, Piece, Prepared, Prompt,
    Reader, ReaderFor, Resident, SeqId, Stepped, TokenLogprob, TokenPiece, Tokenize,
};
use kvad_engine::Engine;
use kvad_engine::EngineError;
use kvad_text::{ChatContext, ChatTemplate};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
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
    /// Milliseconds per forward pass (whatever it holds), to make a reply slow enough to cancel or to batch.
    #[serde(default)]
    delay_ms: u64,
    /// Milliseconds reading a prompt takes (off the engine thread, as a long prompt's tokenising is): a read
    /// holds no running stream.
    #[serde(default)]
    read_ms: u64,
    /// The default reply this many times over: a reply long enough to fill a socket that nobody reads.
    #[serde(default = "once")]
    repeat: usize,
    /// Bytes it is charged when loaded (memory admission tests).
    #[serde(default)]
    bytes: u64,
    default: String,
}

fn once() -> usize {
    1
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

/// One running reply.
struct Seq {
    model: usize,
    reply: Vec<char>,
    /// Characters written.
    at: usize,
    top_logprobs: Option<usize>,
}

/// The backend a scripted model loads on when the load names none.
const DEFAULT_BACKEND: &str = "scripted";

/// Models that answer from a script.
pub struct ScriptedEngine {
    models: Vec<Model>,
    /// The models in memory, by index, with the backend each was loaded on.
    loaded: BTreeMap<usize, String>,
    seqs: HashMap<SeqId, Seq>,
    memory: u64,
}

fn count_tokens(s: &str) -> usize {
    s.chars().count().div_ceil(CHARS_PER_TOKEN)
}

impl ScriptedEngine {
    /// Reads a script; template paths are relative to the script's directory. `memory` is what loads may be
    /// charged in all.
    pub fn from_file(path: &Path, memory: u64) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let script: Script = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let mut models = Vec::new();
        for mut spec in script.models {
            spec.default = spec.default.repeat(spec.repeat);
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
        Ok(ScriptedEngine { models, loaded: BTreeMap::new(), seqs: HashMap::new(), memory })
    }

    fn index(&self, model: &str) -> Result<usize, EngineError> {
        self.models.iter().position(|m| m.spec.id == model).ok_or_else(|| {
            EngineError::model_not_found(model, &self.models.iter().map(|m| m.spec.id.clone()).collect::<Vec<_>>())
        })
    }

    /// The backend it is on, or the default while it is not loaded.
    fn backend(&self, i: usize) -> &str {
        self.loaded.get(&i).map_or(DEFAULT_BACKEND, String::as_str)
    }

    fn name(&self, i: usize) -> String {
        format!("{}@{}", self.models[i].spec.id, self.backend(i))
    }
}

/// A prompt's text: messages through the model's real template, as the local engine renders them.
fn render(model: &str, template: Option<&ChatTemplate>, prompt: &Prompt) -> Result<String, EngineError> {
    match prompt {
        Prompt::Chat { messages, tools, vars } => {
            let Some(t) = template else {
                return Err(EngineError::bad_field("model", format!("model {model} has no chat template")));
            };
            let ctx = ChatContext {
                messages: messages.clone(),
                tools: tools.clone(),
                add_generation_prompt: true,
                extra: vars.clone(),
                ..Default::default()
            };
            t.render(&ctx).map_err(|e| EngineError::bad_field("messages", e.to_string()))
        }
        Prompt::Text(s) => Ok(s.clone()),
    }
}

/// Reads a scripted model's prompts: its real template renders them, a "token" is 3 characters.
struct ScriptedReader {
    model: String,
    template: Option<ChatTemplate>,
    context: usize,
    backend: String,
    read_ms: u64,
}

impl Reader for ScriptedReader {
    fn read(&self, prompt: &Prompt) -> Result<Prepared, EngineError> {
        std::thread::sleep(std::time::Duration::from_millis(self.read_ms));
        let text = render(&self.model, self.template.as_ref(), prompt)?;
        let n = count_tokens(&text);
        Ok(Prepared {
            tokens: vec![0; n],
            prompt_tokens: n,
            text,
            context: self.context,
            vocab: 256,
            backend: self.backend.clone(),
            model: self.model.clone(),
            loaded: false,
            tool_format: self
                .template
                .as_ref()
                .map(|t| kvad_text::stream::ToolFormat::of_template(t.source()))
                .unwrap_or_default(),
        })
    }
}

impl Engine for ScriptedEngine {
    fn catalog(&self) -> Vec<ModelInfo> {
        self.models
            .iter()
            .enumerate()
            .map(|(i, m)| ModelInfo {
                id: m.spec.id.clone(),
                chat: m.template.is_some(),
                tools: m.template.as_ref().is_some_and(ChatTemplate::supports_tools),
                reasoning: m.template.as_ref().is_some_and(|t| template_reasons(t.source())),
                loaded: self.loaded.contains_key(&i),
                backend: self.backend(i).into(),
                default_backend: DEFAULT_BACKEND.into(),
            })
            .collect()
    }

    fn reader(&mut self, model: &str) -> Result<ReaderFor, EngineError> {
        let idx = self.index(model)?;
        let loaded = !self.loaded.contains_key(&idx);
        let backend = self.load(model, None)?;
        let m = &self.models[idx];
        let reader = ScriptedReader {
            model: model.into(),
            template: m.template.clone(),
            context: m.spec.context,
            backend,
            read_ms: m.spec.read_ms,
        };
        Ok(ReaderFor { reader: std::sync::Arc::new(reader), loaded })
    }

    fn budget(&self, model: &str) -> Budget {
        Budget::tokens(self.index(model).map_or(0, |i| self.models[i].spec.context))
    }

    fn begin(&mut self, seq: SeqId, p: &Prepared, params: &GenParams, _fresh: bool) -> Result<Begun, EngineError> {
        let model = self.index(&p.model)?;
        let spec = &self.models[model].spec;
        let reply = spec.rules.iter().find(|r| p.text.contains(&r.when)).map_or(&spec.default, |r| &r.reply);
        let top_logprobs = params.sampling.top_logprobs;
        self.seqs.insert(seq, Seq { model, reply: reply.chars().collect(), at: 0, top_logprobs });
        Ok(Begun { cached: 0, to_read: p.prompt_tokens.max(1) })
    }

    fn step(&mut self, parts: &[Part]) -> Result<Vec<Option<Stepped>>, EngineError> {
        let delay = parts.first().and_then(|p| self.seqs.get(&p.id)).map_or(0, |s| self.models[s.model].spec.delay_ms);
        std::thread::sleep(std::time::Duration::from_millis(delay));
        let mut out = Vec::new();
        for p in parts {
            let s = self.seqs.get_mut(&p.id).ok_or_else(|| EngineError::internal("step: no such sequence"))?;
            if let Work::Chunk(_) = p.work {
                out.push(None);
                continue;
            }
            let end = (s.at + CHARS_PER_TOKEN).min(s.reply.len());
            let text: String = s.reply[s.at..end].iter().collect();
            let done = s.at == s.reply.len();
            s.at = end;
            let logprob = s.top_logprobs.map(|n| scripted_logprob(&text, n));
            out.push(Some(Stepped { piece: Piece { text, logprob }, end: done, full: false }));
        }
        Ok(out)
    }

    fn end(&mut self, seq: SeqId, _keep: bool) -> Ended {
        self.seqs.remove(&seq);
        Ended::default()
    }

    fn load(&mut self, model: &str, backend: Option<&str>) -> Result<String, EngineError> {
        let i = self.index(model)?;
        if let Some(on) = self.loaded.get(&i) {
            return match backend {
                Some(b) if b != on => Err(loaded_elsewhere(model, on, b)),
                _ => Ok(on.clone()),
            };
        }
        let backend = backend.unwrap_or(DEFAULT_BACKEND);
        let bytes = self.models[i].spec.bytes;
        let name = format!("{model}@{backend}");
        memory::admit(self.memory, &self.memory().resident, &name, bytes, "its script says so")
            .map_err(EngineError::insufficient_memory)?;
        self.loaded.insert(i, backend.to_string());
        Ok(backend.to_string())
    }

    fn unload(&mut self, model: Option<&str>) -> Result<Vec<String>, EngineError> {
        let targets: Vec<usize> = match model {
            Some(m) => {
                let i = self.index(m)?;
                if !self.loaded.contains_key(&i) {
                    return Err(EngineError::bad_field("model", format!("{m} is not loaded")));
                }
                vec![i]
            }
            None => self.loaded.keys().copied().collect(),
        };
        let names = targets.iter().map(|&i| self.name(i)).collect();
        for i in targets {
            self.loaded.remove(&i);
        }
        Ok(names)
    }

    fn memory(&self) -> Memory {
        Memory {
            total: self.memory,
            resident: self
                .loaded
                .keys()
                .map(|&i| Resident {
                    name: self.name(i),
                    charged: self.models[i].spec.bytes,
                    context: self.models[i].spec.context,
                    // A scripted model holds no cache.
                    cache_bytes_per_token: 0,
                    held: Default::default(),
                })
                .collect(),
        }
    }

    fn tokenizers(&self) -> std::sync::Arc<dyn Tokenize> {
        std::sync::Arc::new(ScriptedTokenizer(
            self.models.iter().map(|m| (m.spec.id.clone(), m.template.clone())).collect(),
        ))
    }
}

/// A scripted token's log-probabilities: the token itself at 0.7 and two made-up alternatives, " maybe" (0.2, in
/// play) and " never" (0.1, which the sampler's cut left out), so a client can show alternatives and the mark.
fn scripted_logprob(text: &str, n: usize) -> TokenLogprob {
    let all = [
        (text.to_string(), 0.7f32.ln(), true),
        (" maybe".into(), 0.2f32.ln(), true),
        (" never".into(), 0.1f32.ln(), false),
    ];
    let top = &all[..n.min(all.len())];
    TokenLogprob {
        token: text.to_string(),
        logprob: 0.7f32.ln(),
        top: top.iter().map(|(t, lp, _)| (t.clone(), *lp)).collect(),
        in_play: top.iter().map(|t| t.2).collect(),
    }
}

/// The scripted models' tokenizer: a token is 3 characters (as their replies are), its id the sum of its
/// characters' code points modulo 256. Each model's template renders chat prompts for counts.
struct ScriptedTokenizer(Vec<(String, Option<ChatTemplate>)>);

impl ScriptedTokenizer {
    fn template(&self, model: &str) -> Result<Option<&ChatTemplate>, EngineError> {
        match self.0.iter().find(|(m, _)| m == model) {
            Some((_, t)) => Ok(t.as_ref()),
            None => Err(EngineError::model_not_found(model, &self.0.iter().map(|m| m.0.clone()).collect::<Vec<_>>())),
        }
    }
}

impl Tokenize for ScriptedTokenizer {
    fn count(&self, model: &str, prompt: &Prompt) -> Result<usize, EngineError> {
        Ok(count_tokens(&render(model, self.template(model)?, prompt)?))
    }

    fn tokenize(&self, model: &str, text: &str) -> Result<Vec<TokenPiece>, EngineError> {
        self.template(model)?;
        let chars: Vec<char> = text.chars().collect();
        Ok(chars
            .chunks(CHARS_PER_TOKEN)
            .map(|c| TokenPiece { id: c.iter().map(|&ch| ch as u32).sum::<u32>() % 256, text: c.iter().collect() })
            .collect())
    }
}
