//! Reading a prompt for a model in memory: its template renders the messages and its tokenizer turns the text into
//! ids. It holds copies of both (they are small beside the weights), so the scheduler runs it on a thread of its
//! own and a megabyte prompt never holds the engine thread, and every stream on it.

use crate::open::OpenedModel;
use crate::seam::{Prepared, Prompt, Reader};
use crate::EngineError;
use kvad_text::stream::ToolFormat;
use kvad_text::{ChatContext, ChatTemplate, Tokenizer};

/// One loaded model's prompt reader.
pub(super) struct LocalReader {
    model: String,
    tokenizer: Tokenizer,
    template: Option<ChatTemplate>,
    context: usize,
    vocab: usize,
    backend: String,
}

impl LocalReader {
    /// A reader for `m`, loaded as `model`.
    pub(super) fn new(model: &str, m: &OpenedModel) -> Self {
        let c = m.model.config();
        LocalReader {
            model: model.to_string(),
            tokenizer: m.tokenizer.clone(),
            template: m.template.clone(),
            // On a GPU one reply can hold no more than the page pool: past that it is refused at once, naming
            // max_tokens, rather than admitted to run out of pages.
            context: m.model.state_room().map_or(c.max_position, |r| c.max_position.min(r.tokens)),
            vocab: c.vocab_size,
            backend: m.backend.to_string(),
        }
    }
}

/// A prompt's text and ids: messages through `model`'s chat template (a chat prompt holds its special tokens as
/// text, so none are added), plain text as a completion reads it. Shared by the reader and by token counts
/// (`LocalTokenizers`), so a count is what a reply's prompt is.
pub(crate) fn render(
    model: &str,
    tok: &Tokenizer,
    template: Option<&ChatTemplate>,
    prompt: &Prompt,
) -> Result<(String, Vec<u32>), EngineError> {
    match prompt {
        Prompt::Chat { messages, tools, vars } => {
            let Some(t) = template else {
                return Err(EngineError::bad_field(
                    "model",
                    format!("model {model} has no chat template; use /v1/completions with a plain prompt"),
                ));
            };
            let ctx = ChatContext {
                messages: messages.clone(),
                tools: tools.clone(),
                add_generation_prompt: true,
                bos_token: tok.bos_token().unwrap_or_default().to_string(),
                eos_token: tok.eos_token().unwrap_or_default().to_string(),
                extra: vars.clone(),
            };
            let text = t.render(&ctx).map_err(|e| EngineError::bad_field("messages", e.to_string()))?;
            let ids = tok.encode(&text, false).map_err(|e| EngineError::internal(e.to_string()))?;
            Ok((text, ids))
        }
        Prompt::Text(s) => {
            let ids = tok.encode(s, true).map_err(|e| EngineError::internal(e.to_string()))?;
            Ok((s.clone(), ids))
        }
    }
}

impl Reader for LocalReader {
    fn read(&self, prompt: &Prompt) -> Result<Prepared, EngineError> {
        // A prompt far past the context is refused before it is tokenised (a megabyte takes most of a second): its
        // text alone holds more tokens than the context.
        let (bytes, field) = prompt_bytes(prompt);
        let fewest = self.tokenizer.fewest_tokens(bytes);
        if fewest >= self.context {
            return Err(EngineError::bad_field(
                field,
                format!(
                    "the prompt is {bytes} bytes, at least {fewest} tokens for this model; its context is {}",
                    self.context
                ),
            ));
        }
        let (text, tokens) = render(&self.model, &self.tokenizer, self.template.as_ref(), prompt)?;
        Ok(Prepared {
            prompt_tokens: tokens.len(),
            tokens,
            text,
            context: self.context,
            vocab: self.vocab,
            backend: self.backend.clone(),
            model: self.model.clone(),
            loaded: false,
            tool_format: self.template.as_ref().map(|t| ToolFormat::of_template(t.source())).unwrap_or_default(),
        })
    }
}

/// The bytes of text a prompt certainly renders (its messages' text, or the completion's prompt), and the request
/// field it came in.
fn prompt_bytes(prompt: &Prompt) -> (usize, &'static str) {
    fn text_of(v: &serde_json::Value) -> usize {
        match v {
            serde_json::Value::String(s) => s.len(),
            serde_json::Value::Array(parts) => parts.iter().map(|p| p.get("text").map_or(0, text_of)).sum(),
            _ => 0,
        }
    }
    match prompt {
        Prompt::Chat { messages, .. } => {
            (messages.iter().map(|m| m.get("content").map_or(0, text_of)).sum(), "messages")
        }
        Prompt::Text(s) => (s.len(), "prompt"),
    }
}
