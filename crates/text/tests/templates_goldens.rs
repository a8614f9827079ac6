//! Every case of fixtures/goldens/templates.json rendered with our ChatTemplate must equal what
//! transformers' apply_chat_template (Python jinja2) rendered, or fail with the same message.

mod common;

use std::path::Path;
use std::sync::Arc;

use kvad_text::chrono::{NaiveDate, NaiveDateTime};
use kvad_text::{system_clock, ChatContext, ChatTemplate, Clock};
use serde_json::{Map, Value};

use common::{load_json, root};

/// The template source of a case: a file under fixtures/templates/ named by `template`, or the
/// source itself.
fn template_source(case: &Value) -> String {
    let t = case["template"].as_str().expect("template");
    let dir = root().join("fixtures/templates");
    for candidate in [dir.join(t), dir.join(format!("{t}.jinja"))] {
        if candidate.is_file() {
            return std::fs::read_to_string(&candidate).unwrap_or_else(|e| panic!("{}: {e}", candidate.display()));
        }
    }
    assert!(
        Path::new(t).extension().is_none_or(|e| e != "jinja"),
        "missing fixtures/templates/{t}: make it with `bash scripts/reference/make_all.sh`"
    );
    t.to_string()
}

/// A fixed clock when the golden says which time it rendered at (`date`, or `now` in a case),
/// else the system's.
fn clock_for(case: &Value, top: &Value) -> Clock {
    let now = case
        .get("now")
        .or_else(|| case["context"].get("now"))
        .or_else(|| top.get("date"))
        .or_else(|| top.get("now"))
        .and_then(Value::as_str);
    let Some(now) = now else {
        return system_clock();
    };
    let parsed = NaiveDateTime::parse_from_str(now, "%Y-%m-%dT%H:%M:%S%.f")
        .or_else(|_| NaiveDateTime::parse_from_str(now, "%Y-%m-%d %H:%M:%S%.f"))
        .or_else(|_| NaiveDate::parse_from_str(now, "%Y-%m-%d").map(|d| d.and_hms_opt(0, 0, 0).unwrap_or_default()))
        .unwrap_or_else(|e| panic!("bad `now` {now:?}: {e}"));
    Arc::new(move || parsed)
}

/// The context of a case, split into ChatContext's fields and the rest. Where the golden keeps
/// the caller's messages before transformers normalised them (`input_messages`), we start from
/// those, so our own normalisation is tested too.
fn context(case: &Value) -> ChatContext {
    let mut vars: Map<String, Value> = case["context"].as_object().cloned().unwrap_or_default();
    vars.remove("now");
    if let Some(raw) = case.get("input_messages").filter(|m| m.is_array()) {
        vars.insert("messages".into(), raw.clone());
    }
    let messages = match vars.remove("messages") {
        Some(Value::Array(m)) => m,
        _ => Vec::new(),
    };
    let tools = match vars.remove("tools") {
        Some(Value::Array(t)) => Some(t),
        _ => None,
    };
    let add_generation_prompt = vars.remove("add_generation_prompt").and_then(|v| v.as_bool()).unwrap_or(false);
    let text = |v: Option<Value>| v.and_then(|v| v.as_str().map(str::to_string));
    ChatContext {
        messages,
        tools,
        add_generation_prompt,
        bos_token: text(vars.remove("bos_token")).unwrap_or_default(),
        eos_token: text(vars.remove("eos_token")).unwrap_or_default(),
        extra: vars,
    }
}

#[test]
fn templates_match_goldens() {
    let top = load_json("fixtures/goldens/templates.json");
    let cases = match &top {
        Value::Array(c) => c.clone(),
        other => other["cases"].as_array().cloned().expect("cases"),
    };
    assert!(!cases.is_empty(), "templates.json has no cases");
    let mut failures = Vec::new();
    for case in &cases {
        let name = case["name"].as_str().unwrap_or("?");
        let source = template_source(case);
        let result = ChatTemplate::with_clock(&source, clock_for(case, &top)).and_then(|t| t.render(&context(case)));
        let problem = match (case.get("rendered").and_then(Value::as_str), result) {
            (Some(want), Ok(got)) if got == want => None,
            (Some(want), Ok(got)) => Some(format!("rendered {got:?}, want {want:?}")),
            (Some(_), Err(e)) => Some(format!("failed: {e}")),
            (None, Ok(got)) => Some(format!("rendered {got:?}, want error {:?}", case["error"])),
            (None, Err(e)) => {
                let want = case["error"].as_str().unwrap_or("");
                (!e.to_string().contains(want)).then(|| format!("error {e}, want one containing {want:?}"))
            }
        };
        if let Some(p) = problem {
            failures.push(format!("{name}: {p}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} template cases differ; first: {}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
