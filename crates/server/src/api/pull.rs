//! `POST /api/pull {"model"}`: the CLI's `kvad pull` run by the server, into the server's caches, so a model the
//! service will load is downloaded where the service looks. The download is kvad-hub's own (`Hub::pull` with
//! kvad-engine's import checks, or `ollama::resolve`) on a blocking thread; its progress streams back as
//! server-sent events in kvad-hub's [`PullEvent`] vocabulary: `plan`, then `start`/`advance`/`finish` per file,
//! `note`s, and `done` with the local path and commit, or `error` with OpenAI's error object.
//!
//! Two pulls of one repo at once would write the same blobs and links, so the second is refused with a 409 naming
//! the one that runs ([`Pulls`]). A pull whose client leaves carries on to the end (what it fetched stays in the
//! cache, and the next pull of that repo waits for it). In offline mode (`KVAD_OFFLINE`/`HF_HUB_OFFLINE`) every
//! pull is a 403.

use super::request::{parse_body, Fields};
use crate::auth::Admin;
use crate::error::ApiError;
use crate::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};
use kvad_hub::events::{PullEvent, Recorder};
use kvad_hub::ollama::OllamaTag;
use kvad_hub::{Hub, HubError, Progress, RepoRef};
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::watch;

/// The pulls running now, by what they write (a repo id, or an Ollama tag), with the name each was asked as.
#[derive(Clone, Default)]
pub struct Pulls(Arc<Mutex<HashMap<String, (String, Instant)>>>);

/// Holds a pull's claim on what it writes; dropped when the download ends, however it ends.
struct Claim {
    pulls: Pulls,
    key: String,
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.pulls.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&self.key);
    }
}

impl Pulls {
    /// Claims `key` for a pull of `model`, or a 409 naming the pull that holds it.
    fn claim(&self, key: &str, model: &str) -> Result<Claim, ApiError> {
        let mut running = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((asked, since)) = running.get(key) {
            return Err(ApiError {
                status: StatusCode::CONFLICT,
                message: format!(
                    "model = {model:?}: {key} is already being pulled (asked as {asked:?}, {} s ago); two pulls of one \
                     repo at once would write the same files, so this one is refused: wait for that one to end, then \
                     pull again",
                    since.elapsed().as_secs()
                ),
                kind: "invalid_request_error",
                param: Some("model".into()),
                code: Some("pull_in_progress"),
                retry_after: Some(5),
            });
        }
        running.insert(key.to_string(), (model.to_string(), Instant::now()));
        Ok(Claim { pulls: self.clone(), key: key.to_string() })
    }

    /// What is being pulled now.
    pub fn running(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).keys().cloned().collect()
    }
}

/// What a name pulls.
enum Source {
    Hub(RepoRef),
    Ollama(OllamaTag),
}

impl Source {
    /// An alias, `owner/name[@rev]` or `ollama:name[:tag]`; a path or anything else is a 400 naming the value.
    fn parse(model: &str) -> Result<Source, ApiError> {
        let parsed = match model.strip_prefix("ollama:") {
            Some(tag) => OllamaTag::parse(tag).map(Source::Ollama),
            None => kvad_hub::alias::repo_ref(model).map(Source::Hub),
        };
        parsed.map_err(|e| {
            ApiError::bad_field(
                "model",
                format!("model = {model:?}: {e}; a pull takes owner/name[@revision], an alias or ollama:name[:tag]"),
            )
        })
    }

    /// What the pull writes: the repo (any revision of it shares blobs), or the tag.
    fn key(&self) -> String {
        match self {
            Source::Hub(rr) => rr.repo.to_string(),
            Source::Ollama(t) => format!("ollama:{}/{}:{}", t.namespace, t.name, t.tag),
        }
    }
}

/// A hub error as the API's: the status a client would have got had it come before the stream started.
pub fn hub_error(e: HubError) -> ApiError {
    let (status, kind, param, code) = match &e {
        HubError::Unknown(_) => (StatusCode::BAD_REQUEST, "invalid_request_error", Some("model".into()), None),
        HubError::Invalid { field, .. } => {
            (StatusCode::BAD_REQUEST, "invalid_request_error", Some(field.clone()), Some("invalid"))
        }
        HubError::Refused { .. } => {
            (StatusCode::UNPROCESSABLE_ENTITY, "invalid_request_error", Some("model".into()), Some("model_refused"))
        }
        HubError::NotFound { .. } | HubError::NotCached { .. } | HubError::NotOnDisk { .. } => {
            (StatusCode::NOT_FOUND, "not_found_error", Some("model".into()), Some("model_not_found"))
        }
        HubError::Gated { .. } => (StatusCode::FORBIDDEN, "permission_error", Some("model".into()), Some("gated")),
        HubError::Offline { .. } => (StatusCode::FORBIDDEN, "permission_error", None, Some("offline")),
        HubError::Unreachable { .. } | HubError::Http { .. } | HubError::Interrupted { .. } => {
            (StatusCode::BAD_GATEWAY, "server_error", None, Some("upstream"))
        }
        HubError::Io { .. } | HubError::Pip { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "server_error", None, None),
    };
    ApiError { status, message: e.to_string(), kind, param, code, retry_after: None }
}

fn offline(model: &str) -> ApiError {
    ApiError {
        status: StatusCode::FORBIDDEN,
        message: format!(
            "model = {model:?}: this server runs in offline mode (KVAD_OFFLINE/HF_HUB_OFFLINE), which forbids \
             downloading; models already in its cache load without a pull"
        ),
        kind: "permission_error",
        param: Some("model".into()),
        code: Some("offline"),
        retry_after: None,
    }
}

/// The error event for an [`ApiError`].
fn error_event(e: &ApiError) -> PullEvent {
    PullEvent::Error { error: e.body()["error"].clone() }
}

/// The handler: checks the name, claims the repo, starts the download and streams its events.
pub async fn handler(State(state): State<AppState>, _: Admin, body: Bytes) -> Result<Response, ApiError> {
    let obj = parse_body(&body)?;
    let mut f = Fields::new(&obj, "");
    let model = f.string("model")?.trim().to_string();
    f.finish()?;
    if state.draining.load(Ordering::SeqCst) {
        return Err(ApiError::unavailable("the server is shutting down; pull again when it is back", None));
    }
    let source = Source::parse(&model)?;
    if kvad_hub::offline() {
        return Err(offline(&model));
    }
    let claim = state.pulls.claim(&source.key(), &model)?;
    let (tx, rx) = unbounded_channel();
    let queue = state.queue.clone();
    tokio::task::spawn_blocking(move || {
        let last = download(&source, &model, &tx);
        if matches!(last, PullEvent::Done { .. }) {
            // The model is on disk now: offered (in /v1/models) before the client hears the end.
            queue.rescan_and_wait(std::time::Duration::from_secs(10));
        }
        // The claim goes before the last event, so a client that pulls again on hearing it is not refused.
        drop(claim);
        let _ = tx.send(last);
    });
    Ok(sse(rx, state.stopping.clone()).into_response())
}

/// Runs the pull, sending progress on `tx`; returns the last event (`done` or `error`).
fn download(source: &Source, model: &str, tx: &UnboundedSender<PullEvent>) -> PullEvent {
    let mut rec = Recorder::new(|e| {
        let _ = tx.send(e);
    });
    let result = match source {
        Source::Hub(rr) => Hub::from_env().pull(rr, &kvad_engine::checks::checks(), &mut rec).map(|p| {
            for n in &p.notes {
                rec.note(n);
            }
            PullEvent::Done {
                model: model.into(),
                path: p.dir.display().to_string(),
                commit: Some(p.commit),
                transferred: p.transferred,
            }
        }),
        Source::Ollama(t) => kvad_hub::ollama::resolve(t, &mut rec).map(|r| {
            for n in r.source_note.iter().chain(&r.notes) {
                rec.note(n);
            }
            PullEvent::Done {
                model: model.into(),
                path: r.path.display().to_string(),
                commit: None,
                transferred: rec.transferred(),
            }
        }),
    };
    result.unwrap_or_else(|e| error_event(&hub_error(e)))
}

/// Resolves when `stopping` turns true (never, if its sender is gone).
async fn stopped(stopping: &mut watch::Receiver<bool>) {
    if stopping.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// The events as SSE, each with its kind as the SSE event name; ends after `done` or `error`. On shutdown the
/// stream ends with an error event (the download's partial file is kept, and the next pull resumes it).
fn sse(
    rx: UnboundedReceiver<PullEvent>,
    stopping: watch::Receiver<bool>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let events = stream::unfold((rx, stopping, false), |(mut rx, mut stopping, ended)| async move {
        if ended {
            return None;
        }
        let ev = tokio::select! {
            ev = rx.recv() => ev.unwrap_or_else(|| error_event(&ApiError::internal("the pull stopped without a result"))),
            () = stopped(&mut stopping) => error_event(&ApiError::unavailable(
                "the server is shutting down: this pull stops here; what it fetched stays in the cache and a partial \
                 file is kept for the next pull to resume",
                None,
            )),
        };
        let last = matches!(ev, PullEvent::Done { .. } | PullEvent::Error { .. });
        let v = serde_json::to_value(&ev).unwrap_or_default();
        let name = v["event"].as_str().unwrap_or("event").to_string();
        Some((Ok(SseEvent::default().event(name).data(v.to_string())), (rx, stopping, last)))
    });
    Sse::new(events)
}
