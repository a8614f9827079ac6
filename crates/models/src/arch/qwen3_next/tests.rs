use crate::arch::registry::{config_from_hf, param_count};
use serde_json::{json, Value};

fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture_config(name: &str) -> Value {
    let text = std::fs::read_to_string(root().join(format!("fixtures/models/{name}/config.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// A config with `patch`'s keys replaced (null removes one).
fn with(mut cfg: Value, patch: Value) -> Value {
    for (k, v) in patch.as_object().unwrap() {
        if v.is_null() {
            cfg.as_object_mut().unwrap().remove(k);
        } else {
            cfg[k] = v.clone();
        }
    }
    cfg
}

#[test]
fn both_spellings_give_the_layers_the_rotary_width_and_the_experts() {
    let c = config_from_hf(&fixture_config("qwen3-next")).unwrap();
    let d = c.delta.as_ref().unwrap();
    assert_eq!(d.linear, [true, true, true, false]);
    assert_eq!((d.k_heads, d.v_heads, d.k_dim, d.v_dim, d.conv, d.rope_dim), (2, 4, 16, 16, 4, 8));
    let m = c.moe.as_ref().unwrap();
    assert_eq!(
        (m.sparse.clone(), m.shared_ff, m.shared_gate, m.routing.normalise),
        (vec![true, false, true, true], 48, true, true)
    );
    // As published: full_attention_interval, top-level rope_theta and partial_rotary_factor.
    let c = config_from_hf(&fixture_config("qwen3-next-legacy")).unwrap();
    let d = c.delta.as_ref().unwrap();
    assert_eq!((d.linear.clone(), d.rope_dim, c.rope_theta), (vec![true, false, true, false], 16, 1e6));
    assert_eq!(c.moe.as_ref().unwrap().sparse, [false, true, false, true]);
    // Without either key: every fourth layer is full attention, a quarter of the head turns.
    let c = config_from_hf(&with(
        fixture_config("qwen3-next-legacy"),
        json!({"full_attention_interval": null, "partial_rotary_factor": null, "num_hidden_layers": 8}),
    ))
    .unwrap();
    let d = c.delta.unwrap();
    assert_eq!(d.linear, [true, true, true, false, true, true, true, false]);
    assert_eq!(d.rope_dim, 8);
    // Qwen3.5: plain projections; dense, or experts in every layer always normalised.
    let c = config_from_hf(&fixture_config("qwen3-5")).unwrap();
    assert!(c.moe.is_none() && !c.delta.as_ref().unwrap().grouped);
    let c = config_from_hf(&fixture_config("qwen3-5-moe")).unwrap();
    let m = c.moe.as_ref().unwrap();
    assert!(m.sparse.iter().all(|&s| s) && m.routing.normalise && m.shared_gate);
    assert_eq!(c.intermediate, m.expert_ff);
}

#[test]
fn every_refusal_names_field_and_value() {
    let cases = [
        (
            json!({"layer_types": ["linear_attention", "sliding_attention", "linear_attention", "full_attention"]}),
            "layer_types",
            "sliding_attention",
        ),
        (json!({"layer_types": ["full_attention"]}), "layer_types", "1"),
        (json!({"linear_num_value_heads": 3}), "linear_num_value_heads", "3"),
        (json!({"linear_num_key_heads": 0}), "linear_num_key_heads", "0"),
        (json!({"linear_conv_kernel_dim": 0}), "linear_conv_kernel_dim", "0"),
        (json!({"rope_parameters": {"rope_theta": 1e4, "partial_rotary_factor": 0.1}}), "partial_rotary_factor", "0.1"),
        (json!({"hidden_act": "gelu"}), "hidden_act", "gelu"),
        (json!({"attention_bias": true}), "attention_bias", "true"),
        (json!({"decoder_sparse_step": 0}), "decoder_sparse_step", "0"),
        (json!({"mlp_only_layers": "1"}), "mlp_only_layers", "1"),
        (json!({"num_experts_per_tok": 9}), "num_experts_per_tok", "9"),
    ];
    for (patch, field, value) in cases {
        let e = config_from_hf(&with(fixture_config("qwen3-next"), patch.clone())).unwrap_err().to_string();
        assert!(e.contains(field) && e.contains(value), "{patch}: {e}");
    }
    let e = config_from_hf(&with(fixture_config("qwen3-next-legacy"), json!({"full_attention_interval": 0})))
        .unwrap_err()
        .to_string();
    assert!(e.contains("full_attention_interval") && e.contains('0'), "{e}");
}

/// Elements of every tensor in a safetensors file whose name passes `keep`.
fn elements(path: &std::path::Path, keep: impl Fn(&str) -> bool) -> usize {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    header
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k != "__metadata__" && keep(k))
        .map(|(_, v)| v["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).product::<usize>())
        .sum()
}

#[test]
fn the_parameter_count_is_the_checkpoints_matrices() {
    for name in ["qwen3-next", "qwen3-next-moe", "qwen3-next-legacy", "qwen3-5", "qwen3-5-moe"] {
        let c = config_from_hf(&fixture_config(name)).unwrap();
        // param_count leaves out the vectors (norms, A_log, dt_bias) and the one-row shared-expert gate.
        let small = |k: &str| {
            k.contains("norm") || k.ends_with("A_log") || k.ends_with("dt_bias") || k.contains("shared_expert_gate")
        };
        let want = elements(&root().join(format!("fixtures/models/{name}/model.safetensors")), |k| !small(k));
        assert_eq!(param_count(&c), want, "{name}");
    }
}

#[test]
fn the_gguf_config_is_the_checkpoints_and_refusals_name_the_key() {
    use crate::weights::{GgufFile, GgufValue, GgufWriter};
    let g = GgufFile::open(&root().join("fixtures/models/qwen3-next-gguf/model.gguf")).unwrap();
    let from_gguf = crate::arch::registry::config_from_gguf(&g).unwrap();
    let from_hf = config_from_hf(&fixture_config("qwen3-next-moe")).unwrap();
    assert_eq!(from_gguf.delta, from_hf.delta.clone().map(|d| crate::config::DeltaConfig { grouped: true, ..d }));
    assert_eq!(from_gguf.moe, from_hf.moe);
    let same = |c: &crate::config::ModelConfig| {
        (c.hidden, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.vocab_size, c.rope_theta, c.tie_embeddings)
    };
    assert_eq!(same(&from_gguf), same(&from_hf));
    // A value-head width that does not divide is refused naming the key.
    let mut w = GgufWriter::new(3);
    w.kv("general.architecture", GgufValue::String("qwen3next".into()));
    for (k, v) in [("block_count", 2u32), ("attention.head_count", 4), ("attention.key_length", 32)] {
        w.kv(&format!("qwen3next.{k}"), GgufValue::U32(v));
    }
    w.kv("qwen3next.ssm.time_step_rank", GgufValue::U32(3));
    w.kv("qwen3next.ssm.inner_size", GgufValue::U32(64));
    let path = std::env::temp_dir().join(format!("kvad-q3n-{}.gguf", std::process::id()));
    std::fs::write(&path, w.to_bytes().unwrap()).unwrap();
    let e = crate::arch::registry::config_from_gguf(&GgufFile::open(&path).unwrap()).unwrap_err().to_string();
    let _ = std::fs::remove_file(&path);
    assert!(e.contains("qwen3next.ssm.inner_size") && e.contains("64"), "{e}");
    // llama.cpp's qwen35: the four plain projections, value heads tiled over the key heads.
    for name in ["qwen3-5", "qwen3-5-moe"] {
        let g = GgufFile::open(&root().join(format!("fixtures/models/{name}-gguf/model.gguf"))).unwrap();
        let from_gguf = crate::arch::registry::config_from_gguf(&g).unwrap();
        let from_hf = config_from_hf(&fixture_config(name)).unwrap();
        assert_eq!(from_gguf.delta, from_hf.delta.clone().map(|d| crate::config::DeltaConfig { tiled: true, ..d }));
        assert_eq!((&from_gguf.moe, same(&from_gguf)), (&from_hf.moe, same(&from_hf)), "{name}");
    }
}

#[test]
fn a_tiled_value_head_reads_key_head_h_mod_k_heads() {
    let mut d = config_from_hf(&fixture_config("qwen3-5")).unwrap().delta.unwrap();
    assert_eq!((d.k_heads, d.v_heads), (2, 4));
    assert_eq!((0..4).map(|h| d.key_head(h)).collect::<Vec<_>>(), [0, 0, 1, 1], "grouped");
    d.tiled = true;
    assert_eq!((0..4).map(|h| d.key_head(h)).collect::<Vec<_>>(), [0, 1, 0, 1], "tiled");
}
