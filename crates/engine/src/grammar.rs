//! Constrained decoding: a reply's text held to a JSON Schema, a regular expression or a Lark grammar by masking,
//! before each draw, every token that could not continue it. The grammar engine is llguidance (the one llama.cpp and
//! vLLM use); kvad gives it the model's vocabulary as bytes ([`kvad_text::Tokenizer::token_bytes`]). A model's
//! vocabulary is compiled once ([`Grammars`]); each constrained reply keeps its own parser ([`Guide`]), so replies
//! with and without constraints share a batch.

use crate::EngineError;
use kvad_text::Tokenizer;
use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use serde_json::Value;
use std::sync::Arc;
use toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

/// What a reply's text must be.
#[derive(Debug, Clone, PartialEq)]
pub enum Grammar {
    /// JSON valid against this schema (OpenAI's `response_format` `json_schema`).
    JsonSchema(Value),
    /// Any JSON object (OpenAI's `json_object`).
    JsonObject,
    /// Text matching this regular expression as a whole.
    Regex(String),
    /// Text in this Lark grammar (llguidance's dialect: `%json {…}` embeds a schema, as a forced tool call does).
    Lark(String),
}

/// A request's constraint: the grammar, and the request field it came from (a grammar kvad cannot honour is a
/// 400 naming that field).
#[derive(Debug, Clone, PartialEq)]
pub struct Constraint {
    /// What the reply must be.
    pub grammar: Grammar,
    /// The request's field that asked for it (`response_format`, `tool_choice`).
    pub field: &'static str,
    /// Text the reply writes freely before the constraint applies (`</think>`: a reasoning model's trace stays
    /// free, and the answer after it is held); `None`: from the first token.
    pub after: Option<String>,
}

/// The vocabulary as llguidance walks it, with the model's own tokenizer for the text a grammar forces.
struct Vocabulary {
    trie: TokTrie,
    tokenizer: Tokenizer,
}

impl TokenizerEnv for Vocabulary {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.tokenizer.encode(&String::from_utf8_lossy(s), false).unwrap_or_default()
    }
}

/// A schema with llguidance told to write JSON as OpenAI's structured outputs and Python's `json.dumps` do: `", "`
/// between items, `": "` after keys, no other whitespace. Its default lets whitespace run anywhere, which a model
/// at temperature 1 fills without end. A schema that says otherwise (`x-guidance`) keeps its own.
pub fn compact(mut schema: Value) -> Value {
    if let Some(o) = schema.as_object_mut() {
        o.entry("x-guidance").or_insert_with(
            || serde_json::json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "}),
        );
    }
    schema
}

/// A special token's spelling for id `id`: what a token that must never be drawn under a grammar is given.
fn placeholder(id: usize) -> Vec<u8> {
    [&[TokTrie::SPECIAL_TOKEN_MARKER][..], format!("<kvad-unused-{id}>").as_bytes()].concat()
}

/// One model's grammar compiler: its vocabulary, compiled once when the first constrained reply asks for it.
pub struct Grammars {
    factory: Arc<ParserFactory>,
    env: TokEnv,
}

impl std::fmt::Debug for Grammars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grammars").finish_non_exhaustive()
    }
}

impl Grammars {
    /// The compiler for a model whose logits have `vocab` entries (ids past the tokenizer's never allowed) and
    /// whose reply ends at `end` (the token a finished grammar allows).
    pub fn new(tokenizer: &Tokenizer, vocab: usize, end: u32) -> Result<Grammars, EngineError> {
        let mut words: Vec<Vec<u8>> = tokenizer
            .token_bytes()
            .into_iter()
            .enumerate()
            .map(|(id, t)| match (t.special, t.bytes.is_empty()) {
                // llguidance's mark for a special token: never matched as text.
                (true, _) => [&[TokTrie::SPECIAL_TOKEN_MARKER][..], &t.bytes].concat(),
                (false, false) => t.bytes,
                // A token with no text would match the empty string anywhere: never allowed.
                (false, true) => placeholder(id),
            })
            .collect();
        // Logits past the tokenizer's vocabulary (a model's padded head) are never allowed either.
        let known = words.len();
        words.extend((known..vocab).map(placeholder));
        let info = TokRxInfo::new(words.len() as u32, end);
        let trie = TokTrie::from(&info, &words);
        let env: TokEnv = Arc::new(Vocabulary { trie, tokenizer: tokenizer.clone() });
        let mut factory = ParserFactory::new_simple(&env)
            .map_err(|e| EngineError::internal(format!("compiling the vocabulary for grammars: {e}")))?;
        factory.quiet();
        Ok(Grammars { factory: Arc::new(factory), env })
    }

    /// A reply's parser for `c`; a grammar llguidance refuses (a schema keyword it does not implement, a regex it
    /// cannot parse) is a 400 naming the request's field and saying why.
    pub fn guide(&self, c: &Constraint) -> Result<Guide, EngineError> {
        let top = match &c.grammar {
            Grammar::JsonSchema(schema) => TopLevelGrammar::from_json_schema(compact(schema.clone())),
            Grammar::JsonObject => TopLevelGrammar::from_json_schema(compact(serde_json::json!({"type": "object"}))),
            Grammar::Regex(rx) => TopLevelGrammar::from_regex(rx),
            Grammar::Lark(lark) => TopLevelGrammar::from_lark(lark.clone()),
        };
        let parser = self.factory.create_parser(top).map_err(|e| {
            EngineError::bad_field(c.field, format!("{}: kvad cannot hold a reply to it: {e}", c.field))
        })?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(EngineError::bad_field(c.field, format!("{}: {e}", c.field)));
        }
        let wait =
            c.after.as_ref().map(|m| Wait { marker: m.as_bytes().to_vec(), seen: Vec::new(), env: self.env.clone() });
        Ok(Guide { matcher, wait })
    }
}

/// The free text before a constraint applies: the bytes seen so far, until they hold the marker.
#[derive(Clone)]
struct Wait {
    marker: Vec<u8>,
    seen: Vec<u8>,
    env: TokEnv,
}

/// The tokens a grammar allows at one step.
pub struct Mask(toktrie::SimpleVob);

impl Mask {
    /// Sets every logit the mask does not allow to minus infinity.
    pub fn apply(&self, logits: &mut [f32]) {
        for (id, l) in logits.iter_mut().enumerate() {
            if !self.0.is_allowed(id as TokenId) {
                *l = f32::NEG_INFINITY;
            }
        }
    }
}

/// One reply's place in its grammar.
#[derive(Clone)]
pub struct Guide {
    matcher: Matcher,
    wait: Option<Wait>,
}

impl std::fmt::Debug for Guide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guide")
            .field("stopped", &self.matcher.is_stopped())
            .field("waiting", &self.wait.is_some())
            .finish()
    }
}

impl Guide {
    /// Whether the next draw is held (the free text before the constraint is not).
    pub fn needs_mask(&self) -> bool {
        self.wait.is_none()
    }

    /// The tokens the grammar allows next (once it is complete, the end token only). Computed while the pass that
    /// gives the logits runs ([`crate::pass::run`]); applied to them with [`Mask::apply`].
    pub fn next_mask(&mut self) -> Result<Mask, EngineError> {
        let allowed = self.matcher.compute_mask_or_eos().map_err(|e| EngineError::internal(format!("grammar: {e}")))?;
        Ok(Mask(allowed))
    }

    /// Sets the logit of every token the grammar does not allow next to minus infinity; text before the
    /// constraint applies is left free.
    pub fn mask(&mut self, logits: &mut [f32]) -> Result<(), EngineError> {
        if self.needs_mask() {
            self.next_mask()?.apply(logits);
        }
        Ok(())
    }

    /// Moves the grammar past the token drawn.
    pub fn accept(&mut self, id: u32) -> Result<(), EngineError> {
        if let Some(w) = &mut self.wait {
            w.seen.extend_from_slice(w.env.tok_trie().token(id));
            if w.seen.windows(w.marker.len()).any(|x| x == w.marker.as_slice()) {
                // The marker is written: the grammar holds the reply from the next token on.
                self.wait = None;
            }
            return Ok(());
        }
        if self.matcher.is_stopped() {
            return Ok(());
        }
        self.matcher.consume_token(id).map_err(|e| EngineError::internal(format!("grammar: token {id}: {e}")))
    }
}
