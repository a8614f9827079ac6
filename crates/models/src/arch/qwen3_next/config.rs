//! The config of Qwen3-Next and of Qwen3.5's text models (dense and MoE) from an HF config.json, in both spellings:
//! as published (`full_attention_interval`, top-level `rope_theta` and `partial_rotary_factor`) and as
//! transformers 5 writes it (`layer_types`, `rope_parameters` holding both). Defaults are the config classes' own.

use crate::config::{
    bool_field, f64_field, get, ids, index_list, need, rope_params, usize_field, ArchKind, DeltaConfig, ModelConfig,
    MoeConfig, Routing, Scoring,
};
use crate::error::ModelError;
use serde_json::Value;

/// Reads and checks an HF config.json of class `name`.
pub(crate) fn from_hf(cfg: &Value, name: &str) -> Result<ModelConfig, ModelError> {
    let act = get(cfg, "hidden_act").and_then(Value::as_str).unwrap_or("silu");
    if act != "silu" {
        return Err(ModelError::refused("hidden_act", act, "only SiLU is supported"));
    }
    if bool_field(cfg, "attention_bias") == Some(true) {
        return Err(ModelError::refused("attention_bias", true, "Qwen3-Next's attention has no bias"));
    }
    let hidden = need(cfg, "hidden_size")?;
    let n_layers = need(cfg, "num_hidden_layers")?;
    let moe = match name {
        "Qwen3_5ForCausalLM" => None,
        // Qwen3.5-MoE routes in every layer and always normalises the chosen weights.
        "Qwen3_5MoeForCausalLM" => experts(cfg, n_layers, true)?,
        _ => experts(cfg, n_layers, false)?,
    };
    // Qwen3.5-MoE has no dense MLP; its width is only a placeholder there.
    let intermediate = match (usize_field(cfg, "intermediate_size")?, &moe) {
        (Some(n), _) => n,
        (None, Some(m)) if m.sparse.iter().all(|&s| s) => m.expert_ff,
        (None, _) => need(cfg, "intermediate_size")?,
    };
    let n_heads = need(cfg, "num_attention_heads")?;
    if n_heads == 0 {
        return Err(ModelError::refused("num_attention_heads", 0, "must be positive"));
    }
    let n_kv_heads = usize_field(cfg, "num_key_value_heads")?.unwrap_or(n_heads);
    let head_dim = usize_field(cfg, "head_dim")?.unwrap_or(256);
    let (rope_theta, rope_scaling) = rope_params(cfg)?;
    let delta = DeltaConfig {
        linear: layer_types(cfg, n_layers)?,
        k_heads: positive(cfg, "linear_num_key_heads")?,
        v_heads: positive(cfg, "linear_num_value_heads")?,
        k_dim: positive(cfg, "linear_key_head_dim")?,
        v_dim: positive(cfg, "linear_value_head_dim")?,
        conv: usize_field(cfg, "linear_conv_kernel_dim")?.unwrap_or(4),
        rope_dim: rotary_width(cfg, head_dim)?,
        grouped: name == "Qwen3NextForCausalLM",
    };
    if !delta.v_heads.is_multiple_of(delta.k_heads) {
        return Err(ModelError::refused(
            "linear_num_value_heads",
            delta.v_heads,
            format!("must be a multiple of linear_num_key_heads ({})", delta.k_heads),
        ));
    }
    if !(1..=16).contains(&delta.conv) {
        return Err(ModelError::refused("linear_conv_kernel_dim", delta.conv, "out of bounds (1..=16)"));
    }
    let cfg = ModelConfig {
        arch: ArchKind::Qwen3Next,
        arch_name: name.to_string(),
        vocab_size: need(cfg, "vocab_size")?,
        hidden,
        n_layers,
        n_heads,
        n_kv_heads,
        head_dim,
        intermediate,
        norm_eps: f64_field(cfg, "rms_norm_eps")?.unwrap_or(1e-6) as f32,
        rope_theta,
        rope_scaling,
        max_position: usize_field(cfg, "max_position_embeddings")?.unwrap_or(32768),
        sliding_window: None,
        window_cap: None,
        qkv_bias: false,
        qk_norm: true,
        tie_embeddings: bool_field(cfg, "tie_word_embeddings").unwrap_or(false),
        bos_token_id: ids(get(cfg, "bos_token_id")).first().copied(),
        eos_token_ids: ids(get(cfg, "eos_token_id")),
        moe,
        mla: None,
        delta: Some(delta),
    };
    cfg.check_dims()?;
    Ok(cfg)
}

fn positive(cfg: &Value, key: &str) -> Result<usize, ModelError> {
    match need(cfg, key)? {
        0 => Err(ModelError::refused(key, 0, "must be positive")),
        n if n > 1 << 16 => Err(ModelError::refused(key, n, "out of bounds")),
        n => Ok(n),
    }
}

/// Per layer, a delta-net layer or not: `layer_types` when given, else every `full_attention_interval`-th layer
/// (4 by default) is full attention.
fn layer_types(cfg: &Value, n_layers: usize) -> Result<Vec<bool>, ModelError> {
    let Some(v) = get(cfg, "layer_types") else {
        let every = usize_field(cfg, "full_attention_interval")?.unwrap_or(4);
        if every == 0 {
            return Err(ModelError::refused("full_attention_interval", 0, "must be positive"));
        }
        return Ok((0..n_layers).map(|i| !(i + 1).is_multiple_of(every)).collect());
    };
    let list = v.as_array().ok_or_else(|| ModelError::refused("layer_types", v, "expected a list of layer types"))?;
    if list.len() != n_layers {
        return Err(ModelError::refused(
            "layer_types",
            list.len(),
            format!("must name one type for each of the {n_layers} layers"),
        ));
    }
    list.iter()
        .map(|t| match t.as_str() {
            Some("linear_attention") => Ok(true),
            Some("full_attention") => Ok(false),
            _ => Err(ModelError::refused("layer_types", t, "each must be linear_attention or full_attention")),
        })
        .collect()
}

/// The rotated width of a full-attention head: `partial_rotary_factor` (in `rope_parameters` or at the top level;
/// 0.25 by default) of the head.
fn rotary_width(cfg: &Value, head_dim: usize) -> Result<usize, ModelError> {
    let factor = match get(cfg, "rope_parameters").and_then(|p| get(p, "partial_rotary_factor")) {
        Some(v) => v
            .as_f64()
            .ok_or_else(|| ModelError::refused("rope_parameters.partial_rotary_factor", v, "expected a number"))?,
        None => f64_field(cfg, "partial_rotary_factor")?.unwrap_or(0.25),
    };
    let d = (head_dim as f64 * factor) as usize;
    if !(factor > 0.0 && factor <= 1.0) || d == 0 || !d.is_multiple_of(2) {
        return Err(ModelError::refused(
            "partial_rotary_factor",
            factor,
            format!("must rotate an even, positive part of the {head_dim}-wide head"),
        ));
    }
    Ok(d)
}

/// The routed layout: softmax, top-k, `norm_topk_prob` (on by default here), a shared expert scaled by its own
/// sigmoid gate; layers by `decoder_sparse_step` and `mlp_only_layers` (Qwen3-Next), or every layer with the
/// weights always normalised (`every`: Qwen3.5-MoE, whose config has none of those keys). No experts
/// (`num_experts` 0): all dense.
fn experts(cfg: &Value, n_layers: usize, every: bool) -> Result<Option<MoeConfig>, ModelError> {
    let n_experts = usize_field(cfg, "num_experts")?.unwrap_or(0);
    if n_experts == 0 {
        return Ok(None);
    }
    let step = if every { 1 } else { usize_field(cfg, "decoder_sparse_step")?.unwrap_or(1) };
    if step == 0 {
        return Err(ModelError::refused("decoder_sparse_step", 0, "must be positive"));
    }
    let shared_ff = usize_field(cfg, "shared_expert_intermediate_size")?.unwrap_or(0);
    let m = MoeConfig {
        routing: Routing {
            n_experts,
            top_k: need(cfg, "num_experts_per_tok")?,
            scoring: Scoring::Softmax,
            groups: None,
            normalise: every || bool_field(cfg, "norm_topk_prob").unwrap_or(true),
            scale: 1.0,
            choice_bias: false,
        },
        expert_ff: need(cfg, "moe_intermediate_size")?,
        shared_ff,
        sparse: if every {
            vec![true; n_layers]
        } else {
            crate::moe::qwen_sparse_layers(n_layers, step, &index_list(cfg, "mlp_only_layers")?)
        },
        shared_gate: shared_ff > 0,
    };
    crate::moe::check(&m)?;
    Ok(Some(m))
}
