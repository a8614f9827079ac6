//! The perplexity job: a model's perplexity over a dataset's documents, every row's logits read through the
//! scheduler (the seed's `forward_batch_all`). Documents go to the queue a few at a time as whole-input work
//! ([`crate::sched::Whole::Score`]), so they take their account's turns with chat and run in passes of their own
//! between the running replies' steps: a perplexity job never stops a conversation, and it never measures a cached
//! prefix (each document is read from an empty cache).
//!
//! The figure is `exp(total NLL / tokens scored)` over every document's tokens after its first; a document longer
//! than the window is read as consecutive windows (`kvad_engine::perplexity::windows`).

use crate::error::ApiError;
use crate::sched::{InputsJob, Whole};
use crate::AppState;
use kvad_engine::perplexity::{Nll, Perplexity};
use kvad_engine::seam::{EmbedInput, Scored};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// `POST /api/jobs` with `kind: "perplexity"`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct PplRequest {
    /// Always "perplexity".
    pub kind: String,
    /// A dataset of documents (`{"text"}` lines or plain text).
    pub dataset: String,
    /// The model, as the chat API names it.
    pub model: String,
    /// Which documents: "all" (default), "train" or "validation".
    pub split: Option<String>,
    /// Tokens a window (default: the model's context).
    pub window: Option<usize>,
}

/// The splits a request may name.
pub const SPLITS: [&str; 3] = ["all", "train", "validation"];

/// Documents sent to the queue at once: few enough that chat waiting behind them waits one short turn, and at
/// most this many bytes of text.
const GROUP_DOCS: usize = 16;
const GROUP_BYTES: usize = 16 << 10;

impl PplRequest {
    /// Checks the model is known and the split and window make sense: (field, message) otherwise.
    pub fn check(&self, state: &AppState) -> Result<(), (String, String)> {
        state.model_info(&self.model).map_err(|e| ("model".to_string(), e.message))?;
        if let Some(s) = self.split.as_deref().filter(|s| !SPLITS.contains(s)) {
            return Err(("split".into(), format!("split = \"{s}\": one of {}", SPLITS.join(", "))));
        }
        if let Some(w) = self.window.filter(|&w| w < 2) {
            return Err((
                "window".into(),
                format!("window = {w}: a window scores its tokens after the first, so 2 at least"),
            ));
        }
        Ok(())
    }

    /// The documents of the split, from all of a dataset's (`held`: the validation ones' indices).
    pub fn pick(&self, docs: Vec<String>, held: &[usize]) -> Vec<String> {
        let split = self.split.as_deref().unwrap_or("all");
        docs.into_iter()
            .enumerate()
            .filter(|(i, _)| match split {
                "train" => !held.contains(i),
                "validation" => held.contains(i),
                _ => true,
            })
            .map(|(_, d)| d)
            .collect()
    }
}

/// Submits work that may wait: a full queue or an account at its limit (503, 429) is waited out, as the refusal's
/// Retry-After says, rather than failing the job; a cancel ends the wait.
pub async fn patiently<T>(cancel: &AtomicBool, mut submit: impl FnMut() -> Result<T, ApiError>) -> Result<T, String> {
    loop {
        match submit() {
            Ok(t) => return Ok(t),
            Err(e) if e.status.as_u16() == 503 || e.status.as_u16() == 429 => {
                if cancel.load(Ordering::Relaxed) {
                    return Err("cancelled while waiting for the queue".into());
                }
                tokio::time::sleep(Duration::from_secs(e.retry_after.unwrap_or(1).clamp(1, 5))).await;
            }
            Err(e) => return Err(e.message),
        }
    }
}

/// One group of documents scored through the queue.
async fn score(
    state: &AppState,
    account: &str,
    req: &PplRequest,
    docs: &[String],
    cancel: &AtomicBool,
) -> Result<Scored, String> {
    let rx = patiently(cancel, || {
        let (tx, rx) = tokio::sync::oneshot::channel();
        state
            .queue
            .inputs(InputsJob {
                model: req.model.clone(),
                inputs: docs.iter().cloned().map(EmbedInput::Text).collect(),
                account: account.to_string(),
                endpoint: "/api/jobs",
                queued_at: Instant::now(),
                work: Whole::Score { window: req.window, reply: tx },
            })
            .map(|()| rx)
    })
    .await?;
    rx.await.map_err(|_| "the engine dropped the job".to_string())?.map_err(|e| e.message)
}

/// Scores every document, a group at a time, sending a `step` event after each; returns the perplexity, and
/// whether it ran to the end (false: cancelled, with the figure so far).
pub fn execute(
    state: &AppState,
    rt: &tokio::runtime::Handle,
    account: &str,
    req: &PplRequest,
    docs: &[String],
    cancel: &AtomicBool,
    emit: &mut dyn FnMut(Value),
) -> Result<(Value, bool), String> {
    emit(json!({"type": "start", "documents": docs.len(), "model": req.model}));
    let mut scores: Vec<Nll> = Vec::with_capacity(docs.len());
    let mut backend = String::new();
    let result = |scores: &[Nll], backend: &str| {
        let p = Perplexity::of(scores);
        json!({"model": req.model, "backend": backend, "perplexity": p.ppl, "nll": p.nll, "tokens": p.tokens,
               "documents": scores.len(), "window": req.window})
    };
    let mut at = 0;
    while at < docs.len() {
        if cancel.load(Ordering::Relaxed) {
            return Ok((result(&scores, &backend), false));
        }
        let mut end = at;
        let mut bytes = 0;
        while end < docs.len() && end - at < GROUP_DOCS && (end == at || bytes + docs[end].len() <= GROUP_BYTES) {
            bytes += docs[end].len();
            end += 1;
        }
        let s = rt.block_on(score(state, account, req, &docs[at..end], cancel))?;
        scores.extend(s.scores);
        backend = s.backend;
        at = end;
        let p = Perplexity::of(&scores);
        emit(json!({"type": "step", "documents": at, "of": docs.len(), "tokens": p.tokens, "perplexity": p.ppl}));
    }
    Ok((result(&scores, &backend), true))
}
