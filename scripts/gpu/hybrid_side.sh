#!/usr/bin/env bash
# Issue 35: the Qwen3-Next-80B-A3B shape (scripts/gpu/make_hybrid_bench_model.py, 12 layers) side by side with
# llama.cpp on the same GGUF files (BF16 made here, Q4_0 by llama-quantize): one-stream tg128 at bf16 and q4, pp8192
# at bf16, decode after 1,024 and 32,768 tokens at q4, and a kept conversation's second turn through kvad-serve
# (bench/kept-turn.py). Carry .gpu/pack (kvad and kvad-serve, packed by stage.sh), .gpu/llama.cpp.tar.xz (the trimmed
# source of ../shared/tools/llamacpp-for-bench.sh), .gpu/smollm2-tokenizer.gguf and .whl/. Call it again in the same
# lease to go on: each step is skipped once done (markers in /tmp/hs). `hybrid_side.sh start` only sets the
# llama.cpp build and the model's writing going in the background, so that other work can run meanwhile.
set -u
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
export KVAD_ROOT="$PWD"
O="${OUT:-/tmp/out}"; mkdir -p "$O" /tmp/hs
W=/tmp/kvad-hybrid; mkdir -p $W
T0=$(date +%s); el(){ echo $(( $(date +%s) - T0 )); }
log(){ echo "[$(el)s] $*" | tee -a "$O/log.txt"; }
LIMIT=${LIMIT:-540}
# The binaries travel packed (stage.sh's .gpu/pack/bins.tar.xz): the tree and they must fit the 64 MiB carry.
[ -x .gpu/bin/kvad-serve ] || { mkdir -p .gpu/bin && tar xJf .gpu/pack/bins.tar.xz -C .gpu/bin; }
M=$W/qwen3next-12l-bf16.gguf; Q=$W/q4.gguf; LCB=/tmp/lcb/bin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee -a "$O/log.txt"
if [ ! -f /tmp/lc.started ]; then
  mkdir -p /tmp/lc && tar xJf .gpu/llama.cpp.tar.xz -C /tmp/lc && touch /tmp/lc.started
  G=$(command -v ninja >/dev/null && echo Ninja || echo "Unix Makefiles")
  setsid bash -c "cmake -S /tmp/lc/llama.cpp -B /tmp/lcb -G '$G' \$(cat /tmp/lc/llama.cpp/bench-flags) -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build /tmp/lcb -j 15 --target llama-bench llama-quantize && touch /tmp/lc.done" > /tmp/lcbuild.log 2>&1 < /dev/null &
  log "llama.cpp build started ($G)"
fi
if [ ! -f $M ] && [ ! -f /tmp/model.started ]; then
  touch /tmp/model.started
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/gguf-*.whl
  setsid bash -c "PYTHONPATH=/tmp/site python3 scripts/gpu/make_hybrid_bench_model.py $M.part .gpu/smollm2-tokenizer.gguf 12 \
    > /tmp/make.txt 2>&1 && mv $M.part $M" < /dev/null > /dev/null 2>&1 &
  log "model started"
fi
# `start`: only set the build and the model going (in the background: the next call, or other work, goes on).
[ "${1:-}" = start ] && exit 0
while [ ! -f $M ]; do
  pgrep -f make_hybrid_bench_model >/dev/null || { log "model failed"; tail -20 /tmp/make.txt; exit 1; }
  [ $(el) -lt $LIMIT ] || { log "model still being written"; exit 0; }
  sleep 5
done
[ -f /tmp/hs/model ] || { touch /tmp/hs/model; cp /tmp/make.txt "$O/make.txt"; log "model: $(tail -1 /tmp/make.txt)"; }
step() {  # name, command...: runs once, while time is left
  local n=$1; shift
  [ -f /tmp/hs/$n ] && return 0
  [ $(el) -lt $LIMIT ] || { log "out of time before $n"; exit 0; }
  "$@" > "$O/$n.txt" 2>&1; local rc=$?
  touch /tmp/hs/$n; log "$n rc=$rc $(grep -E 'tok/s|t/s' "$O/$n.txt" | tail -2 | tr -s ' ' | tr '\n' ' ' | cut -c1-200)"
}
# kvad's own runs first, while llama.cpp builds.
step kvad-tg-bf16 .gpu/bin/kvad bench $M --backend gpu-bf16,gpu-q4 --prompt-tokens 128 --gen-tokens 128 --rounds 3 --out "$O/kvad-tg.json"
step kvad-pp-bf16 .gpu/bin/kvad bench $M --backend gpu-bf16 --prompt-tokens 8192 --gen-tokens 2 --rounds 3 --out "$O/kvad-pp.json"
step kvad-d1k .gpu/bin/kvad bench $M --backend gpu-q4 --prompt-tokens 1024 --gen-tokens 64 --rounds 2 --out "$O/kvad-d1k.json"
step kvad-d32k .gpu/bin/kvad bench $M --backend gpu-q4 --prompt-tokens 32768 --gen-tokens 64 --rounds 2 --out "$O/kvad-d32k.json"
[ -x .gpu/bin/kvad-serve ] && step kvad-kept python3 bench/kept-turn.py .gpu/bin/kvad-serve $M gpu-q4 4096 3
while [ ! -f /tmp/lc.done ]; do
  if ! pgrep -f "cmake" >/dev/null; then log "llama.cpp build failed"; tail -40 /tmp/lcbuild.log; exit 1; fi
  [ $(el) -lt $LIMIT ] || { log "build still running"; exit 0; }
  sleep 5
done
log "llama.cpp built"
if [ ! -f $Q ]; then
  [ $(el) -lt $((LIMIT - 150)) ] || { log "no time to quantise"; exit 0; }
  $LCB/llama-quantize $M $Q.part Q4_0 16 > /tmp/quant.log 2>&1 || { tail -20 /tmp/quant.log; exit 1; }
  mv $Q.part $Q; log "quantised q4: $(du -h $Q | cut -f1)"
fi
df -h /tmp | tail -1
step lc-tg-bf16 $LCB/llama-bench -m $M -ngl 99 -fa 1 -p 0 -n 128 -d 128 -r 3 -o json
step lc-tg-q4 $LCB/llama-bench -m $Q -ngl 99 -fa 1 -p 0 -n 128 -d 128 -r 3 -o json
step lc-pp-bf16 $LCB/llama-bench -m $M -ngl 99 -fa 1 -p 8192 -n 0 -r 3 -o json
step lc-d1k $LCB/llama-bench -m $Q -ngl 99 -fa 1 -p 0 -n 64 -d 1024 -r 2 -o json
step lc-d32k $LCB/llama-bench -m $Q -ngl 99 -fa 1 -p 0 -n 64 -d 32768 -r 2 -o json
step kvad-tg-q4file .gpu/bin/kvad bench $Q --backend gpu-q4 --prompt-tokens 128 --gen-tokens 128 --rounds 3 --out "$O/kvad-tg-q4file.json"
log "all done"
