"""The official openai SDK against kvad-serve. argv: the real server's URL (SmolLM2), the scripted server's URL
(Qwen2.5's template; replies from tests/fixtures/script.json). Prints "ok: <check>" per check; any failure raises."""

import json
import sys

import openai

real = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="none")
scripted = openai.OpenAI(base_url=sys.argv[2] + "/v1", api_key="none")
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]

r = real.chat.completions.create(model="smollm2-instruct", messages=QUESTION, temperature=0, max_tokens=20)
assert r.choices[0].message.content == "The capital of France is Paris.", r
assert r.choices[0].finish_reason == "stop" and r.usage.completion_tokens == 8, r
print("ok: non-streamed chat")

stream = real.chat.completions.create(
    model="smollm2-instruct", messages=QUESTION, temperature=0, max_tokens=20, stream=True,
    stream_options={"include_usage": True},
)
parts, finish, usage = [], None, None
for chunk in stream:
    if chunk.usage:
        usage = chunk.usage
    for c in chunk.choices:
        parts.append(c.delta.content or "")
        finish = c.finish_reason or finish
assert "".join(parts) == "The capital of France is Paris.", parts
assert len([p for p in parts if p]) > 3, "streamed in pieces"
# The same question a second time: its conversation was kept, so all but the prompt's last token (always read by
# itself) came from the cache, and the reply is the same one.
assert finish == "stop" and usage.prompt_tokens == 37 and usage.prompt_tokens_details.cached_tokens == 36, usage
print("ok: streamed chat")

c = real.completions.create(model="smollm2-instruct", prompt="The capital of France is", temperature=0, max_tokens=3,
                            logprobs=2)
assert c.choices[0].text.startswith(" Paris"), c
assert c.choices[0].finish_reason == "length" and len(c.choices[0].logprobs.tokens) == 3, c
print("ok: completion")

tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
ask = [{"role": "user", "content": "What is the weather in Oslo?"}]
r = scripted.chat.completions.create(model="qwen2.5-scripted", messages=ask, tools=tools)
call = r.choices[0].message.tool_calls[0]
assert r.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather", r
assert json.loads(call.function.arguments) == {"city": "Oslo"}, call
result = {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature_c": 7, "sky": "rain"})}
r2 = scripted.chat.completions.create(
    model="qwen2.5-scripted", messages=ask + [r.choices[0].message.model_dump(exclude_none=True), result], tools=tools
)
assert r2.choices[0].message.content == "It is 7 degrees and raining in Oslo.", r2
print("ok: tool call round trip")

try:
    real.chat.completions.create(model="smollm2-instruct", messages=ask, tools=tools)
    raise AssertionError("tools on SmolLM2 must be refused")
except openai.BadRequestError as e:
    assert e.status_code == 400 and "smollm2-instruct" in e.body["message"] and e.body["param"] == "tools", e.body
try:
    real.chat.completions.create(model="no-such-model", messages=ask)
    raise AssertionError("an unknown model must be refused")
except openai.NotFoundError as e:
    assert "no-such-model" in e.body["message"], e.body
print("ok: error")
