"""Chat-template goldens: fixtures/templates/*.jinja + fixtures/goldens/templates.json.

Templates: SmolLM2's comes from the GGUF (tokenizer.chat_template); the others are the models' official templates as
vendored by llama.cpp in models/templates/ (taken from the llama-cpp-python 0.3.36 sdist on PyPI; see
fixtures/README.md). They are copied into fixtures/templates/ once (set KVAD_TEMPLATE_SRC to re-copy).

Rendering mirrors transformers.utils.chat_template_utils (the environment is rebuilt below) and every case is
cross-checked against transformers' own render_jinja_template with the clock frozen.
"""
import copy
import json
import os
import sys
from datetime import datetime

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402

FIXED_NOW = datetime(2024, 9, 1, 12, 0, 0)  # strftime_now(fmt) == FIXED_NOW.strftime(fmt)

VENDORED = {
    "qwen2.5": "Qwen-Qwen2.5-7B-Instruct.jinja",
    "qwen3": "Qwen-Qwen3-0.6B.jinja",
    "llama3.1": "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "llama3.2": "meta-llama-Llama-3.2-3B-Instruct.jinja",
    "mistral-nemo": "mistralai-Mistral-Nemo-Instruct-2407.jinja",
    "hermes3": "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
}

SPECIALS = {
    "smollm2": {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"},
    "qwen2.5": {"eos_token": "<|im_end|>"},
    "qwen3": {"eos_token": "<|im_end|>"},
    "llama3.1": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "llama3.2": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "mistral-nemo": {"bos_token": "<s>", "eos_token": "</s>"},
    "hermes3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"},
}


def make_env():
    """The environment transformers' _cached_compile_jinja_template builds (minus the {% generation %} tracker)."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return FIXED_NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = dict
    env.globals["namespace"] = jinja2.utils.Namespace
    return env


def load_templates():
    tdir = os.path.join(common.FIX, "templates")
    os.makedirs(tdir, exist_ok=True)
    src = os.environ.get("KVAD_TEMPLATE_SRC")
    if src:
        for name, fname in VENDORED.items():
            with open(os.path.join(src, fname), encoding="utf-8") as f:
                text = f.read()
            with open(os.path.join(tdir, name + ".jinja"), "w", encoding="utf-8") as f:
                f.write(text)
    # SmolLM2: from the GGUF
    from gguf import GGUFReader
    r = GGUFReader(common.SMOLLM2_GGUF)
    smol = r.fields["tokenizer.chat_template"].contents()
    with open(os.path.join(tdir, "smollm2.jinja"), "w", encoding="utf-8") as f:
        f.write(smol)
    out = {}
    for name in ["smollm2"] + list(VENDORED):
        with open(os.path.join(tdir, name + ".jinja"), encoding="utf-8") as f:
            out[name] = f.read()
    return out


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "location": {"type": "string", "description": "City name, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"}},
        "required": ["location"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Get the local time in a timezone.",
    "parameters": {"type": "object", "properties": {
        "timezone": {"type": "string", "description": "IANA timezone name"}}, "required": ["timezone"]}}}
TOOLS = [WEATHER, TIME]


def tc(name, args, id_=None):
    d = {"type": "function", "function": {"name": name, "arguments": args}}
    if id_ is not None:
        d["id"] = id_
    return d


U = lambda c: {"role": "user", "content": c}  # noqa: E731
A = lambda c: {"role": "assistant", "content": c}  # noqa: E731
S = lambda c: {"role": "system", "content": c}  # noqa: E731


def cases():
    c = []
    add = lambda tpl, desc, messages, agp, **kw: c.append((tpl, desc, messages, agp, kw))  # noqa: E731
    # ---- SmolLM2
    add("smollm2", "user only, default system prompt inserted", [U("What is the capital of France?")], True)
    add("smollm2", "system + multi-turn, no generation prompt",
        [S("You are terse."), U("Hi!"), A("Hello."), U("Name a colour.")], False)
    add("smollm2", "unicode content", [U("Traduis: « déjà vu » 日本語 😀👨‍👩‍👧")], True)
    # ---- Qwen2.5
    add("qwen2.5", "user only, default system", [U("Hello")], True)
    add("qwen2.5", "system + multi-turn", [S("Be brief."), U("2+2?"), A("4"), U("3+3?")], True)
    add("qwen2.5", "tools offered", [U("Weather in Paris?")], True, tools=TOOLS)
    add("qwen2.5", "tools + assistant tool_calls + tool results",
        [S("You are a weather bot."), U("Weather in Paris and time in Tokyo?"),
         {"role": "assistant", "content": "", "tool_calls": [
             tc("get_weather", {"location": "Paris", "unit": "celsius"}), tc("get_time", {"timezone": "Asia/Tokyo"})]},
         {"role": "tool", "content": "{\"temp\": 21, \"sky\": \"clear\"}"},
         {"role": "tool", "content": "{\"time\": \"19:04\"}"}], True, tools=TOOLS)
    add("qwen2.5", "unicode multi-turn, no generation prompt",
        [U("Ça va? 你好 🇫🇷"), A("Très bien! 👍🏽"), U("Merci")], False)
    # ---- Qwen3
    add("qwen3", "user only (thinking default)", [U("What is 17*23?")], True)
    add("qwen3", "enable_thinking=false", [U("What is 17*23?")], True, enable_thinking=False)
    add("qwen3", "history with <think> in assistant content (stripped before the last user turn)",
        [U("Hi"), A("<think>\nThe user greets me.\n</think>\n\nHello! How can I help?"), U("Tell me a joke.")], True)
    add("qwen3", "reasoning_content on the assistant turn after the last user query (kept)",
        [U("What is 2+2?"), {"role": "assistant", "content": "4", "reasoning_content": "Simple addition."}], False)
    add("qwen3", "tools + multi-step tool calls + tool responses",
        [S("You can call tools."), U("Weather in Paris?"),
         {"role": "assistant", "content": "<think>\nI should call the tool.\n</think>\n\nLet me check.",
          "tool_calls": [tc("get_weather", {"location": "Paris"})]},
         {"role": "tool", "content": "{\"temp\": 21}"}], True, tools=TOOLS)
    add("qwen3", "reasoning passed as `reasoning` (transformers aliases it to reasoning_content)",
        [U("Capital of Japan?"), {"role": "assistant", "content": "Tokyo.", "reasoning": "Geography fact."}], False)
    add("qwen3", "enable_thinking=true explicit, system message", [S("Be helpful."), U("Hi")], True,
        enable_thinking=True)
    # ---- Llama 3.1
    add("llama3.1", "system + user", [S("You are a helpful assistant."), U("Hello!")], True)
    add("llama3.1", "user only (default date 26 Jul 2024)", [U("Hello!")], True)
    add("llama3.1", "tools in first user message + tool call + ipython result",
        [S("You are a bot."), U("Weather in Paris?"),
         {"role": "assistant", "tool_calls": [tc("get_weather", {"location": "Paris", "unit": "celsius"})]},
         {"role": "tool", "content": "{\"temp\": 21}"}], True, tools=TOOLS)
    add("llama3.1", "date_string override, multi-turn", [U("Hi"), A("Hello!"), U("Bye")], False,
        date_string="01 Jan 2025")
    add("llama3.1", "error: two tool calls in one message",
        [U("Weather in Paris and Rome?"),
         {"role": "assistant", "tool_calls": [tc("get_weather", {"location": "Paris"}),
                                              tc("get_weather", {"location": "Rome"})]}], False, tools=TOOLS)
    # ---- Llama 3.2 (uses strftime_now)
    add("llama3.2", "user only: date from strftime_now", [U("What day is it?")], True)
    add("llama3.2", "tools offered, system message", [S("Answer with tools."), U("Time in Tokyo?")], True,
        tools=TOOLS)
    # ---- Mistral (Nemo, v0.3-style tool format)
    add("mistral-nemo", "system + alternating turns", [S("Be brief."), U("Hi"), A("Hello!"), U("How are you?")], False)
    add("mistral-nemo", "error: roles do not alternate", [U("Hi"), U("Hello?")], False)
    add("mistral-nemo", "tools + tool_calls with 9-char id + tool result",
        [U("Weather in Paris?"),
         {"role": "assistant", "tool_calls": [tc("get_weather", {"location": "Paris"}, id_="abc123XYZ")]},
         {"role": "tool", "tool_call_id": "abc123XYZ", "content": "{\"temp\": 21}"},
         A("It is 21°C in Paris."), U("Thanks! 😀")], False, tools=TOOLS)
    add("mistral-nemo", "error: tool call id of wrong length",
        [U("Weather?"), {"role": "assistant", "tool_calls": [tc("get_weather", {"location": "Paris"}, id_="short")]}],
        False, tools=TOOLS)
    # ---- Hermes 3 tool use
    add("hermes3", "tools offered", [U("Weather in Paris?")], True, tools=TOOLS)
    add("hermes3", "tool call + two tool results",
        [S("You are Hermes."), U("Weather in Paris and time in Tokyo?"),
         {"role": "assistant", "tool_calls": [tc("get_weather", {"location": "Paris"}),
                                              tc("get_time", {"timezone": "Asia/Tokyo"})]},
         {"role": "tool", "content": "{\"temp\": 21}"}, {"role": "tool", "content": "{\"time\": \"19:04\"}"}],
        True, tools=TOOLS)
    return c


def transformers_render(template, context):
    from transformers.utils import chat_template_utils as ctu

    class _FrozenDT(datetime):
        @classmethod
        def now(cls, tz=None):
            return FIXED_NOW

    old = ctu.datetime
    ctu.datetime = _FrozenDT
    try:
        kw = {k: v for k, v in context.items() if k not in ("messages", "tools", "add_generation_prompt")}
        rendered = ctu.render_jinja_template(
            conversations=[context["messages"]], tools=context.get("tools"), chat_template=template,
            add_generation_prompt=context["add_generation_prompt"], **kw)
        return rendered[0][0] if isinstance(rendered, tuple) else rendered[0]
    finally:
        ctu.datetime = old


def main():
    import jinja2
    from transformers.utils.chat_template_utils import _alias_reasoning_fields

    templates = load_templates()
    env = make_env()
    compiled = {k: env.from_string(v) for k, v in templates.items()}
    out = []
    for tpl, desc, messages, agp, kw in cases():
        extra = {k: v for k, v in kw.items() if k != "tools"}
        # what transformers hands the template: tools=None and documents=None when not given,
        # messages after _alias_reasoning_fields, special tokens from the tokenizer.
        aliased = _alias_reasoning_fields(copy.deepcopy(messages))
        context = {"messages": aliased, "tools": kw.get("tools"), "documents": None,
                   "add_generation_prompt": agp, **SPECIALS[tpl], **extra}
        entry = {"name": f"{tpl}: {desc}", "template": tpl + ".jinja", "context": context}
        if aliased != messages:
            entry["input_messages"] = messages
        try:
            rendered = compiled[tpl].render(**copy.deepcopy(context))
            entry["rendered"] = rendered
        except jinja2.exceptions.TemplateError as e:
            entry["error"] = str(e)
        # cross-check against transformers itself (with the original messages)
        tctx = dict(context, messages=messages)
        tctx.pop("documents")
        try:
            t_rendered = transformers_render(templates[tpl], tctx)
            assert entry.get("rendered") == t_rendered, (entry["name"], entry.get("rendered"), t_rendered)
        except jinja2.exceptions.TemplateError as e:
            assert entry.get("error") == str(e), (entry["name"], e)
        out.append(entry)
    path = common.fix("goldens", "templates.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"how": "jinja2 ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, "
                          "extensions=[loopcontrols]); filter tojson = json.dumps(x, ensure_ascii=False, indent=indent, "
                          "separators=separators, sort_keys=False); globals raise_exception (TemplateError), "
                          "strftime_now (frozen), dict, namespace; template.render(**context). Every case equals "
                          "transformers' render_jinja_template output.",
                   "date": FIXED_NOW.isoformat(),
                   "strftime_now": "returns datetime(2024, 9, 1, 12, 0, 0).strftime(fmt)",
                   "versions": common.versions("transformers", "jinja2"),
                   "cases": out}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum(1 for e in out if "error" in e)
    print(f"templates: {len(out)} cases ({n_err} errors) -> {common.rel(path)}")
    for e in out:
        if "error" in e:
            print("  error case:", e["name"], "->", e["error"])


if __name__ == "__main__":
    main()
