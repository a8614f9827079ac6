//! Whole inputs read in batched passes of their own: what embeddings pool and what perplexity scores. Both read
//! every row of many inputs at once, outside any reply, and must hold no more sequence state than the room the
//! running replies leave; the reading loop is the same, only what is done with each pass's rows differs.

use crate::EngineError;
use kvad_models::{CausalLm, LogitsMode, SeqInput};

/// What a run of whole inputs may take: rows a pass, and state held at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Room {
    /// Rows one pass carries (the model's prompt chunk).
    pub rows: usize,
    /// Tokens of state held at once, in whole pages.
    pub tokens: usize,
    /// Tokens a page holds (1 where state is not paged).
    pub page: usize,
    /// Sequences held at once (a GPU's recurrent slots; `usize::MAX` where tokens alone bound them).
    pub sequences: usize,
}

impl Room {
    /// What an input of `n` tokens holds: whole pages.
    pub fn held(&self, n: usize) -> usize {
        n.div_ceil(self.page.max(1)) * self.page.max(1)
    }

    /// The room a run of these inputs needs at most: its longest input, or a pass's rows where more (several
    /// short inputs read together), in whole pages and within what there is.
    pub fn needed(&self, inputs: &[Vec<u32>]) -> usize {
        let longest = inputs.iter().map(|t| self.held(t.len())).max().unwrap_or(0);
        longest.max(self.held(self.rows)).min(self.tokens)
    }
}

/// Refuses, naming `input[i]`, an input that is empty, longer than the model reads or the room holds, or that
/// holds an id past the vocabulary: checked before any pass runs, so a bad input costs nothing.
pub fn check_inputs(model: &dyn CausalLm, inputs: &[Vec<u32>], room: Room, what: &str) -> Result<(), EngineError> {
    let c = model.config();
    for (i, t) in inputs.iter().enumerate() {
        if t.is_empty() {
            return Err(EngineError::bad_field("input", format!("input[{i}] is empty: there is nothing to {what}")));
        }
        if t.len() > c.max_position {
            return Err(EngineError::bad_field(
                "input",
                format!("input[{i}] is {} tokens; this model reads at most {}", t.len(), c.max_position),
            ));
        }
        if room.held(t.len()) > room.tokens {
            return Err(EngineError::bad_field(
                "input",
                format!("input[{i}] is {} tokens; the model's state room holds {}", t.len(), room.tokens),
            ));
        }
        if let Some(bad) = t.iter().find(|&&id| id as usize >= c.vocab_size) {
            return Err(EngineError::bad_field(
                "input",
                format!("input[{i}] holds token id {bad}, past the vocabulary ({})", c.vocab_size),
            ));
        }
    }
    Ok(())
}

/// One input being read: its tokens, how far, its state.
struct Reading<'a> {
    input: usize,
    at: usize,
    tokens: &'a [u32],
    state: kvad_models::SeqState,
}

/// Which forward a run reads through: logits (scoring) or final-normed hidden rows (pooling).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rows {
    /// [`CausalLm::forward`]: logit rows.
    Logits,
    /// [`CausalLm::forward_hidden`]: hidden rows.
    Hidden,
}

/// Reads every input (checked first with [`check_inputs`]) through `model` in passes of up to `room.rows` rows,
/// long inputs over several, each sequence's state held only while it is read and never more state at once than
/// the room has. `mode` picks the rows a pass returns (`Last`: each sequence's last row of the pass); `take(input,
/// start, rows, done)` gets them as they come: `start` is the position of the pass's first token, `done` says the
/// input has been read to its end.
pub fn read_in_passes(
    model: &dyn CausalLm,
    inputs: &[Vec<u32>],
    room: Room,
    (rows_of, mode): (Rows, LogitsMode),
    mut take: impl FnMut(usize, usize, Vec<f32>, bool),
) -> Result<(), EngineError> {
    let pass_rows = room.rows.max(1);
    let mut next = 0;
    let mut reading: Vec<Reading<'_>> = Vec::new();
    while next < inputs.len() || !reading.is_empty() {
        // Newcomers join while their whole input fits the room beside what is held.
        let held = |r: &[Reading<'_>]| r.iter().map(|x| room.held(x.tokens.len())).sum::<usize>();
        while next < inputs.len()
            && (reading.is_empty()
                || (held(&reading) + room.held(inputs[next].len()) <= room.tokens && reading.len() < room.sequences))
        {
            reading.push(Reading { input: next, at: 0, tokens: &inputs[next], state: model.new_state() });
            next += 1;
            if reading.iter().map(|r| r.tokens.len() - r.at).sum::<usize>() >= pass_rows {
                break;
            }
        }
        // One pass: each reader's next chunk, first come first, up to pass_rows rows.
        let mut left = pass_rows;
        let mut takes: Vec<usize> = Vec::with_capacity(reading.len());
        for r in &reading {
            let n = (r.tokens.len() - r.at).min(left);
            takes.push(n);
            left -= n;
        }
        let mut batch: Vec<SeqInput<'_>> = Vec::new();
        let mut who: Vec<usize> = Vec::new();
        for (k, (r, &n)) in reading.iter_mut().zip(&takes).enumerate() {
            if n > 0 {
                let t: &[u32] = r.tokens;
                batch.push(SeqInput { tokens: &t[r.at..r.at + n], state: &mut r.state });
                who.push(k);
            }
        }
        let rows = match rows_of {
            Rows::Logits => model.forward(&mut batch, mode)?,
            Rows::Hidden => model.forward_hidden(&mut batch, mode)?,
        };
        drop(batch);
        for (k, rows) in who.into_iter().zip(rows) {
            let r = &mut reading[k];
            let start = r.at;
            r.at += takes[k];
            take(r.input, start, rows, r.at == r.tokens.len());
        }
        reading.retain(|r| r.at < r.tokens.len());
    }
    Ok(())
}
