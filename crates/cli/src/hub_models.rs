//! `kvad models`: the model index (built in, or the copy `models update` fetched), and the Hugging Face Hub for a
//! repo the index lacks, as caldrix's `models` verbs do: `search`, `info`, `drafts`, `related`, `supported`,
//! `update`.

use crate::hub_cmds::{arch_supported, info, InfoArgs};
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use kvad_hub::api::{self, SearchHit};
use kvad_hub::http::Client;
use kvad_hub::{config, index, RepoId};
use serde_json::{json, Map, Value};

/// `kvad models`.
#[derive(Args, Debug, Clone)]
pub struct ModelsArgs {
    #[command(subcommand)]
    pub command: ModelsCommand,
}

/// What `kvad models` does.
#[derive(Subcommand, Debug, Clone)]
pub enum ModelsCommand {
    /// The index's models whose repo or architecture holds these words.
    Search {
        #[arg(required = true)]
        text: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// A repo's index entry; the Hub's config for a repo the index lacks.
    Info {
        repo: String,
        #[arg(long)]
        json: bool,
    },
    /// The index's models this build runs (`--all`: every model, with why not).
    Supported {
        #[arg(long)]
        all: bool,
        #[arg(long)]
        json: bool,
    },
    /// Draft-model candidates for a repo: the index's, else the Hub's (smaller models of its family).
    Drafts {
        repo: String,
        #[arg(long)]
        json: bool,
    },
    /// Repos related to one: fine-tunes, quantisations, base/instruct twins (the Hub's, for a repo the index
    /// lacks).
    Related {
        repo: String,
        #[arg(long)]
        finetunes: bool,
        #[arg(long)]
        quantizations: bool,
        #[arg(long)]
        twins: bool,
        #[arg(long)]
        json: bool,
    },
    /// Fetch the index again (its latest release, the PyPI package kvad-index, or KVAD_INDEX_URL); a failed update
    /// keeps the copy there was.
    Update,
}

/// How many Hub answers a question reads.
const HUB_LIMIT: usize = 50;

fn entry_json(m: &index::Entry) -> Value {
    json!({"repo": m.repo, "architecture": m.architecture, "kind": m.kind, "params": m.params,
           "runs": arch_supported(&m.architecture), "drafts": m.drafts, "related": m.related})
}

fn row(m: &index::Entry) -> String {
    let params = m.params.map(|p| format!("{:.2} B params", p as f64 / 1e9)).unwrap_or_default();
    let why = if arch_supported(&m.architecture) {
        String::new()
    } else {
        format!("  (not in this build: {})", m.architecture)
    };
    format!("{:<45} {:<11} {:<34} {params}{why}", m.repo, m.kind, m.architecture)
}

/// The Hub, for a repo the index lacks (never in offline mode).
fn hub(repo: &str, idx: &index::Index) -> Result<(Client, String)> {
    RepoId::parse(repo)?;
    if kvad_hub::offline() {
        bail!("repo = {repo:?}: not in the model index ({}), and offline mode forbids asking the Hub", idx.source);
    }
    eprintln!("kvad: {repo} is not in the model index ({}); asking the Hub", idx.source);
    Ok((Client::for_hub(), config::hf_endpoint()))
}

/// A repo's family: its name up to the size (`Qwen2.5-7B-Instruct` → `Qwen2.5`), the name itself when no size.
fn family(name: &str) -> &str {
    let parts: Vec<&str> = name.split('-').collect();
    let sized = |p: &str| {
        let p = p.to_ascii_lowercase();
        let digits = p.trim_end_matches(['b', 'm']);
        digits.len() < p.len() && !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit() || c == '.')
    };
    match parts.iter().position(|p| sized(p)) {
        Some(i) if i > 0 => &name[..parts[..i].iter().map(|p| p.len() + 1).sum::<usize>() - 1],
        _ => name,
    }
}

fn model_type(h: &SearchHit) -> Option<&str> {
    h.config.as_ref()?.get("model_type")?.as_str()
}

fn quantized(h: &SearchHit) -> bool {
    let upper = h.id.to_ascii_uppercase();
    ["GGUF", "AWQ", "GPTQ", "FP8", "INT4", "INT8"].iter().any(|q| upper.contains(q))
        || h.config.as_ref().is_some_and(|c| c.get("quantization_config").is_some())
}

/// The Hub's draft candidates for a repo: the same author's models of its family and `model_type` (so one
/// tokenizer), smaller than it, unquantised, that this build runs; smallest first.
fn hub_drafts(repo: &str, idx: &index::Index) -> Result<Vec<String>> {
    let (client, endpoint) = hub(repo, idx)?;
    let (owner, name) = repo.split_once('/').context("owner/name")?;
    let hits = api::by_author(&client, &endpoint, owner, family(name), HUB_LIMIT)?;
    let me = hits.iter().find(|h| h.id.eq_ignore_ascii_case(repo));
    let (kind, size) = (me.and_then(model_type), me.and_then(api::params));
    let mut out: Vec<(u64, String)> = hits
        .iter()
        .filter(|h| !h.id.eq_ignore_ascii_case(repo) && !quantized(h))
        .filter(|h| kind.is_none() || model_type(h) == kind)
        .filter(|h| {
            let arch = h.config.as_ref().and_then(|c| c["architectures"][0].as_str()).unwrap_or("");
            arch_supported(arch)
        })
        .filter_map(|h| {
            let p = api::params(h)?;
            size.is_none_or(|s| p < s).then(|| (p, h.id.clone()))
        })
        .collect();
    out.sort();
    Ok(out.into_iter().map(|(_, id)| id).collect())
}

/// The Hub's relatives of a repo: cards naming it as their base (fine-tunes, quantisations) and the base/instruct
/// twin that exists.
fn hub_related(repo: &str, idx: &index::Index) -> Result<index::Related> {
    let (client, endpoint) = hub(repo, idx)?;
    let ids = |hits: Vec<SearchHit>| hits.into_iter().map(|h| h.id).collect::<Vec<_>>();
    let finetunes = ids(api::derived(&client, &endpoint, repo, "finetune", HUB_LIMIT)?);
    let quantizations = ids(api::derived(&client, &endpoint, repo, "quantized", HUB_LIMIT)?);
    let twin = ["-Instruct", "-instruct", "-Chat", "-chat", "-it"]
        .iter()
        .find_map(|s| repo.strip_suffix(s).map(str::to_string))
        .map_or_else(|| vec![format!("{repo}-Instruct")], |base| vec![base]);
    let mut twins = Vec::new();
    for t in twin {
        match api::repo_info(&client, &endpoint, &RepoId::parse(&t)?, "main") {
            Ok(_) => twins.push(t),
            Err(kvad_hub::HubError::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(index::Related { finetunes, quantizations, twins })
}

/// `kvad models …`.
pub fn models(a: ModelsArgs) -> Result<()> {
    let idx = index::load();
    match a.command {
        ModelsCommand::Update => {
            let idx = index::update()?;
            eprintln!(
                "kvad: the model index ({} models, from {}) is now {}",
                idx.models.len(),
                idx.source,
                index::downloaded_path().display()
            );
        }
        ModelsCommand::Search { text, json } => {
            let words: Vec<String> = text.iter().map(|w| w.to_lowercase()).collect();
            let hits: Vec<&index::Entry> = idx
                .models
                .iter()
                .filter(|m| {
                    let hay = format!("{} {}", m.repo, m.architecture).to_lowercase();
                    words.iter().all(|w| hay.contains(w.as_str()))
                })
                .collect();
            if json {
                println!("{}", serde_json::to_string_pretty(&hits.iter().map(|m| entry_json(m)).collect::<Vec<_>>())?);
            } else {
                if hits.is_empty() {
                    eprintln!("kvad: no model of the index matches {:?}; `kvad search` asks the Hub", text.join(" "));
                }
                for m in hits {
                    println!("{}", row(m));
                }
                eprintln!("kvad: index: {}", idx.source);
            }
        }
        ModelsCommand::Info { repo, json } => match idx.get(&repo) {
            Some(m) if json => println!("{}", serde_json::to_string_pretty(&entry_json(m))?),
            Some(m) => {
                println!("{}", row(m));
                println!("drafts:        {}", if m.drafts.is_empty() { "-".into() } else { m.drafts.join(", ") });
                for (k, list) in [
                    ("finetunes", &m.related.finetunes),
                    ("quantizations", &m.related.quantizations),
                    ("twins", &m.related.twins),
                ] {
                    println!("{:<14} {}", format!("{k}:"), if list.is_empty() { "-".into() } else { list.join(", ") });
                }
                eprintln!("kvad: index: {}", idx.source);
            }
            None => {
                hub(&repo, &idx)?;
                info(InfoArgs { model: repo, json })?;
            }
        },
        ModelsCommand::Supported { all, json } => {
            let rows: Vec<&index::Entry> =
                idx.models.iter().filter(|m| all || arch_supported(&m.architecture)).collect();
            if json {
                let v: Vec<Value> = rows.iter().map(|m| json!({"repo": m.repo, "architecture": m.architecture, "kind": m.kind, "params": m.params, "runs": arch_supported(&m.architecture)})).collect();
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                for m in rows {
                    println!("{}", row(m));
                }
                eprintln!("kvad: index: {}", idx.source);
            }
        }
        ModelsCommand::Drafts { repo, json } => {
            let drafts = match idx.get(&repo) {
                Some(e) => e.drafts.clone(),
                None => hub_drafts(&repo, &idx)?,
            };
            if json {
                println!("{}", serde_json::to_string_pretty(&drafts)?);
            } else if drafts.is_empty() {
                println!("{repo}: no draft candidate");
            } else {
                for d in &drafts {
                    println!("{d}");
                }
            }
        }
        ModelsCommand::Related { repo, finetunes, quantizations, twins, json } => {
            let related = match idx.get(&repo) {
                Some(e) => e.related.clone(),
                None => hub_related(&repo, &idx)?,
            };
            let every = !(finetunes || quantizations || twins);
            let mut v = Map::new();
            for (k, on, list) in [
                ("finetunes", finetunes, related.finetunes),
                ("quantizations", quantizations, related.quantizations),
                ("twins", twins, related.twins),
            ] {
                if every || on {
                    v.insert(k.into(), json!(list));
                }
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                for (k, list) in v {
                    for r in list.as_array().into_iter().flatten() {
                        println!("{k:<14} {}", r.as_str().unwrap_or_default());
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::family;

    #[test]
    fn a_family_is_the_name_up_to_its_size() {
        assert_eq!(family("Qwen2.5-7B-Instruct"), "Qwen2.5");
        assert_eq!(family("SmolLM2-135M-Instruct"), "SmolLM2");
        assert_eq!(family("Llama-3.2-1B"), "Llama-3.2");
        assert_eq!(family("gpt2"), "gpt2");
        assert_eq!(family("7B-model"), "7B-model", "a size first names no family");
    }
}
