use super::*;
use serde_json::json;

fn base() -> Value {
    json!({
        "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256,
        "rms_norm_eps": 1e-5, "torch_dtype": "float32"
    })
}

fn refusal(cfg: Value) -> String {
    crate::arch::registry::config_from_hf(&cfg).unwrap_err().to_string()
}

#[test]
fn reads_a_llama_config() {
    let c = crate::arch::registry::config_from_hf(&base()).unwrap();
    assert_eq!((c.head_dim, c.n_kv_heads, c.q_dim(), c.kv_dim()), (16, 2, 64, 32));
    assert!(!c.qkv_bias && !c.qk_norm && c.sliding_window.is_none());
}

#[test]
fn every_refusal_names_field_and_value() {
    let cases: Vec<(Value, &str, &str)> = vec![
        (json!({"architectures": ["BertModel"]}), "architectures", "BertModel"),
        (json!({"architectures": ["A", "B"]}), "architectures", "[\"A\", \"B\"]"),
        (
            json!({"architectures": ["Qwen3_5ForConditionalGeneration"]}),
            "architectures",
            "Qwen3_5ForConditionalGeneration",
        ),
        (json!({"torch_dtype": "int8"}), "torch_dtype", "int8"),
        (json!({"hidden_act": "gelu"}), "hidden_act", "gelu"),
        (json!({"mlp_bias": true}), "mlp_bias", "true"),
        (json!({"attention_bias": true}), "attention_bias", "true"),
        (json!({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}), "rope_scaling.rope_type", "yarn"),
        (json!({"num_key_value_heads": 3}), "num_key_value_heads", "3"),
        (json!({"hidden_size": 0}), "hidden_size", "0"),
        (json!({"vocab_size": 1u64 << 40}), "vocab_size", "1099511627776"),
        (json!({"head_dim": 15}), "head_dim", "15"),
        (json!({"quantization_config": {"quant_method": "awq"}}), "quantization_config", "awq"),
        (json!({"hidden_size": "big"}), "hidden_size", "big"),
    ];
    for (patch, field, value) in cases {
        let mut cfg = base();
        for (k, v) in patch.as_object().unwrap() {
            cfg[k] = v.clone();
        }
        let msg = refusal(cfg);
        assert!(msg.contains(field) && msg.contains(value), "{msg:?} should name {field} and {value}");
    }
}

#[test]
fn qwen2_may_have_attention_bias_and_qwen3_defaults_head_dim() {
    let mut c = base();
    c["architectures"] = json!(["Qwen2ForCausalLM"]);
    c["attention_bias"] = json!(true);
    assert!(crate::arch::registry::config_from_hf(&c).unwrap().qkv_bias);
    c["architectures"] = json!(["Qwen3ForCausalLM"]);
    c["attention_bias"] = json!(false);
    let q3 = crate::arch::registry::config_from_hf(&c).unwrap();
    assert!(q3.qk_norm && q3.head_dim == 128);
}

#[test]
fn rope_parameters_of_transformers_5_are_read() {
    let mut c = base();
    c["rope_parameters"] = json!({"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0,
        "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192});
    let cfg = crate::arch::registry::config_from_hf(&c).unwrap();
    assert_eq!(cfg.rope_theta, 500000.0);
    assert!(matches!(cfg.rope_scaling, Some(RopeScaling::Llama3 { .. })));
}

#[test]
fn mistral_window_is_kept_and_qwen_window_caps_the_context() {
    let mut c = base();
    c["architectures"] = json!(["MistralForCausalLM"]);
    c["sliding_window"] = json!(4096);
    assert_eq!(crate::arch::registry::config_from_hf(&c).unwrap().sliding_window, Some(4096));
    c["architectures"] = json!(["Qwen2ForCausalLM"]);
    c["use_sliding_window"] = json!(true);
    c["max_position_embeddings"] = json!(32768);
    let q = crate::arch::registry::config_from_hf(&c).unwrap();
    assert_eq!((q.sliding_window, q.max_position, q.window_cap), (None, 4096, Some(4096)));
    c["use_sliding_window"] = json!(false);
    let q = crate::arch::registry::config_from_hf(&c).unwrap();
    assert_eq!((q.max_position, q.window_cap), (32768, None));
}

#[test]
fn interleaved_rope_is_refused_by_name_in_the_llama_family() {
    for key in ["rope_interleave", "rope_interleaved", "rotary_interleaved"] {
        for class in ["LlamaForCausalLM", "Qwen3ForCausalLM"] {
            let mut c = base();
            c["architectures"] = json!([class]);
            c[key] = json!(true);
            let e = crate::arch::registry::config_from_hf(&c).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains("true") && e.contains("interleaved RoPE"), "{e}");
            c[key] = json!(false);
            assert!(crate::arch::registry::config_from_hf(&c).is_ok(), "{class} {key} = false");
        }
    }
}
