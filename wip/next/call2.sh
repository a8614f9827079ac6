#!/usr/bin/env bash
# Device call 2 for wip/next (after call1.sh, same staging): gpu-bf16 main against 0d061e5 (the device's greedy
# pick at bf16); a 4,096-token context at gpu-q4 with and without the split; a q4 trace of the branch.
export KVAD_ROOT=$PWD KVAD_OFFLINE=1
source scripts/gpu/env.sh
F=fixtures/models/llama-gguf/model.gguf
M=/tmp/kvad-bench/hf
T0=$(date +%s)
O=/tmp/o2
mkdir -p $O
[ -d $M ] || bash scripts/gpu/bench.sh make > $O/make.log 2>&1
( KVAD_GPU_TRACE=$O/warm-trace.raw .gpu/bin/kvad bench $F --backend gpu-q8 --prompt-tokens 8 --gen-tokens 2 --rounds 1 > $O/warm-tr.log 2>&1 ) &
ALT_DEADLINE=150 bash scripts/gpu/alternate.sh $O "main|.gpu/main/kvad|" "old|.gpu/old/kvad|" -- $M --backend gpu-bf16 \
  --prompt-tokens 128 --gen-tokens 128 --rounds 2
wait
tar czf $OUT/call2.tgz -C $O .
ALT_DEADLINE=$(( 430 - ($(date +%s)-T0) )) bash scripts/gpu/alternate.sh $O/long "split|.gpu/bin/kvad|" \
  "unsplit|.gpu/bin/kvad|KVAD_GPU_ATT_SPLIT=1" -- $M --backend gpu-q4 --prompt-tokens 4096 --gen-tokens 128 --rounds 1
tar czf $OUT/call2.tgz -C $O .
if [ $(( $(date +%s)-T0 )) -lt 520 ]; then
  KVAD_GPU_TRACE=$O/trace-q4.raw timeout 40 .gpu/bin/kvad bench $M --backend gpu-q4 --prompt-tokens 128 --gen-tokens 64 \
    --rounds 1 --warmup 0 > $O/trace-q4.log 2>&1
  python3 scripts/gpu/trace.py $O/trace-q4.raw > $O/trace-q4.txt 2>&1; head -24 $O/trace-q4.txt
fi
tar czf $OUT/call2.tgz -C $O .
echo "end at $(( $(date +%s)-T0 ))s"
