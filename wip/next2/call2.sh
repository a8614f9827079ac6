#!/usr/bin/env bash
# Device call 2 for wip/next2 (after call1.sh, same staging): main's one-wave split cap as its default against
# KVAD_GPU_ATT_SPLIT=4 (the same launch if the driver counts one block an SM) and 16 (the cap before), at a
# 1,024-token context; the branch against main there (the merge's two round trips); a q4 trace of the branch.
export KVAD_ROOT=$PWD KVAD_OFFLINE=1
source scripts/gpu/env.sh
M=/tmp/kvad-bench/hf
T0=$(date +%s)
O=/tmp/o2
mkdir -p $O
[ -d $M ] || bash scripts/gpu/bench.sh make > $O/make.log 2>&1
ALT_DEADLINE=300 bash scripts/gpu/alternate.sh $O/p1024 "main|.gpu/main/kvad|" "main-s4|.gpu/main/kvad|KVAD_GPU_ATT_SPLIT=4" \
  "main-s16|.gpu/main/kvad|KVAD_GPU_ATT_SPLIT=16" "next2|.gpu/bin/kvad|" -- $M --backend gpu-q4 --prompt-tokens 1024 \
  --gen-tokens 128 --rounds 1
tar czf $OUT/call2.tgz -C $O .
KVAD_GPU_TRACE=$O/trace-q4.raw timeout 60 .gpu/bin/kvad bench $M --backend gpu-q4 --prompt-tokens 128 --gen-tokens 64 \
  --rounds 1 --warmup 0 > $O/trace-q4.log 2>&1
python3 scripts/gpu/trace.py $O/trace-q4.raw > $O/trace-q4.txt 2>&1; head -24 $O/trace-q4.txt
rm -f $O/trace-q4.raw
tar czf $OUT/call2.tgz -C $O .
echo "end at $(( $(date +%s)-T0 ))s"
