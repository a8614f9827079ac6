//! Parquet, the Hub's dataset format (what `datasets` writes and the Hub converts every dataset to): each row
//! becomes the JSON object a JSONL line would be (strings, lists of `{role, content}` structs for `messages`), so
//! one set of checks ([`crate::data::parse`]) reads every format.

use parquet::file::reader::{FileReader, SerializedFileReader};
use serde_json::Value;

/// The rows of a Parquet file, in order, each as a JSON object (or why it could not be read).
pub fn rows(bytes: &[u8]) -> Result<Vec<Result<Value, String>>, String> {
    let reader = SerializedFileReader::new(bytes::Bytes::copy_from_slice(bytes)).map_err(|e| e.to_string())?;
    let iter = reader.get_row_iter(None).map_err(|e| e.to_string())?;
    Ok(iter.map(|r| r.map(|row| row.to_json_value()).map_err(|e| format!("unreadable row: {e}"))).collect())
}
