//! `Hub::pull` against the fake Hub: the cache layout, revisions, the download rules, resume, and hostile servers.

mod support;
use kvad_hub::{Checks, HfCache, Hub, HubError, RepoRef, Silent};
use support::*;

fn hub(fake: &Fake, cache: &std::path::Path, token: Option<&str>) -> Hub {
    Hub {
        client: kvad_hub::http::Client::new(token.map(str::to_string), Some(&fake.url)),
        endpoint: fake.url.clone(),
        cache: HfCache::new(cache),
    }
}

fn pull(h: &Hub, name: &str) -> Result<kvad_hub::Pulled, HubError> {
    h.pull(&RepoRef::parse(name).unwrap(), &Checks::none(), &mut Silent)
}

fn fetched_files(fake: &Fake) -> Vec<String> {
    fake.file_requests().iter().map(|p| p.rsplit('/').next().unwrap().to_string()).collect()
}

#[test]
fn pull_lays_out_the_cache_like_huggingface_hub_and_skips_what_is_there() {
    let fake = Fake::start();
    fake.add_repo("tiny/llama", C1, tiny_llama_files(), &["main"]);
    let t = tempfile::tempdir().unwrap();
    let h = hub(&fake, t.path(), None);
    let p = pull(&h, "tiny/llama").unwrap();
    assert_eq!(p.commit, C1);
    let repo = t.path().join("models--tiny--llama");
    assert_eq!(std::fs::read_to_string(repo.join("refs/main")).unwrap(), C1);
    let snap = repo.join("snapshots").join(C1);
    for (name, bytes) in tiny_llama_files() {
        let f = snap.join(&name);
        if name.ends_with(".md") || name.starts_with('.') {
            assert!(!f.exists(), "{name} is not something a model needs");
            continue;
        }
        let link = std::fs::read_link(&f).unwrap().to_string_lossy().to_string();
        assert!(link.starts_with("../../blobs/"), "{name} -> {link}");
        assert_eq!(std::fs::read(&f).unwrap(), bytes, "{name}");
    }
    // The LFS file's blob is named by its sha256, as huggingface_hub names it.
    let weights = &tiny_llama_files()[1].1;
    assert!(repo.join("blobs").join(sha256_hex(weights)).is_file());
    // config.json first, alone; weights last.
    let order = fetched_files(&fake);
    assert_eq!(order.first().map(String::as_str), Some("config.json"), "{order:?}");
    assert_eq!(order.last().map(String::as_str), Some("model.safetensors"), "{order:?}");
    // A second pull asks for the revision only.
    fake.clear_log();
    pull(&h, "tiny/llama").unwrap();
    assert!(fake.file_requests().is_empty(), "{:?}", fake.requests());
}

#[test]
fn a_revision_is_resolved_to_its_commit_and_recorded() {
    let fake = Fake::start();
    let mut old = tiny_llama_files();
    old[3].1 = br#"{"model_max_length": 64}"#.to_vec();
    fake.add_repo("tiny/llama", C1, old.clone(), &["v1"]);
    fake.add_repo("tiny/llama", C2, tiny_llama_files(), &["main"]);
    let t = tempfile::tempdir().unwrap();
    let h = hub(&fake, t.path(), None);
    assert_eq!(pull(&h, "tiny/llama@v1").unwrap().commit, C1);
    assert_eq!(pull(&h, "tiny/llama").unwrap().commit, C2);
    let by_commit = pull(&h, &format!("tiny/llama@{C1}")).unwrap();
    assert_eq!(std::fs::read(by_commit.dir.join("tokenizer_config.json")).unwrap(), old[3].1);
    let repo = t.path().join("models--tiny--llama/refs");
    assert_eq!(std::fs::read_to_string(repo.join("v1")).unwrap(), C1);
    assert_eq!(std::fs::read_to_string(repo.join("main")).unwrap(), C2);
    // Files are fetched at the commit, never at the branch name.
    assert!(fake.file_requests().iter().all(|p| p.contains(C1) || p.contains(C2)), "{:?}", fake.file_requests());
    let e = pull(&h, "tiny/llama@nope").unwrap_err().to_string();
    assert!(e.contains("revision") && e.contains("tiny/llama"), "{e}");
}

#[test]
fn a_refused_config_costs_one_small_download() {
    let fake = Fake::start();
    let mut files = tiny_llama_files();
    files[0].1 = br#"{"architectures": ["BertModel"], "model_type": "bert"}"#.to_vec();
    fake.add_repo("x/bert", C1, files, &["main"]);
    let t = tempfile::tempdir().unwrap();
    let h = hub(&fake, t.path(), None);
    let check = |c: &serde_json::Value| match c["architectures"][0].as_str() {
        Some("LlamaForCausalLM") => Ok(()),
        other => Err(format!("architectures = {other:?}: not supported")),
    };
    let checks = Checks { config: &check, tokenizer: &|_| Ok(()) };
    let e = h.pull(&RepoRef::parse("x/bert").unwrap(), &checks, &mut Silent).unwrap_err().to_string();
    assert!(e.contains("BertModel") && e.contains("after config.json alone; nothing else was downloaded"), "{e}");
    assert_eq!(fetched_files(&fake), vec!["config.json"]);
}

#[test]
fn a_refused_tokenizer_costs_no_weights() {
    let fake = Fake::start();
    fake.add_repo("tiny/llama", C1, tiny_llama_files(), &["main"]);
    let t = tempfile::tempdir().unwrap();
    let h = hub(&fake, t.path(), None);
    let tok = |d: &std::path::Path| {
        assert!(d.join("tokenizer.json").is_file());
        Err("tokenizer.json: not this kind".to_string())
    };
    let checks = Checks { config: &|_| Ok(()), tokenizer: &tok };
    let e = h.pull(&RepoRef::parse("tiny/llama").unwrap(), &checks, &mut Silent).unwrap_err().to_string();
    assert!(e.contains("no weights were downloaded"), "{e}");
    assert!(!fetched_files(&fake).contains(&"model.safetensors".to_string()));
}

#[test]
fn a_gated_repo_names_hf_token_and_opens_with_it() {
    let fake = Fake::start();
    fake.add_repo("corp/gated", C1, tiny_llama_files(), &["main"]);
    fake.state.lock().unwrap().repos.get_mut("corp/gated").unwrap().gated = true;
    fake.state.lock().unwrap().token = Some("hf_secret".into());
    let t = tempfile::tempdir().unwrap();
    let e = pull(&hub(&fake, t.path(), None), "corp/gated").unwrap_err().to_string();
    assert!(e.contains("HF_TOKEN") && e.contains("401") && e.contains("corp/gated"), "{e}");
    let e = pull(&hub(&fake, t.path(), Some("hf_wrong")), "corp/gated").unwrap_err().to_string();
    assert!(e.contains("does not give access"), "{e}");
    fake.clear_log();
    pull(&hub(&fake, t.path(), Some("hf_secret")), "corp/gated").unwrap();
    // The token goes to the Hub, never to the CDN it redirects to.
    let log = fake.requests();
    assert!(log.iter().filter(|r| !r.0.starts_with("/cdn/")).all(|r| r.2.as_deref() == Some("Bearer hf_secret")));
    assert!(
        log.iter().any(|r| r.0.starts_with("/cdn/"))
            && log.iter().filter(|r| r.0.starts_with("/cdn/")).all(|r| r.2.is_none())
    );
    let e = pull(&hub(&fake, t.path(), None), "corp/absent").unwrap_err().to_string();
    assert!(e.contains("corp/absent") && e.contains("not found"), "{e}");
}

#[test]
fn a_dropped_connection_resumes_with_a_range_request() {
    let fake = Fake::start();
    fake.add_repo("tiny/llama", C1, tiny_llama_files(), &["main"]);
    fake.fault("model.safetensors", Fault::DropAfter { bytes: 100_000, times: 1 });
    let t = tempfile::tempdir().unwrap();
    let p = pull(&hub(&fake, t.path(), None), "tiny/llama").unwrap();
    assert_eq!(std::fs::read(p.dir.join("model.safetensors")).unwrap(), tiny_llama_files()[1].1);
    let ranges: Vec<Option<String>> =
        fake.requests().into_iter().filter(|r| r.0.starts_with("/cdn/")).map(|r| r.1).collect();
    assert_eq!(ranges, vec![None, Some("bytes=100000-".to_string())]);
}

#[test]
fn an_interrupted_pull_keeps_the_partial_file_apart_and_the_next_pull_resumes() {
    let fake = Fake::start();
    fake.add_repo("tiny/llama", C1, tiny_llama_files(), &["main"]);
    fake.fault("model.safetensors", Fault::DropAfter { bytes: 50_000, times: 1000 });
    let t = tempfile::tempdir().unwrap();
    let h = hub(&fake, t.path(), None);
    let e = pull(&h, "tiny/llama").unwrap_err();
    assert!(matches!(e, HubError::Interrupted { .. }), "{e}");
    let weights = &tiny_llama_files()[1].1;
    let blob = t.path().join("models--tiny--llama/blobs").join(sha256_hex(weights));
    let partial = std::path::PathBuf::from(format!("{}.incomplete", blob.display()));
    // Each attempt added 50 000 bytes from where the previous stopped.
    let have = std::fs::metadata(&partial).unwrap().len();
    assert_eq!(have, 50_000 * kvad_hub::fetch::RESUME_ATTEMPTS as u64);
    assert!(
        !blob.exists() && !t.path().join("models--tiny--llama/snapshots").join(C1).join("model.safetensors").exists()
    );
    // The loader's view: not complete.
    assert!(kvad_hub::cache::missing_for_load(&t.path().join("models--tiny--llama/snapshots").join(C1)).is_some());
    fake.state.lock().unwrap().faults.clear();
    fake.clear_log();
    let p = pull(&h, "tiny/llama").unwrap();
    assert_eq!(&std::fs::read(p.dir.join("model.safetensors")).unwrap(), weights);
    let ranges: Vec<Option<String>> =
        fake.requests().into_iter().filter(|r| r.0.starts_with("/cdn/")).map(|r| r.1).collect();
    assert_eq!(ranges, vec![Some(format!("bytes={have}-"))]);
    assert!(!partial.exists());
}

#[test]
fn a_lying_server_is_refused_and_nothing_partial_passes_for_complete() {
    let weights_len = tiny_llama_files()[1].1.len() as u64;
    for (fault, want) in [
        (Fault::LieLength(weights_len + 10), "Content-Length"),
        (Fault::Overflow(1000), "more than the listing announced"),
        (Fault::LieLength(1000), "stopped at byte 4000"),
    ] {
        let fake = Fake::start();
        fake.add_repo("tiny/llama", C1, tiny_llama_files(), &["main"]);
        fake.fault("model.safetensors", fault.clone());
        let t = tempfile::tempdir().unwrap();
        let e = pull(&hub(&fake, t.path(), None), "tiny/llama").unwrap_err().to_string();
        assert!(e.contains(want), "{fault:?}: {e}");
        let snap = t.path().join("models--tiny--llama/snapshots").join(C1);
        assert!(!snap.join("model.safetensors").exists(), "{fault:?}");
        assert!(kvad_hub::cache::missing_for_load(&snap).is_some());
    }
}

#[test]
fn hostile_names_a_huge_config_and_redirect_loops_are_refused() {
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("cache");
    // An index naming a shard outside the snapshot.
    let fake = Fake::start();
    let mut files = tiny_llama_files();
    files.retain(|f| f.0 != "model.safetensors");
    files.push(("model-1.safetensors".into(), tiny_llama_files()[1].1.clone()));
    files.push((
        "model.safetensors.index.json".into(),
        br#"{"weight_map": {"a": "../../../escape.safetensors"}}"#.to_vec(),
    ));
    fake.add_repo("evil/index", C1, files, &["main"]);
    let e = pull(&hub(&fake, &cache, None), "evil/index").unwrap_err().to_string();
    assert!(e.contains("weight_map") && e.contains("../../../escape.safetensors"), "{e}");
    // A config bigger than any real one: refused from the listing, before a byte is fetched.
    let mut files = tiny_llama_files();
    files[0].1 = vec![b' '; 5 << 20];
    fake.add_repo("evil/huge", C1, files, &["main"]);
    fake.clear_log();
    let e = pull(&hub(&fake, &cache, None), "evil/huge").unwrap_err().to_string();
    assert!(e.contains("size of config.json") && e.contains("nothing was downloaded"), "{e}");
    assert!(fake.file_requests().is_empty());
    // A redirect loop.
    fake.add_repo("evil/loop", C1, tiny_llama_files(), &["main"]);
    fake.fault("config.json", Fault::RedirectLoop);
    let e = pull(&hub(&fake, &cache, None), "evil/loop").unwrap_err().to_string();
    assert!(e.contains("redirect loop"), "{e}");
    // Nothing was written beside the cache.
    let beside: Vec<_> = std::fs::read_dir(t.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(beside, vec![std::ffi::OsString::from("cache")]);
}

#[test]
fn weights_in_other_formats_are_refused_before_any_download() {
    let fake = Fake::start();
    let mut files = tiny_llama_files();
    files.retain(|f| f.0 != "model.safetensors");
    files.push(("pytorch_model.bin".into(), vec![0; 10]));
    fake.add_repo("old/bin", C1, files, &["main"]);
    let t = tempfile::tempdir().unwrap();
    let e = pull(&hub(&fake, t.path(), None), "old/bin").unwrap_err().to_string();
    assert!(e.contains("pytorch_model.bin") && e.contains("before anything was downloaded"), "{e}");
    assert!(fake.file_requests().is_empty());
}

#[test]
fn adapters_beside_weights_follow_the_checksum_rule() {
    let fake = Fake::start();
    let base = tiny_llama_files();
    fake.add_repo("base/model", C1, base.clone(), &["main"]);
    let adapter = |weights: Vec<u8>| {
        let mut f = tiny_llama_files();
        f[1].1 = weights;
        f.push((
            "adapter_config.json".into(),
            br#"{"base_model_name_or_path": "base/model", "peft_type": "LORA"}"#.to_vec(),
        ));
        f.push(("adapter_model.safetensors".into(), vec![1, 2, 3]));
        f
    };
    fake.add_repo("someone/same", C1, adapter(base[1].1.clone()), &["main"]);
    let mut other = base[1].1.clone();
    let n = other.len();
    other[n - 1] ^= 1;
    fake.add_repo("someone/merged", C1, adapter(other), &["main"]);
    let t = tempfile::tempdir().unwrap();
    let h = hub(&fake, t.path(), None);
    fake.clear_log();
    let e = pull(&h, "someone/same").unwrap_err().to_string();
    assert!(e.contains("adapter over base/model"), "{e}");
    assert!(!fetched_files(&fake).iter().any(|f| f.ends_with(".safetensors")), "{:?}", fetched_files(&fake));
    let p = pull(&h, "someone/merged").unwrap();
    let note = p.notes.join("\n");
    assert!(
        note.contains("reads model.safetensors")
            && note.contains("not read: adapter_config.json, adapter_model.safetensors"),
        "{note}"
    );
    assert!(!p.dir.join("adapter_model.safetensors").exists());
}

#[test]
fn an_embedding_models_pooling_config_is_pulled_into_its_folder() {
    let fake = Fake::start();
    let dir = fixtures().join("models/qwen3-embed");
    let mut files = Vec::new();
    for name in ["config.json", "tokenizer.json", "model.safetensors", "modules.json", "1_Pooling/config.json"] {
        files.push((name.to_string(), std::fs::read(dir.join(name)).unwrap()));
    }
    files.push(("1_Pooling/README.md".into(), b"not needed".to_vec()));
    fake.add_repo("tiny/embed", C1, files.clone(), &["main"]);
    let t = tempfile::tempdir().unwrap();
    pull(&hub(&fake, t.path(), None), "tiny/embed").unwrap();
    let snap = t.path().join("models--tiny--embed/snapshots").join(C1);
    for (name, bytes) in &files {
        let f = snap.join(name);
        match name.ends_with(".md") {
            true => assert!(!f.exists(), "{name} is not something a model needs"),
            false => assert_eq!(&std::fs::read(&f).unwrap(), bytes, "{name}"),
        }
    }
    let link = std::fs::read_link(snap.join("1_Pooling/config.json")).unwrap();
    assert!(link.starts_with("../../../blobs/"), "{}", link.display());
}
