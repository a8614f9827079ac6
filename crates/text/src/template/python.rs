//! How Python prints values, for templates written against Python's jinja2.
//!
//! Two places differ from minijinja's defaults: `{{ value }}` prints Python's `str()` (`True`,
//! `None`, `['a', 1]`), and transformers' `tojson` filter is `json.dumps` (separators `", "` and
//! `": "`, no HTML escaping, floats as Python writes them, keys in insertion order).

use std::fmt::Write as _;

use serde_json::Value as Json;

/// Options of transformers' `tojson(x, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)`.
#[derive(Debug, Clone, Default)]
pub(crate) struct DumpOptions {
    /// Escape every non-ASCII character as `\uXXXX`.
    pub ensure_ascii: bool,
    /// Pretty-print with this indent (a number of spaces, or a literal string).
    pub indent: Option<String>,
    /// Item and key separators; Python's default depends on `indent`.
    pub separators: Option<(String, String)>,
    /// Sort object keys.
    pub sort_keys: bool,
}

/// `json.dumps(value, **options)`.
pub(crate) fn json_dumps(value: &Json, opts: &DumpOptions) -> String {
    let (item_sep, key_sep) = opts.separators.clone().unwrap_or_else(|| {
        let item = if opts.indent.is_some() { "," } else { ", " };
        (item.to_string(), ": ".to_string())
    });
    let mut out = String::new();
    let w = Writer { opts, item_sep: &item_sep, key_sep: &key_sep };
    w.value(&mut out, value, 0);
    out
}

struct Writer<'a> {
    opts: &'a DumpOptions,
    item_sep: &'a str,
    key_sep: &'a str,
}

impl Writer<'_> {
    fn value(&self, out: &mut String, v: &Json, depth: usize) {
        match v {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Number(n) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => out.push_str(&i.to_string()),
                (None, Some(u)) => out.push_str(&u.to_string()),
                _ => out.push_str(&json_float(n.as_f64().unwrap_or(f64::NAN))),
            },
            Json::String(s) => json_string(out, s, self.opts.ensure_ascii),
            Json::Array(items) => {
                if items.is_empty() {
                    out.push_str("[]");
                    return;
                }
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    self.separator(out, i, depth + 1);
                    self.value(out, item, depth + 1);
                }
                self.newline(out, depth);
                out.push(']');
            }
            Json::Object(map) => {
                if map.is_empty() {
                    out.push_str("{}");
                    return;
                }
                let mut entries: Vec<(&String, &Json)> = map.iter().collect();
                if self.opts.sort_keys {
                    entries.sort_by(|a, b| a.0.cmp(b.0));
                }
                out.push('{');
                for (i, (k, item)) in entries.into_iter().enumerate() {
                    self.separator(out, i, depth + 1);
                    json_string(out, k, self.opts.ensure_ascii);
                    out.push_str(self.key_sep);
                    self.value(out, item, depth + 1);
                }
                self.newline(out, depth);
                out.push('}');
            }
        }
    }

    /// Writes what goes before item `i` of a container at `depth`.
    fn separator(&self, out: &mut String, i: usize, depth: usize) {
        if i > 0 {
            out.push_str(self.item_sep);
        }
        self.newline(out, depth);
    }

    fn newline(&self, out: &mut String, depth: usize) {
        if let Some(indent) = &self.opts.indent {
            out.push('\n');
            for _ in 0..depth {
                out.push_str(indent);
            }
        }
    }
}

/// A JSON string literal as Python's json module writes it.
fn json_string(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && !c.is_ascii() => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A float as `json.dumps` writes it (`NaN` and `Infinity` for the non-finite ones).
fn json_float(f: f64) -> String {
    if f.is_nan() {
        "NaN".into()
    } else if f.is_infinite() {
        if f > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        float_repr(f)
    }
}

/// Python's `repr(float)`: the shortest digits that round-trip, positional for exponents in
/// -4..16 and scientific (`1e-05`, `1e+16`) outside.
pub(crate) fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.into();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // Rust's `{:e}` gives the shortest round-trip digits: "-1.2345e-7".
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        let point = exp + 1; // digits before the decimal point
        let body = if point <= 0 {
            format!("0.{}{}", "0".repeat((-point) as usize), digits)
        } else if point as usize >= digits.len() {
            format!("{}{}.0", digits, "0".repeat(point as usize - digits.len()))
        } else {
            let (a, b) = digits.split_at(point as usize);
            format!("{a}.{b}")
        };
        format!("{sign}{body}")
    } else {
        let (first, rest) = digits.split_at(1);
        let frac = if rest.is_empty() { String::new() } else { format!(".{rest}") };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{first}{frac}e{esign}{:02}", exp.abs())
    }
}

/// Python's `str(value)` for JSON-like data, as jinja2 prints `{{ value }}`.
pub(crate) fn python_str(v: &Json) -> String {
    match v {
        Json::String(s) => s.clone(),
        other => python_repr(other),
    }
}

/// Python's `repr(value)` for JSON-like data (what a list or dict shows of its items).
pub(crate) fn python_repr(v: &Json) -> String {
    let mut out = String::new();
    repr_into(&mut out, v);
    out
}

fn repr_into(out: &mut String, v: &Json) {
    match v {
        Json::Null => out.push_str("None"),
        Json::Bool(b) => out.push_str(if *b { "True" } else { "False" }),
        Json::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => out.push_str(&i.to_string()),
            (None, Some(u)) => out.push_str(&u.to_string()),
            _ => out.push_str(&float_repr(n.as_f64().unwrap_or(f64::NAN))),
        },
        Json::String(s) => string_repr(out, s),
        Json::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                repr_into(out, item);
            }
            out.push(']');
        }
        Json::Object(map) => {
            out.push('{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                string_repr(out, k);
                out.push_str(": ");
                repr_into(out, item);
            }
            out.push('}');
        }
    }
}

/// Python's `repr(str)`: single quotes unless the text has `'` and no `"`.
fn string_repr(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn dumps_like_python_defaults() {
        let v = json!({"b": 1, "a": [1.5, "é\"\n", null, true], "c": {}});
        assert_eq!(json_dumps(&v, &DumpOptions::default()), r#"{"b": 1, "a": [1.5, "é\"\n", null, true], "c": {}}"#);
    }

    #[test]
    fn dumps_with_indent_and_options() {
        let v = json!({"b": [1, 2], "a": "x"});
        let opts = DumpOptions { indent: Some("  ".into()), ..Default::default() };
        assert_eq!(json_dumps(&v, &opts), "{\n  \"b\": [\n    1,\n    2\n  ],\n  \"a\": \"x\"\n}");
        let opts = DumpOptions {
            sort_keys: true,
            separators: Some((",".into(), ":".into())),
            ensure_ascii: true,
            ..Default::default()
        };
        assert_eq!(json_dumps(&json!({"b": "é😀", "a": 1}), &opts), r#"{"a":1,"b":"\u00e9\ud83d\ude00"}"#);
    }

    #[test]
    fn floats_like_python_repr() {
        for (f, s) in [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (1e16, "1e+16"),
            (123456789012345.6, "123456789012345.6"),
            (-2.5e-10, "-2.5e-10"),
            (1.5e300, "1.5e+300"),
            (100.0, "100.0"),
        ] {
            assert_eq!(float_repr(f), s, "{f}");
        }
        assert_eq!(json_float(f64::INFINITY), "Infinity");
    }

    #[test]
    fn str_and_repr_like_python() {
        assert_eq!(python_str(&json!(true)), "True");
        assert_eq!(python_str(&json!(null)), "None");
        assert_eq!(python_str(&json!("it's")), "it's");
        assert_eq!(python_str(&json!(["a", "it's", 1, 2.0, {"k": false}])), r#"['a', "it's", 1, 2.0, {'k': False}]"#);
    }
}
