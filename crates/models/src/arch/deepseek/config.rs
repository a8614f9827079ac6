//! DeepSeek-V2/V3's config: from an HF config.json (as published, and as transformers 5 writes it) or a GGUF's
//! `deepseek2` metadata in llama.cpp's layout, and its GGUF tensor names. Values where transformers and DeepSeek's
//! own code disagree, or that kvad does not run, are refused naming the field.

use crate::config::{
    bool_field, f64_field, get, gguf_tensor_name, ids, need, usize_field, ArchKind, GgufKeys, MlaConfig, ModelConfig,
    MoeConfig, RopeScaling, Routing, Scoring,
};
use crate::error::ModelError;
use crate::weights::{GgufFile, WeightSource};
use serde_json::Value;

/// YaRN's magnitude correction, `0.1·m·ln(scale) + 1` (1 below a scale of 1).
fn get_mscale(scale: f64, m: f64) -> f64 {
    if scale <= 1.0 {
        1.0
    } else {
        0.1 * m * scale.ln() + 1.0
    }
}

/// The rope part: theta, YaRN if any, and the two scales it implies (on cos/sin, on the softmax).
struct RopeParts {
    theta: f64,
    scaling: Option<RopeScaling>,
    mscale: f32,
    softmax_factor: f64,
}

fn hf_rope(cfg: &Value) -> Result<RopeParts, ModelError> {
    let params = get(cfg, "rope_parameters");
    let theta = match params.and_then(|p| get(p, "rope_theta")) {
        Some(v) => {
            v.as_f64().ok_or_else(|| ModelError::refused("rope_parameters.rope_theta", v, "expected a number"))?
        }
        None => f64_field(cfg, "rope_theta")?.unwrap_or(10000.0),
    };
    if !(theta.is_finite() && theta > 1.0) {
        return Err(ModelError::refused("rope_theta", theta, "must be a number above 1"));
    }
    let (field, s) = match (get(cfg, "rope_scaling"), params) {
        (Some(s), _) => ("rope_scaling", s),
        (None, Some(p)) => ("rope_parameters", p),
        (None, None) => return Ok(RopeParts { theta, scaling: None, mscale: 1.0, softmax_factor: 1.0 }),
    };
    let kind = get(s, "rope_type").or_else(|| get(s, "type")).and_then(Value::as_str).unwrap_or("default");
    match kind {
        "default" => return Ok(RopeParts { theta, scaling: None, mscale: 1.0, softmax_factor: 1.0 }),
        "yarn" => {}
        other => {
            return Err(ModelError::refused(format!("{field}.rope_type"), other, "DeepSeek runs default or yarn RoPE"))
        }
    }
    let num = |k: &str| -> Result<Option<f64>, ModelError> {
        match get(s, k) {
            None => Ok(None),
            Some(v) => {
                v.as_f64().map(Some).ok_or_else(|| ModelError::refused(format!("{field}.{k}"), v, "expected a number"))
            }
        }
    };
    let original = num("original_max_position_embeddings")?.ok_or_else(|| {
        ModelError::refused(format!("{field}.original_max_position_embeddings"), "missing", "YaRN needs it")
    })?;
    let factor = match num("factor")? {
        Some(f) => f,
        None => usize_field(cfg, "max_position_embeddings")?.unwrap_or(0) as f64 / original,
    };
    if !(factor.is_finite() && factor > 0.0 && original > 0.0) {
        return Err(ModelError::refused(format!("{field}.factor"), factor, "YaRN needs a positive factor and context"));
    }
    let (mscale, all_dim) = (num("mscale")?.unwrap_or(0.0), num("mscale_all_dim")?.unwrap_or(0.0));
    let attention_factor = match num("attention_factor")? {
        Some(a) => a,
        None if mscale != 0.0 && all_dim != 0.0 => get_mscale(factor, mscale) / get_mscale(factor, all_dim),
        None => get_mscale(factor, 1.0),
    };
    let softmax_factor = if all_dim != 0.0 { get_mscale(factor, all_dim).powi(2) } else { 1.0 };
    let beta = |k: &str, d: f64| -> Result<f64, ModelError> { Ok(num(k)?.filter(|v| *v != 0.0).unwrap_or(d)) };
    if let Some(false) = get(s, "truncate").and_then(Value::as_bool) {
        return Err(ModelError::refused(format!("{field}.truncate"), false, "only YaRN's truncated ramp is supported"));
    }
    Ok(RopeParts {
        theta,
        scaling: Some(RopeScaling::Yarn {
            factor,
            original_max_position: original,
            beta_fast: beta("beta_fast", 32.0)?,
            beta_slow: beta("beta_slow", 1.0)?,
        }),
        mscale: attention_factor as f32,
        softmax_factor,
    })
}

/// Reads and checks an HF config.json of `DeepseekV2ForCausalLM` or `DeepseekV3ForCausalLM`.
pub(crate) fn from_hf(cfg: &Value, name: &str) -> Result<ModelConfig, ModelError> {
    let v3 = name == "DeepseekV3ForCausalLM";
    let act = get(cfg, "hidden_act").and_then(Value::as_str).unwrap_or("silu");
    if act != "silu" {
        return Err(ModelError::refused("hidden_act", act, "only SiLU is supported"));
    }
    for key in ["attention_bias", "mlp_bias"] {
        if bool_field(cfg, key) == Some(true) {
            return Err(ModelError::refused(key, true, "DeepSeek checkpoints have no bias here; one is not supported"));
        }
    }
    let hidden = need(cfg, "hidden_size")?;
    let n_heads = need(cfg, "num_attention_heads")?;
    let n_kv = usize_field(cfg, "num_key_value_heads")?.unwrap_or(n_heads);
    if n_kv != n_heads {
        return Err(ModelError::refused(
            "num_key_value_heads",
            n_kv,
            format!("latent attention expands to every head ({n_heads}); transformers needs them equal"),
        ));
    }
    let n_layers = need(cfg, "num_hidden_layers")?;
    let rope = hf_rope(cfg)?;
    let (nope, rope_dim, v_dim) =
        (need(cfg, "qk_nope_head_dim")?, need(cfg, "qk_rope_head_dim")?, need(cfg, "v_head_dim")?);
    let interleaved = if v3 { bool_field(cfg, "rope_interleave").unwrap_or(true) } else { true };
    let mla = MlaConfig {
        q_lora_rank: usize_field(cfg, "q_lora_rank")?,
        kv_lora_rank: need(cfg, "kv_lora_rank")?,
        nope_dim: nope,
        rope_dim,
        v_dim,
        rope_interleaved: interleaved,
        softmax_scale: (((nope + rope_dim) as f64).powf(-0.5) * rope.softmax_factor) as f32,
        rope_mscale: rope.mscale,
    };
    let moe = match usize_field(cfg, "n_routed_experts")? {
        None => None,
        Some(n_experts) => Some(hf_moe(cfg, v3, n_experts, n_layers)?),
    };
    let c = ModelConfig {
        arch: ArchKind::Deepseek,
        arch_name: name.to_string(),
        vocab_size: need(cfg, "vocab_size")?,
        hidden,
        n_layers,
        n_heads,
        n_kv_heads: n_heads,
        head_dim: nope + rope_dim,
        intermediate: need(cfg, "intermediate_size")?,
        norm_eps: f64_field(cfg, "rms_norm_eps")?.unwrap_or(1e-6) as f32,
        rope_theta: rope.theta,
        rope_scaling: rope.scaling,
        max_position: usize_field(cfg, "max_position_embeddings")?.unwrap_or(4096),
        sliding_window: None,
        window_cap: None,
        qkv_bias: false,
        qk_norm: false,
        tie_embeddings: bool_field(cfg, "tie_word_embeddings").unwrap_or(false),
        bos_token_id: ids(get(cfg, "bos_token_id")).first().copied(),
        eos_token_ids: ids(get(cfg, "eos_token_id")),
        moe,
        mla: Some(mla),
        delta: None,
    };
    check(&c)?;
    Ok(c)
}

fn hf_moe(cfg: &Value, v3: bool, n_experts: usize, n_layers: usize) -> Result<MoeConfig, ModelError> {
    let str_field = |k: &str| get(cfg, k).and_then(Value::as_str);
    let scoring = str_field("scoring_func").unwrap_or(if v3 { "sigmoid" } else { "softmax" });
    let method = str_field("topk_method").unwrap_or(if v3 { "noaux_tc" } else { "greedy" });
    let (want_scoring, methods): (&str, &[&str]) =
        if v3 { ("sigmoid", &["noaux_tc"]) } else { ("softmax", &["greedy", "group_limited_greedy"]) };
    if scoring != want_scoring {
        return Err(ModelError::refused(
            "scoring_func",
            scoring,
            format!("transformers' {} routes by {want_scoring}", if v3 { "DeepseekV3" } else { "DeepseekV2" }),
        ));
    }
    if !methods.contains(&method) {
        return Err(ModelError::refused("topk_method", method, format!("expected one of {}", methods.join(", "))));
    }
    let normalise = bool_field(cfg, "norm_topk_prob").unwrap_or(v3);
    if !v3 && normalise {
        return Err(ModelError::refused(
            "norm_topk_prob",
            true,
            "transformers' DeepseekV2 ignores it while DeepSeek's own code normalises: no reference to follow",
        ));
    }
    let groups = if v3 || method == "group_limited_greedy" {
        let g = usize_field(cfg, "n_group")?.unwrap_or(if v3 { 8 } else { 1 });
        let k = usize_field(cfg, "topk_group")?.unwrap_or(if v3 { 4 } else { 1 });
        Some((g, k))
    } else {
        None
    };
    let first_dense = usize_field(cfg, "first_k_dense_replace")?.unwrap_or(if v3 { 3 } else { 0 });
    let freq = usize_field(cfg, "moe_layer_freq")?.unwrap_or(1);
    if freq == 0 {
        return Err(ModelError::refused("moe_layer_freq", 0, "must be positive"));
    }
    let expert_ff = need(cfg, "moe_intermediate_size")?;
    let n_shared = usize_field(cfg, "n_shared_experts")?.unwrap_or(0);
    let m = MoeConfig {
        routing: Routing {
            n_experts,
            top_k: need(cfg, "num_experts_per_tok")?,
            scoring: if v3 { Scoring::Sigmoid } else { Scoring::Softmax },
            groups,
            normalise,
            scale: f64_field(cfg, "routed_scaling_factor")?.unwrap_or(if v3 { 2.5 } else { 1.0 }) as f32,
            choice_bias: v3,
        },
        expert_ff,
        shared_ff: expert_ff * n_shared,
        sparse: crate::moe::deepseek_sparse_layers(n_layers, first_dense, freq),
        shared_gate: false,
    };
    crate::moe::check(&m)?;
    Ok(m)
}

fn check(c: &ModelConfig) -> Result<(), ModelError> {
    c.check_dims()?;
    let m = c.mla.as_ref().expect("DeepSeek configs have latent attention");
    for (field, v) in [
        ("kv_lora_rank", m.kv_lora_rank),
        ("qk_nope_head_dim", m.nope_dim),
        ("qk_rope_head_dim", m.rope_dim),
        ("v_head_dim", m.v_dim),
    ] {
        if v == 0 || v > 1 << 16 {
            return Err(ModelError::refused(field, v, "out of bounds (1..=65536)"));
        }
    }
    if let Some(q) = m.q_lora_rank {
        if q == 0 || q > 1 << 16 {
            return Err(ModelError::refused("q_lora_rank", q, "out of bounds (1..=65536)"));
        }
    }
    if !m.rope_dim.is_multiple_of(2) {
        return Err(ModelError::refused("qk_rope_head_dim", m.rope_dim, "RoPE needs an even width"));
    }
    Ok(())
}

/// Reads and checks a GGUF's `deepseek2` metadata as llama.cpp's converter writes it (MLA as one KV head of
/// `kv_lora_rank + rope` keys; `key_length_mla`/`value_length_mla` the per-head widths).
pub(crate) fn from_gguf(g: &GgufFile, arch: &str) -> Result<ModelConfig, ModelError> {
    let meta = GgufKeys { g, arch };
    let n_layers = meta.need("block_count")?;
    let n_heads = meta.need("attention.head_count")?;
    let kv_lora = meta.need("attention.kv_lora_rank")?;
    let rope_dim = meta.need("rope.dimension_count")?;
    let (k_mla, v_mla) = (meta.need("attention.key_length_mla")?, meta.need("attention.value_length_mla")?);
    if k_mla <= rope_dim {
        return Err(ModelError::refused(
            meta.key("attention.key_length_mla"),
            k_mla,
            format!("must exceed the rope width {rope_dim}"),
        ));
    }
    let nope = k_mla - rope_dim;
    let theta = meta.float("rope.freq_base").unwrap_or(10000.0);
    let (scaling, mscale, softmax_factor) = match g.get(&meta.key("rope.scaling.type")).and_then(|v| v.as_str()) {
        None | Some("none") => (None, 1.0f32, 1.0),
        Some("yarn") => {
            let factor = meta
                .float("rope.scaling.factor")
                .ok_or_else(|| ModelError::refused(meta.key("rope.scaling.factor"), "missing", "YaRN needs it"))?;
            let original = meta.uint("rope.scaling.original_context_length")?.ok_or_else(|| {
                ModelError::refused(meta.key("rope.scaling.original_context_length"), "missing", "YaRN needs it")
            })?;
            // llama.cpp stores 0.1·mscale_all_dim and assumes mscale = mscale_all_dim (DeepSeek's published values),
            // so cos and sin keep their magnitude.
            let all_dim = meta.float("rope.scaling.yarn_log_multiplier").unwrap_or(0.0) / 0.1;
            let attn = meta.float("rope.scaling.attn_factor").unwrap_or(1.0);
            let sf = if all_dim != 0.0 { get_mscale(factor, all_dim).powi(2) } else { 1.0 };
            let s = RopeScaling::Yarn {
                factor,
                original_max_position: original as f64,
                beta_fast: meta.float("rope.scaling.yarn_beta_fast").unwrap_or(32.0),
                beta_slow: meta.float("rope.scaling.yarn_beta_slow").unwrap_or(1.0),
            };
            (Some(s), attn as f32, sf)
        }
        Some(t) => {
            return Err(ModelError::refused(meta.key("rope.scaling.type"), t, "DeepSeek runs default or yarn RoPE"))
        }
    };
    let mla = MlaConfig {
        q_lora_rank: meta.uint("attention.q_lora_rank")?,
        kv_lora_rank: kv_lora,
        nope_dim: nope,
        rope_dim,
        v_dim: v_mla,
        rope_interleaved: true,
        softmax_scale: ((k_mla as f64).powf(-0.5) * softmax_factor) as f32,
        rope_mscale: mscale,
    };
    let moe = match meta.uint("expert_count")? {
        None | Some(0) => None,
        Some(n_experts) => {
            let gating = meta.uint("expert_gating_func")?.unwrap_or(1);
            let scoring = match gating {
                1 => Scoring::Softmax,
                2 => Scoring::Sigmoid,
                other => {
                    return Err(ModelError::refused(
                        meta.key("expert_gating_func"),
                        other,
                        "expected 1 (softmax) or 2 (sigmoid)",
                    ))
                }
            };
            let bias = (0..n_layers).any(|i| g.info(&format!("blk.{i}.exp_probs_b.bias")).is_some());
            let groups = match (meta.uint("expert_group_count")?, meta.uint("expert_group_used_count")?) {
                (Some(n), Some(k)) if n > 1 || scoring == Scoring::Sigmoid => Some((n, k)),
                _ if scoring == Scoring::Sigmoid => Some((1, 1)),
                _ => None,
            };
            let expert_ff = meta.need("expert_feed_forward_length")?;
            let m = MoeConfig {
                routing: Routing {
                    n_experts,
                    top_k: meta.need("expert_used_count")?,
                    scoring,
                    groups,
                    normalise: g.get(&meta.key("expert_weights_norm")).and_then(|v| v.as_bool()).unwrap_or(false),
                    scale: meta.float("expert_weights_scale").unwrap_or(1.0) as f32,
                    choice_bias: bias,
                },
                expert_ff,
                shared_ff: expert_ff * meta.uint("expert_shared_count")?.unwrap_or(0),
                sparse: (0..n_layers).map(|i| g.info(&format!("blk.{i}.ffn_gate_inp.weight")).is_some()).collect(),
                shared_gate: false,
            };
            crate::moe::check(&m)?;
            Some(m)
        }
    };
    let embd =
        g.info("token_embd.weight").ok_or_else(|| ModelError::MissingTensor { name: "token_embd.weight".into() })?;
    let eos = meta.eos_ids();
    let c = ModelConfig {
        arch: ArchKind::Deepseek,
        arch_name: format!("gguf:{arch}"),
        vocab_size: match meta.uint("vocab_size")? {
            Some(v) => v,
            None => embd.shape.first().copied().unwrap_or(0),
        },
        hidden: meta.need("embedding_length")?,
        n_layers,
        n_heads,
        n_kv_heads: n_heads,
        head_dim: k_mla,
        intermediate: meta.uint("feed_forward_length")?.unwrap_or(1),
        norm_eps: meta.float("attention.layer_norm_rms_epsilon").unwrap_or(1e-6) as f32,
        rope_theta: theta,
        rope_scaling: scaling,
        max_position: meta.uint("context_length")?.unwrap_or(4096),
        sliding_window: None,
        window_cap: None,
        qkv_bias: false,
        qk_norm: false,
        tie_embeddings: g.info("output.weight").is_none(),
        bos_token_id: meta.id("tokenizer.ggml.bos_token_id"),
        eos_token_ids: eos,
        moe,
        mla: Some(mla),
        delta: None,
    };
    check(&c)?;
    Ok(c)
}

/// HF tensor name to llama.cpp's `deepseek2` one. (`kv_b_proj` is split by the converter into `attn_k_b` and
/// `attn_v_b`, read apart: see `mla.rs`.)
pub(crate) fn gguf_name(hf: &str) -> String {
    gguf_tensor_name(hf, LAYER_NAMES)
}

/// Layer tensors: HF prefix, GGUF name.
const LAYER_NAMES: &[(&str, &str)] = &[
    ("mlp.experts.gate_proj", "ffn_gate_exps"),
    ("mlp.experts.up_proj", "ffn_up_exps"),
    ("mlp.experts.down_proj", "ffn_down_exps"),
    ("mlp.gate.weight", "ffn_gate_inp.weight"),
    ("mlp.gate.e_score_correction_bias", "exp_probs_b.bias"),
    ("mlp.shared_experts.gate_proj", "ffn_gate_shexp"),
    ("mlp.shared_experts.up_proj", "ffn_up_shexp"),
    ("mlp.shared_experts.down_proj", "ffn_down_shexp"),
    ("input_layernorm", "attn_norm"),
    ("self_attn.q_proj", "attn_q"),
    ("self_attn.q_a_proj", "attn_q_a"),
    ("self_attn.q_a_layernorm", "attn_q_a_norm"),
    ("self_attn.q_b_proj", "attn_q_b"),
    ("self_attn.kv_a_proj_with_mqa", "attn_kv_a_mqa"),
    ("self_attn.kv_a_layernorm", "attn_kv_a_norm"),
    ("self_attn.kv_b_proj", "attn_kv_b"),
    ("self_attn.k_b_proj", "attn_k_b"),
    ("self_attn.v_b_proj", "attn_v_b"),
    ("self_attn.o_proj", "attn_output"),
    ("post_attention_layernorm", "ffn_norm"),
    ("mlp.gate_proj", "ffn_gate"),
    ("mlp.up_proj", "ffn_up"),
    ("mlp.down_proj", "ffn_down"),
];

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base(v3: bool) -> Value {
        let path = format!(
            "{}/../../fixtures/models/{}/config.json",
            env!("CARGO_MANIFEST_DIR"),
            if v3 { "deepseek-v3" } else { "deepseek-v2" }
        );
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    #[test]
    fn every_refusal_names_field_and_value() {
        let cases: Vec<(bool, Value, &str, &str)> = vec![
            (false, json!({"topk_method": "noaux_tc"}), "topk_method", "noaux_tc"),
            (true, json!({"topk_method": "greedy"}), "topk_method", "greedy"),
            (true, json!({"scoring_func": "softmax"}), "scoring_func", "softmax"),
            (false, json!({"scoring_func": "sigmoid"}), "scoring_func", "sigmoid"),
            (false, json!({"norm_topk_prob": true}), "norm_topk_prob", "true"),
            (false, json!({"num_key_value_heads": 2}), "num_key_value_heads", "2"),
            (true, json!({"n_group": 3}), "n_group", "3"),
            (true, json!({"topk_group": 9}), "topk_group", "9"),
            (false, json!({"moe_layer_freq": 0}), "moe_layer_freq", "0"),
            (false, json!({"num_experts_per_tok": 99}), "num_experts_per_tok", "99"),
            (true, json!({"attention_bias": true}), "attention_bias", "true"),
            (true, json!({"qk_rope_head_dim": 7}), "qk_rope_head_dim", "7"),
            (
                true,
                json!({"rope_scaling": {"rope_type": "longrope", "factor": 2.0}}),
                "rope_scaling.rope_type",
                "longrope",
            ),
        ];
        for (v3, patch, field, value) in cases {
            let mut cfg = base(v3);
            for (k, v) in patch.as_object().unwrap() {
                cfg[k] = v.clone();
            }
            let name = if v3 { "DeepseekV3ForCausalLM" } else { "DeepseekV2ForCausalLM" };
            match from_hf(&cfg, name) {
                Err(ModelError::Refused { field: f, value: v, .. }) => {
                    assert_eq!((f.as_str(), v.as_str()), (field, value), "{patch}")
                }
                other => panic!("{patch}: expected a refusal of {field}, got {other:?}"),
            }
        }
    }

    #[test]
    fn yarn_scales_follow_transformers() {
        // deepseek-v2: factor 4, mscale 1.0, mscale_all_dim 0.5 → attention_factor = m(4,1)/m(4,0.5); the softmax
        // scale takes m(4,0.5)².
        let c = from_hf(&base(false), "DeepseekV2ForCausalLM").unwrap();
        let m = c.mla.unwrap();
        let ms = |s: f64, k: f64| 0.1 * k * s.ln() + 1.0;
        assert!((m.rope_mscale as f64 - ms(4.0, 1.0) / ms(4.0, 0.5)).abs() < 1e-6);
        assert!((m.softmax_scale as f64 - 24f64.powf(-0.5) * ms(4.0, 0.5).powi(2)).abs() < 1e-6);
        assert_eq!(c.moe.unwrap().sparse, [false, false, true, false], "first dense, then every second");
    }
}
