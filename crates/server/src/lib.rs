//! kvad-server: the OpenAI-compatible HTTP server (`kvad-serve`).
//!
//! Requests become [`sched::Job`]s in the scheduler's line (bounded, fair per account); one engine thread owns the
//! [`Engine`] and writes up to `[server] batch` replies together, a forward pass a step, sending classified deltas
//! (content, reasoning, tool calls) back over each job's channel; every completion's row lands in SQLite
//! ([`store`]). The routes are listed in [`api::table::ROUTES`], from which the OpenAPI document
//! and the `/api` page are made.

pub mod api;
pub mod auth;
pub mod config;
pub mod error;
pub mod fields;
pub mod jobs;
pub mod metrics;
pub mod sched;
pub mod scripted;
pub mod store;
pub mod ui;

pub use kvad_engine::Engine;

/// The commit this build is from (`build.rs`: `git rev-parse`, `-dirty` for uncommitted changes, "unknown"
/// outside git): `/api/health` and `--version` report it.
pub const COMMIT: &str = env!("KVAD_COMMIT");

/// The version and commit, as `kvad-serve --version` prints them.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("KVAD_COMMIT"), ")");

use error::ApiError;
use kvad_engine::seam::ModelInfo;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    /// The scheduler.
    pub queue: sched::Queue,
    /// Set on shutdown: new generations are refused while the running ones finish.
    pub draining: Arc<AtomicBool>,
    /// The SQLite file (usage reads open their own connection).
    pub db: std::path::PathBuf,
    /// The downloads `POST /api/pull` runs now, so a second pull of one repo is refused rather than racing.
    pub pulls: api::pull::Pulls,
    /// Turns true when the shutdown timeout has passed: what still streams (pulls) ends now.
    pub stopping: tokio::sync::watch::Receiver<bool>,
    /// Accounts, sessions and API keys, and the mode requests are authenticated in.
    pub auth: auth::Auth,
    /// The models' tokenizers (`POST /api/tokenize`), outside the engine thread so tokenizing never queues.
    pub tokenizers: Arc<dyn kvad_engine::seam::Tokenize>,
    /// The benchmark running now or the last one (`/api/bench`), so a second is refused naming the first.
    pub bench: api::bench::Benches,
    /// The jobs running now (training runs): their cancel flags and live events.
    pub jobs: jobs::Jobs,
    /// The configuration the server started with (`GET /api/settings`; live limits are the queue's).
    pub config: Arc<config::Config>,
    /// The model offered first (`kvad use` against the server; kept in kvad.db), else the engine's first.
    pub default_model: Arc<std::sync::RwLock<Option<String>>>,
}

impl AppState {
    /// The model's entry, or a 404 naming the models there are. A model on this machine that the catalog does not
    /// list yet (pulled since, by this server or `kvad pull`) is taken too: a request naming a model on disk loads
    /// it (the seed's third memory rule). A path is taken only from an administrator ([`Self::model_info_as`]).
    pub fn model_info(&self, id: &str) -> Result<ModelInfo, ApiError> {
        self.model_info_as(id, false)
    }

    /// [`Self::model_info`], with `admin`: whether the caller may name a path on the server's disk.
    pub fn model_info_as(&self, id: &str, admin: bool) -> Result<ModelInfo, ApiError> {
        let all = self.queue.catalog();
        if let Some(m) = all.iter().find(|m| m.id == id) {
            return Ok(m.clone());
        }
        let ids: Vec<String> = all.iter().map(|m| m.id.clone()).collect();
        // Paths are the administrator's to name; anyone else learns nothing of the disk (the same 404).
        let path = id.starts_with(['/', '.', '~']) || id.ends_with(".gguf");
        if path && !admin {
            return Err(ApiError::model_not_found(id, &ids));
        }
        match kvad_engine::local::on_disk_info(id) {
            Ok(info) => {
                self.queue.rescan();
                Ok(info)
            }
            Err(kvad_engine::EngineError::ModelNotFound { .. }) => Err(ApiError::model_not_found(id, &ids)),
            Err(e) => Err(e.into()),
        }
    }

    /// A model named as `kvad ps` names it, `NAME@backend` (the seed's form), or by its id alone: the model, and
    /// the backend when one was named. An id that itself holds an `@` is taken whole first. For the administrator's
    /// routes (load, unload): a path on the server's disk may be named.
    pub fn model_at(&self, name: &str) -> Result<(ModelInfo, Option<String>), ApiError> {
        let whole = self.model_info_as(name, true);
        if whole.is_ok() {
            return whole.map(|m| (m, None));
        }
        match name.rsplit_once('@') {
            Some((id, b)) if b.parse::<kvad_engine::BackendKind>().is_ok() => {
                self.model_info_as(id, true).map(|m| (m, Some(b.to_string())))
            }
            _ => whole.map(|m| (m, None)),
        }
    }
}
