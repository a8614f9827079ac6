//! `remote_model_type`: the Hub's `config.model_type` for a repo nobody has downloaded, and `None` for every way
//! of not knowing. One test in this binary, because it sets process-wide environment variables.

mod support;
use support::*;

#[test]
fn the_hub_names_the_architecture_and_every_way_of_not_knowing_is_none() {
    let fake = Fake::start();
    fake.add_repo("tiny/llama", C1, tiny_llama_files(), &["main"]);
    std::env::set_var("HF_ENDPOINT", &fake.url);
    std::env::remove_var("KVAD_OFFLINE");
    std::env::remove_var("HF_HUB_OFFLINE");
    assert_eq!(kvad_hub::remote_model_type("tiny/llama").as_deref(), Some("llama"));
    assert_eq!(kvad_hub::remote_model_type("tiny/absent"), None);
    assert_eq!(kvad_hub::remote_model_type("not-a-repo"), None);
    // A path on this machine is not asked about.
    fake.clear_log();
    assert_eq!(kvad_hub::remote_model_type(env!("CARGO_MANIFEST_DIR")), None);
    assert!(fake.requests().is_empty());
    std::env::set_var("KVAD_OFFLINE", "1");
    assert_eq!(kvad_hub::remote_model_type("tiny/llama"), None);
    assert!(fake.requests().is_empty());
}
