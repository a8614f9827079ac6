//! Embeddings: one vector per input from a decoder's final-normed hidden states, pooled as the model's own files
//! say. sentence-transformers' `modules.json` (a Transformer, a Pooling module and its `config.json`, optionally
//! Normalize) is what Qwen3-Embedding and the e5/gte decoder models ship; a GGUF says it with llama.cpp's
//! `<arch>.pooling_type`, and llama.cpp's server normalises those. `dimensions` truncates and normalises again, where
//! the config declares the model was trained for it (vLLM's `is_matryoshka` / `matryoshka_dimensions`).

pub use crate::passes::Room;
use crate::passes::{check_inputs, read_in_passes, Rows};
use crate::EngineError;
use kvad_models::{CausalLm, LogitsMode};
use serde_json::Value;
use std::path::Path;

/// How a sequence's rows become one vector (sentence-transformers' `pooling_mode_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// The first token's row (`cls_token`).
    Cls,
    /// The rows' mean (`mean_tokens`).
    Mean,
    /// Each dimension's largest value (`max_tokens`).
    Max,
    /// The rows' sum over the square root of their count (`mean_sqrt_len_tokens`).
    MeanSqrtLen,
    /// Rows weighted by their position, 1 to n (`weightedmean_tokens`).
    WeightedMean,
    /// The last token's row (`lasttoken`): Qwen3-Embedding, whose tokenizer appends `<|endoftext|>`.
    Last,
}

/// What the model's files say about its embeddings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbedConfig {
    /// How rows are pooled.
    pub pooling: Pooling,
    /// Whether vectors are scaled to unit length (a Normalize module; always for a GGUF, as llama.cpp's server).
    pub normalize: bool,
    /// Dimensions a request may truncate to: None where the model declares no Matryoshka training (a `dimensions`
    /// is then refused), an empty list for any up to the hidden size, else exactly those listed.
    pub matryoshka: Option<Vec<usize>>,
    /// The vector's full length: the model's hidden size.
    pub hidden: usize,
}

/// The module types of `modules.json` kvad runs, by their class name (the package path changed across
/// sentence-transformers versions, the class names did not).
fn module_class(ty: &str) -> &str {
    ty.rsplit('.').next().unwrap_or(ty)
}

fn read_json(path: &Path) -> Result<Value, EngineError> {
    let name = path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let text = std::fs::read_to_string(path)
        .map_err(|e| EngineError::bad_field("model", format!("{}: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| EngineError::bad_field("model", format!("{name}: not JSON: {e}")))
}

fn refused(field: &str, value: impl std::fmt::Display, why: &str) -> EngineError {
    EngineError::unsupported("model", format!("{field} = {value}: {why}"))
}

impl EmbedConfig {
    /// The embedding config of the model at `path` (a directory or a GGUF file), whose hidden size is `hidden`;
    /// None where its files name no pooling (not an embedding model). A layout kvad cannot run exactly (a Dense
    /// projection after pooling, several pooling modes at once) is refused naming the field and value.
    pub fn read(path: &Path, hidden: usize) -> Result<Option<EmbedConfig>, EngineError> {
        if path.is_dir() {
            return Self::from_dir(path, hidden);
        }
        let g =
            kvad_models::weights::GgufFile::open(path).map_err(|e| EngineError::bad_field("model", e.to_string()))?;
        let arch = g.get("general.architecture").and_then(|v| v.as_str()).unwrap_or_default().to_string();
        let key = format!("{arch}.pooling_type");
        let pooling = match g.get(&key).and_then(|v| v.as_u64()) {
            None | Some(0) => return Ok(None),
            Some(1) => Pooling::Mean,
            Some(2) => Pooling::Cls,
            Some(3) => Pooling::Last,
            Some(n) => return Err(refused(&key, n, "kvad pools by mean (1), first token (2) or last token (3)")),
        };
        Ok(Some(EmbedConfig { pooling, normalize: true, matryoshka: None, hidden }))
    }

    fn from_dir(dir: &Path, hidden: usize) -> Result<Option<EmbedConfig>, EngineError> {
        let modules = dir.join("modules.json");
        if !modules.is_file() {
            return Ok(None);
        }
        let list = read_json(&modules)?;
        let list = list.as_array().ok_or_else(|| refused("modules.json", "not a list", "it lists the modules"))?;
        let (mut pooling, mut normalize) = (None, false);
        for (i, m) in list.iter().enumerate() {
            let ty = m.get("type").and_then(Value::as_str).unwrap_or_default();
            let sub = m.get("path").and_then(Value::as_str).unwrap_or_default();
            match module_class(ty) {
                "Transformer" if sub.is_empty() => {}
                "Transformer" => {
                    return Err(refused(
                        &format!("modules.json[{i}].path"),
                        sub,
                        "kvad runs the model at the top level",
                    ))
                }
                "Pooling" if pooling.is_none() => {
                    pooling = Some(Self::pooling(&dir.join(sub).join("config.json"), hidden)?)
                }
                "Normalize" => normalize = true,
                _ => {
                    return Err(refused(
                        &format!("modules.json[{i}].type"),
                        ty,
                        "kvad runs a Transformer, one Pooling and Normalize modules only",
                    ))
                }
            }
        }
        let Some(pooling) = pooling else { return Ok(None) };
        let config = read_json(&dir.join("config.json"))?;
        let matryoshka = match (config.get("matryoshka_dimensions"), config.get("is_matryoshka")) {
            (Some(Value::Array(dims)), _) => {
                let dims: Option<Vec<usize>> = dims.iter().map(|d| d.as_u64().map(|d| d as usize)).collect();
                Some(dims.ok_or_else(|| refused("matryoshka_dimensions", "not a list of sizes", "it lists sizes"))?)
            }
            (_, Some(Value::Bool(true))) => Some(Vec::new()),
            _ => None,
        };
        Ok(Some(EmbedConfig { pooling, normalize, matryoshka, hidden }))
    }

    /// A Pooling module's `config.json`: exactly one `pooling_mode_*` on, of the model's width.
    fn pooling(path: &Path, hidden: usize) -> Result<Pooling, EngineError> {
        let c = read_json(path)?;
        if let Some(w) = c.get("word_embedding_dimension").and_then(Value::as_u64) {
            if w as usize != hidden {
                let why = format!("the model's hidden size is {hidden}");
                return Err(refused("1_Pooling word_embedding_dimension", w, &why));
            }
        }
        let modes = [
            ("pooling_mode_cls_token", Pooling::Cls),
            ("pooling_mode_mean_tokens", Pooling::Mean),
            ("pooling_mode_max_tokens", Pooling::Max),
            ("pooling_mode_mean_sqrt_len_tokens", Pooling::MeanSqrtLen),
            ("pooling_mode_weightedmean_tokens", Pooling::WeightedMean),
            ("pooling_mode_lasttoken", Pooling::Last),
        ];
        let on: Vec<_> = modes.iter().filter(|(k, _)| c.get(*k).and_then(Value::as_bool) == Some(true)).collect();
        match on.as_slice() {
            [(_, p)] => Ok(*p),
            [] => Err(refused("1_Pooling config.json", "no pooling_mode_* on", "one pooling mode is needed")),
            many => Err(refused(
                "1_Pooling config.json",
                many.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(" and "),
                "kvad pools one way at a time (sentence-transformers would concatenate them)",
            )),
        }
    }

    /// Checks a request's `dimensions` against what the model declares.
    pub fn check_dimensions(&self, dims: Option<usize>) -> Result<(), EngineError> {
        let Some(d) = dims else { return Ok(()) };
        if d == 0 || d > self.hidden {
            return Err(EngineError::bad_field(
                "dimensions",
                format!("dimensions = {d}: the model's vectors have {} (ask 1 to {})", self.hidden, self.hidden),
            ));
        }
        match &self.matryoshka {
            None if d == self.hidden => Ok(()),
            None => Err(EngineError::unsupported(
                "dimensions",
                format!(
                    "dimensions = {d}: this model declares no Matryoshka training (is_matryoshka or \
                     matryoshka_dimensions in its config.json), so a shorter vector would lose its meaning"
                ),
            )),
            Some(list) if !list.is_empty() && !list.contains(&d) => Err(EngineError::bad_field(
                "dimensions",
                format!("dimensions = {d}: this model was trained for {list:?}"),
            )),
            Some(_) => Ok(()),
        }
    }

    /// The request's vector from a pooled one: truncated to `dims`, then normalised where the model normalises
    /// (sentence-transformers' `truncate_dim` with `normalize_embeddings`, vLLM's order).
    pub fn finish(&self, mut v: Vec<f32>, dims: Option<usize>) -> Vec<f32> {
        if let Some(d) = dims {
            v.truncate(d);
        }
        if self.normalize {
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
            v.iter_mut().for_each(|x| *x /= norm);
        }
        v
    }
}

/// One sequence's pooled rows so far, fed a chunk at a time.
struct Acc {
    pooling: Pooling,
    v: Vec<f32>,
    /// Rows seen.
    n: usize,
    /// Sum of the weights of [`Pooling::WeightedMean`].
    weights: f32,
}

impl Acc {
    fn new(pooling: Pooling, hidden: usize) -> Acc {
        let fill = if pooling == Pooling::Max { f32::NEG_INFINITY } else { 0.0 };
        Acc { pooling, v: vec![fill; hidden], n: 0, weights: 0.0 }
    }

    /// The rows of one chunk (only its last row for [`Pooling::Last`]), in order.
    fn add(&mut self, rows: &[f32]) {
        let h = self.v.len();
        for row in rows.chunks_exact(h) {
            self.n += 1;
            match self.pooling {
                Pooling::Cls if self.n == 1 => self.v.copy_from_slice(row),
                Pooling::Cls => {}
                Pooling::Last => self.v.copy_from_slice(row),
                Pooling::Max => self.v.iter_mut().zip(row).for_each(|(a, &b)| *a = a.max(b)),
                Pooling::Mean | Pooling::MeanSqrtLen => self.v.iter_mut().zip(row).for_each(|(a, &b)| *a += b),
                Pooling::WeightedMean => {
                    let w = self.n as f32;
                    self.weights += w;
                    self.v.iter_mut().zip(row).for_each(|(a, &b)| *a += w * b);
                }
            }
        }
    }

    fn pooled(mut self) -> Vec<f32> {
        let by = match self.pooling {
            Pooling::Mean => self.n as f32,
            Pooling::MeanSqrtLen => (self.n as f32).sqrt(),
            Pooling::WeightedMean => self.weights,
            _ => 1.0,
        };
        if by != 1.0 {
            self.v.iter_mut().for_each(|x| *x /= by.max(1e-9));
        }
        self.v
    }
}

/// Pools every input through `model` in batched passes ([`read_in_passes`]: up to `room.rows` rows a pass, long
/// inputs over several, their rows pooled as they come, never more state at once than the room has). Inputs are
/// checked first (empty, past the context or the vocabulary: refused naming `input[i]`). Returns one vector per
/// input, pooled and finished ([`EmbedConfig::finish`]).
pub fn embed_inputs(
    model: &dyn CausalLm,
    cfg: &EmbedConfig,
    inputs: &[Vec<u32>],
    dims: Option<usize>,
    room: Room,
) -> Result<Vec<Vec<f32>>, EngineError> {
    cfg.check_dimensions(dims)?;
    check_inputs(model, inputs, room, "embed")?;
    let mut accs: Vec<Option<Acc>> = (0..inputs.len()).map(|_| None).collect();
    let mut out: Vec<Option<Vec<f32>>> = vec![None; inputs.len()];
    // Last-token pooling needs only each sequence's last row; the rest need every row.
    let last_only = cfg.pooling == Pooling::Last;
    let mode = if last_only { LogitsMode::Last } else { LogitsMode::All };
    read_in_passes(model, inputs, room, (Rows::Hidden, mode), |i, _, rows, done| {
        let acc = accs[i].get_or_insert_with(|| Acc::new(cfg.pooling, cfg.hidden));
        if !last_only || done {
            acc.add(&rows);
        }
        if done {
            out[i] = accs[i].take().map(|a| cfg.finish(a.pooled(), dims));
        }
    })?;
    out.into_iter()
        .enumerate()
        .map(|(i, v)| v.ok_or_else(|| EngineError::internal(format!("input[{i}] was never pooled"))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_pooling_mode_is_sentence_transformers_arithmetic() {
        let rows = [1.0f32, -2.0, 3.0, 4.0, 5.0, -6.0];
        let pool = |p| {
            let mut a = Acc::new(p, 2);
            a.add(&rows[..2]);
            a.add(&rows[2..]);
            a.pooled()
        };
        assert_eq!(pool(Pooling::Cls), vec![1.0, -2.0]);
        assert_eq!(pool(Pooling::Last), vec![5.0, -6.0]);
        assert_eq!(pool(Pooling::Max), vec![5.0, 4.0]);
        assert_eq!(pool(Pooling::Mean), vec![3.0, -4.0 / 3.0]);
        let s3 = 3f32.sqrt();
        assert_eq!(pool(Pooling::MeanSqrtLen), vec![9.0 / s3, -4.0 / s3]);
        // weights 1, 2, 3 over a sum of 6
        assert_eq!(pool(Pooling::WeightedMean), vec![(1.0 + 6.0 + 15.0) / 6.0, (-2.0 + 8.0 - 18.0) / 6.0]);
    }

    #[test]
    fn dimensions_follow_what_the_config_declares() {
        let mut c = EmbedConfig { pooling: Pooling::Last, normalize: true, matryoshka: None, hidden: 8 };
        assert!(c.check_dimensions(None).is_ok() && c.check_dimensions(Some(8)).is_ok());
        let e = c.check_dimensions(Some(4)).unwrap_err().to_string();
        assert!(e.contains("dimensions = 4") && e.contains("Matryoshka"), "{e}");
        c.matryoshka = Some(vec![]);
        assert!(c.check_dimensions(Some(4)).is_ok());
        assert!(c.check_dimensions(Some(9)).unwrap_err().to_string().contains("dimensions = 9"));
        assert!(c.check_dimensions(Some(0)).is_err());
        c.matryoshka = Some(vec![2, 6]);
        assert!(c.check_dimensions(Some(6)).is_ok() && c.check_dimensions(Some(4)).is_err());
        let v = c.finish(vec![3.0, 4.0, 12.0], Some(2));
        assert_eq!(v, vec![0.6, 0.8]);
    }
}
