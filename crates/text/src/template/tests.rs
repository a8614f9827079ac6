//! Behaviour that must match Python's jinja2 as transformers configures it. Expected strings
//! were checked against jinja2 3.1 with trim_blocks and lstrip_blocks.

use std::sync::Arc;

use serde_json::json;

use super::*;

fn render(src: &str, ctx: &ChatContext) -> Result<String, TextError> {
    ChatTemplate::new(src)?.render(ctx)
}

fn with_messages(messages: Json) -> ChatContext {
    ChatContext { messages: messages.as_array().cloned().unwrap_or_default(), ..Default::default() }
}

#[test]
fn blocks_trim_and_lstrip() {
    let src =
        "{% for m in messages %}\n    {% if m.role == 'user' %}\nU:{{ m.content }}\n    {% endif %}\n{% endfor %}\n";
    let ctx = with_messages(json!([{"role": "user", "content": "hi"}, {"role": "x", "content": "no"}]));
    assert_eq!(render(src, &ctx).unwrap(), "U:hi\n");
}

#[test]
fn raise_exception_fails_with_the_message() {
    let src = "{% if messages|length == 0 %}{{ raise_exception('Need at least one message!') }}{% endif %}";
    let err = render(src, &ChatContext::default()).unwrap_err();
    match err {
        TextError::TemplateRender { message } => assert_eq!(message, "Need at least one message!"),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn strftime_now_reads_the_injected_clock() {
    let fixed = chrono::NaiveDate::from_ymd_opt(2024, 9, 26).and_then(|d| d.and_hms_opt(12, 0, 0)).unwrap();
    let t = ChatTemplate::with_clock("Today: {{ strftime_now('%d %b %Y') }}", Arc::new(move || fixed)).unwrap();
    assert_eq!(t.render(&ChatContext::default()).unwrap(), "Today: 26 Sep 2024");
}

#[test]
fn tojson_is_python_json_dumps() {
    let ctx = ChatContext {
        tools: Some(vec![json!({"name": "f", "desc": "<é>", "n": 1.0, "args": {"b": 1, "a": [true, null]}})]),
        ..Default::default()
    };
    assert_eq!(
        render("{{ tools[0]|tojson }}", &ctx).unwrap(),
        r#"{"name": "f", "desc": "<é>", "n": 1.0, "args": {"b": 1, "a": [true, null]}}"#
    );
    assert_eq!(
        render("{{ tools[0].args|tojson(indent=2) }}", &ctx).unwrap(),
        "{\n  \"b\": 1,\n  \"a\": [\n    true,\n    null\n  ]\n}"
    );
    assert_eq!(
        render("{{ tools[0].args|tojson(sort_keys=true, separators=(',', ':')) }}", &ctx).unwrap(),
        r#"{"a":[true,null],"b":1}"#
    );
}

#[test]
fn values_print_like_python() {
    let ctx = with_messages(json!([{"role": "user", "content": ["a", 1, 2.5, true, null]}]));
    assert_eq!(
        render("{{ messages[0].content }}|{{ true }}|{{ none }}|{{ 0.00001 }}", &ctx).unwrap(),
        "['a', 1, 2.5, True, None]|True|None|1e-05"
    );
}

#[test]
fn python_string_and_dict_methods() {
    let ctx = with_messages(json!([{"role": "user", "content": "  a,b,c  "}]));
    let src = "{{ messages[0].content.strip() }}|{{ messages[0].content.strip().split(',')|length }}|\
               {{ messages[0].role.startswith('us') }}|{{ messages[0].get('missing', 'd') }}|\
               {% for k, v in messages[0].items() %}{{ k }}={{ v|trim }};{% endfor %}";
    assert_eq!(render(src, &ctx).unwrap(), "a,b,c|3|True|d|role=user;content=a,b,c;");
}

#[test]
fn namespace_loop_controls_and_undefined() {
    let ctx = with_messages(json!([{"role": "a"}, {"role": "b"}, {"role": "c"}]));
    let src = "{% set ns = namespace(n=0) %}{% for m in messages %}{% if m.role == 'b' %}{% continue %}{% endif %}\
               {% set ns.n = ns.n + 1 %}{% if loop.last %}{% break %}{% endif %}{% endfor %}{{ ns.n }}{{ nothing }}\
               {% if nothing is defined %}D{% endif %}{{ 'abc'[::-1] }}{{ 'abc'|length }}";
    assert_eq!(render(src, &ctx).unwrap(), "2cba3");
}

#[test]
fn tools_none_is_defined_but_falsy() {
    let src = "{% if tools is defined %}D{% endif %}{% if tools is none %}N{% endif %}{% if tools %}T{% endif %}";
    assert_eq!(render(src, &ChatContext::default()).unwrap(), "DN");
}

#[test]
fn extra_variables_and_special_tokens() {
    let mut ctx = ChatContext {
        bos_token: "<s>".into(),
        eos_token: "</s>".into(),
        add_generation_prompt: true,
        ..Default::default()
    };
    ctx.extra.insert("enable_thinking".into(), json!(false));
    let src = "{{ bos_token }}{% if add_generation_prompt %}A{% endif %}{% if not enable_thinking %}NT{% endif %}{{ eos_token }}";
    assert_eq!(render(src, &ctx).unwrap(), "<s>ANT</s>");
}

#[test]
fn generation_blocks_render_their_body() {
    let src = "{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}";
    let ctx = with_messages(json!([{"role": "assistant", "content": "x"}]));
    assert_eq!(render(src, &ctx).unwrap(), "x");
}

#[test]
fn reasoning_fields_are_aliased_and_nulls_dropped() {
    let ctx = with_messages(json!([{"role": "assistant", "content": "c", "reasoning": "r", "tool_calls": null}]));
    let src = "{{ messages[0]|tojson }}";
    assert_eq!(
        render(src, &ctx).unwrap(),
        r#"{"thinking": "r", "role": "assistant", "content": "c", "reasoning": "r", "reasoning_content": "r"}"#
    );
}

#[test]
fn syntax_errors_are_typed() {
    let err = ChatTemplate::new("{% if %}").unwrap_err();
    assert!(matches!(err, TextError::TemplateSyntax { .. }), "{err:?}");
}

#[test]
fn supports_tools_reads_the_source() {
    assert!(ChatTemplate::new("{% if tools %}x{% endif %}").unwrap().supports_tools());
    assert!(!ChatTemplate::new("{{ messages }}").unwrap().supports_tools());
}

#[test]
fn from_dir_prefers_jinja_then_json_then_tokenizer_config() {
    let dir = std::env::temp_dir().join(format!("kvad-text-tpl-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    assert!(ChatTemplate::from_dir(&dir).unwrap().is_none());
    std::fs::write(
        dir.join("tokenizer_config.json"),
        r#"{"chat_template": [{"name": "default", "template": "C"}, {"name": "rag", "template": "R"}]}"#,
    )
    .unwrap();
    let src = |d: &Path| ChatTemplate::from_dir(d).unwrap().unwrap().source().to_string();
    assert_eq!(src(&dir), "C");
    std::fs::write(dir.join("chat_template.json"), r#"{"chat_template": "J"}"#).unwrap();
    assert_eq!(src(&dir), "J");
    std::fs::write(dir.join("chat_template.jinja"), "K").unwrap();
    assert_eq!(src(&dir), "K");
    std::fs::write(dir.join("chat_template.jinja"), "{% if %}").unwrap();
    assert!(ChatTemplate::from_dir(&dir).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn operators_and_filters_like_python() {
    let src = "{{ 'a' + 'b' }}|{{ [1,2] + [3] }}|{{ 'a b  c'.split() }}|{{ 'a,b'.split(',', 1) }}|\
               {{ {'a':1}.keys()|list }}|{{ 3/2 }}|{{ 4/2 }}|{{ 7//2 }}|{{ 'Hi'.upper() }}|{{ 'x'|string }}";
    assert_eq!(
        render(src, &ChatContext::default()).unwrap(),
        "ab|[1, 2, 3]|['a', 'b', 'c']|['a', 'b']|['a']|1.5|2.0|3|HI|x"
    );
    let ctx = with_messages(json!([{"role": "u", "content": {"a": "it's", "b": 1.5}}, {"role": "v"}]));
    let src = "{{ messages[0].content }}|{{ 1 in [1,2] }}|{{ 'ab' in 'cabd' }}|\
               {{ messages|selectattr('role','equalto','u')|list|length }}|{{ messages|map(attribute='role')|join(',') }}";
    assert_eq!(render(src, &ctx).unwrap(), "{'a': \"it's\", 'b': 1.5}|True|True|1|u,v");
}

#[test]
fn comments_and_indented_blocks() {
    let src = "  {#- c -#}\n  {% if true %}\n  x\n  {% endif %}\n  {{ 'y' }}  \n  {# comment #}\n  z";
    assert_eq!(render(src, &ChatContext::default()).unwrap(), "  x\n  y  \n  z");
}
