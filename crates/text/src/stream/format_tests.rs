//! The formats beside Hermes, cut at every pair of boundaries: the same calls and content whatever the cuts, and
//! the segments reassemble to the reply.

use super::*;
use serde_json::{json, Value};

fn boundaries(text: &str) -> Vec<usize> {
    (0..=text.len()).filter(|&i| text.is_char_boundary(i)).collect()
}

/// Feeds `text` cut at every pair of boundaries (every single cut for a long text) and checks the calls and the
/// content that come out.
fn check(format: ToolFormat, text: &str, calls: &[(&str, Value)], content: &str) {
    let cuts = boundaries(text);
    let mut splits: Vec<Vec<&str>> = cuts.iter().map(|&i| vec![&text[..i], &text[i..]]).collect();
    if text.len() <= 160 {
        for &i in &cuts {
            for &j in cuts.iter().filter(|&&j| j >= i) {
                splits.push(vec![&text[..i], &text[i..j], &text[j..]]);
            }
        }
    }
    splits.push(cuts.windows(2).map(|w| &text[w[0]..w[1]]).collect());
    for pieces in splits {
        let mut p = ReplyParser::new(None, Some(ToolCallParser::for_format(format)));
        let mut out = Vec::new();
        for piece in &pieces {
            out.extend(p.push(piece));
        }
        out.extend(p.finish());
        let raw: String = out.iter().map(Segment::raw).collect();
        assert_eq!(raw, text, "{format:?} cut as {pieces:?} does not reassemble");
        let got: Vec<(String, Value)> = out
            .iter()
            .filter_map(|s| match s {
                Segment::ToolCall(c) => Some((c.name.clone(), serde_json::from_str(&c.arguments).unwrap())),
                _ => None,
            })
            .collect();
        let want: Vec<(String, Value)> = calls.iter().map(|(n, a)| (n.to_string(), a.clone())).collect();
        assert_eq!(got, want, "{format:?} cut as {pieces:?}");
        let text_out: String =
            out.iter().filter_map(|s| if let Segment::Content(t) = s { Some(t.as_str()) } else { None }).collect();
        assert_eq!(text_out, content, "{format:?} cut as {pieces:?}");
    }
}

#[test]
fn mistral_json_array_and_v11_calls() {
    let text = r#"Sure.[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": "now", "arguments": {}}]"#;
    check(ToolFormat::Mistral, text, &[("get_weather", json!({"city": "Oslo"})), ("now", json!({}))], "Sure.");
    let v11 =
        r#"[TOOL_CALLS]get_weather[ARGS]{"city": "Oslo"}[TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]{"tz": "CET"}"#;
    check(
        ToolFormat::Mistral,
        v11,
        &[("get_weather", json!({"city": "Oslo"})), ("get_time", json!({"tz": "CET"}))],
        "",
    );
    // Cut off, or not JSON: content, marker and all.
    let bad = r#"[TOOL_CALLS][{"name": "get_weather", "arguments": {"#;
    check(ToolFormat::Mistral, bad, &[], bad);
    check(ToolFormat::Mistral, "No calls [TOOL_ here.", &[], "No calls [TOOL_ here.");
}

#[test]
fn deepseek_v3_and_v3_1_calls() {
    let v3 = "Let me check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Oslo\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
    check(ToolFormat::DeepSeek, v3, &[("get_weather", json!({"city": "Oslo"})), ("now", json!({}))], "Let me check.");
    let v31 = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Oslo\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜> Done.";
    check(ToolFormat::DeepSeek, v31, &[("get_weather", json!({"city": "Oslo"}))], " Done.");
    let cut = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\"";
    check(ToolFormat::DeepSeek, cut, &[], cut);
}

#[test]
fn llama3_json_calls_open_the_answer() {
    let text = r#"{"name": "get_weather", "parameters": {"city": "Oslo"}}"#;
    check(ToolFormat::Llama3Json, text, &[("get_weather", json!({"city": "Oslo"}))], "");
    let tagged = r#"<|python_tag|>{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"x": 1}}"#;
    check(ToolFormat::Llama3Json, tagged, &[("a", json!({})), ("b", json!({"x": 1}))], "");
    // JSON that is not a call, and an answer that does not open with one, are content.
    check(ToolFormat::Llama3Json, r#"{"city": "Oslo"}"#, &[], r#"{"city": "Oslo"}"#);
    let prose = r#"Here: {"name": "f", "parameters": {}}"#;
    check(ToolFormat::Llama3Json, prose, &[], prose);
}

#[test]
fn the_template_names_the_format() {
    assert_eq!(ToolFormat::of_template("{{ '[TOOL_CALLS]' }}"), ToolFormat::Mistral);
    assert_eq!(ToolFormat::of_template("{{ '<｜tool▁calls▁begin｜>' }}"), ToolFormat::DeepSeek);
    assert_eq!(ToolFormat::of_template("{{ '<|python_tag|>' }}"), ToolFormat::Llama3Json);
    assert_eq!(ToolFormat::of_template("{{ '<tool_call>' }}"), ToolFormat::Hermes);
    // The real templates in the fixtures.
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/templates/");
    for (file, want) in [
        ("llama3.1.jinja", ToolFormat::Llama3Json),
        ("llama3.2.jinja", ToolFormat::Llama3Json),
        ("mistral-nemo.jinja", ToolFormat::Mistral),
        ("hermes3.jinja", ToolFormat::Hermes),
        ("qwen2.5.jinja", ToolFormat::Hermes),
        ("qwen3.jinja", ToolFormat::Hermes),
    ] {
        let src = std::fs::read_to_string(format!("{dir}{file}")).unwrap();
        assert_eq!(ToolFormat::of_template(&src), want, "{file}");
    }
}
