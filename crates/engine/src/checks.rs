//! The import checks a download runs before it fetches more: config.json through the model loader's own refusals,
//! then the tokenizer through kvad-text. They live here, beside `open_model`, because this crate knows both models
//! and tokenizers while kvad-hub (which downloads) must know neither; the CLI's `kvad pull` and the server's
//! `POST /api/pull` hand the same [`checks`] to `kvad_hub::Hub::pull`, so both refuse a model the same way.

use kvad_hub::Checks;
use serde_json::Value;
use std::path::Path;

/// config.json as the loader reads it: `Err` names the field and value the loader refuses.
pub fn check_config(cfg: &Value) -> Result<(), String> {
    kvad_models::config_from_hf(cfg).map(|_| ()).map_err(|e| e.to_string())
}

/// The snapshot's tokenizer as kvad-text reads it: tokenizer.json must be there and parse.
pub fn check_tokenizer(dir: &Path) -> Result<(), String> {
    if !dir.join("tokenizer.json").is_file() {
        return Err("tokenizer.json is absent: this build reads tokenizer.json only, and does not convert a \
                    SentencePiece tokenizer.model or vocab.json/merges.txt"
            .into());
    }
    kvad_text::Tokenizer::from_dir(dir).map(|_| ()).map_err(|e| format!("tokenizer.json: {e}"))
}

/// Both checks, as `kvad_hub::Hub::pull` and `kvad_hub::resolve_with` take them.
pub fn checks() -> Checks<'static> {
    Checks { config: &check_config, tokenizer: &check_tokenizer }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_refused_config_names_the_field_and_a_missing_tokenizer_says_what_is_read() {
        let e = check_config(&json!({"architectures": ["GPTNeoXForCausalLM"]})).unwrap_err();
        assert!(e.contains("architectures") && e.contains("GPTNeoXForCausalLM"), "{e}");
        let dir = std::env::temp_dir().join(format!("kvad-checks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let e = check_tokenizer(&dir).unwrap_err();
        assert!(e.contains("tokenizer.json is absent"), "{e}");
        std::fs::write(dir.join("tokenizer.json"), "{not json").unwrap();
        assert!(check_tokenizer(&dir).unwrap_err().starts_with("tokenizer.json: "));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
