//! Which files to download, from the repo's file list alone (caldrix-models.md, "What is downloaded"). Pure
//! functions over names, so the rules are tested without a network.

use crate::HubError;

/// Files that configure the tokenizer and generation, fetched when the repo has them.
pub const TOKENIZER_EXTRAS: &[&str] = &[
    "tokenizer_config.json",
    "generation_config.json",
    "chat_template.jinja",
    "chat_template.json",
    "special_tokens_map.json",
];
/// A vision model's image processing configuration.
pub const PROCESSOR_FILES: &[&str] = &["preprocessor_config.json", "processor_config.json"];
/// An embedding model's sentence-transformers layout: which modules run, and how they pool (the pooling module's
/// `N_Pooling/config.json` comes too, when `modules.json` does).
pub const SENTENCE_TRANSFORMERS_FILES: &[&str] =
    &["modules.json", "config_sentence_transformers.json", "sentence_bert_config.json"];

/// A sentence-transformers module's config, `<n>_<Name>/config.json` (`1_Pooling/config.json`).
fn is_module_config(f: &str) -> bool {
    f.split_once('/').is_some_and(|(dir, rest)| {
        rest == "config.json"
            && dir.split_once('_').is_some_and(|(n, name)| {
                !n.is_empty()
                    && n.bytes().all(|b| b.is_ascii_digit())
                    && name.bytes().all(|b| b.is_ascii_alphanumeric())
            })
    })
}

/// Adapter files (PEFT).
pub const ADAPTER_FILES: &[&str] = &["adapter_config.json", "adapter_model.safetensors", "adapter_model.bin"];

/// The kind of tokenizer a repo ships, by precedence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenizerSource {
    /// `tokenizer.json` (the other two are then never downloaded).
    Json,
    /// A SentencePiece `tokenizer.model`.
    SentencePiece,
    /// `vocab.json` and `merges.txt`.
    VocabMerges,
}

/// How the weight files were chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WeightRule {
    /// `model.safetensors` alone.
    Single,
    /// The shards `model.safetensors.index.json` names (read after the index is fetched).
    Index,
    /// Every top-level `*.safetensors`.
    All(Vec<String>),
}

/// The download plan before any byte is fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The tokenizer kind.
    pub tokenizer: TokenizerSource,
    /// Tokenizer files to fetch right after config.json (present in the repo).
    pub tokenizer_files: Vec<String>,
    /// Other small files (generation config, chat template, processor configs).
    pub extras: Vec<String>,
    /// The weight rule.
    pub weights: WeightRule,
    /// Whether the repo ships an adapter (adapter_config.json) beside its weights.
    pub adapter: bool,
}

fn refused(repo: &str, why: String) -> HubError {
    HubError::Refused { repo: repo.into(), reason: why, after: "before anything was downloaded".into() }
}

/// Applies the rules to a repo's file list.
pub fn plan(repo: &str, files: &[String]) -> Result<Plan, HubError> {
    let has = |f: &str| files.iter().any(|x| x == f);
    let top_safetensors: Vec<String> = files
        .iter()
        .filter(|f| !f.contains('/') && f.ends_with(".safetensors") && !f.starts_with("adapter_model"))
        .cloned()
        .collect();
    let adapter = has("adapter_config.json");
    if !has("config.json") {
        let why = if adapter {
            "it is an adapter (adapter_config.json, no config.json); kvad does not apply adapters: run its base model"
                .into()
        } else {
            "the repo has no config.json".into()
        };
        return Err(refused(repo, why));
    }
    let (tokenizer, mut tokenizer_files) = if has("tokenizer.json") {
        (TokenizerSource::Json, vec!["tokenizer.json".to_string()])
    } else if has("tokenizer.model") {
        (TokenizerSource::SentencePiece, vec!["tokenizer.model".to_string()])
    } else if has("vocab.json") && has("merges.txt") {
        (TokenizerSource::VocabMerges, vec!["vocab.json".to_string(), "merges.txt".to_string()])
    } else {
        return Err(refused(
            repo,
            "the repo has no supported tokenizer (tokenizer.json, a SentencePiece tokenizer.model, or both vocab.json and merges.txt)".into(),
        ));
    };
    if tokenizer != TokenizerSource::Json && has("added_tokens.json") {
        tokenizer_files.push("added_tokens.json".into());
    }
    let weights = if has("model.safetensors") {
        WeightRule::Single
    } else if has("model.safetensors.index.json") {
        WeightRule::Index
    } else if !top_safetensors.is_empty() {
        WeightRule::All(top_safetensors)
    } else {
        let others: Vec<&String> = files
            .iter()
            .filter(|f| {
                [".bin", ".gguf", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx"].iter().any(|e| f.ends_with(e))
            })
            .take(4)
            .collect();
        let why = if others.is_empty() {
            "the repo has no *.safetensors weights".to_string()
        } else {
            format!(
                "the repo has no *.safetensors weights, only {} (GGUF, .bin and other weight formats are not supported; an Ollama tag, ollama:<name>:<tag>, serves GGUF)",
                others.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
            )
        };
        return Err(refused(repo, why));
    };
    let named = TOKENIZER_EXTRAS.iter().chain(PROCESSOR_FILES).chain(SENTENCE_TRANSFORMERS_FILES);
    let mut extras: Vec<String> = named.filter(|f| has(f)).map(|f| f.to_string()).collect();
    if has("modules.json") {
        extras.extend(files.iter().filter(|f| is_module_config(f)).cloned());
    }
    let extras = extras.into_iter().filter(|f| !tokenizer_files.contains(f)).collect();
    Ok(Plan { tokenizer, tokenizer_files, extras, weights, adapter })
}

/// The shards an index names: unique, sorted, each a top-level `.safetensors` the repo has. A name that could
/// escape the snapshot is refused by name.
pub fn shards_from_index(index: &serde_json::Value, files: &[String]) -> Result<Vec<String>, HubError> {
    let Some(map) = index.get("weight_map").and_then(|m| m.as_object()) else {
        return Err(HubError::Invalid {
            field: "model.safetensors.index.json weight_map".into(),
            value: index.get("weight_map").map(|v| v.to_string()).unwrap_or_else(|| "absent".into()),
            why: "expected an object of tensor name → shard file".into(),
        });
    };
    let mut shards: Vec<String> = Vec::new();
    for v in map.values() {
        let name = v.as_str().unwrap_or_default();
        let bad = |why: &str| HubError::Invalid {
            field: "model.safetensors.index.json weight_map".into(),
            value: v.to_string(),
            why: why.into(),
        };
        if name.contains('/') || name.contains('\\') || name.starts_with('.') || !name.ends_with(".safetensors") {
            return Err(bad("a shard must be a top-level *.safetensors file of the repo"));
        }
        if !files.iter().any(|f| f == name) {
            return Err(bad("the index names a shard the repo does not have"));
        }
        if !shards.iter().any(|s| s == name) {
            shards.push(name.to_string());
        }
    }
    if shards.is_empty() {
        return Err(HubError::Invalid {
            field: "model.safetensors.index.json weight_map".into(),
            value: "{}".into(),
            why: "names no shard".into(),
        });
    }
    shards.sort();
    Ok(shards)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn weights_are_chosen_as_transformers_chooses_them() {
        let single = plan(
            "r",
            &names(&["config.json", "tokenizer.json", "model.safetensors", "model-00001-of-00002.safetensors"]),
        )
        .unwrap();
        assert_eq!(single.weights, WeightRule::Single);
        let idx =
            plan("r", &names(&["config.json", "tokenizer.json", "model.safetensors.index.json", "a.safetensors"]))
                .unwrap();
        assert_eq!(idx.weights, WeightRule::Index);
        let all = plan(
            "r",
            &names(&["config.json", "tokenizer.json", "b.safetensors", "a.safetensors", "sub/c.safetensors"]),
        )
        .unwrap();
        assert_eq!(all.weights, WeightRule::All(names(&["b.safetensors", "a.safetensors"])));
    }

    #[test]
    fn an_embedding_models_sentence_transformers_files_come_with_it() {
        let p = plan(
            "r",
            &names(&[
                "config.json",
                "tokenizer.json",
                "model.safetensors",
                "modules.json",
                "config_sentence_transformers.json",
                "1_Pooling/config.json",
                "1_Pooling/README.md",
                "x/config.json",
            ]),
        )
        .unwrap();
        assert_eq!(p.extras, names(&["modules.json", "config_sentence_transformers.json", "1_Pooling/config.json"]));
        let p = plan("r", &names(&["config.json", "tokenizer.json", "model.safetensors", "1_Pooling/config.json"]));
        assert!(p.unwrap().extras.is_empty(), "no modules.json: not an embedding model's layout");
    }

    #[test]
    fn tokenizer_precedence() {
        let p = plan(
            "r",
            &names(&[
                "config.json",
                "tokenizer.json",
                "tokenizer.model",
                "vocab.json",
                "merges.txt",
                "model.safetensors",
                "tokenizer_config.json",
            ]),
        )
        .unwrap();
        assert_eq!((p.tokenizer, p.tokenizer_files), (TokenizerSource::Json, names(&["tokenizer.json"])));
        assert_eq!(p.extras, names(&["tokenizer_config.json"]));
        let p = plan("r", &names(&["config.json", "tokenizer.model", "vocab.json", "merges.txt", "model.safetensors"]))
            .unwrap();
        assert_eq!(p.tokenizer_files, names(&["tokenizer.model"]));
        let p =
            plan("r", &names(&["config.json", "vocab.json", "merges.txt", "added_tokens.json", "model.safetensors"]))
                .unwrap();
        assert_eq!(p.tokenizer_files, names(&["vocab.json", "merges.txt", "added_tokens.json"]));
    }

    #[test]
    fn refusals_name_what_is_missing() {
        let cases: [(&[&str], &str); 4] = [
            (&["tokenizer.json", "model.safetensors"], "no config.json"),
            (&["config.json", "model.safetensors"], "no supported tokenizer"),
            (&["config.json", "tokenizer.json", "pytorch_model.bin"], "pytorch_model.bin"),
            (&["adapter_config.json", "adapter_model.safetensors"], "adapter"),
        ];
        for (files, want) in cases {
            let e = plan("o/r", &names(files)).unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("o/r"), "{files:?}: {e}");
        }
    }

    #[test]
    fn index_shards_cannot_escape() {
        let files = names(&["a.safetensors", "b.safetensors"]);
        let ok = serde_json::json!({"weight_map": {"x": "b.safetensors", "y": "a.safetensors", "z": "a.safetensors"}});
        assert_eq!(shards_from_index(&ok, &files).unwrap(), names(&["a.safetensors", "b.safetensors"]));
        for bad in ["../a.safetensors", "/etc/a.safetensors", "sub/a.safetensors", "c.safetensors", "a.bin"] {
            let e = shards_from_index(&serde_json::json!({"weight_map": {"x": bad}}), &files).unwrap_err().to_string();
            assert!(e.contains("weight_map") && e.contains(bad), "{bad}: {e}");
        }
    }
}
