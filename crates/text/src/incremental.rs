//! Streaming detokenization: text for ids as they are generated.
//!
//! Decoding one id at a time is wrong twice over: a UTF-8 character can span several byte
//! tokens, and SentencePiece decoders drop a leading space that only the first token of a text
//! should lose. So we decode a small window instead. `prefix` marks where the window starts (the
//! start of the last text we emitted), `read` where the unemitted ids start. For each new id we
//! decode `ids[prefix..]`, and once that text is longer than the decode of `ids[prefix..read]`
//! and does not end in U+FFFD (an incomplete character), we emit the difference and slide the
//! window forward.
//!
//! SentencePiece byte fallback needs one more rule: a run of `<0xNN>` tokens decodes as a whole,
//! and one invalid byte turns the entire run into U+FFFD. So while the last token that decodes to
//! anything is such a byte, we hold the text back until the run ends.

use crate::{TextError, Tokenizer};

/// The replacement character that decoders emit for incomplete or invalid UTF-8.
const REPLACEMENT: char = '\u{FFFD}';

/// An [`IncrementalDecoder`]'s position, stored apart from the tokenizer it borrows.
#[derive(Debug, Clone, Default)]
pub struct DecoderState {
    ids: Vec<u32>,
    prefix: usize,
    read: usize,
    in_byte_run: bool,
}

/// Streams text for ids as they come, never splitting a UTF-8 character across deltas.
///
/// Concatenating every delta and [`IncrementalDecoder::finish`] gives the same text as decoding
/// all ids at once.
#[derive(Debug)]
pub struct IncrementalDecoder<'a> {
    tokenizer: &'a Tokenizer,
    skip_special: bool,
    ids: Vec<u32>,
    prefix: usize,
    read: usize,
    /// The last id that reaches the decoder was a `<0xNN>` fallback byte.
    in_byte_run: bool,
}

impl<'a> IncrementalDecoder<'a> {
    /// A decoder with no ids yet; `skip_special` as in [`Tokenizer::decode`].
    pub fn new(tokenizer: &'a Tokenizer, skip_special: bool) -> Self {
        IncrementalDecoder { tokenizer, skip_special, ids: Vec::new(), prefix: 0, read: 0, in_byte_run: false }
    }

    /// Adds one id; returns the new text it completes, or `None` while a character is still
    /// incomplete (or the id adds no text, like a skipped special token). An id past the tokenizer's vocabulary
    /// (a model's embedding rows padded beyond it, as Qwen's are) has no text, as transformers decodes it.
    pub fn push(&mut self, id: u32) -> Result<Option<String>, TextError> {
        if id as usize >= self.tokenizer.vocab_size() {
            return Ok(None);
        }
        self.ids.push(id);
        let dropped = self.skip_special && self.tokenizer.is_special(id);
        if !dropped {
            self.in_byte_run = self.tokenizer.is_fallback_byte(id);
        }
        if self.in_byte_run {
            return Ok(None);
        }
        let delta = self.pending()?;
        match delta {
            Some(text) if !text.ends_with(REPLACEMENT) => {
                self.prefix = self.read;
                self.read = self.ids.len();
                Ok(Some(text))
            }
            _ => Ok(None),
        }
    }

    /// Returns whatever text is still held back (an incomplete character decodes to U+FFFD here,
    /// as in a full decode) and resets the decoder for a new stream.
    pub fn finish(&mut self) -> Result<String, TextError> {
        let rest = self.pending()?.unwrap_or_default();
        self.ids.clear();
        self.prefix = 0;
        self.read = 0;
        self.in_byte_run = false;
        Ok(rest)
    }

    /// The decoder's position without its tokenizer borrow, so a caller that keeps many streams (the server's
    /// scheduler, one per reply in a batch) can store it and [`IncrementalDecoder::resume`] it for the next id.
    pub fn into_state(self) -> DecoderState {
        DecoderState { ids: self.ids, prefix: self.prefix, read: self.read, in_byte_run: self.in_byte_run }
    }

    /// A decoder continuing from a stored [`DecoderState`].
    pub fn resume(tokenizer: &'a Tokenizer, skip_special: bool, state: DecoderState) -> Self {
        let DecoderState { ids, prefix, read, in_byte_run } = state;
        IncrementalDecoder { tokenizer, skip_special, ids, prefix, read, in_byte_run }
    }

    /// All ids pushed since the last [`IncrementalDecoder::finish`].
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// The text after the last emitted delta, if the window decodes to more than before.
    fn pending(&self) -> Result<Option<String>, TextError> {
        let window = &self.ids[self.prefix..];
        let before = self.tokenizer.decode(&window[..self.read - self.prefix], self.skip_special)?;
        let now = self.tokenizer.decode(window, self.skip_special)?;
        Ok(match now.strip_prefix(before.as_str()) {
            Some(rest) if !rest.is_empty() => Some(rest.to_string()),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::tests::{tiny_byte_level, tiny_spm};
    use proptest::prelude::*;

    fn stream(t: &Tokenizer, ids: &[u32], skip: bool) -> (Vec<String>, String) {
        let mut d = IncrementalDecoder::new(t, skip);
        let mut deltas = Vec::new();
        for &id in ids {
            if let Some(s) = d.push(id).unwrap() {
                deltas.push(s);
            }
        }
        let rest = d.finish().unwrap();
        (deltas, rest)
    }

    /// The same stream, with the decoder stored and resumed between every two ids.
    fn stream_resumed(t: &Tokenizer, ids: &[u32], skip: bool) -> (Vec<String>, String) {
        let mut state = DecoderState::default();
        let mut deltas = Vec::new();
        for &id in ids {
            let mut d = IncrementalDecoder::resume(t, skip, state);
            if let Some(s) = d.push(id).unwrap() {
                deltas.push(s);
            }
            state = d.into_state();
        }
        let rest = IncrementalDecoder::resume(t, skip, state).finish().unwrap();
        (deltas, rest)
    }

    fn check(t: &Tokenizer, ids: &[u32], skip: bool) -> Result<(), TestCaseError> {
        let (deltas, rest) = stream(t, ids, skip);
        prop_assert_eq!(stream_resumed(t, ids, skip), (deltas.clone(), rest.clone()));
        let whole = t.decode(ids, skip).unwrap();
        prop_assert_eq!(deltas.concat() + &rest, whole.clone());
        if !whole.contains(REPLACEMENT) {
            for d in &deltas {
                prop_assert!(!d.contains(REPLACEMENT), "delta {:?} of {:?}", d, whole);
            }
        }
        Ok(())
    }

    #[test]
    fn multibyte_character_waits_for_its_last_byte() {
        let t = Tokenizer::from_gguf_vocab(tiny_byte_level()).unwrap();
        let ids = t.encode("a日b", false).unwrap();
        let (deltas, rest) = stream(&t, &ids, false);
        assert_eq!(deltas, vec!["a", "日", "b"]);
        assert_eq!(rest, "");
    }

    #[test]
    fn an_id_past_the_vocabulary_adds_no_text_and_breaks_nothing() {
        let t = Tokenizer::from_gguf_vocab(tiny_byte_level()).unwrap();
        let ids = t.encode("a日b", false).unwrap();
        let past = t.vocab_size() as u32 + 3;
        let mut with: Vec<u32> = vec![past];
        for &id in &ids {
            with.extend([id, past]);
        }
        assert_eq!(stream(&t, &with, false), stream(&t, &ids, false));
    }

    #[test]
    fn spm_keeps_spaces_between_words() {
        let t = Tokenizer::from_gguf_vocab(tiny_spm()).unwrap();
        let ids = t.encode("hi hi é", true).unwrap();
        let (deltas, rest) = stream(&t, &ids, true);
        assert_eq!(deltas.concat() + &rest, "hi hi é");
        assert_eq!(deltas.first().map(String::as_str), Some("hi"));
    }

    #[test]
    fn finish_flushes_an_incomplete_character() {
        let t = Tokenizer::from_gguf_vocab(tiny_spm()).unwrap();
        let mut d = IncrementalDecoder::new(&t, false);
        assert_eq!(d.push(3 + 0xE6).unwrap(), None);
        assert_eq!(d.finish().unwrap(), "\u{FFFD}");
        assert!(d.ids().is_empty());
    }

    proptest! {
        #[test]
        fn byte_level_deltas_concatenate_to_decode(
            ids in proptest::collection::vec(0u32..262, 0..40),
            skip in any::<bool>(),
        ) {
            let t = Tokenizer::from_gguf_vocab(tiny_byte_level()).unwrap();
            check(&t, &ids, skip)?;
        }

        #[test]
        fn spm_deltas_concatenate_to_decode(
            ids in proptest::collection::vec(0u32..265, 0..40),
            skip in any::<bool>(),
        ) {
            let t = Tokenizer::from_gguf_vocab(tiny_spm()).unwrap();
            check(&t, &ids, skip)?;
        }

        #[test]
        fn real_text_streams_exactly(s in "\\PC{0,30}") {
            let t = Tokenizer::from_gguf_vocab(tiny_byte_level()).unwrap();
            let ids = t.encode(&s, false).unwrap();
            check(&t, &ids, false)?;
            let t = Tokenizer::from_gguf_vocab(tiny_spm()).unwrap();
            let ids = t.encode(&s, true).unwrap();
            check(&t, &ids, true)?;
        }
    }
}
