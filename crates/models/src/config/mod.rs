//! One typed model config, whichever file format it came from, and the helpers every architecture's config reader
//! shares (`arch/<name>/config.rs`); the import's refusals name the field and value before any weight is read.

use crate::error::ModelError;
use serde_json::Value;

/// The architecture families: one folder each under `arch/`, one line each in `arch::registry`. (Stored in the
/// quantised cache's config, so a name once written stays.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ArchKind {
    /// Llama 2/3, Mistral, Qwen2, Qwen3, SmolLM2: pre-norm decoder, RMSNorm, RoPE, SwiGLU, GQA.
    Llama,
    /// GPT-2: LayerNorm, learned positions, GELU, fused qkv.
    Gpt2,
    /// DeepSeek-V2/V3: latent attention (MLA), routed and shared experts, dense first layers.
    Deepseek,
    /// Qwen3-Next: gated delta-net layers beside gated full attention, routed experts with a gated shared one.
    Qwen3Next,
}

/// Llama 3's RoPE frequency scaling.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum RopeScaling {
    /// The `llama3` rule, from config.json's `rope_scaling`.
    Llama3 {
        /// How much longer the context is than the one trained for.
        factor: f64,
        /// Wavelengths longer than `original_max_position / low_freq_factor` are divided by `factor`.
        low_freq_factor: f64,
        /// Wavelengths shorter than `original_max_position / high_freq_factor` are kept.
        high_freq_factor: f64,
        /// The context the model was first trained for.
        original_max_position: f64,
    },
    /// Per-frequency divisors, as a GGUF stores Llama 3's rule (`rope_freqs.weight`).
    Divisors(Vec<f32>),
    /// YaRN (DeepSeek's long context): frequencies between two wavelengths ramp from kept to divided by `factor`.
    Yarn {
        /// How much longer the context is than the one trained for.
        factor: f64,
        /// The context the model was first trained for.
        original_max_position: f64,
        /// Rotations above which a frequency is kept.
        beta_fast: f64,
        /// Rotations below which a frequency is divided by `factor`.
        beta_slow: f64,
    },
}

/// How a router turns one token's logits into experts and weights (`crate::moe::route`), each option as
/// transformers computes it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Routing {
    /// Routed experts.
    pub n_experts: usize,
    /// Experts each token uses.
    pub top_k: usize,
    /// Softmax (Qwen3-MoE, DeepSeek-V2) or sigmoid (DeepSeek-V3) of the logits.
    pub scoring: Scoring,
    /// `(n_group, topk_group)`: only experts of the best `topk_group` of `n_group` equal groups are chosen
    /// (softmax: groups ranked by their best score; sigmoid: by the sum of their best two, bias included).
    pub groups: Option<(usize, usize)>,
    /// The chosen weights divided by their sum (`norm_topk_prob`).
    pub normalise: bool,
    /// Every weight multiplied by this (`routed_scaling_factor`).
    pub scale: f32,
    /// A per-expert bias added to the scores for choosing only (`e_score_correction_bias`).
    pub choice_bias: bool,
}

/// The router's activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Scoring {
    /// `softmax(logits)`.
    Softmax,
    /// `sigmoid(logits)`.
    Sigmoid,
}

/// A mixture-of-experts layout: which layers route, and the widths of their experts.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MoeConfig {
    /// The router.
    pub routing: Routing,
    /// Width of one routed expert's MLP (`moe_intermediate_size`).
    pub expert_ff: usize,
    /// Width of the shared experts' one MLP (`moe_intermediate_size × n_shared_experts`), 0 when none.
    pub shared_ff: usize,
    /// Per layer: whether it routes (the others run the dense MLP of `intermediate`).
    pub sparse: Vec<bool>,
    /// The shared expert's output is scaled by `sigmoid(shared_expert_gate · x)` (Qwen3-Next), and named
    /// `shared_expert` rather than `shared_experts`.
    #[serde(default)]
    pub shared_gate: bool,
}

/// Gated delta-net layers (Qwen3-Next): linear attention whose per-head state `[k_dim, v_dim]` decays and is
/// corrected by the delta rule each token, beside full-attention layers with an output gate.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DeltaConfig {
    /// Per layer: a delta-net layer (true) or a gated full-attention layer (false).
    pub linear: Vec<bool>,
    /// Query/key heads of a delta-net layer.
    pub k_heads: usize,
    /// Value heads (a multiple of `k_heads`; each key head serves `v_heads / k_heads` consecutive value heads).
    pub v_heads: usize,
    /// Width of a query/key head.
    pub k_dim: usize,
    /// Width of a value head.
    pub v_dim: usize,
    /// Taps of the causal depthwise convolution over q, k and v.
    pub conv: usize,
    /// Rotated width of a full-attention head (`partial_rotary_factor × head_dim`).
    pub rope_dim: usize,
    /// How the checkpoint stores the input projection: Qwen3-Next's two matrices whose rows are grouped by key head
    /// (`in_proj_qkvz`, `in_proj_ba`), or Qwen3.5's four plain ones (`in_proj_qkv`, `_z`, `_b`, `_a`).
    #[serde(default)]
    pub grouped: bool,
    /// Value heads in llama.cpp's qwen35 order, tiled over the key heads (value head h reads key head
    /// `h mod k_heads`), where the checkpoint's order groups them by key head (`h / (v_heads / k_heads)`).
    #[serde(default)]
    pub tiled: bool,
}

impl DeltaConfig {
    /// Width of q (and of k) over all key heads.
    pub fn key_width(&self) -> usize {
        self.k_heads * self.k_dim
    }

    /// Width of v (and of the output gate z) over all value heads.
    pub fn value_width(&self) -> usize {
        self.v_heads * self.v_dim
    }

    /// The key head value head `h` reads (see `tiled`).
    pub fn key_head(&self, h: usize) -> usize {
        if self.tiled {
            h % self.k_heads
        } else {
            h / (self.v_heads / self.k_heads).max(1)
        }
    }

    /// Channels of the convolution: q, k and v side by side.
    pub fn conv_channels(&self) -> usize {
        2 * self.key_width() + self.value_width()
    }
}

/// Latent attention (DeepSeek's MLA): queries, keys and values go through low-rank projections, and the cache
/// holds the key/value latent and one shared RoPE key per token.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MlaConfig {
    /// Rank of the query's low-rank projection; None projects the query directly (DeepSeek-V2-Lite).
    pub q_lora_rank: Option<usize>,
    /// Width of the key/value latent.
    pub kv_lora_rank: usize,
    /// Per-head query/key width without position.
    pub nope_dim: usize,
    /// Width of the rotated part (per head for queries, shared for keys).
    pub rope_dim: usize,
    /// Per-head value width.
    pub v_dim: usize,
    /// RoPE pairs adjacent values (DeepSeek's layout) rather than the two halves.
    pub rope_interleaved: bool,
    /// Softmax scale: `1/sqrt(nope + rope)`, times YaRN's `mscale_all_dim` correction squared.
    pub softmax_scale: f32,
    /// YaRN's factor on cos and sin (`attention_factor`), 1 without YaRN.
    pub rope_mscale: f32,
}

/// Everything the architecture code needs, in one place, whichever file format it came from.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ModelConfig {
    /// The family that runs it.
    pub arch: ArchKind,
    /// The HF class name (e.g. `Qwen3ForCausalLM`) or `gguf:<architecture>`.
    pub arch_name: String,
    /// Token count of the embedding.
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden: usize,
    /// Decoder layers.
    pub n_layers: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads (GQA when fewer than `n_heads`).
    pub n_kv_heads: usize,
    /// Width of one head (Qwen3 sets it apart from `hidden / n_heads`).
    pub head_dim: usize,
    /// Width of the MLP.
    pub intermediate: usize,
    /// RMSNorm or LayerNorm epsilon.
    pub norm_eps: f32,
    /// RoPE base.
    pub rope_theta: f64,
    /// Llama 3 scaling, if any.
    pub rope_scaling: Option<RopeScaling>,
    /// Longest context the model was trained for.
    pub max_position: usize,
    /// Attention window (Mistral): a query sees this many keys, itself included.
    pub sliding_window: Option<usize>,
    /// An active sliding window kvad does not run as a mask (Qwen's `use_sliding_window`): `max_position` was
    /// lowered to it, where the window changes nothing, so a wider `--ctx` is refused with the window's size.
    #[serde(default)]
    pub window_cap: Option<usize>,
    /// Bias on q/k/v (Qwen2).
    pub qkv_bias: bool,
    /// Per-head RMSNorm of q and k (Qwen3).
    pub qk_norm: bool,
    /// The output head is the embedding.
    pub tie_embeddings: bool,
    /// Beginning-of-sequence id, when the config names one.
    pub bos_token_id: Option<u32>,
    /// Ids that end generation.
    pub eos_token_ids: Vec<u32>,
    /// Routed experts, when the model has them.
    #[serde(default)]
    pub moe: Option<MoeConfig>,
    /// Latent attention, when the model uses it.
    #[serde(default)]
    pub mla: Option<MlaConfig>,
    /// Gated delta-net layers, when the model has them.
    #[serde(default)]
    pub delta: Option<DeltaConfig>,
}

/// Upper bounds that catch corrupt or hostile configs before they size an allocation.
const MAX_DIM: usize = 1 << 20;
const MAX_LAYERS: usize = 1024;
const MAX_VOCAB: usize = 1 << 22;

pub(crate) fn get<'a>(cfg: &'a Value, key: &str) -> Option<&'a Value> {
    cfg.get(key).filter(|v| !v.is_null())
}

pub(crate) fn usize_field(cfg: &Value, key: &str) -> Result<Option<usize>, ModelError> {
    match get(cfg, key) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .map(|n| Some(n as usize))
            .ok_or_else(|| ModelError::refused(key, v, "expected a non-negative integer")),
    }
}

pub(crate) fn need(cfg: &Value, key: &str) -> Result<usize, ModelError> {
    usize_field(cfg, key)?.ok_or_else(|| ModelError::refused(key, "missing", "the config must give it"))
}

pub(crate) fn f64_field(cfg: &Value, key: &str) -> Result<Option<f64>, ModelError> {
    match get(cfg, key) {
        None => Ok(None),
        Some(v) => v.as_f64().map(Some).ok_or_else(|| ModelError::refused(key, v, "expected a number")),
    }
}

/// A list of layer indices (`mlp_only_layers`), empty when absent.
pub(crate) fn index_list(cfg: &Value, key: &str) -> Result<Vec<usize>, ModelError> {
    match get(cfg, key) {
        None => Ok(Vec::new()),
        Some(v) => v
            .as_array()
            .and_then(|a| a.iter().map(|x| x.as_u64().map(|n| n as usize)).collect::<Option<Vec<_>>>())
            .ok_or_else(|| ModelError::refused(key, v, "expected a list of layer indices")),
    }
}

pub(crate) fn bool_field(cfg: &Value, key: &str) -> Option<bool> {
    get(cfg, key).and_then(Value::as_bool)
}

pub(crate) fn ids(v: Option<&Value>) -> Vec<u32> {
    match v {
        Some(Value::Number(n)) => n.as_u64().map(|n| vec![n as u32]).unwrap_or_default(),
        Some(Value::Array(a)) => a.iter().filter_map(|x| x.as_u64().map(|n| n as u32)).collect(),
        _ => Vec::new(),
    }
}

/// An HF tensor name as llama.cpp's converter names it: the embedding, final norm and head by their fixed names,
/// a layer's tensor `model.layers.<i>.<hf>…` as `blk.<i>.<gguf>…` by the family's `layer_map` of `(hf, gguf)`
/// prefixes (first match wins); anything else as it is.
pub(crate) fn gguf_tensor_name(hf: &str, layer_map: &[(&str, &str)]) -> String {
    let fixed = [
        ("model.embed_tokens.weight", "token_embd.weight"),
        ("model.norm.weight", "output_norm.weight"),
        ("lm_head.weight", "output.weight"),
    ];
    if let Some((_, g)) = fixed.iter().find(|(h, _)| *h == hf) {
        return g.to_string();
    }
    let Some((idx, tail)) = hf.strip_prefix("model.layers.").and_then(|r| r.split_once('.')) else {
        return hf.to_string();
    };
    for (h, g) in layer_map {
        if let Some(suffix) = tail.strip_prefix(h) {
            return format!("blk.{idx}.{g}{suffix}");
        }
    }
    hf.to_string()
}

/// A GGUF's `<arch>.*` metadata, read with the refusals every family's reader gives (the key named in full).
pub(crate) struct GgufKeys<'a> {
    pub(crate) g: &'a crate::weights::GgufFile,
    pub(crate) arch: &'a str,
}

impl GgufKeys<'_> {
    /// The full key of `k`.
    pub(crate) fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.arch)
    }

    /// An unsigned integer, if present.
    pub(crate) fn uint(&self, k: &str) -> Result<Option<usize>, ModelError> {
        match self.g.get(&self.key(k)) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(|n| Some(n as usize))
                .ok_or_else(|| ModelError::refused(self.key(k), format!("{v:?}"), "expected an unsigned integer")),
        }
    }

    /// An unsigned integer the file must give.
    pub(crate) fn need(&self, k: &str) -> Result<usize, ModelError> {
        self.uint(k)?.ok_or_else(|| ModelError::refused(self.key(k), "missing", "the GGUF metadata must give it"))
    }

    /// A number, if present.
    pub(crate) fn float(&self, k: &str) -> Option<f64> {
        self.g.get(&self.key(k)).and_then(|v| v.as_f64())
    }

    /// A token id of the tokenizer's metadata (`tokenizer.ggml.*`, full key).
    pub(crate) fn id(&self, full_key: &str) -> Option<u32> {
        self.g.get(full_key).and_then(|v| v.as_u64()).map(|v| v as u32)
    }

    /// The ids that end generation: EOS and EOT.
    pub(crate) fn eos_ids(&self) -> Vec<u32> {
        let mut eos: Vec<u32> =
            ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"].iter().filter_map(|k| self.id(k)).collect();
        eos.dedup();
        eos
    }
}

impl ModelConfig {
    /// Checks that dimensions are in bounds and consistent with each other.
    pub fn check_dims(&self) -> Result<(), ModelError> {
        let bounded = [
            ("hidden_size", self.hidden, MAX_DIM),
            ("num_hidden_layers", self.n_layers, MAX_LAYERS),
            ("num_attention_heads", self.n_heads, 4096),
            ("num_key_value_heads", self.n_kv_heads, 4096),
            ("head_dim", self.head_dim, 4096),
            ("intermediate_size", self.intermediate, MAX_DIM),
            ("vocab_size", self.vocab_size, MAX_VOCAB),
        ];
        for (field, v, max) in bounded {
            if v == 0 || v > max {
                return Err(ModelError::refused(field, v, format!("out of bounds (1..={max})")));
            }
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return Err(ModelError::refused(
                "num_key_value_heads",
                self.n_kv_heads,
                format!("must divide num_attention_heads ({})", self.n_heads),
            ));
        }
        if self.max_position == 0 {
            return Err(ModelError::refused("max_position_embeddings", 0, "must be positive"));
        }
        if !(self.norm_eps.is_finite() && self.norm_eps >= 0.0) {
            return Err(ModelError::refused("rms_norm_eps", self.norm_eps, "must be a finite non-negative number"));
        }
        if let Some(w) = self.sliding_window {
            if w == 0 {
                return Err(ModelError::refused("sliding_window", 0, "must be positive"));
            }
        }
        Ok(())
    }

    /// Width of q (all heads).
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    /// Width of k or v (all KV heads).
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
}

pub(crate) fn rope_params(cfg: &Value) -> Result<(f64, Option<RopeScaling>), ModelError> {
    // transformers 5 writes `rope_parameters`; 4.x wrote `rope_theta` and `rope_scaling`.
    let params = get(cfg, "rope_parameters");
    let theta = match params.and_then(|p| get(p, "rope_theta")) {
        Some(v) => {
            v.as_f64().ok_or_else(|| ModelError::refused("rope_parameters.rope_theta", v, "expected a number"))?
        }
        None => f64_field(cfg, "rope_theta")?.unwrap_or(10000.0),
    };
    if !(theta.is_finite() && theta > 0.0) {
        return Err(ModelError::refused("rope_theta", theta, "must be a positive number"));
    }
    let (field, scaling) = match (get(cfg, "rope_scaling"), params) {
        (Some(s), _) => ("rope_scaling", s),
        (None, Some(p)) => ("rope_parameters", p),
        (None, None) => return Ok((theta, None)),
    };
    let kind = get(scaling, "rope_type").or_else(|| get(scaling, "type")).and_then(Value::as_str).unwrap_or("default");
    match kind {
        "default" => Ok((theta, None)),
        "llama3" => {
            let num = |k: &str| -> Result<f64, ModelError> {
                get(scaling, k).and_then(Value::as_f64).ok_or_else(|| {
                    ModelError::refused(format!("{field}.{k}"), "missing", "llama3 rope scaling needs it")
                })
            };
            let s = RopeScaling::Llama3 {
                factor: num("factor")?,
                low_freq_factor: num("low_freq_factor")?,
                high_freq_factor: num("high_freq_factor")?,
                original_max_position: num("original_max_position_embeddings")?,
            };
            if let RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position } = &s {
                if !(*factor > 0.0
                    && *high_freq_factor > *low_freq_factor
                    && *low_freq_factor > 0.0
                    && *original_max_position > 0.0)
                {
                    return Err(ModelError::refused(field, scaling, "inconsistent llama3 scaling factors"));
                }
            }
            Ok((theta, Some(s)))
        }
        other => {
            Err(ModelError::refused(format!("{field}.rope_type"), other, "only Llama 3's rope scaling is supported"))
        }
    }
}

#[cfg(test)]
mod tests;
