"""The official openai SDK (pinned in the test venv) against kvad-serve's /v1/embeddings.

argv: base URL, the embedding model's id, the goldens file (sentence-transformers' vectors). The SDK asks for
base64 unless told otherwise and decodes it itself; both encodings must give the reference's vectors."""
import base64
import json
import math
import struct
import sys

import openai

url, model, golden_path = sys.argv[1:4]
client = openai.OpenAI(base_url=url + "/v1", api_key="unused")
with open(golden_path) as f:
    golden = json.load(f)
texts, want = golden["texts"], golden["embeddings"]


def worst(a, b):
    return max(abs(x - y) for u, v in zip(a, b) for x, y in zip(u, v))


def decoded(e):
    """An explicit base64 answer is handed over as the string: its little-endian f32 values."""
    if isinstance(e, str):
        raw = base64.b64decode(e)
        return list(struct.unpack(f"<{len(raw) // 4}f", raw))
    return e


# None: the SDK's default, which asks for base64 and decodes it itself.
for fmt in (None, "base64", "float"):
    kw = {} if fmt is None else {"encoding_format": fmt}
    r = client.embeddings.create(model=model, input=texts, **kw)
    got = [decoded(d.embedding) for d in sorted(r.data, key=lambda d: d.index)]
    assert len(got) == len(texts) and all(len(v) == len(want[0]) for v in got), [len(v) for v in got]
    assert worst(got, want) < 1e-4, worst(got, want)
    assert r.usage.prompt_tokens == sum(len(t) for t in golden["tokens"]), r.usage
    print(f"embeddings as {fmt or 'the default'} equal sentence-transformers'")

r = client.embeddings.create(model=model, input=texts[0], dimensions=golden["dimensions"])
v = r.data[0].embedding
assert len(v) == golden["dimensions"] and abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-5
assert worst([v], golden["truncated"][:1]) < 1e-4
print("dimensions truncated and normalised")

r = client.embeddings.create(model=model, input=[golden["tokens"][2]])
assert worst([r.data[0].embedding], want[2:3]) < 1e-4
print("token ids embedded")

try:
    client.embeddings.create(model=model, input="x", dimensions=100000)
    raise SystemExit("dimensions past the model's were accepted")
except openai.BadRequestError as e:
    assert "dimensions" in str(e), e
    print("bad dimensions refused:", e.body.get("param") if isinstance(e.body, dict) else e.body)
