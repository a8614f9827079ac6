"""The official anthropic Python SDK against kvad-serve's Messages API (run by constrained.rs).

argv[1]: the real SmolLM2-135M-Instruct given the Qwen2.5 (Hermes) tool template; argv[2]: the scripted engine
(real templates and parsers, scripted replies: a tool round trip and a thinking model). Prints "ok: <check>" per
check; any failure raises.
"""

import json
import sys

import anthropic

real = anthropic.Anthropic(base_url=sys.argv[1], api_key="unused", max_retries=0)
scripted = anthropic.Anthropic(base_url=sys.argv[2], api_key="unused", max_retries=0)
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
# Anthropic's current SDK has no sampling arguments; kvad reads temperature/top_p/top_k when sent.
GREEDY = {"temperature": 0}
WEATHER = [{
    "name": "get_weather",
    "description": "The weather in a city now",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                     "required": ["city"], "additionalProperties": False},
}]

msg = real.messages.create(model="smollm2-instruct", max_tokens=24, extra_body=GREEDY, messages=QUESTION)
assert msg.type == "message" and msg.role == "assistant", msg
assert msg.content[0].type == "text" and "Paris" in msg.content[0].text, msg
assert msg.stop_reason in ("end_turn", "max_tokens"), msg
count = real.messages.count_tokens(model="smollm2-instruct", messages=QUESTION)
assert count.input_tokens == msg.usage.input_tokens, (count, msg.usage)
print("ok: non-streamed message and count_tokens")

with real.messages.stream(model="smollm2-instruct", max_tokens=24, extra_body=GREEDY, messages=QUESTION) as st:
    text = "".join(st.text_stream)
    final = st.get_final_message()
assert text == msg.content[0].text, (text, msg.content[0].text)
assert final.content[0].text == text and final.stop_reason == msg.stop_reason, final
assert final.usage.output_tokens == msg.usage.output_tokens, (final.usage, msg.usage)
print("ok: streamed message")

forced = real.messages.create(
    model="smollm2-instruct", max_tokens=80, tools=WEATHER, tool_choice={"type": "any"},
    messages=[{"role": "user", "content": "What is the weather in Oslo?"}],
)
calls = [b for b in forced.content if b.type == "tool_use"]
assert forced.stop_reason == "tool_use" and len(calls) >= 1, forced
assert calls[0].name == "get_weather" and isinstance(calls[0].input["city"], str), calls
assert set(calls[0].input) == {"city"}, calls
print("ok: forced tool call")

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                           "population": {"type": "integer"}},
          "required": ["city", "population"], "additionalProperties": False}
for seed in range(3):
    out = real.messages.create(
        model="smollm2-instruct", max_tokens=60, extra_body={"seed": seed},
        output_config={"format": {"type": "json_schema", "schema": SCHEMA}},
        messages=[{"role": "user", "content": "The largest city of Norway, as JSON."}],
    )
    reply = json.loads(out.content[0].text)
    assert set(reply) == {"city", "population"} and isinstance(reply["population"], int), reply
print("ok: structured output")

ask = [{"role": "user", "content": "What is the weather in Oslo?"}]
first = scripted.messages.create(model="qwen2.5-scripted", max_tokens=64, tools=WEATHER, messages=ask)
call = next(b for b in first.content if b.type == "tool_use")
assert (call.name, call.input) == ("get_weather", {"city": "Oslo"}), first
ask += [
    {"role": "assistant", "content": first.content},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                  "content": json.dumps({"temperature_c": 7, "sky": "rain"})}]},
]
second = scripted.messages.create(model="qwen2.5-scripted", max_tokens=64, tools=WEATHER, messages=ask)
assert second.content[0].text == "It is 7 degrees and raining in Oslo.", second
print("ok: tool round trip")

with scripted.messages.stream(model="qwen3-scripted", max_tokens=2048, messages=[{"role": "user", "content": "hi"}],
                              thinking={"type": "enabled", "budget_tokens": 1024}) as st:
    final = st.get_final_message()
assert [b.type for b in final.content] == ["thinking", "text"], final
assert "greet" in final.content[0].thinking and final.content[1].text == "Hello!", final
print("ok: thinking streamed")

hidden = scripted.messages.create(model="qwen3-scripted", max_tokens=64, messages=[{"role": "user", "content": "hi"}],
                                  thinking={"type": "adaptive", "display": "omitted"})
assert [b.type for b in hidden.content] == ["text"], hidden
print("ok: thinking omitted")

try:
    real.messages.create(model="no-such-model", max_tokens=5, messages=QUESTION)
    raise AssertionError("an unknown model was accepted")
except anthropic.NotFoundError as e:
    assert e.body["error"]["type"] == "not_found_error", e.body
try:
    real.messages.create(model="smollm2-instruct", max_tokens=5, messages=QUESTION, extra_body={"top_k": -3})
    raise AssertionError("top_k -3 was accepted")
except anthropic.BadRequestError as e:
    assert e.body["error"]["type"] == "invalid_request_error" and "top_k" in e.body["error"]["message"], e.body
print("ok: errors")
