//! Training data: datasets as users bring them (JSONL of `{"text"}` or `{"messages"}`, or plain text), checked
//! line by line, split, tokenised and packed into batches.
//!
//! A bad dataset is answered with every bad line (up to [`MAX_ERRORS`]), each naming its line and field, so a user
//! fixes a file once rather than once a line.

use kvad_text::{ChatContext, ChatTemplate, Tokenizer};
use serde_json::Value;

/// Bad lines reported at most per dataset.
pub const MAX_ERRORS: usize = 20;

/// The roles a `messages` record may use (OpenAI's and the chat templates').
const ROLES: [&str; 4] = ["system", "user", "assistant", "tool"];

/// One training example.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// A document: trained on whole.
    Text(String),
    /// A conversation (objects with `role` and `content`), rendered with the model's chat template.
    Messages(Vec<Value>),
    /// A prompt suite's item: asked as a user turn, the answer scored against `expected`.
    Item(crate::eval::Item),
}

/// What a dataset holds, as the Datasets page shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// JSONL with a `text` field a line.
    Text,
    /// JSONL with a `messages` field a line.
    Messages,
    /// Plain text: documents separated by blank lines.
    Plain,
    /// JSONL with `prompt` and `expected` (and optionally `scorer`) a line: a prompt suite for evals.
    Suite,
}

/// A parsed dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    /// Its kind.
    pub format: Format,
    /// Its records, in file order.
    pub records: Vec<Record>,
}

/// One bad line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LineError {
    /// 1-based line number.
    pub line: usize,
    /// The field (`text`, `messages[2].role`), or empty when the line as a whole is wrong.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for LineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.field.is_empty() {
            write!(f, "line {}: {}", self.line, self.message)
        } else {
            write!(f, "line {}: field {}: {}", self.line, self.field, self.message)
        }
    }
}

impl Record {
    /// The record as the object of a JSONL line, which [`parse`] reads back as this record.
    pub fn to_json(&self) -> Value {
        match self {
            Record::Text(t) => serde_json::json!({"text": t}),
            Record::Messages(m) => serde_json::json!({"messages": m}),
            Record::Item(i) => {
                let mut v = serde_json::json!({"prompt": i.prompt, "expected": i.expected});
                if let Some(s) = i.scorer {
                    v["scorer"] = serde_json::to_value(s).unwrap_or(Value::Null);
                }
                v
            }
        }
    }
}

/// Parses several files of one dataset (a Hub split's shards) as one: every file checked, errors named with their
/// file, kinds not mixed between files. Plain-text files stay plain; anything else becomes JSONL records.
pub fn parse_files(files: &[(String, Vec<u8>)]) -> Result<Dataset, Vec<LineError>> {
    let mut all: Option<Dataset> = None;
    let mut errors = Vec::new();
    for (name, bytes) in files {
        match parse(name, bytes) {
            Ok(d) => match &mut all {
                None => all = Some(d),
                Some(a) if a.format == d.format => a.records.extend(d.records),
                Some(a) => errors.push(LineError {
                    line: 1,
                    field: String::new(),
                    message: format!(
                        "{name} holds {} records, the files before it {}",
                        name_of(d.format),
                        name_of(a.format)
                    ),
                }),
            },
            Err(es) => {
                errors.extend(es.into_iter().map(|e| LineError { message: format!("{name}: {}", e.message), ..e }))
            }
        }
    }
    match all {
        Some(d) if errors.is_empty() => Ok(d),
        _ => {
            errors.truncate(MAX_ERRORS);
            Err(errors)
        }
    }
}

/// The records as the file kvad keeps: blank-line-separated documents for plain text, else JSONL.
pub fn to_file(d: &Dataset) -> String {
    match d.format {
        Format::Plain => d
            .records
            .iter()
            .filter_map(|r| match r {
                Record::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n\n"),
        _ => d.records.iter().map(|r| r.to_json().to_string() + "\n").collect(),
    }
}

/// Parses a dataset file: Parquet when its name ends in `.parquet` (each row a record, as a JSONL line would be;
/// errors name the row as the line), a JSON array of records for `.json` files that hold one, JSONL when its name
/// ends in `.jsonl` or `.json` (or its first non-blank character is `{`), else plain text. Every bad record is
/// reported (the first [`MAX_ERRORS`]).
pub fn parse(name: &str, bytes: &[u8]) -> Result<Dataset, Vec<LineError>> {
    if name.ends_with(".parquet") {
        let rows = crate::columnar::rows(bytes)
            .map_err(|e| vec![LineError { line: 1, field: String::new(), message: format!("not Parquet: {e}") }])?;
        return from_values(rows.into_iter().enumerate().map(|(i, v)| (i + 1, v)));
    }
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let line = bytes[..e.valid_up_to()].iter().filter(|&&b| b == b'\n').count() + 1;
        vec![LineError { line, field: String::new(), message: "not UTF-8".into() }]
    })?;
    if name.ends_with(".json") && text.trim_start().starts_with('[') {
        let all: Vec<Value> = serde_json::from_str(text)
            .map_err(|e| vec![LineError { line: e.line(), field: String::new(), message: format!("not JSON: {e}") }])?;
        return from_values(all.into_iter().enumerate().map(|(i, v)| (i + 1, Ok(v))));
    }
    let jsonl = name.ends_with(".jsonl") || name.ends_with(".json") || text.trim_start().starts_with('{');
    if !jsonl {
        let records: Vec<Record> =
            text.split("\n\n").map(str::trim).filter(|d| !d.is_empty()).map(|d| Record::Text(d.to_string())).collect();
        if records.is_empty() {
            return Err(vec![LineError { line: 1, field: String::new(), message: "the file holds no text".into() }]);
        }
        return Ok(Dataset { format: Format::Plain, records });
    }
    let lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, line)| (i + 1, serde_json::from_str::<Value>(line).map_err(|e| format!("not JSON: {e}"))));
    from_values(lines)
}

/// The records of a file's rows (each numbered as its line, or its row), every row checked, kinds not mixed.
fn from_values(rows: impl Iterator<Item = (usize, Result<Value, String>)>) -> Result<Dataset, Vec<LineError>> {
    let mut errors = Vec::new();
    let mut records = Vec::new();
    let mut format: Option<(Format, usize)> = None;
    for (n, v) in rows {
        let mut bad = |field: &str, message: String| errors.push(LineError { line: n, field: field.into(), message });
        let v: Value = match v {
            Ok(v) => v,
            Err(e) => {
                bad("", e);
                continue;
            }
        };
        if v.get("prompt").is_some() {
            match crate::eval::Item::from_json(&v) {
                Ok(item) => {
                    if let Some((f, first)) = format.filter(|(f, _)| *f != Format::Suite) {
                        bad(
                            "prompt",
                            format!("line {first} set the dataset's kind to {}; lines cannot mix kinds", name_of(f)),
                        );
                    } else {
                        format.get_or_insert((Format::Suite, n));
                        records.push(Record::Item(item));
                    }
                }
                Err((field, msg)) => bad(&field, msg),
            }
            continue;
        }
        let record = match (v.get("text"), v.get("messages")) {
            (Some(Value::String(t)), None) if !t.is_empty() => Some(Record::Text(t.clone())),
            (Some(Value::String(_)), None) => {
                bad("text", "is empty".into());
                None
            }
            (Some(other), None) => {
                bad("text", format!("must be a string, not {}", kind(other)));
                None
            }
            (None, Some(m)) => messages(m).map_err(|(field, msg)| bad(&field, msg)).ok().map(Record::Messages),
            (Some(_), Some(_)) => {
                bad("", "has both \"text\" and \"messages\"; a line is one or the other".into());
                None
            }
            (None, None) if !v.is_object() => {
                bad("", format!("must be an object, not {}", kind(&v)));
                None
            }
            (None, None) => {
                bad("", "needs a \"text\", \"messages\" or \"prompt\" field".into());
                None
            }
        };
        let Some(record) = record else { continue };
        let this = if matches!(record, Record::Text(_)) { Format::Text } else { Format::Messages };
        match format {
            None => format = Some((this, n)),
            Some((Format::Suite, first)) => {
                let msg = format!("line {first} made this a prompt suite; lines cannot mix kinds");
                errors.push(LineError { line: n, field: String::new(), message: msg });
                continue;
            }
            Some((f, first)) if f != this => {
                let field = if this == Format::Text { "text" } else { "messages" };
                let msg = format!("line {first} set the dataset's kind to {}; lines cannot mix kinds", name_of(f));
                errors.push(LineError { line: n, field: field.into(), message: msg });
                continue;
            }
            Some(_) => {}
        }
        records.push(record);
    }
    if errors.is_empty() && records.is_empty() {
        errors.push(LineError { line: 1, field: String::new(), message: "the file holds no records".into() });
    }
    if !errors.is_empty() {
        errors.truncate(MAX_ERRORS);
        return Err(errors);
    }
    Ok(Dataset { format: format.map_or(Format::Text, |(f, _)| f), records })
}

fn name_of(f: Format) -> &'static str {
    match f {
        Format::Text => "\"text\"",
        Format::Messages => "\"messages\"",
        Format::Plain => "plain text",
        Format::Suite => "a prompt suite",
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Checks a `messages` value: a non-empty array of objects with a known `role` and a string `content`.
fn messages(m: &Value) -> Result<Vec<Value>, (String, String)> {
    let Value::Array(list) = m else {
        return Err(("messages".into(), format!("must be an array, not {}", kind(m))));
    };
    if list.is_empty() {
        return Err(("messages".into(), "is empty".into()));
    }
    for (j, msg) in list.iter().enumerate() {
        let role = msg.get("role");
        match role.and_then(Value::as_str) {
            Some(r) if ROLES.contains(&r) => {}
            Some(r) => {
                return Err((format!("messages[{j}].role"), format!("\"{r}\" is not one of {}", ROLES.join(", "))));
            }
            None => return Err((format!("messages[{j}].role"), "is missing or not a string".into())),
        }
        if !msg.get("content").is_some_and(Value::is_string) {
            return Err((format!("messages[{j}].content"), "is missing or not a string".into()));
        }
    }
    Ok(list.clone())
}

/// Splits record indices into training and validation: `validation` of them (a fraction, rounded, at least one
/// when there are two or more records and the fraction is above zero) drawn by a seeded shuffle, each side in file
/// order.
pub fn split(n: usize, validation: f64, seed: u64) -> (Vec<usize>, Vec<usize>) {
    let mut want = (n as f64 * validation.clamp(0.0, 1.0)).round() as usize;
    if validation > 0.0 && n >= 2 {
        want = want.clamp(1, n - 1);
    }
    let mut order: Vec<usize> = (0..n).collect();
    let mut s = seed;
    for i in (1..n).rev() {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        let j = ((z ^ (z >> 31)) % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    let mut val: Vec<usize> = order[..want].to_vec();
    let mut train: Vec<usize> = order[want..].to_vec();
    val.sort_unstable();
    train.sort_unstable();
    (train, val)
}

/// Why records could not be tokenised.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    /// A conversation needs the model's chat template and it has none.
    #[error("the dataset holds conversations (\"messages\") and the model has no chat template")]
    NoTemplate,
    /// The template or the tokenizer failed on a record.
    #[error("record {index}: {msg}")]
    Record {
        /// 0-based record index.
        index: usize,
        /// What failed.
        msg: String,
    },
}

/// Token ids of each record: a document as the tokenizer encodes it (its special tokens included) with the end
/// token appended, a conversation rendered by `template` and encoded without adding special tokens (the template
/// writes them), as transformers' `apply_chat_template` tokenises.
pub fn encode(
    records: &[Record],
    tok: &Tokenizer,
    template: Option<&ChatTemplate>,
) -> Result<Vec<Vec<u32>>, EncodeError> {
    let eos = tok.eos_ids().first().copied();
    records
        .iter()
        .enumerate()
        .map(|(index, r)| {
            let err = |e: kvad_text::TextError| EncodeError::Record { index, msg: e.to_string() };
            match r {
                Record::Text(t) => {
                    let mut ids = tok.encode(t, true).map_err(err)?;
                    if let Some(e) = eos.filter(|e| ids.last() != Some(e)) {
                        ids.push(e);
                    }
                    Ok(ids)
                }
                Record::Messages(m) => {
                    let template = template.ok_or(EncodeError::NoTemplate)?;
                    let ctx = ChatContext {
                        messages: m.clone(),
                        bos_token: tok.bos_token().unwrap_or_default().to_string(),
                        eos_token: tok.eos_token().unwrap_or_default().to_string(),
                        ..Default::default()
                    };
                    tok.encode(&template.render(&ctx).map_err(err)?, false).map_err(err)
                }
                Record::Item(_) => {
                    Err(EncodeError::Record { index, msg: "a prompt suite is for evals, not training".into() })
                }
            }
        })
        .collect()
}

/// Rows of `len` tokens from documents laid end to end (transformers' `group_texts`), so no token is padding; the
/// tail shorter than `len` is kept as a last, shorter row when it holds at least two tokens (a tiny dataset still
/// trains).
pub fn pack(docs: &[Vec<u32>], len: usize) -> Vec<Vec<u32>> {
    let all: Vec<u32> = docs.concat();
    let mut rows: Vec<Vec<u32>> = all.chunks(len.max(2)).map(<[u32]>::to_vec).collect();
    if rows.last().is_some_and(|r| r.len() < 2) {
        rows.pop();
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(p: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/datasets").join(p)
    }

    #[test]
    fn parquet_rows_are_records_as_pyarrow_wrote_them() {
        let want: Value = serde_json::from_str(&std::fs::read_to_string(fixture("rows.json")).unwrap()).unwrap();
        for split in ["train", "validation"] {
            let name = format!("cat-text/data/{split}-00000-of-00001.parquet");
            let d = parse(&name, &std::fs::read(fixture(&name)).unwrap()).unwrap();
            assert_eq!(d.format, Format::Text);
            let texts: Vec<Value> = d
                .records
                .iter()
                .map(|r| match r {
                    Record::Text(t) => Value::from(t.as_str()),
                    other => panic!("{other:?}"),
                })
                .collect();
            assert_eq!(Value::from(texts), want["cat-text"][split]);
        }
        let name = "cat-chat/data/train-00000-of-00001.parquet";
        let d = parse(name, &std::fs::read(fixture(name)).unwrap()).unwrap();
        assert_eq!(d.format, Format::Messages);
        let turns: Vec<Value> = d
            .records
            .iter()
            .map(|r| match r {
                Record::Messages(m) => Value::from(m.clone()),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(Value::from(turns), want["cat-chat"]["train"]);
        let e = parse("x.parquet", b"PAR1 not really").unwrap_err();
        assert!(e[0].message.starts_with("not Parquet"), "{}", e[0]);
    }

    #[test]
    fn a_json_array_is_records_and_bad_ones_are_named_by_position() {
        let d = parse("d.json", br#"[{"text": "a"}, {"text": "b"}]"#).unwrap();
        assert_eq!(d.records, vec![Record::Text("a".into()), Record::Text("b".into())]);
        let e = parse("d.json", br#"[{"text": "a"}, {"text": 2}]"#).unwrap_err();
        assert_eq!((e[0].line, e[0].field.as_str()), (2, "text"));
    }

    #[test]
    fn every_bad_line_is_named_with_its_field() {
        let file = concat!(
            "{\"text\": \"fine\"}\n",
            "{\"text\": 3}\n",
            "not json\n",
            "\n",
            "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n",
            "{\"other\": 1}\n",
            "{\"text\": \"\"}\n",
            "[1]\n",
        );
        let errs = parse("d.jsonl", file.as_bytes()).unwrap_err();
        let lines: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert_eq!(errs.iter().map(|e| e.line).collect::<Vec<_>>(), vec![2, 3, 5, 6, 7, 8], "{lines:?}");
        assert!(lines[0].contains("field text: must be a string, not a number"), "{lines:?}");
        assert!(lines[1].contains("not JSON"), "{lines:?}");
        assert!(lines[2].contains("field messages: line 1 set the dataset's kind"), "{lines:?}");
        assert!(lines[3].contains("needs a \"text\", \"messages\" or \"prompt\""), "{lines:?}");
        assert!(lines[4].contains("field text: is empty"), "{lines:?}");
        assert!(lines[5].contains("must be an object, not an array"), "{lines:?}");
    }

    #[test]
    fn messages_are_checked_to_the_role() {
        let file =
            "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"robot\", \"content\": \"b\"}]}\n\
                    {\"messages\": [{\"role\": \"user\"}]}\n{\"messages\": []}\n";
        let lines: Vec<String> =
            parse("d.jsonl", file.as_bytes()).unwrap_err().iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            vec![
                "line 1: field messages[1].role: \"robot\" is not one of system, user, assistant, tool",
                "line 2: field messages[0].content: is missing or not a string",
                "line 3: field messages: is empty",
            ]
        );
        let ok = parse("d.jsonl", b"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}\n").unwrap();
        assert_eq!(ok.format, Format::Messages);
    }

    #[test]
    fn plain_text_is_documents_and_bad_bytes_name_their_line() {
        let d = parse("t.txt", b"the cat sat\non the mat\n\n\nthe dog\n").unwrap();
        assert_eq!(d.format, Format::Plain);
        assert_eq!(d.records, vec![Record::Text("the cat sat\non the mat".into()), Record::Text("the dog".into())]);
        let e = parse("t.txt", b"ok\nok\n\xff\n").unwrap_err();
        assert_eq!(e[0].to_string(), "line 3: not UTF-8");
        assert_eq!(parse("t.txt", b"\n\n").unwrap_err()[0].message, "the file holds no text");
    }

    #[test]
    fn splits_are_seeded_disjoint_and_whole() {
        let (t, v) = split(10, 0.2, 7);
        assert_eq!((t.len(), v.len()), (8, 2));
        let mut all: Vec<usize> = t.iter().chain(&v).copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
        assert_eq!(split(10, 0.2, 7), (t, v.clone()));
        assert_ne!(split(10, 0.2, 8).1, v);
        assert_eq!(split(3, 0.01, 1).1.len(), 1, "a positive fraction keeps one record for validation");
        assert!(split(5, 0.0, 1).1.is_empty());
    }

    #[test]
    fn packing_lays_documents_end_to_end() {
        let rows = pack(&[vec![1, 2, 3], vec![4, 5], vec![6, 7, 8, 9]], 4);
        assert_eq!(rows, vec![vec![1, 2, 3, 4], vec![5, 6, 7, 8]], "a one-token tail trains nothing");
        assert_eq!(pack(&[vec![1, 2, 3]], 8), vec![vec![1, 2, 3]]);
    }
}
