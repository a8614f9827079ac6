//! Embeddings against sentence-transformers (fixtures/goldens/embed/, made by scripts/reference/embed_models.py):
//! qwen3-embed in Qwen3-Embedding's layout (a base checkpoint with no head, last-token pooling over the tokenizer's
//! appended `<|endoftext|>`, Normalize, Matryoshka) and llama-embed-mean (a LlamaModel checkpoint, mean pooling, no
//! Normalize). Tokens must equal the reference's; vectors match within 1e-4 on cpu-f32 and point the same way on the
//! quantised backends and, on a machine with a GPU, on the GPU's (`scripts/gpu/test.sh` runs this there).

use kvad_engine::embed::{embed_inputs, EmbedConfig, Pooling, Room};
use kvad_engine::seam::{EmbedInput, Engine};
use kvad_engine::{open_model, BackendKind};
use serde_json::Value;
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn golden(name: &str) -> Value {
    let p = root().join(format!("fixtures/goldens/embed/{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

fn vecs(v: &Value) -> Vec<Vec<f32>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect())
        .collect()
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let n = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (n(a) * n(b))
}

fn worst(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter().zip(b).flat_map(|(x, y)| x.iter().zip(y).map(|(p, q)| (p - q).abs())).fold(0f32, f32::max)
}

/// Every input through the model, `rows` a pass: a small number makes long inputs span passes and short ones share.
fn run(name: &str, backend: BackendKind, rows: usize, dims: Option<usize>) -> (Vec<Vec<u32>>, Vec<Vec<f32>>) {
    let dir = root().join("fixtures/models").join(name);
    let m = open_model(&dir, backend).unwrap();
    let cfg = EmbedConfig::read(&dir, m.model.config().hidden).unwrap().expect("an embedding model");
    let g = golden(name);
    let texts: Vec<&str> = g["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    let ids: Vec<Vec<u32>> = texts.iter().map(|t| m.tokenizer.encode(t, true).unwrap()).collect();
    let room = Room { rows, tokens: 4096, page: 1, sequences: usize::MAX };
    let v = embed_inputs(m.model.as_ref(), &cfg, &ids, dims, room).unwrap();
    (ids, v)
}

/// The vectors of `backend`'s quantised weights computed by the f32 kernels (`LoadOptions::f32_reference`).
fn reference_of(name: &str, backend: BackendKind) -> Vec<Vec<f32>> {
    let dir = root().join("fixtures/models").join(name);
    let files = kvad_models::ModelFiles::detect(&dir).unwrap();
    let opts = kvad_models::LoadOptions { backend, cache_dir: None, f32_reference: true };
    let model = kvad_models::load_model_with(&files, &opts).unwrap().model;
    let (ids, _) = run(name, BackendKind::CpuF32, 256, None);
    let cfg = EmbedConfig::read(&dir, 64).unwrap().unwrap();
    let room = Room { rows: 64, tokens: 4096, page: 1, sequences: usize::MAX };
    embed_inputs(model.as_ref(), &cfg, &ids, None, room).unwrap()
}

#[test]
fn the_configs_say_how_each_model_pools() {
    let read = |n: &str| EmbedConfig::read(&root().join("fixtures/models").join(n), 64).unwrap();
    let q = read("qwen3-embed").unwrap();
    assert_eq!((q.pooling, q.normalize, q.matryoshka.clone()), (Pooling::Last, true, Some(vec![])));
    let l = read("llama-embed-mean").unwrap();
    assert_eq!((l.pooling, l.normalize, l.matryoshka), (Pooling::Mean, false, None));
    assert_eq!(read("qwen3"), None, "a causal LM with no modules.json is not an embedding model");
    let e = EmbedConfig::read(&root().join("fixtures/models/qwen3-embed"), 32).unwrap_err().to_string();
    assert!(e.contains("word_embedding_dimension = 64"), "{e}");
}

#[test]
fn cpu_f32_equals_sentence_transformers_and_the_others_point_the_same_way() {
    for name in ["qwen3-embed", "llama-embed-mean"] {
        let g = golden(name);
        let want = vecs(&g["embeddings"]);
        let tokens: Vec<Vec<u32>> = serde_json::from_value(g["tokens"].clone()).unwrap();
        let (ids, got) = run(name, BackendKind::CpuF32, 256, None);
        assert_eq!(ids, tokens, "{name}: the tokenizer (its post-processor's <|endoftext|> included)");
        let w = worst(&got, &want);
        assert!(w < 1e-4, "{name} cpu-f32: worst difference {w}");
        // Passes of 16 rows: the long input spans many, the short ones share them; the same vectors.
        let (_, chunked) = run(name, BackendKind::CpuF32, 16, None);
        let w = worst(&chunked, &got);
        assert!(w < 1e-5, "{name}: 16-row passes differ from 256-row ones by {w}");
        // Random weights 64 wide lose more to 4-bit blocks than a trained model does, so against the reference the
        // bar is per format; against the same quantised weights computed in f32 (the kernels' own error) it is tight.
        for (backend, least) in [(BackendKind::CpuQ8, 0.999), (BackendKind::CpuQ4, 0.9)] {
            let (_, q) = run(name, backend, 64, None);
            let exact = reference_of(name, backend);
            for (i, ((a, b), r)) in q.iter().zip(&want).zip(&exact).enumerate() {
                let (c, k) = (cosine(a, b), cosine(a, r));
                assert!(c > least && k > 0.9999, "{name} {backend} input {i}: cosine {c}, {k} to its f32 reference");
            }
        }
    }
}

#[test]
fn dimensions_truncate_and_normalise_as_sentence_transformers_truncate_dim() {
    let g = golden("qwen3-embed");
    let dims = g["dimensions"].as_u64().unwrap() as usize;
    let (_, got) = run("qwen3-embed", BackendKind::CpuF32, 256, Some(dims));
    assert!(got.iter().all(|v| v.len() == dims));
    let w = worst(&got, &vecs(&g["truncated"]));
    assert!(w < 1e-4, "truncated to {dims}: worst difference {w}");
    let dir = root().join("fixtures/models/llama-embed-mean");
    let m = open_model(&dir, BackendKind::CpuF32).unwrap();
    let cfg = EmbedConfig::read(&dir, 64).unwrap().unwrap();
    let room = Room { rows: 64, tokens: 4096, page: 1, sequences: usize::MAX };
    let e = embed_inputs(m.model.as_ref(), &cfg, &[vec![5, 6]], Some(16), room).unwrap_err().to_string();
    assert!(e.contains("dimensions = 16") && e.contains("Matryoshka"), "{e}");
}

#[test]
fn bad_inputs_are_refused_naming_which() {
    let dir = root().join("fixtures/models/qwen3-embed");
    let m = open_model(&dir, BackendKind::CpuF32).unwrap();
    let cfg = EmbedConfig::read(&dir, 64).unwrap().unwrap();
    let room = Room { rows: 64, tokens: 4096, page: 1, sequences: usize::MAX };
    let vocab = m.model.config().vocab_size as u32;
    for (inputs, says) in [
        (vec![vec![3], vec![]], "input[1] is empty"),
        (vec![vec![3, vocab]], &*format!("input[0] holds token id {vocab}")),
        (vec![vec![3; 600]], "input[0] is 600 tokens; this model reads at most 512"),
    ] {
        let e = embed_inputs(m.model.as_ref(), &cfg, &inputs, None, room).unwrap_err().to_string();
        assert!(e.contains(says), "{e}");
    }
}

#[test]
fn a_headless_checkpoint_pools_but_refuses_to_generate() {
    let dir = root().join("fixtures/models/qwen3-embed");
    let m = open_model(&dir, BackendKind::CpuF32).unwrap();
    let mut state = m.model.new_state();
    let e = m
        .model
        .forward(&mut [kvad_models::SeqInput { tokens: &[3, 4], state: &mut state }], kvad_models::LogitsMode::Last)
        .expect_err("no head, no logits")
        .to_string();
    assert!(e.contains("lm_head.weight") && e.contains("embedding model"), "{e}");
}

#[test]
fn the_local_engine_embeds_texts_and_token_ids_and_refuses_a_model_that_does_not_pool() {
    // The same model with no modules.json: a causal LM's files, which name no pooling.
    let src = root().join("fixtures/models/qwen3-embed");
    let plain = std::env::temp_dir().join(format!("kvad-embed-plain-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&plain);
    std::fs::create_dir_all(&plain).unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(src.join(f), plain.join(f)).unwrap();
    }
    let models = [src.display().to_string(), plain.display().to_string()];
    let settings = kvad_engine::local::LocalSettings {
        context: None,
        memory: 8 << 30,
        stepping: Default::default(),
        step_trace: false,
    };
    let mut e = kvad_engine::local::LocalEngine::new(&models, Some(BackendKind::CpuF32), &Default::default(), settings)
        .unwrap();
    let g = golden("qwen3-embed");
    let text = g["texts"][0].as_str().unwrap().to_string();
    let ids: Vec<u32> = serde_json::from_value(g["tokens"][0].clone()).unwrap();
    let got = e.embed(&models[0], &[EmbedInput::Text(text), EmbedInput::Tokens(ids.clone())], None).unwrap().unwrap();
    assert_eq!(got.tokens, 2 * ids.len());
    assert!(got.loaded && got.backend == "cpu-f32");
    let want = &vecs(&g["embeddings"])[0];
    for v in &got.vectors {
        assert!(worst(std::slice::from_ref(v), std::slice::from_ref(want)) < 1e-4);
    }
    let err = e.embed(&models[1], &[EmbedInput::Tokens(vec![3])], None).unwrap_err().to_string();
    assert!(err.contains("not an embedding model"), "{err}");
}

/// On the GPU backends (the device runs this: scripts/gpu/test.sh): gpu-bf16 against sentence-transformers, and
/// gpu-q8/q4 against cpu-q8/q4 on the very same quantised weights, in passes that share rows and span chunks.
#[test]
fn on_a_gpu_each_backend_pools_as_the_reference_and_its_cpu_twin() {
    if let Err(e) = kvad_tensor::cuda::Gpu::shared(None) {
        eprintln!("no GPU found ({e}): the GPU embedding tests run on the device (scripts/gpu/test.sh)");
        return;
    }
    for name in ["qwen3-embed", "llama-embed-mean"] {
        let want = vecs(&golden(name)["embeddings"]);
        for (gpu, twin, least) in [
            (BackendKind::GpuBf16, None, 0.999),
            (BackendKind::GpuQ8, Some(BackendKind::CpuQ8), 0.9995),
            (BackendKind::GpuQ4, Some(BackendKind::CpuQ4), 0.9995),
        ] {
            // 32-row passes (the few-row kernels) and 512-row ones (the prompt kernels, tiled attention).
            for rows in [32, 512] {
                let (_, got) = run(name, gpu, rows, None);
                let against = match twin {
                    Some(b) => run(name, b, rows, None).1,
                    None => want.clone(),
                };
                for (i, (a, b)) in got.iter().zip(&against).enumerate() {
                    let c = cosine(a, b);
                    let to = twin.map_or("the reference".into(), |t| t.to_string());
                    eprintln!("{name} {gpu} {rows}-row passes, input {i}: cosine {c} against {to}");
                    assert!(c > least, "{name} {gpu} {rows}-row passes, input {i}: cosine {c}");
                }
            }
        }
    }
}
