"""The official openai Python SDK against kvad-serve's Responses API (run by constrained.rs).

argv[1]: the real SmolLM2-135M-Instruct given the Qwen2.5 (Hermes) tool template; argv[2]: the scripted engine
(real templates and parsers, scripted replies). Prints "ok: <check>" per check; any failure raises.
"""

import json
import sys

import openai

real = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="unused", max_retries=0)
scripted = openai.OpenAI(base_url=sys.argv[2] + "/v1", api_key="unused", max_retries=0)
WEATHER = [{"type": "function", "name": "get_weather", "description": "The weather in a city now",
            "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                           "required": ["city"], "additionalProperties": False}}]

r = real.responses.create(model="smollm2-instruct", input="What is the capital of France?", temperature=0,
                          max_output_tokens=24)
assert r.status in ("completed", "incomplete") and "Paris" in r.output_text, r
again = real.responses.retrieve(r.id)
assert again.output_text == r.output_text and again.id == r.id, again
print("ok: response created and retrieved")

with real.responses.stream(model="smollm2-instruct", input="What is the capital of France?", temperature=0,
                           max_output_tokens=24) as st:
    text = "".join(e.delta for e in st if e.type == "response.output_text.delta")
    final = st.get_final_response()
assert text == r.output_text == final.output_text, (text, r.output_text, final.output_text)
print("ok: streamed response")

forced = real.responses.create(model="smollm2-instruct", input="What is the weather in Oslo?", tools=WEATHER,
                               tool_choice="required", temperature=1, max_output_tokens=80)
calls = [i for i in forced.output if i.type == "function_call"]
assert calls and calls[0].name == "get_weather" and set(json.loads(calls[0].arguments)) == {"city"}, forced
print("ok: forced function call")

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}, "population": {"type": "integer"}},
          "required": ["city", "population"], "additionalProperties": False}
out = real.responses.create(model="smollm2-instruct", input="The largest city of Norway, as JSON.", max_output_tokens=60,
                            text={"format": {"type": "json_schema", "name": "city", "schema": SCHEMA, "strict": True}})
reply = json.loads(out.output_text)
assert set(reply) == {"city", "population"} and isinstance(reply["population"], int), reply
print("ok: structured output")

first = scripted.responses.create(model="qwen2.5-scripted", input="What is the weather in Oslo?", tools=WEATHER)
call = next(i for i in first.output if i.type == "function_call")
assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Oslo"}), first
second = scripted.responses.create(
    model="qwen2.5-scripted", tools=WEATHER, previous_response_id=first.id,
    input=[{"type": "function_call_output", "call_id": call.call_id,
            "output": json.dumps({"temperature_c": 7, "sky": "rain"})}],
)
assert second.output_text == "It is 7 degrees and raining in Oslo.", second
print("ok: tool round trip by previous_response_id")

thought = scripted.responses.create(model="qwen3-scripted", input="hi")
assert [i.type for i in thought.output] == ["reasoning", "message"], thought
assert "greet" in thought.output[0].content[0].text, thought
print("ok: reasoning item")

deleted = scripted.responses.delete(first.id)
try:
    scripted.responses.retrieve(first.id)
    raise AssertionError("a deleted response was found")
except openai.NotFoundError:
    pass
try:
    real.responses.create(model="smollm2-instruct", input="hi", temperature=3)
    raise AssertionError("temperature 3 was accepted")
except openai.BadRequestError as e:
    assert e.body["param"] == "temperature", e.body
print("ok: errors")
