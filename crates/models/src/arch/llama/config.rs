//! The llama family's config: from an HF config.json (Llama, Mistral, Qwen2, Qwen3) or a GGUF's metadata (llama,
//! qwen2, qwen3), and its GGUF tensor names.

use crate::config::{
    bool_field, f64_field, get, gguf_tensor_name, ids, index_list, need, rope_params, usize_field, ArchKind, GgufKeys,
    ModelConfig, MoeConfig, RopeScaling, Routing, Scoring,
};
use crate::error::ModelError;
use crate::weights::{GgufFile, WeightSource};
use serde_json::Value;

/// RoPE in the rotate-half layout pairs the two halves of a head.
fn check(cfg: &ModelConfig) -> Result<(), ModelError> {
    if !cfg.head_dim.is_multiple_of(2) {
        return Err(ModelError::refused("head_dim", cfg.head_dim, "RoPE needs an even head width"));
    }
    Ok(())
}

/// Reads and checks an HF config.json of class `name`.
pub(crate) fn from_hf(cfg: &Value, name: &str) -> Result<ModelConfig, ModelError> {
    let act = get(cfg, "hidden_act").and_then(Value::as_str).unwrap_or("silu");
    if act != "silu" {
        return Err(ModelError::refused("hidden_act", act, "only SiLU is supported"));
    }
    if bool_field(cfg, "mlp_bias") == Some(true) {
        return Err(ModelError::refused("mlp_bias", true, "an MLP bias is not supported"));
    }
    // This family rotates the two halves of a head; a config declaring adjacent pairs asks for other arithmetic.
    for key in ["rope_interleave", "rope_interleaved", "rotary_interleaved"] {
        if bool_field(cfg, key) == Some(true) {
            return Err(ModelError::refused(key, true, format!("interleaved RoPE is not what {name} computes")));
        }
    }
    let is_qwen2 = name == "Qwen2ForCausalLM";
    if !is_qwen2 && bool_field(cfg, "attention_bias") == Some(true) {
        return Err(ModelError::refused("attention_bias", true, "an attention bias is supported only for Qwen2"));
    }
    let hidden = need(cfg, "hidden_size")?;
    let n_heads = need(cfg, "num_attention_heads")?;
    if n_heads == 0 {
        return Err(ModelError::refused("num_attention_heads", 0, "must be positive"));
    }
    let n_kv_heads = usize_field(cfg, "num_key_value_heads")?.unwrap_or(n_heads);
    let qwen3 = matches!(name, "Qwen3ForCausalLM" | "Qwen3MoeForCausalLM");
    let default_head_dim = if qwen3 { 128 } else { hidden / n_heads };
    let head_dim = usize_field(cfg, "head_dim")?.unwrap_or(default_head_dim);
    let (rope_theta, rope_scaling) = rope_params(cfg)?;
    let mut max_position = usize_field(cfg, "max_position_embeddings")?.unwrap_or(4096);
    let mut window_cap = None;
    // Mistral applies its window whenever it is set, as a mask: a query sees the last `window` keys, as
    // transformers does. Qwen's window applies only from layer `max_window_layers` on; kvad runs such a model at a
    // context no wider than the window, where the window changes nothing (the seed's rule).
    let sliding_window = match name {
        "MistralForCausalLM" => usize_field(cfg, "sliding_window")?,
        "Qwen2ForCausalLM" | "Qwen3ForCausalLM" | "Qwen3MoeForCausalLM"
            if bool_field(cfg, "use_sliding_window") == Some(true) =>
        {
            if let Some(w) = usize_field(cfg, "sliding_window")? {
                max_position = max_position.min(w);
                window_cap = Some(w);
            }
            None
        }
        _ => None,
    };
    let n_layers = need(cfg, "num_hidden_layers")?;
    let moe = if name == "Qwen3MoeForCausalLM" { Some(qwen3_moe(cfg, n_layers)?) } else { None };
    let cfg = ModelConfig {
        arch: ArchKind::Llama,
        arch_name: name.to_string(),
        vocab_size: need(cfg, "vocab_size")?,
        hidden,
        n_layers,
        n_heads,
        n_kv_heads,
        head_dim,
        intermediate: need(cfg, "intermediate_size")?,
        norm_eps: f64_field(cfg, "rms_norm_eps")?.unwrap_or(1e-6) as f32,
        rope_theta,
        rope_scaling,
        max_position,
        sliding_window,
        window_cap,
        qkv_bias: is_qwen2,
        qk_norm: qwen3,
        tie_embeddings: bool_field(cfg, "tie_word_embeddings").unwrap_or(false),
        bos_token_id: ids(get(cfg, "bos_token_id")).first().copied(),
        eos_token_ids: ids(get(cfg, "eos_token_id")),
        moe,
        mla: None,
        delta: None,
    };
    cfg.check_dims()?;
    check(&cfg)?;
    Ok(cfg)
}

/// Qwen3-MoE's routed layout: softmax, top-k, `norm_topk_prob`; layers by `decoder_sparse_step` and
/// `mlp_only_layers`. (Published configs say `num_experts`; transformers 5 writes `num_local_experts`.)
fn qwen3_moe(cfg: &Value, n_layers: usize) -> Result<MoeConfig, ModelError> {
    let n_experts = match usize_field(cfg, "num_experts")? {
        Some(n) => n,
        None => need(cfg, "num_local_experts")?,
    };
    let mlp_only = index_list(cfg, "mlp_only_layers")?;
    let step = usize_field(cfg, "decoder_sparse_step")?.unwrap_or(1);
    if step == 0 {
        return Err(ModelError::refused("decoder_sparse_step", 0, "must be positive"));
    }
    if let Some(v) = get(cfg, "shared_expert_intermediate_size").filter(|v| v.as_u64() != Some(0)) {
        return Err(ModelError::refused("shared_expert_intermediate_size", v, "Qwen3-MoE has no shared expert"));
    }
    let m = MoeConfig {
        routing: Routing {
            n_experts,
            top_k: need(cfg, "num_experts_per_tok")?,
            scoring: Scoring::Softmax,
            groups: None,
            normalise: bool_field(cfg, "norm_topk_prob").unwrap_or(false),
            scale: 1.0,
            choice_bias: false,
        },
        expert_ff: need(cfg, "moe_intermediate_size")?,
        shared_ff: 0,
        sparse: crate::moe::qwen_sparse_layers(n_layers, step, &mlp_only),
        shared_gate: false,
    };
    crate::moe::check(&m)?;
    Ok(m)
}

/// GGUF architectures of the family, with whether q/k carry a bias (qwen2) or a norm (qwen3).
const GGUF_VARIANTS: &[(&str, bool, bool)] =
    &[("llama", false, false), ("qwen2", true, false), ("qwen3", false, true), ("qwen3moe", false, true)];

/// Reads and checks a GGUF's metadata (`<arch>.*` keys) for architecture `arch`.
pub(crate) fn from_gguf(g: &GgufFile, arch: &str) -> Result<ModelConfig, ModelError> {
    let Some(&(_, qkv_bias, qk_norm)) = GGUF_VARIANTS.iter().find(|(a, _, _)| *a == arch) else {
        return Err(ModelError::refused("general.architecture", arch, "not a llama-family GGUF architecture"));
    };
    let meta = GgufKeys { g, arch };
    let hidden = meta.need("embedding_length")?;
    let n_heads = meta.need("attention.head_count")?;
    if n_heads == 0 {
        return Err(ModelError::refused(meta.key("attention.head_count"), 0, "must be positive"));
    }
    let n_kv_heads = meta.uint("attention.head_count_kv")?.unwrap_or(n_heads);
    let head_dim = meta.uint("attention.key_length")?.unwrap_or(hidden / n_heads);
    if let Some(rd) = meta.uint("rope.dimension_count")? {
        if rd != head_dim {
            return Err(ModelError::refused(
                meta.key("rope.dimension_count"),
                rd,
                format!("partial RoPE is not supported (head width {head_dim})"),
            ));
        }
    }
    if let Some(t) = g.get(&meta.key("rope.scaling.type")).and_then(|v| v.as_str()) {
        if t != "none" {
            return Err(ModelError::refused(
                meta.key("rope.scaling.type"),
                t,
                "only Llama 3's rope scaling (rope_freqs.weight) is supported",
            ));
        }
    }
    let rope_scaling = match g.info("rope_freqs.weight") {
        Some(_) => Some(RopeScaling::Divisors(g.load_f32("rope_freqs.weight")?)),
        None => None,
    };
    let embd =
        g.info("token_embd.weight").ok_or_else(|| ModelError::MissingTensor { name: "token_embd.weight".into() })?;
    let vocab_size = match meta.uint("vocab_size")? {
        Some(v) => v,
        None => embd.shape.first().copied().unwrap_or(0),
    };
    let eos = meta.eos_ids();
    let n_layers = meta.need("block_count")?;
    let moe = if arch == "qwen3moe" {
        let n_experts = meta.need("expert_count")?;
        // A layer routes when its router is in the file (llama.cpp writes each layer as what it is).
        let sparse = (0..n_layers).map(|i| g.info(&format!("blk.{i}.ffn_gate_inp.weight")).is_some()).collect();
        let m = MoeConfig {
            routing: Routing {
                n_experts,
                top_k: meta.need("expert_used_count")?,
                scoring: Scoring::Softmax,
                groups: None,
                // llama.cpp's qwen3moe graph always normalises the chosen weights.
                normalise: g.get(&meta.key("expert_weights_norm")).and_then(|v| v.as_bool()).unwrap_or(true),
                scale: 1.0,
                choice_bias: false,
            },
            expert_ff: meta.need("expert_feed_forward_length")?,
            shared_ff: 0,
            sparse,
            shared_gate: false,
        };
        crate::moe::check(&m)?;
        Some(m)
    } else {
        None
    };
    let cfg = ModelConfig {
        arch: ArchKind::Llama,
        arch_name: format!("gguf:{arch}"),
        vocab_size,
        hidden,
        n_layers,
        n_heads,
        n_kv_heads,
        head_dim,
        intermediate: match &moe {
            // Dense layers of a routed model (mlp_only_layers) have their width; a file without any may omit it.
            Some(m) => meta.uint("feed_forward_length")?.unwrap_or(m.expert_ff),
            None => meta.need("feed_forward_length")?,
        },
        norm_eps: meta.float("attention.layer_norm_rms_epsilon").unwrap_or(1e-5) as f32,
        rope_theta: meta.float("rope.freq_base").unwrap_or(10000.0),
        rope_scaling,
        max_position: meta.uint("context_length")?.unwrap_or(4096),
        sliding_window: meta.uint("attention.sliding_window")?,
        window_cap: None,
        qkv_bias,
        qk_norm,
        tie_embeddings: g.info("output.weight").is_none(),
        bos_token_id: meta.id("tokenizer.ggml.bos_token_id"),
        eos_token_ids: eos,
        moe,
        mla: None,
        delta: None,
    };
    if let Some(RopeScaling::Divisors(d)) = &cfg.rope_scaling {
        if d.len() != head_dim / 2 {
            return Err(ModelError::refused(
                "rope_freqs.weight",
                format!("{} values", d.len()),
                format!("expected head_dim/2 = {}", head_dim / 2),
            ));
        }
    }
    cfg.check_dims()?;
    check(&cfg)?;
    Ok(cfg)
}

/// llama.cpp's converter permutes q/k rows for its RoPE in GGUFs of the `llama` architecture only.
pub(crate) fn gguf_permute(cfg: &ModelConfig, arch: &str) -> Option<(usize, usize)> {
    (arch == "llama").then_some((cfg.n_heads, cfg.n_kv_heads))
}

/// HF tensor name to GGUF's.
pub(crate) fn gguf_name(hf: &str) -> String {
    gguf_tensor_name(hf, LAYER_NAMES)
}

/// Layer tensors: HF prefix, GGUF name.
const LAYER_NAMES: &[(&str, &str)] = &[
    ("mlp.experts.gate_proj", "ffn_gate_exps"),
    ("mlp.experts.up_proj", "ffn_up_exps"),
    ("mlp.experts.down_proj", "ffn_down_exps"),
    ("mlp.gate.weight", "ffn_gate_inp.weight"),
    ("input_layernorm", "attn_norm"),
    ("self_attn.q_proj", "attn_q"),
    ("self_attn.k_proj", "attn_k"),
    ("self_attn.v_proj", "attn_v"),
    ("self_attn.o_proj", "attn_output"),
    ("self_attn.q_norm", "attn_q_norm"),
    ("self_attn.k_norm", "attn_k_norm"),
    ("post_attention_layernorm", "ffn_norm"),
    ("mlp.gate_proj", "ffn_gate"),
    ("mlp.up_proj", "ffn_up"),
    ("mlp.down_proj", "ffn_down"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gguf_names_map_every_layer_tensor() {
        assert_eq!(gguf_name("model.layers.3.self_attn.q_proj.weight"), "blk.3.attn_q.weight");
        assert_eq!(gguf_name("model.layers.12.mlp.down_proj.weight"), "blk.12.ffn_down.weight");
        assert_eq!(gguf_name("model.layers.0.self_attn.k_norm.weight"), "blk.0.attn_k_norm.weight");
        assert_eq!(gguf_name("lm_head.weight"), "output.weight");
    }
}
