#!/usr/bin/env bash
# The scheduler's GPU goal (issue 5) on the device, after scripts/gpu/stage.sh here: 16 concurrent replies on a
# 1.5B-shaped model at gpu-q8 against one reply at a time, through a real kvad-serve and `kvad bench --concurrency`.
#   bash scripts/gpu/sched.sh            (JSON to $OUT or /tmp)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source scripts/gpu/env.sh
W="${KVAD_SCHED_DIR:-/tmp/kvad-sched}"
O="${OUT:-/tmp}"
N="${KVAD_SCHED_N:-16}"
if [ ! -d .gpu/smollm2-tokenizer ]; then
  if ls .whl/gguf-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
  fi
  python3 -c "from transformers import AutoTokenizer as T
T.from_pretrained('.gpu', gguf_file='smollm2-tokenizer.gguf').save_pretrained('.gpu/smollm2-tokenizer')"
fi
[ -f "$W/hf/config.json" ] || KVAD_BENCH_SHAPE=1.5b python3 scripts/gpu/make_bench_model.py "$W" .gpu/smollm2-tokenizer
export KVAD_OFFLINE=1
DATA="$(mktemp -d)"
URL=http://127.0.0.1:5899
.gpu/bin/kvad-serve --data-dir "$DATA" --bind 127.0.0.1:5899 --model "$W/hf" --backend gpu-q8 --batch "$N" \
  --queue 64 --queue-per-account 64 --context 4096 > "$O/serve.log" 2>&1 &
SERVER=$!
for _ in $(seq 1 120); do curl -sf "$URL/v1/models" >/dev/null && break; sleep 0.5; done
.gpu/bin/kvad --json bench --remote "$URL" "$W/hf" --concurrency "$N" --rounds 3 --warmup 1 --prompt-tokens 64 \
  --gen-tokens 128 > "$O/sched$N.json"
echo "rc=$?"
cat "$O/sched$N.json"
kill "$SERVER"
wait "$SERVER" 2>/dev/null
tail -5 "$O/serve.log"
