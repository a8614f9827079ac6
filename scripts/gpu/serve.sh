#!/usr/bin/env bash
# Issue 36's figures on the device (after scripts/gpu/stage.sh here): the Llama-3-8B shape served by a real
# kvad-serve with no [server] batch (the page pool decides), loaded by `kvad bench --remote`: 128 and 256
# concurrent streams at gpu-bf16, 64 at gpu-q8 and gpu-q4 (128-token prompts, 128 generated), one stream against
# `kvad bench` in process, and the request-rate mode (Poisson arrivals, lengths ±50%, SLO TTFT 0.5 s, TPOT 50 ms).
#   bash scripts/gpu/serve.sh [STEP…]      (steps: bf16 c128 q8 q4 one rate; JSON and logs to $OUT or /tmp)
# Each step is skipped once done (markers in /tmp/serve-done), so a second call in the same lease goes on.
# KVAD_SERVE names another server binary (an older build, for a before/after on the same card).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source scripts/gpu/env.sh
export KVAD_ROOT="$PWD" KVAD_OFFLINE=1
W="${KVAD_BENCH_DIR:-/tmp/kvad-bench}"
O="${OUT:-/tmp}"
K=.gpu/bin/kvad
mkdir -p /tmp/serve-done
[ -x .gpu/bin/kvad-serve ] || { mkdir -p .gpu/bin && tar xJf .gpu/pack/bins.tar.xz -C .gpu/bin; }
[ -f "$W/hf/config.json" ] || KVAD_BENCH_REF=0 bash scripts/gpu/bench.sh make > "$O/make.log" 2>&1
T0=$(date +%s)
LIMIT=${LIMIT:-560}
URL=http://127.0.0.1:5899
serve() {  # backend: a fresh server on it, the model loaded
  DATA="$(mktemp -d)"
  "${KVAD_SERVE:-.gpu/bin/kvad-serve}" --data-dir "$DATA" --bind 127.0.0.1:5899 --model "$W/hf" --backend "$1" --queue 1024 \
    --queue-per-account 1024 > "$O/serve-$1.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 1 240); do curl -sf "$URL/v1/models" >/dev/null && break; sleep 0.5; done
}
stop() { kill "$SERVER"; wait "$SERVER" 2>/dev/null; tail -3 "$O/serve-$1.log"; }
step() {  # name command…: once, while time is left
  local n=$1; shift
  [ -f /tmp/serve-done/$n ] && return 0
  [ $(( $(date +%s) - T0 )) -lt "$LIMIT" ] || { echo "out of time before $n"; exit 0; }
  "$@" > "$O/$n.json" 2> "$O/$n.err"; echo "$n rc=$? $(head -c 600 "$O/$n.json")"
  touch /tmp/serve-done/$n
}
conc() { $K --json bench --remote "$URL" "$W/hf" --concurrency "$1" --rounds 2 --warmup 1 --prompt-tokens 128 --gen-tokens 128; }
rate() { $K --json bench --remote "$URL" "$W/hf" --request-rate "$1" --requests "$2" --prompt-tokens 128 \
  --gen-tokens 128 --length-spread 0.5 --slo-ttft 0.5 --slo-tpot 0.05 --seed 1; }
for s in ${*:-bf16 q8 q4 one rate}; do
  case $s in
    bf16) serve gpu-bf16; step bf16-c128 conc 128; step bf16-c256 conc 256; stop gpu-bf16 ;;
    c128) serve gpu-bf16; step bf16-c128 conc 128; stop gpu-bf16 ;;
    q8) serve gpu-q8; step q8-c64 conc 64; stop gpu-q8 ;;
    q4) serve gpu-q4; step q4-c64 conc 64; stop gpu-q4 ;;
    one) step inproc-one $K --json bench "$W/hf" --backend gpu-bf16 --prompt-tokens 128 --gen-tokens 128 --rounds 3
         serve gpu-bf16; step serve-one conc 1; stop gpu-bf16 ;;
    rate) serve gpu-bf16; step rate-20 rate 20 400; step rate-inf rate inf 256; stop gpu-bf16 ;;
  esac
done
