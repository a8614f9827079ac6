"""Issue 35's kept-conversation goal, measured through kvad-serve on loopback: the time to the first token of a
conversation's second turn against its first, where the first turn's prompt is long (4,096 tokens by default) and
the second repeats it with the first reply and a short new message after. For a recurrent model (a delta net) the
second turn resumes from the state kept after the first reply (or its prompt-end snapshot); `cached_tokens` says
how much it did not read again.

    python3 bench/kept-turn.py KVAD_SERVE MODEL BACKEND [PROMPT_TOKENS] [ROUNDS] > out.txt

Each round is a new conversation (a different long text), so no round reuses another's state. Prints one line a
round and the medians with ranges; every figure is read from the server's own stream and usage.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa quebec "
         "romeo sierra tango uniform victor whiskey xray yankee zulu").split()


def post_stream(url, body):
    """Streams a completion; returns (seconds to the first text, text, usage)."""
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first, text, usage = None, "", None
    with urllib.request.urlopen(req, timeout=3600) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            for c in ev.get("choices", []):
                if c.get("text") and first is None:
                    first = time.perf_counter() - t0
                text += c.get("text", "")
            usage = ev.get("usage") or usage
    return first, text, usage


def long_text(seed, tokens):
    """Roughly `tokens` tokens of words (a word and its space are about one to two tokens)."""
    out, s = [], seed
    for _ in range(tokens * 2 // 3):
        s = (s * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        out.append(WORDS[(s >> 33) % len(WORDS)])
    return " ".join(out)


def main():
    serve, model, backend = sys.argv[1], sys.argv[2], sys.argv[3]
    want = int(sys.argv[4]) if len(sys.argv) > 4 else 4096
    rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 3
    port = 5900 + os.getpid() % 500
    url = f"http://127.0.0.1:{port}"
    data = tempfile.mkdtemp(prefix="kvad-kept-")
    proc = subprocess.Popen([serve, "--bind", f"127.0.0.1:{port}", "--data-dir", data, "--model", model,
                             "--backend", backend, "--context", str(2 * want + 1024)],
                            stdout=subprocess.DEVNULL, stderr=open(os.path.join(data, "serve.log"), "w"))
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(url + "/api/health", timeout=1)
                break
            except Exception:
                time.sleep(0.5)
        cpu = open("/proc/cpuinfo").read().split("model name")[1].split(":")[1].splitlines()[0].strip()
        try:
            gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=30).stdout.strip() or "none"
        except OSError:
            gpu = "none"
        print(f"# {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {model} {backend} prompt ~{want} tokens; "
              f"cpu: {cpu}; gpu: {gpu}")
        body = {"model": model, "max_tokens": 16, "temperature": 0, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}
        # One untimed turn loads the model.
        post_stream(url, dict(body, prompt="warm up", max_tokens=2))
        firsts, seconds, ratios = [], [], []
        for r in range(rounds):
            text = long_text(r + 1, want)
            t1, reply, u1 = post_stream(url, dict(body, prompt=text))
            t2, _, u2 = post_stream(url, dict(body, prompt=text + reply + " Now say it again in short."))
            cached = (u2.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
            firsts.append(t1)
            seconds.append(t2)
            ratios.append(t2 / t1)
            print(f"round {r + 1}: first turn {u1['prompt_tokens']} tokens, first token after {t1:.3f} s; second turn "
                  f"{u2['prompt_tokens']} tokens, {cached} cached, first token after {t2:.3f} s; ratio {t2 / t1:.3f}",
                  flush=True)
        f = lambda v: f"{statistics.median(v):.3f} [{min(v):.3f}-{max(v):.3f}]"  # noqa: E731
        print(f"median: first turn {f(firsts)} s, second turn {f(seconds)} s, ratio {f(ratios)}")
    finally:
        proc.terminate()
        proc.wait(timeout=60)


if __name__ == "__main__":
    main()
