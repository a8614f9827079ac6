//! LoRA: low-rank adapters on the blocks' linear layers, in PEFT's format so an adapter trained here loads in peft
//! (and one trained with peft resumes here).
//!
//! An adapter on module `m` is `m.lora_A.weight` `[rank][in]` and `m.lora_B.weight` `[out][rank]`, stored as
//! `base_model.model.{m}.lora_{A,B}.weight` in `adapter_model.safetensors` beside `adapter_config.json`. New
//! adapters start as PEFT's do: A uniform in ±1/√in (kaiming-uniform with a = √5), B zero, so step 0 is the base
//! model.

pub use crate::layer::LoraSpec;
use crate::net::Net;
use crate::TrainError;
use kvad_models::weights::{SafetensorsSource, WeightSource};
use serde_json::{json, Value};
use std::path::Path;

fn tensor_name(module: &str, which: char) -> String {
    format!("base_model.model.{module}.lora_{which}.weight")
}

/// A small deterministic generator (splitmix64) for adapter initialisation: the same seed gives the same adapter.
struct SplitMix(u64);

impl SplitMix {
    fn next_f32(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 40) as f32 / (1u64 << 24) as f32
    }
}

impl Net {
    /// Freezes the model and puts a fresh adapter on every module `spec` targets; returns how many. A spec that
    /// matches nothing is refused, naming its targets.
    pub fn add_lora(&mut self, spec: &LoraSpec, seed: u64) -> Result<usize, TrainError> {
        check_spec(spec)?;
        let mut rng = SplitMix(seed);
        let scale = spec.scale();
        let (params, lins) = self.parts_mut();
        params.freeze_all();
        let mut n = 0;
        for lin in lins.into_iter().filter(|l| spec.matches(&l.name)) {
            let (n_in, n_out) = (lin.s.n_in, lin.s.n_out);
            let bound = 1.0 / (n_in as f32).sqrt();
            let a: Vec<f32> = (0..spec.rank * n_in).map(|_| (2.0 * rng.next_f32() - 1.0) * bound).collect();
            let ai = params.push(&tensor_name(&lin.name, 'A'), vec![spec.rank, n_in], a);
            let bi = params.push(&tensor_name(&lin.name, 'B'), vec![n_out, spec.rank], vec![0.0; n_out * spec.rank]);
            lin.lora = Some(crate::layer::Lora { a: ai, b: bi, rank: spec.rank, scale });
            n += 1;
        }
        if n == 0 {
            return Err(TrainError::refused("target_modules", spec.targets.join(","), "match no linear layer"));
        }
        self.lora = Some(spec.clone());
        Ok(n)
    }

    /// Freezes the model and puts on the PEFT adapter in `dir` (adapter_config.json, adapter_model.safetensors),
    /// trainable (resuming a LoRA run). Settings kvad does not compute are refused by name.
    pub fn load_adapter(&mut self, dir: &Path) -> Result<LoraSpec, TrainError> {
        let spec = read_adapter_config(dir)?;
        let file = SafetensorsSource::open_files(&[dir.join("adapter_model.safetensors")])?;
        let src = crate::params::Stored(&file);
        let mut unused: std::collections::BTreeSet<String> = file.tensor_names().into_iter().collect();
        let scale = spec.scale();
        let (params, lins) = self.parts_mut();
        params.freeze_all();
        for lin in lins.into_iter().filter(|l| spec.matches(&l.name)) {
            let (an, bn) = (tensor_name(&lin.name, 'A'), tensor_name(&lin.name, 'B'));
            let a = params.take(&src, &an, &[spec.rank, lin.s.n_in])?;
            let b = params.take(&src, &bn, &[lin.s.n_out, spec.rank])?;
            params.get_mut(a).trainable = true;
            params.get_mut(b).trainable = true;
            unused.remove(&an);
            unused.remove(&bn);
            lin.lora = Some(crate::layer::Lora { a, b, rank: spec.rank, scale });
        }
        if let Some(name) = unused.into_iter().next() {
            return Err(TrainError::refused(name, "present", "no adapted module of this model has that name"));
        }
        self.lora = Some(spec.clone());
        Ok(spec)
    }

    /// Folds every adapter into its weight and drops the adapters' tensors: a plain model again, every tensor
    /// trainable (what a merged checkpoint needs no peft for).
    pub fn merge_lora(&mut self) {
        let (params, lins) = self.parts_mut();
        let mut first = params.len();
        for lin in lins {
            if let Some(l) = lin.lora {
                first = first.min(l.a).min(l.b);
            }
            lin.merge(params);
        }
        // Adapters are added after the model's own tensors, so they are the tail.
        params.truncate(first);
        params.iter_mut().for_each(|p| p.trainable = true);
        self.lora = None;
    }

    /// The adapter on this network, if any.
    pub fn lora(&self) -> Option<&LoraSpec> {
        self.lora.as_ref()
    }
}

fn check_spec(spec: &LoraSpec) -> Result<(), TrainError> {
    if spec.rank == 0 {
        return Err(TrainError::refused("r", 0, "the rank must be positive"));
    }
    if spec.targets.is_empty() {
        return Err(TrainError::refused("target_modules", "[]", "name at least one module"));
    }
    Ok(())
}

/// Reads a PEFT adapter_config.json into a spec, refusing what changes the computation and is not done here.
pub fn read_adapter_config(dir: &Path) -> Result<LoraSpec, TrainError> {
    let path = dir.join("adapter_config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| TrainError::io(&path, e))?;
    let cfg: Value = serde_json::from_str(&text)
        .map_err(|e| TrainError::Format { path: path.display().to_string(), msg: e.to_string() })?;
    let peft_type = cfg["peft_type"].as_str().unwrap_or("");
    if peft_type != "LORA" {
        return Err(TrainError::refused("peft_type", peft_type, "only LORA adapters"));
    }
    for key in ["use_dora", "use_qalora", "lora_bias"] {
        if cfg[key].as_bool() == Some(true) {
            return Err(TrainError::refused(key, true, "not supported"));
        }
    }
    if let Some(b) = cfg["bias"].as_str().filter(|&b| b != "none") {
        return Err(TrainError::refused("bias", b, "only \"none\""));
    }
    for key in ["rank_pattern", "alpha_pattern"] {
        if cfg[key].as_object().is_some_and(|o| !o.is_empty()) {
            return Err(TrainError::refused(key, &cfg[key], "per-module ranks are not supported"));
        }
    }
    for key in ["layers_to_transform", "modules_to_save", "target_parameters", "trainable_token_indices"] {
        if !cfg[key].is_null() {
            return Err(TrainError::refused(key, &cfg[key], "not supported"));
        }
    }
    let targets = match &cfg["target_modules"] {
        Value::Array(a) => a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect(),
        other => return Err(TrainError::refused("target_modules", other, "a list of module names is supported")),
    };
    let rank = cfg["r"].as_u64().unwrap_or(8) as usize;
    let alpha = cfg["lora_alpha"].as_f64().unwrap_or(8.0) as f32;
    let spec = LoraSpec { rank, alpha, targets, rslora: cfg["use_rslora"].as_bool() == Some(true) };
    check_spec(&spec)?;
    Ok(spec)
}

/// Writes `net`'s adapter in PEFT's format into `out` (created if missing): `adapter_model.safetensors` and `adapter_config.json`
/// naming `base` (as given: a path or a repository id) as its base model.
pub fn save_adapter(net: &Net, base: &str, out: &Path) -> Result<(), TrainError> {
    let spec = net.lora().ok_or_else(|| TrainError::refused("adapter", "none", "this network has no LoRA adapter"))?;
    std::fs::create_dir_all(out).map_err(|e| TrainError::io(out, e))?;
    let mut adapter = crate::params::Params::default();
    for p in net.params.iter().filter(|p| p.trainable && p.name.contains(".lora_")) {
        adapter.push(&p.name, p.shape.clone(), p.data.clone());
    }
    crate::checkpoint::write_safetensors(&adapter, &out.join("adapter_model.safetensors"))?;
    let cfg = json!({
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base,
        "r": spec.rank,
        "lora_alpha": spec.alpha,
        "target_modules": spec.targets,
        "lora_dropout": 0.0,
        "bias": "none",
        "fan_in_fan_out": net.config().arch == kvad_models::ArchKind::Gpt2,
        "use_rslora": spec.rslora,
        "use_dora": false,
        "init_lora_weights": true,
        "inference_mode": true,
        "modules_to_save": null,
        "layers_to_transform": null,
        "rank_pattern": {},
        "alpha_pattern": {},
    });
    let path = out.join("adapter_config.json");
    std::fs::write(&path, serde_json::to_string_pretty(&cfg).unwrap_or_default() + "\n")
        .map_err(|e| TrainError::io(&path, e))
}
