//! Reads tensors by their HF names into the backend's storage formats, checks shapes, and remembers what was used,
//! so that a tensor the architecture does not use is refused instead of silently ignored.
//!
//! A stored tensor whose blocks already match the backend's format is used as it is, borrowed from the mapped file
//! (no copy); any other is read as f32 and quantised once. Everything built is recorded so the quantised cache can
//! be written from it, under names that let the next load take every matrix as it is.

use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::layers::{Embedding, Linear};
use crate::weights::{StoredType, WeightSource};
use kvad_tensor::cpu::{Bytes, QMatrix, QType};
use kvad_tensor::BackendKind;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// What a matrix is for, which decides its format: q4 keeps the embedding at 8 bits and an untied output head at 6
/// (as llama.cpp's own Q4_0 files hold theirs as Q6_K), as their error reaches every logit directly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// A projection inside a layer.
    Layer,
    /// The token embedding, or a head tied to it.
    Embedding,
    /// An output head of its own.
    Head,
    /// A mixture-of-experts router: kept in f32 on every backend (its logits choose experts; DeepSeek keeps it in
    /// f32 even in bf16 checkpoints).
    Router,
}

/// The format a backend stores a matrix of this role in, when it quantises.
pub(crate) fn target(backend: BackendKind, role: Role) -> QType {
    match (backend, role) {
        (_, Role::Router) => QType::F32,
        (BackendKind::CpuQ8 | BackendKind::GpuQ8, _) => QType::Q8_0,
        (BackendKind::CpuQ4 | BackendKind::GpuQ4, Role::Layer) => QType::Q4_0,
        (BackendKind::CpuQ4 | BackendKind::GpuQ4, Role::Embedding | Role::Head) => QType::Q8_0,
        (BackendKind::GpuBf16, _) => QType::BF16,
        (BackendKind::CpuF32, _) => QType::F32,
    }
}

/// Whether a backend quantises a matrix of this role, stored in floats, to Q8_0 blocks of 6-bit quants
/// (`QMatrix::quantize_6bit`): the q4 backends' own output head, which decode reads whole every step, in three
/// quarters of Q8_0's bytes (figures in docs/performance-gpu.md); the CPU runs the same values as Q8_0, so cpu-q4
/// and gpu-q4 hold one set of weights.
pub(crate) fn six_bit(backend: BackendKind, role: Role) -> bool {
    matches!(backend, BackendKind::CpuQ4 | BackendKind::GpuQ4) && role == Role::Head
}

/// Whether stored blocks can be used as they are by this backend for this role.
fn as_is(backend: BackendKind, role: Role, stored: &StoredType) -> Option<QType> {
    // The GPU takes bf16 as it is and quantises it on the device when the backend wants blocks.
    if backend.device() == kvad_tensor::Device::Gpu && *stored == StoredType::BF16 {
        return Some(QType::BF16);
    }
    let t = match stored {
        StoredType::F32 => QType::F32,
        StoredType::Q8_0 => QType::Q8_0,
        StoredType::Q4_0 => QType::Q4_0,
        StoredType::Q4_1 => QType::Q4_1,
        _ => return None,
    };
    let want = target(backend, role);
    let ok = t == want || (want == QType::Q4_0 && t == QType::Q4_1);
    ok.then_some(t)
}

/// One thing the loader built, for the quantised cache.
pub(crate) enum Recorded {
    /// A matrix in its final format.
    Matrix(QMatrix),
    /// An f32 vector (norm weights, biases, learned positions).
    Vector(Vec<f32>, Vec<usize>),
}

/// How GGUF names and layouts map to HF's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GgufNames {
    /// `(n_heads, n_kv_heads)` when q/k rows were permuted by llama.cpp's converter.
    pub(crate) permute: Option<(usize, usize)>,
    /// An HF name as the family's GGUF spells it (the registry's `gguf_name`).
    pub(crate) map: fn(&str) -> String,
}

/// The loader state of one model.
pub(crate) struct Tensors<'a> {
    pub(crate) src: &'a dyn WeightSource,
    pub(crate) gguf: Option<GgufNames>,
    /// Reading kvad's own quantised cache: names are the recorded keys, formats already final (name → format).
    pub(crate) cached: Option<HashMap<String, QType>>,
    pub(crate) backend: BackendKind,
    pub(crate) used: BTreeSet<String>,
    pub(crate) notes: Vec<String>,
    pub(crate) record: Vec<(String, Recorded)>,
    /// Dequantise every quantised matrix to f32 after building it (see `LoadOptions::f32_reference`).
    pub(crate) f32_reference: bool,
    /// How the checkpoint stores the token embedding, which a head shipped beside a tied one must match.
    embed_type: Option<StoredType>,
    /// A safetensors checkpoint saved from the base model (transformers' `AutoModel`, as sentence-transformers
    /// and embedding models save it): its tensors are named without the `model.` of the causal-LM class.
    bare: bool,
}

impl<'a> Tensors<'a> {
    /// A loader over a source.
    pub(crate) fn new(
        src: &'a dyn WeightSource,
        gguf: Option<GgufNames>,
        cached: Option<HashMap<String, QType>>,
        backend: BackendKind,
    ) -> Self {
        Tensors {
            src,
            gguf,
            cached,
            backend,
            used: BTreeSet::new(),
            notes: Vec::new(),
            record: Vec::new(),
            f32_reference: false,
            embed_type: None,
            bare: gguf.is_none()
                && src.info("model.embed_tokens.weight").is_none()
                && src.info("embed_tokens.weight").is_some(),
        }
    }

    fn source_name(&self, hf: &str) -> String {
        match self.gguf {
            Some(g) => (g.map)(hf),
            None if self.bare => hf.strip_prefix("model.").unwrap_or(hf).to_string(),
            None => hf.to_string(),
        }
    }

    /// Whether the checkpoint has a tensor (by HF name).
    pub(crate) fn has(&self, hf: &str) -> bool {
        self.src.info(&self.source_name(hf)).is_some()
    }

    fn permutation(&self, hf: &str) -> Option<usize> {
        let (nh, nkv) = self.gguf?.permute?;
        if hf.contains("self_attn.q_proj.") {
            Some(nh)
        } else if hf.contains("self_attn.k_proj.") {
            Some(nkv)
        } else {
            None
        }
    }

    /// Reads an f32 tensor of the given shape (by HF name), un-permuting llama GGUF q/k rows.
    pub(crate) fn get(&mut self, hf: &str, shape: &[usize]) -> Result<Vec<f32>, ModelError> {
        let name = self.source_name(hf);
        let info = self.src.info(&name).ok_or_else(|| ModelError::MissingTensor { name: name.clone() })?;
        if info.shape != shape {
            return Err(ModelError::ShapeMismatch { name, expected: shape.to_vec(), got: info.shape });
        }
        let mut data = self.src.load_f32(&name)?;
        if let Some(heads) = self.permutation(hf) {
            data = unpermute(&data, heads, data.len() / shape[0]);
        }
        self.used.insert(name);
        Ok(data)
    }

    /// An f32 vector (norm weight, bias), recorded for the cache.
    pub(crate) fn vector(&mut self, hf: &str, shape: &[usize]) -> Result<Vec<f32>, ModelError> {
        let v = self.get(hf, shape)?;
        self.record.push((hf.to_string(), Recorded::Vector(v.clone(), shape.to_vec())));
        Ok(v)
    }

    /// A matrix `[rows, cols]` by HF name, as is when its blocks match, else quantised. Not recorded.
    pub(crate) fn matrix_unrecorded(
        &mut self,
        hf: &str,
        rows: usize,
        cols: usize,
        role: Role,
    ) -> Result<QMatrix, ModelError> {
        self.matrix_shaped(hf, &[rows, cols], rows, cols, role)
    }

    /// A matrix `[rows, cols]` stored under `stored`, a shape of the same rows (a stack of experts `[E, out, in]`
    /// read as `[E·out, in]`). Not recorded.
    pub(crate) fn matrix_shaped(
        &mut self,
        hf: &str,
        stored: &[usize],
        rows: usize,
        cols: usize,
        role: Role,
    ) -> Result<QMatrix, ModelError> {
        if let Some(types) = &self.cached {
            // kvad's cache: the bytes are the final layout, mapped without a copy.
            let t = *types.get(hf).ok_or_else(|| ModelError::MissingTensor { name: hf.to_string() })?;
            let row_bytes = t.row_bytes(cols).unwrap_or(0);
            let info = self.src.info(hf).ok_or_else(|| ModelError::MissingTensor { name: hf.to_string() })?;
            if info.shape != [rows, row_bytes] {
                return Err(ModelError::ShapeMismatch {
                    name: hf.into(),
                    expected: vec![rows, row_bytes],
                    got: info.shape,
                });
            }
            self.used.insert(hf.to_string());
            return QMatrix::new(t, rows, cols, self.src.raw_shared(hf)?).map_err(|e| matrix_error(hf, e));
        }
        let name = self.source_name(hf);
        let info = self.src.info(&name).ok_or_else(|| ModelError::MissingTensor { name: name.clone() })?;
        if info.shape != stored {
            return Err(ModelError::ShapeMismatch { name, expected: stored.to_vec(), got: info.shape });
        }
        let whole_blocks = cols.is_multiple_of(32);
        let plain = |t: QType| t == QType::F32 || t == QType::BF16;
        if let Some(t) = as_is(self.backend, role, &info.dtype).filter(|&t| plain(t) || whole_blocks) {
            let m = match (self.permutation(hf), t) {
                // f32 and bf16 as stored: borrowed from the mapped file.
                (None, QType::F32 | QType::BF16) => QMatrix::new(t, rows, cols, self.src.raw_shared(&name)?),
                (None, _) => QMatrix::from_ggml(t, rows, cols, self.src.raw_bytes(&name)?),
                (Some(heads), _) => {
                    let raw = self.src.raw_bytes(&name)?;
                    let rows_unpermuted = unpermute(raw, heads, raw.len() / rows);
                    if plain(t) {
                        QMatrix::new(t, rows, cols, Bytes::Owned(Arc::new(rows_unpermuted)))
                    } else {
                        QMatrix::from_ggml(t, rows, cols, &rows_unpermuted)
                    }
                }
            };
            self.used.insert(name.clone());
            return m.map_err(|e| matrix_error(&name, e));
        }
        let w = self.get(hf, stored)?;
        let t = match target(self.backend, role) {
            t @ (QType::F32 | QType::BF16) => t,
            _ if !whole_blocks => QType::F32,
            t => t,
        };
        // Quantised twice — a file's Q6_K or Q4_K head to 6 bits again — would add a second rounding to the first:
        // a head stored in blocks goes to Q8_0's 8 bits, near its values.
        let float_source = matches!(info.dtype, StoredType::F32 | StoredType::F16 | StoredType::BF16);
        let m = if t == QType::Q8_0 && six_bit(self.backend, role) && float_source {
            QMatrix::quantize_6bit(rows, cols, &w)
        } else {
            QMatrix::quantize(t, rows, cols, &w)
        };
        m.map_err(|e| matrix_error(&name, e))
    }

    /// A matrix, recorded for the cache under its HF name.
    pub(crate) fn matrix(&mut self, hf: &str, rows: usize, cols: usize, role: Role) -> Result<QMatrix, ModelError> {
        let m = self.matrix_unrecorded(hf, rows, cols, role)?;
        let m = self.reference(m)?;
        self.record.push((hf.to_string(), Recorded::Matrix(m.clone())));
        Ok(m)
    }

    /// In f32-reference mode, the matrix dequantised to f32; else the matrix as it is.
    pub(crate) fn reference(&self, m: QMatrix) -> Result<QMatrix, ModelError> {
        if !self.f32_reference || m.qtype() == QType::F32 {
            return Ok(m);
        }
        let mut w = vec![0f32; m.rows() * m.cols()];
        for r in 0..m.rows() {
            m.dequantize_row(r, &mut w[r * m.cols()..(r + 1) * m.cols()]);
        }
        QMatrix::quantize(QType::F32, m.rows(), m.cols(), &w).map_err(|e| matrix_error("reference", e))
    }

    /// A linear layer `prefix.weight` `[out, inp]` with an optional `prefix.bias`.
    pub(crate) fn linear(&mut self, prefix: &str, out: usize, inp: usize, bias: bool) -> Result<Linear, ModelError> {
        let w = self.matrix(&format!("{prefix}.weight"), out, inp, Role::Layer)?;
        let b = if bias { Some(self.vector(&format!("{prefix}.bias"), &[out])?) } else { None };
        Ok(Linear::new(w, b))
    }

    /// Several linears with one input width stacked into one (q/k/v, gate/up), cached under `key`.
    pub(crate) fn stacked(
        &mut self,
        key: &str,
        parts: &[(&str, usize)],
        inp: usize,
        bias: bool,
    ) -> Result<Linear, ModelError> {
        let rows: usize = parts.iter().map(|p| p.1).sum();
        if self.cached.is_some() {
            let w = self.matrix(&format!("{key}.weight"), rows, inp, Role::Layer)?;
            let b = if bias { Some(self.vector(&format!("{key}.bias"), &[rows])?) } else { None };
            return Ok(Linear::new(w, b));
        }
        let mut mats = Vec::with_capacity(parts.len());
        for (prefix, out) in parts {
            mats.push(self.matrix_unrecorded(&format!("{prefix}.weight"), *out, inp, Role::Layer)?);
        }
        // Parts stored in different formats (a mixed GGUF) are brought to the backend's format first.
        if mats.iter().any(|m| m.qtype() != mats[0].qtype()) {
            let t = target(self.backend, Role::Layer);
            for m in mats.iter_mut() {
                let mut w = vec![0f32; m.rows() * m.cols()];
                for r in 0..m.rows() {
                    m.dequantize_row(r, &mut w[r * m.cols()..(r + 1) * m.cols()]);
                }
                *m = QMatrix::quantize(t, m.rows(), m.cols(), &w).map_err(|e| matrix_error(key, e))?;
            }
        }
        let w = self.reference(QMatrix::stack(&mats).map_err(|e| matrix_error(key, e))?)?;
        let b = if bias {
            let mut b = Vec::with_capacity(rows);
            for (prefix, out) in parts {
                b.extend(self.get(&format!("{prefix}.bias"), &[*out])?);
            }
            self.record.push((format!("{key}.bias"), Recorded::Vector(b.clone(), vec![rows])));
            Some(b)
        } else {
            None
        };
        self.record.push((format!("{key}.weight"), Recorded::Matrix(w.clone())));
        Ok(Linear::new(w, b))
    }

    /// A GPT-2 `Conv1D` (`[inp, out]`, stored transposed) as a linear `[out, inp]`, cached transposed.
    pub(crate) fn conv1d(&mut self, name: &str, inp: usize, out: usize) -> Result<Linear, ModelError> {
        let key = format!("{name}.weight_t");
        let w = if self.cached.is_some() {
            self.matrix(&key, out, inp, Role::Layer)?
        } else {
            let w = self.get(&format!("{name}.weight"), &[inp, out])?;
            let mut wt = vec![0f32; inp * out];
            for i in 0..inp {
                for o in 0..out {
                    wt[o * inp + i] = w[i * out + o];
                }
            }
            let t = if inp.is_multiple_of(32) { target(self.backend, Role::Layer) } else { QType::F32 };
            let m = self.reference(QMatrix::quantize(t, out, inp, &wt).map_err(|e| matrix_error(name, e))?)?;
            self.record.push((key, Recorded::Matrix(m.clone())));
            m
        };
        Ok(Linear::new(w, Some(self.vector(&format!("{name}.bias"), &[out])?)))
    }

    /// The token embedding.
    pub(crate) fn embedding(&mut self, hf: &str, vocab: usize, hidden: usize) -> Result<Embedding, ModelError> {
        self.embed_type = self.src.info(&self.source_name(hf)).map(|i| i.dtype);
        Ok(Embedding(self.matrix(hf, vocab, hidden, Role::Embedding)?))
    }

    /// The output head: its own matrix unless tied. A tied config that ships a head of the embedding's shape and
    /// type runs with the shipped head, as transformers does (with a note); one of another shape or stored type is
    /// refused (caldrix's rule: such a file was not written by one save of one model).
    pub(crate) fn head(&mut self, cfg: &ModelConfig, embed: &Embedding) -> Result<Option<Linear>, ModelError> {
        let name = "lm_head.weight";
        if !cfg.tie_embeddings && (self.bare || self.cached.is_some()) && !self.has(name) {
            self.notes
                .push("no lm_head.weight: an embedding model's base checkpoint, it pools and cannot generate".into());
            return Ok(None);
        }
        if !cfg.tie_embeddings {
            let w = self.matrix(name, cfg.vocab_size, cfg.hidden, Role::Head)?;
            return Ok(Some(Linear::new(w, None)));
        }
        let Some(info) = self.src.info(&self.source_name(name)) else { return Ok(None) };
        if info.shape != [cfg.vocab_size, cfg.hidden] {
            return Err(ModelError::refused(
                name,
                format!("{:?}", info.shape),
                format!("a tied head must have the embedding's shape [{}, {}]", cfg.vocab_size, cfg.hidden),
            ));
        }
        if let Some(embed_type) = self.embed_type.as_ref().filter(|t| self.cached.is_none() && **t != info.dtype) {
            return Err(ModelError::refused(
                name,
                info.dtype.name(),
                format!("a head beside a tied embedding must be stored as the embedding is ({})", embed_type.name()),
            ));
        }
        // Read as the embedding is, to compare them; a head of its own is then read as one.
        let w = self.matrix(name, cfg.vocab_size, cfg.hidden, Role::Embedding)?;
        let cached = self.cached.is_some();
        if cached || w.bytes() != embed.0.bytes() || w.qtype() != embed.0.qtype() {
            if cached {
                return Ok(Some(Linear::new(w, None)));
            }
            self.notes.push("the config ties the head to the embedding but the checkpoint ships a different lm_head.weight: running with the shipped head, as transformers does".into());
            self.record.pop();
            let w = self.matrix(name, cfg.vocab_size, cfg.hidden, Role::Head)?;
            return Ok(Some(Linear::new(w, None)));
        }
        self.record.pop();
        Ok(None)
    }

    /// Refuses tensors the architecture did not read (buffers transformers never loads are skipped by name).
    pub(crate) fn finish(&self) -> Result<(), ModelError> {
        let ignorable = |n: &str| {
            n.ends_with("rotary_emb.inv_freq") || n.ends_with(".attn.bias") || n.ends_with(".attn.masked_bias")
        };
        for name in self.src.tensor_names() {
            if !self.used.contains(&name) && !ignorable(&name) {
                return Err(ModelError::refused("tensor", &name, "the architecture does not use this tensor"));
            }
        }
        Ok(())
    }
}

fn matrix_error(name: &str, e: kvad_tensor::cpu::MatrixError) -> ModelError {
    ModelError::BadInput(format!("tensor {name}: {e}"))
}

/// Undoes llama.cpp's q/k permutation of rows (of any element type): GGUF row `h·d + 2j + s` holds HF row
/// `h·d + s·d/2 + j`. `row_len` is the elements per row.
pub(crate) fn unpermute<T: Copy + Default>(w: &[T], heads: usize, row_len: usize) -> Vec<T> {
    let rows = w.len() / row_len;
    let d = rows / heads;
    let half = d / 2;
    let mut out = vec![T::default(); w.len()];
    for h in 0..heads {
        for j in 0..half {
            for s in 0..2 {
                let src = h * d + 2 * j + s;
                let dst = h * d + s * half + j;
                out[dst * row_len..(dst + 1) * row_len].copy_from_slice(&w[src * row_len..(src + 1) * row_len]);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpermute_inverts_llama_cpp_permutation() {
        // llama.cpp: w.reshape(heads, 2, d/2, cols).swapaxes(1, 2)
        let (heads, d, cols) = (2, 4, 3);
        let hf: Vec<f32> = (0..heads * d * cols).map(|v| v as f32).collect();
        let mut permuted = vec![0f32; hf.len()];
        for h in 0..heads {
            for s in 0..2 {
                for j in 0..d / 2 {
                    let src = h * d + s * (d / 2) + j;
                    let dst = h * d + j * 2 + s;
                    permuted[dst * cols..(dst + 1) * cols].copy_from_slice(&hf[src * cols..(src + 1) * cols]);
                }
            }
        }
        assert_eq!(unpermute(&permuted, heads, cols), hf);
    }

    #[test]
    fn q4_backends_hold_an_untied_head_in_six_bits_and_the_rest_as_before() {
        use crate::arch::llama::Llama;
        use crate::weights::SafetensorsSource;
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models/llama");
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
        let cfg = crate::arch::registry::config_from_hf(&json).unwrap();
        assert!(!cfg.tie_embeddings, "the fixture's head is its own");
        let src = SafetensorsSource::open_dir(&dir).unwrap();
        for backend in [BackendKind::CpuQ4, BackendKind::CpuQ8] {
            let mut t = Tensors::new(&src, None, None, backend);
            let m = Llama::load(cfg.clone(), &mut t).unwrap();
            let head = m.head.as_ref().unwrap().matrix();
            assert_eq!(head.qtype(), QType::Q8_0, "{backend}");
            assert_eq!(head.is_6bit(), backend == BackendKind::CpuQ4, "{backend}");
            assert!(!m.embed.0.is_6bit(), "{backend}: the embedding stays at 8 bits");
            let layer = if backend == BackendKind::CpuQ4 { QType::Q4_0 } else { QType::Q8_0 };
            let crate::moe::Ffn::Dense(mlp) = &m.layers[0].ffn else { panic!("dense") };
            assert_eq!(mlp.down.matrix().qtype(), layer, "{backend}");
        }
    }

    /// Only a head stored in floats is quantised to 6 bits; one stored in blocks (llama.cpp's Q6_K output) goes to
    /// 8, as before.
    #[test]
    fn only_float_heads_are_quantised_to_six_bits() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/gguf/types.gguf");
        let g = crate::weights::GgufFile::open(&path).unwrap();
        for (name, six) in [
            ("t_f32", true),
            ("t_f16", true),
            ("t_bf16", true),
            ("t_q6_k", false),
            ("t_q4_k", false),
            ("t_q8_0", false),
        ] {
            let mut t = Tensors::new(
                &g,
                Some(GgufNames { permute: None, map: crate::arch::registry::entry(crate::ArchKind::Llama).gguf_name }),
                None,
                BackendKind::CpuQ4,
            );
            let m = t.matrix(name, 2, 256, Role::Head).unwrap();
            assert_eq!((m.qtype(), m.is_6bit()), (QType::Q8_0, six), "{name}");
        }
    }

    #[test]
    fn blocks_are_used_as_is_only_where_the_backend_stores_that_format() {
        use BackendKind::*;
        assert_eq!(as_is(CpuQ8, Role::Layer, &StoredType::Q8_0), Some(QType::Q8_0));
        assert_eq!(as_is(CpuQ8, Role::Layer, &StoredType::Q4_1), None);
        assert_eq!(as_is(CpuQ4, Role::Layer, &StoredType::Q4_1), Some(QType::Q4_1));
        assert_eq!(as_is(CpuQ4, Role::Embedding, &StoredType::Q4_0), None);
        assert_eq!(as_is(CpuQ4, Role::Embedding, &StoredType::Q8_0), Some(QType::Q8_0));
        assert_eq!(as_is(CpuF32, Role::Layer, &StoredType::F32), Some(QType::F32));
        assert_eq!(as_is(CpuF32, Role::Layer, &StoredType::BF16), None);
    }
}
