//! The config of Qwen3-Next and of Qwen3.5's text models (dense and MoE) from an HF config.json, in both spellings:
//! as published (`full_attention_interval`, top-level `rope_theta` and `partial_rotary_factor`) and as
//! transformers 5 writes it (`layer_types`, `rope_parameters` holding both). Defaults are the config classes' own.

use crate::config::{
    bool_field, f64_field, get, gguf_tensor_name, ids, index_list, need, rope_params, usize_field, ArchKind,
    DeltaConfig, GgufKeys, ModelConfig, MoeConfig, Routing, Scoring,
};
use crate::error::ModelError;
use crate::weights::{GgufFile, WeightSource};
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
        tiled: false,
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

/// Reads and checks a GGUF's `qwen3next` metadata as llama.cpp's converter writes it: the delta net as `ssm.*`
/// (`state_size` the key width, `group_count` the key heads, `time_step_rank` the value heads, `inner_size` their
/// width), the layer kinds as `attention.recurrent_layers` (else every `full_attention_interval`-th is attention),
/// experts where a layer has a router; llama.cpp's graph always normalises the chosen weights, so kvad does too.
pub(crate) fn from_gguf(g: &GgufFile, arch: &str) -> Result<ModelConfig, ModelError> {
    let meta = GgufKeys { g, arch };
    // The converter appends the multi-token-prediction layers as blocks past the model's own.
    let n_layers = meta.need("block_count")?.saturating_sub(meta.uint("nextn_predict_layers")?.unwrap_or(0));
    let n_heads = meta.need("attention.head_count")?;
    let head_dim = meta.need("attention.key_length")?;
    let v_heads = meta.need("ssm.time_step_rank")?;
    let inner = meta.need("ssm.inner_size")?;
    if v_heads == 0 || !inner.is_multiple_of(v_heads) {
        return Err(ModelError::refused(
            meta.key("ssm.inner_size"),
            inner,
            format!("must be a multiple of ssm.time_step_rank ({v_heads})"),
        ));
    }
    let linear = match g.get(&meta.key("attention.recurrent_layers")).and_then(|v| v.as_array()) {
        Some(a) => a.iter().map(|v| v.as_bool().or_else(|| v.as_u64().map(|n| n != 0))).collect::<Option<Vec<_>>>(),
        None => None,
    };
    let linear = match linear {
        Some(l) if l.len() >= n_layers => l[..n_layers].to_vec(),
        Some(l) => {
            return Err(ModelError::refused(
                meta.key("attention.recurrent_layers"),
                l.len(),
                format!("must name a kind for each of the {n_layers} layers"),
            ))
        }
        None => {
            let every = meta.uint("full_attention_interval")?.unwrap_or(4).max(1);
            (0..n_layers).map(|i| !(i + 1).is_multiple_of(every)).collect()
        }
    };
    let delta = DeltaConfig {
        linear,
        k_heads: meta.need("ssm.group_count")?,
        v_heads,
        k_dim: meta.need("ssm.state_size")?,
        v_dim: inner / v_heads,
        conv: meta.uint("ssm.conv_kernel")?.unwrap_or(4),
        rope_dim: meta.need("rope.dimension_count")?,
        // qwen3next keeps the checkpoint's grouped b/a (ssm_ba); qwen35 splits them (ssm_beta, ssm_alpha) and tiles
        // every value-head tensor over the key heads.
        grouped: arch == "qwen3next",
        tiled: arch != "qwen3next",
    };
    if delta.k_heads == 0 || !delta.v_heads.is_multiple_of(delta.k_heads) || !(1..=16).contains(&delta.conv) {
        return Err(ModelError::refused(
            meta.key("ssm.group_count"),
            delta.k_heads,
            format!("must divide ssm.time_step_rank ({v_heads}), with ssm.conv_kernel in 1..=16"),
        ));
    }
    let sparse: Vec<bool> = (0..n_layers).map(|i| g.info(&format!("blk.{i}.ffn_gate_inp.weight")).is_some()).collect();
    let moe = match meta.uint("expert_count")? {
        Some(n) if n > 0 => {
            let shared_ff = meta.uint("expert_shared_feed_forward_length")?.unwrap_or(0);
            let m = MoeConfig {
                routing: Routing {
                    n_experts: n,
                    top_k: meta.need("expert_used_count")?,
                    scoring: Scoring::Softmax,
                    groups: None,
                    normalise: true,
                    scale: 1.0,
                    choice_bias: false,
                },
                expert_ff: meta.need("expert_feed_forward_length")?,
                shared_ff,
                sparse,
                shared_gate: shared_ff > 0,
            };
            crate::moe::check(&m)?;
            Some(m)
        }
        _ => None,
    };
    let embd =
        g.info("token_embd.weight").ok_or_else(|| ModelError::MissingTensor { name: "token_embd.weight".into() })?;
    let cfg = ModelConfig {
        arch: ArchKind::Qwen3Next,
        arch_name: format!("gguf:{arch}"),
        vocab_size: match meta.uint("vocab_size")? {
            Some(v) => v,
            None => embd.shape.first().copied().unwrap_or(0),
        },
        hidden: meta.need("embedding_length")?,
        n_layers,
        n_heads,
        n_kv_heads: meta.uint("attention.head_count_kv")?.unwrap_or(n_heads),
        head_dim,
        intermediate: meta.uint("feed_forward_length")?.unwrap_or(1),
        norm_eps: meta.float("attention.layer_norm_rms_epsilon").unwrap_or(1e-6) as f32,
        rope_theta: meta.float("rope.freq_base").unwrap_or(10000.0),
        rope_scaling: None,
        max_position: meta.uint("context_length")?.unwrap_or(32768),
        sliding_window: None,
        window_cap: None,
        qkv_bias: false,
        qk_norm: true,
        tie_embeddings: g.info("output.weight").is_none(),
        bos_token_id: meta.id("tokenizer.ggml.bos_token_id"),
        eos_token_ids: meta.eos_ids(),
        moe,
        mla: None,
        delta: Some(delta),
    };
    cfg.check_dims()?;
    Ok(cfg)
}

/// HF tensor name to llama.cpp's `qwen3next` one. The delta net's input projection is read, from a GGUF, as the
/// converter splits it: `in_proj_qkv` (q, k, v), `in_proj_z` and the grouped `in_proj_ba`.
pub(crate) fn gguf_name(hf: &str) -> String {
    gguf_tensor_name(hf, LAYER_NAMES)
}

/// Layer tensors: HF prefix, GGUF name (the delta net's `ssm_*`; `post_attention_norm`, not `ffn_norm`).
const LAYER_NAMES: &[(&str, &str)] = &[
    ("input_layernorm", "attn_norm"),
    ("post_attention_layernorm", "post_attention_norm"),
    ("linear_attn.A_log", "ssm_a"),
    ("linear_attn.conv1d", "ssm_conv1d"),
    ("linear_attn.dt_bias", "ssm_dt.bias"),
    ("linear_attn.in_proj_qkv", "attn_qkv"),
    ("linear_attn.in_proj_z", "attn_gate"),
    ("linear_attn.in_proj_ba", "ssm_ba"),
    ("linear_attn.in_proj_b", "ssm_beta"),
    ("linear_attn.in_proj_a", "ssm_alpha"),
    ("linear_attn.norm", "ssm_norm"),
    ("linear_attn.out_proj", "ssm_out"),
    ("self_attn.q_proj", "attn_q"),
    ("self_attn.k_proj", "attn_k"),
    ("self_attn.v_proj", "attn_v"),
    ("self_attn.o_proj", "attn_output"),
    ("self_attn.q_norm", "attn_q_norm"),
    ("self_attn.k_norm", "attn_k_norm"),
    ("mlp.experts.gate_proj", "ffn_gate_exps"),
    ("mlp.experts.up_proj", "ffn_up_exps"),
    ("mlp.experts.down_proj", "ffn_down_exps"),
    ("mlp.gate.weight", "ffn_gate_inp.weight"),
    ("mlp.shared_expert_gate", "ffn_gate_inp_shexp"),
    ("mlp.shared_expert.gate_proj", "ffn_gate_shexp"),
    ("mlp.shared_expert.up_proj", "ffn_up_shexp"),
    ("mlp.shared_expert.down_proj", "ffn_down_shexp"),
    ("mlp.gate_proj", "ffn_gate"),
    ("mlp.up_proj", "ffn_up"),
    ("mlp.down_proj", "ffn_down"),
];
