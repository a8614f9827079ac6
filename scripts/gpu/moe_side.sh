#!/usr/bin/env bash
# Issue 34: the Qwen3-30B-A3B shape side by side with llama.cpp on the same GGUF files (BF16 made here, Q8_0/Q4_0 by
# llama-quantize). Call it again in the same lease to go on: each step is skipped once done (markers in /tmp/ms).
set -u
cd "$(dirname "$0")/.."
source scripts/gpu/env.sh
export KVAD_ROOT="$PWD"
O="${OUT:-/tmp/out}"; mkdir -p "$O" /tmp/ms
W=/tmp/kvad-moe; mkdir -p $W
T0=$(date +%s); el(){ echo $(( $(date +%s) - T0 )); }
log(){ echo "[$(el)s] $*" | tee -a "$O/log.txt"; }
LIMIT=${LIMIT:-520}
M=$W/qwen3moe-24l-bf16.gguf; LCB=/tmp/lcb/bin
declare -A F=([bf16]=$M [q8]=$W/q8.gguf [q4]=$W/q4.gguf)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee -a "$O/log.txt"
if [ ! -f /tmp/lc.started ]; then
  mkdir -p /tmp/lc && tar xJf .gpu/llama.cpp.tar.xz -C /tmp/lc && touch /tmp/lc.started
  G=$(command -v ninja >/dev/null && echo Ninja || echo "Unix Makefiles")
  setsid bash -c "cmake -S /tmp/lc/llama.cpp -B /tmp/lcb -G '$G' \$(cat /tmp/lc/llama.cpp/bench-flags) -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build /tmp/lcb -j 15 --target llama-bench llama-batched-bench llama-quantize && touch /tmp/lc.done" > /tmp/lcbuild.log 2>&1 < /dev/null &
  log "llama.cpp build started ($G)"
fi
[ "${1:-}" = start ] && exit 0
if [ ! -f $M ]; then
  [ $(el) -lt $((LIMIT - 200)) ] || { log "no time to make the model"; exit 0; }
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/gguf-*.whl
  PYTHONPATH=/tmp/site python3 scripts/gpu/make_moe_bench_model.py $M.part .gpu/smollm2-tokenizer.gguf 24 > "$O/make.txt" 2>&1 \
    && mv $M.part $M; log "model: $(tail -1 $O/make.txt)"
fi
while [ ! -f /tmp/lc.done ]; do
  if ! pgrep -f "cmake" >/dev/null; then log "llama.cpp build failed"; tail -40 /tmp/lcbuild.log; exit 1; fi
  [ $(el) -lt $LIMIT ] || { log "build still running"; exit 0; }
  sleep 5
done
log "llama.cpp built"
for q in q8 q4; do
  T=$([ $q = q8 ] && echo Q8_0 || echo Q4_0)
  [ -f ${F[$q]} ] && continue
  [ $(el) -lt $((LIMIT - 100)) ] || { log "no time to quantise $q"; exit 0; }
  $LCB/llama-quantize $M ${F[$q]}.part $T 16 > /tmp/quant-$q.log 2>&1 || { tail -20 /tmp/quant-$q.log; exit 1; }
  mv ${F[$q]}.part ${F[$q]}; log "quantised $q: $(du -h ${F[$q]} | cut -f1)"
done
df -h /tmp | tail -1
step() {  # name, command...: runs once, while time is left
  local n=$1; shift
  [ -f /tmp/ms/$n ] && return 0
  [ $(el) -lt $LIMIT ] || { log "out of time before $n"; exit 0; }
  "$@" > "$O/$n.txt" 2>&1; local rc=$?
  touch /tmp/ms/$n; log "$n rc=$rc $(grep -E 'tok/s|t/s' "$O/$n.txt" | tail -2 | tr -s ' ' | tr '\n' ' ' | cut -c1-200)"
}
for q in bf16 q8 q4; do
  step kvad-tg-$q .gpu/bin/kvad bench ${F[$q]} --backend gpu-$q --prompt-tokens 128 --gen-tokens 128 --rounds 3 --out "$O/kvad-tg-$q.json"
  step lc-tg-$q $LCB/llama-bench -m ${F[$q]} -ngl 99 -fa 1 -p 0 -n 128 -d 128 -r 3 -o json
done
for q in bf16 q8 q4; do
  step kvad-pp-$q .gpu/bin/kvad bench ${F[$q]} --backend gpu-$q --prompt-tokens 2048 --gen-tokens 2 --rounds 3 --out "$O/kvad-pp-$q.json"
  step lc-pp-$q $LCB/llama-bench -m ${F[$q]} -ngl 99 -fa 1 -p 2048 -n 0 -r 3 -o json
done
step kvad-b32 .gpu/bin/kvad bench $M --backend gpu-bf16 --batch 32 --prompt-tokens 128 --gen-tokens 128 --rounds 2 --out "$O/kvad-b32.json"
step lc-b32 $LCB/llama-batched-bench -m $M -ngl 99 -fa 1 -c 16384 -npp 128 -ntg 128 -npl 32
log "all done"
