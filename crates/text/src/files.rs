//! Small helpers for the JSON and text files of a Hugging Face model directory.

use std::path::Path;

use serde_json::Value;

use crate::TextError;

/// Reads a text file, or `None` when it does not exist.
pub(crate) fn read_optional_text(path: &Path) -> Result<Option<String>, TextError> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(TextError::io(path, e)),
    }
}

/// Reads and parses a JSON file, or `None` when it does not exist.
pub(crate) fn read_optional_json(path: &Path) -> Result<Option<Value>, TextError> {
    let Some(text) = read_optional_text(path)? else {
        return Ok(None);
    };
    serde_json::from_str(&text).map(Some).map_err(|source| TextError::Json { path: path.to_path_buf(), source })
}

/// A special token as tokenizer_config.json spells it: a string, or an object with `content`.
pub(crate) fn token_content(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}

/// The chat template stored in a JSON config under `chat_template`: a string, or a list of
/// `{name, template}` of which we take the one named `default`.
pub(crate) fn chat_template_field(config: &Value) -> Option<String> {
    match config.get("chat_template")? {
        Value::String(s) => Some(s.clone()),
        Value::Array(list) => list
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
            .and_then(|t| t.get("template"))
            .and_then(Value::as_str)
            .map(str::to_string),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn token_content_accepts_both_spellings() {
        assert_eq!(token_content(Some(&json!("<s>"))), Some("<s>".into()));
        assert_eq!(token_content(Some(&json!({"content": "</s>", "special": true}))), Some("</s>".into()));
        assert_eq!(token_content(Some(&json!(null))), None);
        assert_eq!(token_content(None), None);
    }

    #[test]
    fn chat_template_list_picks_default() {
        let c = json!({"chat_template": [
            {"name": "tool_use", "template": "T"},
            {"name": "default", "template": "D"}
        ]});
        assert_eq!(chat_template_field(&c), Some("D".into()));
        assert_eq!(chat_template_field(&json!({"chat_template": "S"})), Some("S".into()));
        assert_eq!(chat_template_field(&json!({})), None);
    }

    #[test]
    fn missing_files_are_none() {
        let p = Path::new("/nonexistent/kvad/tokenizer_config.json");
        assert!(read_optional_json(p).unwrap().is_none());
    }
}
