//! A model from scratch: fresh weights drawn as transformers initialises them, and a byte-level tokenizer for when
//! the user brings none.
//!
//! Weights: every matrix and embedding from N(0, initializer_range²), GPT-2's residual projections (`c_proj`) from
//! N(0, initializer_range² / 2·n_layer), biases zero, norm weights one (`GPT2PreTrainedModel._init_weights`,
//! `LlamaPreTrainedModel._init_weights`).

use crate::net::Net;
use crate::params::Source;
use crate::TrainError;
use kvad_models::{ArchKind, ModelConfig};
use serde_json::{json, Value};
use std::cell::RefCell;
use std::path::Path;

/// A seeded normal generator (splitmix64 and Box–Muller): the same seed gives the same model.
pub(crate) struct Normal {
    state: u64,
    spare: Option<f64>,
}

impl Normal {
    pub(crate) fn new(seed: u64) -> Self {
        Normal { state: seed, spare: None }
    }

    /// Uniform in [0, 1).
    pub(crate) fn uniform(&mut self) -> f64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }

    fn sample(&mut self) -> f64 {
        if let Some(s) = self.spare.take() {
            return s;
        }
        let (u1, u2) = (self.uniform().max(f64::MIN_POSITIVE), self.uniform());
        let r = (-2.0 * u1.ln()).sqrt();
        let t = 2.0 * std::f64::consts::PI * u2;
        self.spare = Some(r * t.sin());
        r * t.cos()
    }
}

/// Fresh weights, by name, as transformers draws them.
pub struct Init {
    rng: RefCell<Normal>,
    std: f64,
    proj_std: f64,
}

impl Init {
    /// The initialiser for `cfg` with `initializer_range` (transformers' default is 0.02).
    pub fn new(cfg: &ModelConfig, initializer_range: f64, seed: u64) -> Self {
        let proj_std = match cfg.arch {
            ArchKind::Gpt2 => initializer_range / (2.0 * cfg.n_layers as f64).sqrt(),
            _ => initializer_range,
        };
        Init { rng: RefCell::new(Normal::new(seed)), std: initializer_range, proj_std }
    }
}

impl Source for Init {
    fn tensor(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, TrainError> {
        let n: usize = shape.iter().product();
        if name.ends_with(".bias") {
            return Ok(vec![0.0; n]);
        }
        let leaf = name.rsplit('.').nth(1).unwrap_or("");
        if shape.len() == 1 && (leaf.contains("norm") || leaf.starts_with("ln_")) {
            return Ok(vec![1.0; n]);
        }
        let std = if name.ends_with("c_proj.weight") { self.proj_std } else { self.std };
        let mut rng = self.rng.borrow_mut();
        Ok((0..n).map(|_| (rng.sample() * std) as f32).collect())
    }
}

/// A network from an HF config.json's contents with fresh weights; `initializer_range` comes from the config
/// (default 0.02).
pub fn scratch(config: &Value, seed: u64) -> Result<Net, TrainError> {
    let cfg = kvad_models::config_from_hf(config)?;
    let range = config.get("initializer_range").and_then(Value::as_f64).unwrap_or(0.02);
    if !(range > 0.0 && range.is_finite()) {
        return Err(TrainError::refused("initializer_range", range, "must be a positive number"));
    }
    Net::load(&cfg, &Init::new(&cfg, range, seed))
}

/// GPT-2's map from bytes to printable characters, which byte-level BPE vocabularies are written in.
fn byte_chars() -> Vec<char> {
    let mut out = Vec::with_capacity(256);
    let mut extra = 0u32;
    for b in 0u32..256 {
        let printable = (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        out.push(if printable {
            char::from_u32(b).unwrap_or('?')
        } else {
            extra += 1;
            char::from_u32(255 + extra).unwrap_or('?')
        });
    }
    out
}

/// Writes a byte-level tokenizer (one token per byte, id = the byte's value, then `specials` from 256) into
/// `dir`: tokenizer.json, and tokenizer_config.json naming `eos` (a special, or a single byte such as `|`) and the
/// chat template when given. transformers loads it as a PreTrainedTokenizerFast; kvad as any tokenizer.json.
pub fn write_byte_tokenizer(
    dir: &Path,
    specials: &[&str],
    eos: Option<&str>,
    template: Option<&str>,
) -> Result<(), TrainError> {
    let chars = byte_chars();
    let mut vocab = serde_json::Map::new();
    for (id, c) in chars.iter().enumerate() {
        vocab.insert(c.to_string(), json!(id));
    }
    let added: Vec<Value> = specials
        .iter()
        .enumerate()
        .map(|(i, s)| {
            vocab.insert(s.to_string(), json!(256 + i));
            json!({"id": 256 + i, "content": s, "single_word": false, "lstrip": false, "rstrip": false,
                   "normalized": false, "special": true})
        })
        .collect();
    let tokenizer = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                  "vocab": vocab, "merges": []},
    });
    let mut config = json!({"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1_000_000,
                            "clean_up_tokenization_spaces": false});
    if let Some(e) = eos {
        config["eos_token"] = json!(e);
    }
    if let Some(t) = template {
        config["chat_template"] = json!(t);
    }
    std::fs::create_dir_all(dir).map_err(|e| TrainError::io(dir, e))?;
    for (name, v) in [("tokenizer.json", tokenizer), ("tokenizer_config.json", config)] {
        let path = dir.join(name);
        std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap_or_default() + "\n")
            .map_err(|e| TrainError::io(&path, e))?;
    }
    Ok(())
}

/// The id [`write_byte_tokenizer`] gives a byte.
pub fn byte_id(b: u8) -> u32 {
    b as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_tokenizer_round_trips_text_through_kvads_tokenizer() {
        let dir = tempfile::tempdir().unwrap();
        write_byte_tokenizer(dir.path(), &["<|endoftext|>"], Some("|"), None).unwrap();
        let tok = kvad_text::Tokenizer::from_dir(dir.path()).unwrap();
        let ids = tok.encode("the cat sat|é", false).unwrap();
        let want: Vec<u32> = "the cat sat|é".bytes().map(byte_id).collect();
        assert_eq!(ids, want);
        assert_eq!(tok.decode(&ids, false).unwrap(), "the cat sat|é");
        assert_eq!(tok.token_to_id("<|endoftext|>"), Some(256));
        assert_eq!(tok.eos_ids(), &[b'|' as u32]);
    }

    #[test]
    fn fresh_weights_follow_transformers_init() {
        let cfg = json!({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 64, "n_embd": 32,
                         "n_layer": 2, "n_head": 2, "n_positions": 16, "initializer_range": 0.5});
        let net = scratch(&cfg, 1).unwrap();
        let p = |name: &str| net.params.iter().find(|p| p.name == name).unwrap().data.clone();
        assert!(p("transformer.h.0.ln_1.weight").iter().all(|&v| v == 1.0));
        assert!(p("transformer.h.0.attn.c_attn.bias").iter().all(|&v| v == 0.0));
        let std = |v: &[f32]| (v.iter().map(|x| (x * x) as f64).sum::<f64>() / v.len() as f64).sqrt();
        let (w, proj) = (std(&p("transformer.wte.weight")), std(&p("transformer.h.1.mlp.c_proj.weight")));
        assert!((w - 0.5).abs() < 0.03, "{w}");
        assert!((proj - 0.25).abs() < 0.02, "{proj}");
        assert_eq!(scratch(&cfg, 1).unwrap().params.get(0).data, net.params.get(0).data, "seeded");
    }
}
