//! Every parser is checked on every way of cutting the reply into deltas: one cut at each boundary, every pair of
//! cuts (short replies), and one character at a time. The coalesced result must not depend on the cuts.

use super::*;
use proptest::prelude::*;

/// Expected segments: `('c', text)` content, `('r', text)` reasoning, `('m', text)` markup, `('t', "name args")`.
fn expect(spec: &[(char, &str)]) -> Vec<(char, String)> {
    spec.iter().map(|(k, s)| (*k, s.to_string())).collect()
}

fn kinds(segments: Vec<Segment>) -> Vec<(char, String)> {
    coalesce(segments)
        .into_iter()
        .map(|s| match s {
            Segment::Content(t) => ('c', t),
            Segment::Reasoning(t) => ('r', t),
            Segment::Markup(t) => ('m', t),
            Segment::ToolCall(c) => ('t', format!("{} {}", c.name, c.arguments)),
        })
        .collect()
}

fn parser(reasoning: bool, tools: bool) -> ReplyParser {
    ReplyParser::new(reasoning.then(ReasoningSplitter::new), tools.then(ToolCallParser::new))
}

fn run(reasoning: bool, tools: bool, pieces: &[&str]) -> Vec<Segment> {
    let mut p = parser(reasoning, tools);
    let mut out = Vec::new();
    for piece in pieces {
        out.extend(p.push(piece));
    }
    out.extend(p.finish());
    out
}

fn boundaries(text: &str) -> Vec<usize> {
    (0..=text.len()).filter(|&i| text.is_char_boundary(i)).collect()
}

fn check(reasoning: bool, tools: bool, text: &str, expected: &[(char, &str)]) {
    let expected = expect(expected);
    let mut splits: Vec<Vec<&str>> = vec![vec![text]];
    let cuts = boundaries(text);
    for &i in &cuts {
        splits.push(vec![&text[..i], &text[i..]]);
    }
    if text.len() <= 80 {
        for &i in &cuts {
            for &j in cuts.iter().filter(|&&j| j >= i) {
                splits.push(vec![&text[..i], &text[i..j], &text[j..]]);
            }
        }
    }
    splits.push(cuts.windows(2).map(|w| &text[w[0]..w[1]]).collect());
    for pieces in splits {
        let out = run(reasoning, tools, &pieces);
        let raw: String = out.iter().map(|s| s.raw()).collect();
        assert_eq!(raw, text, "pieces {pieces:?} do not reassemble");
        assert_eq!(kinds(out), expected, "reply {text:?} cut as {pieces:?}");
    }
}

#[test]
fn a_trace_then_an_answer() {
    check(
        true,
        false,
        "<think>Paris? yes.</think>\n\nParis.",
        &[('m', "<think>"), ('r', "Paris? yes."), ('m', "</think>\n\n"), ('c', "Paris.")],
    );
}

#[test]
fn leading_whitespace_before_the_opening_tag_is_format() {
    check(true, false, "\n <think>a</think>b", &[('m', "\n <think>"), ('r', "a"), ('m', "</think>"), ('c', "b")]);
}

#[test]
fn a_tag_after_text_is_text() {
    check(true, false, "I use <think>tags</think> here", &[('c', "I use <think>tags</think> here")]);
    check(true, false, "x<think>", &[('c', "x<think>")]);
}

#[test]
fn a_cut_off_trace_is_still_a_trace() {
    check(true, false, "<think>still thinking about </thi", &[('m', "<think>"), ('r', "still thinking about </thi")]);
    check(true, false, "<think>", &[('m', "<think>")]);
}

#[test]
fn a_cut_off_opening_tag_is_content() {
    check(true, false, "<thi", &[('c', "<thi")]);
    check(true, false, "  ", &[('c', "  ")]);
}

#[test]
fn nested_and_unbalanced_tags() {
    // The first close ends the trace; a nested open is text of the trace.
    check(
        true,
        false,
        "<think>a<think>b</think>c</think>d",
        &[('m', "<think>"), ('r', "a<think>b"), ('m', "</think>"), ('c', "c</think>d")],
    );
    // A close with no open is text.
    check(true, false, "</think>answer", &[('c', "</think>answer")]);
    check(true, false, "<think></think>", &[('m', "<think></think>")]);
    check(true, false, "<<think>>", &[('c', "<<think>>")]);
}

#[test]
fn a_prompt_that_opened_the_trace() {
    let text = "working</think> answer";
    for i in boundaries(text) {
        let mut p = ReplyParser::new(Some(ReasoningSplitter::inside_trace()), None);
        let mut out = p.push(&text[..i]);
        out.extend(p.push(&text[i..]));
        out.extend(p.finish());
        assert_eq!(kinds(out), expect(&[('r', "working"), ('m', "</think> "), ('c', "answer")]));
    }
}

#[test]
fn non_ascii_text_is_never_split_inside_a_character() {
    check(
        true,
        true,
        "<think>æøå 🦀</think>Grüße <tool_",
        &[('m', "<think>"), ('r', "æøå 🦀"), ('m', "</think>"), ('c', "Grüße <tool_")],
    );
}

const CALL: &str = r#"<tool_call>
{"name": "get_weather", "arguments": {"city": "Oslo"}}
</tool_call>"#;

#[test]
fn one_call() {
    check(false, true, CALL, &[('t', r#"get_weather {"city":"Oslo"}"#)]);
}

#[test]
fn a_call_after_text_and_parallel_calls() {
    let text = format!("Let me look.\n{CALL}\n{CALL}\n");
    check(
        false,
        true,
        &text,
        &[
            ('c', "Let me look.\n"),
            ('t', r#"get_weather {"city":"Oslo"}"#),
            ('m', "\n"),
            ('t', r#"get_weather {"city":"Oslo"}"#),
            ('m', "\n"),
        ],
    );
}

/// Qwen3-Coder writes its calls as XML inside the same tags; values are bare (numbers and objects read as JSON).
#[test]
fn qwen3_coder_xml_calls() {
    let call = "<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/a b.rs\n</parameter>\n<parameter=lines>\n3\n</parameter>\n\
                <parameter=body>\nfn main() {\n    println!(\"<hi>\");\n}\n</parameter>\n</function>\n</tool_call>";
    let text = format!("Writing it.\n{call}");
    let want = serde_json::json!({"path": "src/a b.rs", "lines": 3, "body": "fn main() {\n    println!(\"<hi>\");\n}"});
    let cuts = boundaries(&text);
    for (i, j) in cuts.iter().flat_map(|&i| cuts.iter().filter(move |&&j| j >= i).map(move |&j| (i, j))) {
        let out = run(false, true, &[&text[..i], &text[i..j], &text[j..]]);
        let calls: Vec<&ToolCall> =
            out.iter().filter_map(|s| if let Segment::ToolCall(c) = s { Some(c) } else { None }).collect();
        assert_eq!(calls.len(), 1, "cut at {i},{j}: {out:?}");
        assert_eq!(calls[0].name, "write_file");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&calls[0].arguments).unwrap(), want, "cut at {i},{j}");
        assert_eq!(out.iter().map(|s| s.raw()).collect::<String>(), text);
    }
    // No parameters; and a malformed block (no closing function) is content.
    check(false, true, "<tool_call><function=now></function></tool_call>", &[('t', "now {}")]);
    let bad = "<tool_call><function=f><parameter=x>1</parameter></tool_call>";
    check(false, true, bad, &[('c', bad)]);
}

#[test]
fn text_after_a_call_is_content() {
    let text = format!("{CALL}\nDone.");
    check(false, true, &text, &[('t', r#"get_weather {"city":"Oslo"}"#), ('c', "\nDone.")]);
}

#[test]
fn bad_json_comes_back_as_content_tags_and_all() {
    let bad = "<tool_call>{\"name\": \"f\", \"arguments\": {</tool_call>";
    check(false, true, bad, &[('c', bad)]);
    let no_name = "<tool_call>{\"arguments\": {}}</tool_call>";
    check(false, true, no_name, &[('c', no_name)]);
    let not_object = "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>";
    check(false, true, not_object, &[('c', not_object)]);
}

#[test]
fn arguments_as_a_string_or_absent() {
    check(false, true, r#"<tool_call>{"name":"f","arguments":"{\"a\":1}"}</tool_call>"#, &[('t', r#"f {"a":1}"#)]);
    check(false, true, r#"<tool_call>{"name":"f"}</tool_call>"#, &[('t', "f {}")]);
}

#[test]
fn a_cut_off_call_comes_back_as_content() {
    let cut = "<tool_call>\n{\"name\": \"get_weather\", \"argu";
    check(false, true, cut, &[('c', cut)]);
    check(false, true, "see <tool_ca", &[('c', "see <tool_ca")]);
}

#[test]
fn nested_open_tags_inside_a_call_make_it_content() {
    let text = "<tool_call><tool_call>{\"name\":\"f\"}</tool_call>";
    check(false, true, text, &[('c', text)]);
}

#[test]
fn without_tools_offered_the_reply_is_untouched() {
    let text = format!("The format is {CALL}");
    check(false, false, &text, &[('c', &text)]);
    check(false, false, CALL, &[('c', CALL)]);
}

#[test]
fn reasoning_then_a_call() {
    let text = format!("<think>need weather</think>\n{CALL}");
    check(
        true,
        true,
        &text,
        &[('m', "<think>"), ('r', "need weather"), ('m', "</think>\n"), ('t', r#"get_weather {"city":"Oslo"}"#)],
    );
    // A call inside the trace is part of the working, not a call.
    let inside = format!("<think>{CALL}</think>ok");
    check(true, true, &inside, &[('m', "<think>"), ('r', CALL), ('m', "</think>"), ('c', "ok")]);
}

fn stop_run(stops: &[&str], pieces: &[&str]) -> (String, Option<String>) {
    let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect());
    let mut out = String::new();
    for p in pieces {
        out.push_str(&m.push(p));
    }
    if !m.stopped() {
        out.push_str(&m.finish());
    }
    assert_eq!(m.stopped(), m.matched().is_some());
    (out, m.matched().map(str::to_string))
}

#[test]
fn stop_strings_end_the_reply_at_every_cut() {
    // The stop string matched is the earliest in the text (Anthropic's `stop_sequence` reports it).
    let cases: [(&[&str], &str, &str, Option<&str>); 7] = [
        (&["\n\n"], "one\ntwo\n\nthree", "one\ntwo", Some("\n\n")),
        (&["END", "STOP"], "abcSTOPdefEND", "abc", Some("STOP")),
        (&["STOP", "OP"], "abcSTOPdef", "abc", Some("STOP")),
        (&["xyz"], "no stop here xy", "no stop here xy", None),
        (&["é!"], "café!", "caf", Some("é!")),
        (&["aab"], "aaab", "a", Some("aab")),
        (&[""], "empty stops are ignored", "empty stops are ignored", None),
    ];
    for (stops, text, want, matched) in cases {
        for i in boundaries(text) {
            for j in boundaries(text).into_iter().filter(|&j| j >= i) {
                let got = stop_run(stops, &[&text[..i], &text[i..j], &text[j..]]);
                let matched = matched.map(str::to_string);
                assert_eq!(got, (want.to_string(), matched), "{stops:?} on {text:?} cut at {i},{j}");
            }
        }
    }
}

fn fragment() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "<think>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
        "{\"name\":\"f\",\"arguments\":{\"x\":1}}",
        "{\"name\":",
        "a",
        "b c",
        " ",
        "\n",
        "<",
        "</",
        "<t",
        "think>",
        "tool_call>",
        "é",
        "🦀",
        "{",
        "}",
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    /// Content + reasoning + calls + markup reassemble to the model's text, whatever the text and however it is
    /// cut, and the cuts never change what it parses to.
    #[test]
    fn segments_reassemble_and_ignore_the_cuts(
        frags in prop::collection::vec(fragment(), 0..14),
        cuts in prop::collection::vec(0usize..200, 0..6),
        reasoning in any::<bool>(),
        tools in any::<bool>(),
    ) {
        let text: String = frags.concat();
        let mut at: Vec<usize> = cuts.into_iter().map(|c| c % (text.len() + 1)).filter(|&c| text.is_char_boundary(c)).collect();
        at.sort_unstable();
        let mut pieces = Vec::new();
        let mut last = 0;
        for c in at {
            pieces.push(&text[last..c]);
            last = c;
        }
        pieces.push(&text[last..]);
        let out = run(reasoning, tools, &pieces);
        let raw: String = out.iter().map(|s| s.raw()).collect();
        prop_assert_eq!(&raw, &text);
        prop_assert_eq!(kinds(out), kinds(run(reasoning, tools, &[&text])));
    }
}
