//! Whole inputs read beside the running replies: embeddings and perplexity scores. Each loads its model under the
//! memory rule as a reply would, takes only the state room the running replies' reserves leave (kept conversations
//! give way first, as they do to a reply), and answers `Ok(None)` when an input does not fit that room: the
//! scheduler then asks again once the batch has run down.

use super::{LocalEngine, Slot};
use crate::embed::{embed_inputs, EmbedConfig};
use crate::passes::Room;
use crate::perplexity::{score_inputs, windows};
use crate::seam::{Budget, EmbedInput, Embedded, Scored};
use crate::EngineError;

impl LocalEngine {
    /// Loads `model`; returns its entry, whether this loaded it, and its texts tokenized (special tokens added).
    fn whole_inputs(
        &mut self,
        model: &str,
        inputs: &[EmbedInput],
    ) -> Result<(usize, bool, Vec<Vec<u32>>), EngineError> {
        let entry = self.find(model)?;
        let loaded = self.slot(entry).is_none();
        let slot = self.load_entry(entry, None)?;
        let mut ids = Vec::with_capacity(inputs.len());
        for i in inputs {
            ids.push(match i {
                EmbedInput::Text(t) => {
                    slot.m.tokenizer.encode(t, true).map_err(|e| EngineError::internal(e.to_string()))?
                }
                EmbedInput::Tokens(t) => t.clone(),
            });
        }
        Ok((entry, loaded, ids))
    }

    /// The room `ids` may be read in on `entry`'s model beside its running sequences, with kept conversations
    /// fitted to leave it; None when the longest does not fit beside them (it will once they have finished).
    fn room_beside(&mut self, entry: usize, ids: &[Vec<u32>]) -> Result<Option<Room>, EngineError> {
        let (reserved, count) = {
            let b = self.slot(entry).map(Slot::budget).unwrap_or(Budget::tokens(0));
            let running = self.seqs.values().filter(|s| s.entry == entry);
            running.fold((0, 0), |(r, n), s| (r + b.reserve(s.seq.reserve), n + 1))
        };
        let slot = self
            .slots
            .iter_mut()
            .find(|s| s.entry == entry)
            .ok_or_else(|| EngineError::internal("the model left memory before its inputs were read"))?;
        let m = slot.m.model.as_ref();
        let b = slot.budget();
        let room = Room {
            rows: m.prefill_chunk(),
            tokens: b.tokens.saturating_sub(reserved),
            page: b.page,
            sequences: b.sequences.saturating_sub(count).max(1),
        };
        let longest = ids.iter().map(Vec::len).max().unwrap_or(0);
        if count > 0 && longest <= m.config().max_position && b.reserve(longest) > room.tokens {
            return Ok(None);
        }
        let need = room.needed(ids);
        slot.kept.fit(room.tokens.saturating_sub(need), b.page, room.sequences.saturating_sub(1));
        Ok(Some(Room { tokens: need.max(b.page), ..room }))
    }

    fn slot_of(&self, entry: usize) -> Result<&Slot, EngineError> {
        self.slot(entry).ok_or_else(|| EngineError::internal("the model left memory before its inputs were read"))
    }

    /// [`crate::Engine::embed`] on the local backends.
    pub(super) fn embed_whole(
        &mut self,
        model: &str,
        inputs: &[EmbedInput],
        dimensions: Option<usize>,
    ) -> Result<Option<Embedded>, EngineError> {
        let (entry, loaded, ids) = self.whole_inputs(model, inputs)?;
        let path = self.entries[entry].path.clone();
        let hidden = self.slot_of(entry)?.m.model.config().hidden;
        let cfg = EmbedConfig::read(&path, hidden)?.ok_or_else(|| {
            EngineError::bad_field(
                "model",
                format!(
                    "{model} is not an embedding model: its files name no pooling (sentence-transformers' \
                     modules.json with a Pooling module, or a GGUF <arch>.pooling_type)"
                ),
            )
        })?;
        let Some(room) = self.room_beside(entry, &ids)? else { return Ok(None) };
        let slot = self.slot_of(entry)?;
        let vectors = embed_inputs(slot.m.model.as_ref(), &cfg, &ids, dimensions, room)?;
        let backend = slot.backend.to_string();
        self.fit(entry);
        Ok(Some(Embedded { vectors, tokens: ids.iter().map(Vec::len).sum(), backend, loaded }))
    }

    /// [`crate::Engine::score`] on the local backends: each text cut into windows, every window scored, and each
    /// text's windows summed.
    pub(super) fn score_whole(
        &mut self,
        model: &str,
        inputs: &[EmbedInput],
        window: Option<usize>,
    ) -> Result<Option<Scored>, EngineError> {
        let (entry, loaded, ids) = self.whole_inputs(model, inputs)?;
        let ctx = self.slot_of(entry)?.m.model.config().max_position;
        let window = match window {
            Some(w) if !(2..=ctx).contains(&w) => {
                return Err(EngineError::bad_field("window", format!("window = {w}: 2 to the model's context, {ctx}")))
            }
            w => w.unwrap_or(ctx),
        };
        if let Some(i) = ids.iter().position(|t| t.len() < 2) {
            return Err(EngineError::bad_field(
                "input",
                format!("input[{i}] is {} token(s): scoring needs two at least", ids[i].len()),
            ));
        }
        let (mut pieces, mut owner) = (Vec::new(), Vec::new());
        for (i, t) in ids.iter().enumerate() {
            for w in windows(t, window) {
                pieces.push(w);
                owner.push(i);
            }
        }
        let Some(room) = self.room_beside(entry, &pieces)? else { return Ok(None) };
        let slot = self.slot_of(entry)?;
        let per_window = score_inputs(slot.m.model.as_ref(), &pieces, room)?;
        let mut scores = vec![crate::perplexity::Nll::default(); ids.len()];
        for (s, &i) in per_window.iter().zip(&owner) {
            scores[i].sum += s.sum;
            scores[i].tokens += s.tokens;
        }
        let backend = slot.backend.to_string();
        self.fit(entry);
        Ok(Some(Scored { scores, tokens: ids.iter().map(Vec::len).sum(), backend, loaded }))
    }
}
