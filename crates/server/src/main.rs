//! `kvad-serve`: the OpenAI-compatible server. Loopback on 5823 by default, no authentication (`[auth]` mode
//! none); a non-loopback address needs another mode, or --insecure.
//!
//! The doc comments of the clap arguments are the `--help` text, where brackets are literal (`[server]`), not
//! rustdoc links.
#![allow(rustdoc::broken_intra_doc_links)]

use clap::Parser;
use kvad_engine::local::{memory, LocalEngine, LocalSettings};
use kvad_engine::pass::Stepping;
use kvad_server::config::{data_dir, Config};
use kvad_server::sched::{pass_rules, Kind, Limits, Queue};
use kvad_server::scripted::ScriptedEngine;
use kvad_server::store::Store;
use kvad_server::{api, AppState, Engine};
use std::future::IntoFuture;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// kvad-serve: the OpenAI-compatible server. Settings come from kvad.toml in the data directory, then the
/// environment (KVAD_BIND, KVAD_QUEUE, KVAD_MODELS, KVAD_BACKEND, KVAD_SHUTDOWN_TIMEOUT, ...), then these flags.
#[derive(Parser, Debug)]
#[command(name = "kvad-serve", version = kvad_server::VERSION)]
struct Args {
    /// Address to listen on (default 127.0.0.1:5823). A non-loopback address needs [auth] mode local, basic or
    /// oidc (KVAD_AUTH_MODE), or --insecure.
    #[arg(long)]
    bind: Option<String>,
    /// Serve a non-loopback address with [auth] mode none: anyone who reaches it administers this server.
    #[arg(long)]
    insecure: bool,
    /// The data directory (kvad.toml, kvad.db).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// A model to offer (repeatable; replaces [server] models).
    #[arg(long = "model")]
    models: Vec<String>,
    /// Backend models load on.
    #[arg(long)]
    backend: Option<String>,
    /// Generations that may wait; the next gets a 503.
    #[arg(long)]
    queue: Option<usize>,
    /// Generations one account may have waiting; the next gets a 429.
    #[arg(long)]
    queue_per_account: Option<usize>,
    /// Generations one account may start per minute.
    #[arg(long)]
    generations_per_minute: Option<usize>,
    /// Replies on one model written together (`--max-batch`, caldrix's name, is the same flag: every architecture
    /// kvad runs batches, so no model refuses it).
    #[arg(long, visible_alias = "max-batch")]
    batch: Option<usize>,
    /// Tokens of KV cache each model is charged for, and the longest prompt and reply it takes (`--ctx`, caldrix's
    /// name); a model whose own context is narrower (a Qwen model's active sliding window) keeps its own.
    #[arg(long, visible_alias = "ctx")]
    context: Option<usize>,
    /// What loaded models may be charged in all, e.g. "24 GB".
    #[arg(long)]
    memory: Option<String>,
    /// Reload the models that were loaded when the server last ran.
    #[arg(long)]
    autoload: bool,
    /// A Jinja chat template (a file) to render every model's prompts with instead of its own, as llama.cpp's and
    /// vLLM's `--chat-template`: a tool-calling template for a model whose own knows no tools, say.
    #[arg(long, value_name = "FILE")]
    chat_template: Option<std::path::PathBuf>,
    /// Seconds running replies get after SIGINT/SIGTERM before they are ended (default 30).
    #[arg(long, value_name = "SECONDS")]
    shutdown_timeout: Option<u64>,
    /// Serve scripted models from this JSON file instead of real ones (tests; see kvad_server::scripted).
    #[arg(long)]
    scripted: Option<PathBuf>,
}

fn main() -> std::process::ExitCode {
    match run(Args::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kvad-serve: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<(), String> {
    let dir = data_dir(args.data_dir.as_deref());
    std::fs::create_dir_all(&dir).map_err(|e| format!("data directory {}: {e}", dir.display()))?;
    let mut config = Config::load(&dir)?;
    if let Some(b) = args.bind {
        config.server.bind = b;
    }
    if !args.models.is_empty() {
        config.server.models = args.models;
    }
    if let Some(b) = args.backend {
        config.server.backend = Some(b);
    }
    if let Some(q) = args.queue {
        config.server.queue = q;
    }
    let sv = &mut config.server;
    sv.queue_per_account = args.queue_per_account.unwrap_or(sv.queue_per_account);
    sv.generations_per_minute = args.generations_per_minute.or(sv.generations_per_minute);
    sv.batch = args.batch.or(sv.batch);
    sv.context = args.context.or(sv.context);
    sv.memory = args.memory.or(sv.memory.take());
    sv.autoload |= args.autoload;
    sv.shutdown_timeout = args.shutdown_timeout.unwrap_or(sv.shutdown_timeout);
    config.check()?;
    let addr: SocketAddr = config
        .server
        .bind
        .parse()
        .map_err(|_| format!("bind = {:?}: not an address like 127.0.0.1:5823", config.server.bind))?;
    kvad_server::auth::check_bind(config.auth.mode, addr, args.insecure)?;
    let db = dir.join("kvad.db");
    let admin_password = kvad_server::config::admin_password();
    let auth = kvad_server::auth::Auth::start(&config.auth, &db, args.insecure, admin_password.as_deref())?;
    let total = match &config.server.memory {
        Some(m) => memory::parse_bytes(m)?,
        None => memory::available().unwrap_or(u64::MAX),
    };
    let store = Store::open(&db).map_err(|e| format!("{}: {e}", db.display()))?;
    // Requests the last process was running when it died: interrupted, with what they had generated.
    match store.mark_interrupted() {
        Ok(0) => {}
        Ok(n) => eprintln!("kvad-serve: {n} requests were running when the server last stopped: marked interrupted"),
        Err(e) => return Err(format!("{}: {e}", db.display())),
    }
    let engine: Box<dyn Engine> = match &args.scripted {
        Some(path) => Box::new(ScriptedEngine::from_file(path, total)?),
        None => {
            let backend = config.server.backend.as_deref().map(str::parse).transpose();
            let backend = backend.map_err(|e| format!("backend: {e}"))?;
            // Each model's remembered choice (a row naming a backend this build does not know is left out).
            let chosen = store.choices().map_err(|e| e.to_string())?;
            let chosen = chosen.into_iter().filter_map(|(m, b)| Some((m, b.parse().ok()?))).collect();
            let settings = LocalSettings {
                context: config.server.context,
                memory: total,
                stepping: Stepping { greedy_ahead: config.server.greedy_ahead },
                step_trace: config.server.step_trace,
            };
            let engine = LocalEngine::new(&config.server.models, backend, &chosen, settings)?;
            let read = |key: &str, path: &std::path::Path| -> Result<kvad_text::ChatTemplate, String> {
                let source = std::fs::read_to_string(path).map_err(|e| format!("{key} {}: {e}", path.display()))?;
                kvad_text::ChatTemplate::new(&source).map_err(|e| format!("{key} {}: {e}", path.display()))
            };
            let mut templates = kvad_engine::local::tokens::Templates::default();
            if let Some(path) = args.chat_template.as_ref().or(config.server.chat_template.as_ref()) {
                templates.all = Some(read("chat_template", path)?);
            }
            for (model, path) in &config.server.chat_templates {
                templates.per_model.insert(model.clone(), read(&format!("chat_templates.{model}"), path)?);
            }
            Box::new(engine.with_chat_templates(templates))
        }
    };
    // The first model's backend sets the passes' limits until a reply joins on its own model's.
    let first = engine.catalog().first().map(|m| m.default_backend.clone());
    let backend_name = if args.scripted.is_some() { "scripted".to_string() } else { first.unwrap_or_default() };
    let active = if config.server.autoload { store.active_models().map_err(|e| e.to_string())? } else { vec![] };
    let limits = Limits {
        queue: config.server.queue,
        per_account: config.server.queue_per_account,
        per_minute: config.server.generations_per_minute,
        batch: config.server.batch,
        rules: pass_rules(&backend_name),
        trace_steps: config.server.step_trace,
        stall: (config.server.stall_timeout > 0).then(|| std::time::Duration::from_secs(config.server.stall_timeout)),
    };
    let tokenizers = engine.tokenizers();
    // The default model: the one `kvad use` set on this server, else the first it offers ([server] models' first).
    let first_offered = engine.catalog().first().map(|m| m.id.clone());
    let default_model = store.default_model().map_err(|e| e.to_string())?.or(first_offered);
    let (queue, _worker) = Queue::start(engine, store, limits);
    // Autoload: a job on the same queue, so a request that turns up meanwhile waits for it.
    // Each on the backend it was on (a row from before that was recorded: [server] backend).
    for (model, backend) in active {
        let on = backend.as_deref().unwrap_or("[server] backend");
        eprintln!("kvad-serve: autoload: {model} on {on} (it was loaded when the server last ran)");
        queue.admin("system", Kind::Load { model, backend }, false);
    }
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let state = AppState {
        queue,
        draining: Arc::new(AtomicBool::new(false)),
        db,
        pulls: api::pull::Pulls::default(),
        stopping,
        auth,
        tokenizers,
        bench: api::bench::Benches::default(),
        jobs: kvad_server::jobs::Jobs::default(),
        config: Arc::new(config.clone()),
        default_model: Arc::new(std::sync::RwLock::new(default_model)),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("starting the runtime: {e}"))?;
    let timeout = Duration::from_secs(config.server.shutdown_timeout);
    let result = rt.block_on(serve(addr, state, dir, stop, timeout));
    // A pull's download thread may still be writing (its partial file is kept for the next pull): not waited for.
    rt.shutdown_timeout(Duration::from_millis(500));
    result
}

/// How long connections may stay open after the shutdown timeout ended what ran on them, before the process exits
/// without them (a client that stopped reading).
const AFTER_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves until SIGINT/SIGTERM; then takes no new generations, gives running ones `timeout`, ends what still runs
/// (cleanly: a final chunk and `[DONE]`), and returns once the connections close or [`AFTER_TIMEOUT`] passes.
async fn serve(
    addr: SocketAddr,
    state: AppState,
    dir: PathBuf,
    stop: tokio::sync::watch::Sender<bool>,
    timeout: Duration,
) -> Result<(), String> {
    // The handlers are installed before the port opens: axum polls the shutdown future on a task of its own, so a
    // signal sent right after the first answer could otherwise meet the default action and kill the process.
    let signals = Signals::install()?;
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("binding {addr}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    let models: Vec<String> = state.queue.catalog().into_iter().map(|m| m.id).collect();
    eprintln!(
        "kvad-serve: listening on http://{local} (models: {}; data: {}; auth: {})",
        models.join(", "),
        dir.display(),
        state.auth.mode().as_str()
    );
    let draining = state.draining.clone();
    let queue = state.queue.clone();
    let (busy, pulls) = (state.queue.clone(), state.pulls.clone());
    let (signalled, on_signal) = tokio::sync::oneshot::channel::<()>();
    let app = api::router(state);
    // The client address reaches the handlers (failed sign-ins are throttled per address).
    let server = axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
        .with_graceful_shutdown(async move {
            signals.recv().await;
            draining.store(true, Ordering::SeqCst);
            eprintln!(
                "kvad-serve: shutting down; replies in progress get {} s to finish ([server] shutdown_timeout)",
                timeout.as_secs()
            );
            let _ = signalled.send(());
            // The listener stays open while replies and pulls finish (health answers 503, new generations are
            // refused), so a client sees a server shutting down rather than a refused connection; it closes once
            // none runs (at the timeout at the latest, when `bound` ends them).
            while busy.depth() + busy.running() > 0 || !pulls.running().is_empty() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .into_future();
    let bound = async move {
        if on_signal.await.is_err() {
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(timeout).await;
        eprintln!("kvad-serve: the shutdown timeout passed; ending the replies and pulls still running");
        queue.stop_all();
        let _ = stop.send(true);
        tokio::time::sleep(AFTER_TIMEOUT).await;
    };
    tokio::select! {
        served = server => served.map_err(|e| format!("serving: {e}"))?,
        () = bound => eprintln!(
            "kvad-serve: connections still open {} s after the timeout; exiting without them",
            AFTER_TIMEOUT.as_secs()
        ),
    }
    eprintln!("kvad-serve: stopped");
    Ok(())
}

/// SIGINT and SIGTERM, each registered when made (not on first poll).
struct Signals {
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> Result<Self, String> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let err = |e: std::io::Error| format!("installing the signal handlers: {e}");
            Ok(Signals {
                int: signal(SignalKind::interrupt()).map_err(err)?,
                term: signal(SignalKind::terminate()).map_err(err)?,
            })
        }
        #[cfg(not(unix))]
        Ok(Signals {})
    }

    /// Waits for either signal.
    async fn recv(mut self) {
        #[cfg(unix)]
        tokio::select! { _ = self.int.recv() => {}, _ = self.term.recv() => {} }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            let _ = &mut self;
        }
    }
}
