#!/usr/bin/env bash
# Session 18's fourth device call: the same plans asked a 128-byte line at a time by the load units
# (KVAD_GPU_L2_NEXT=o,up,down,1) — call3 had the bulk copy engine's pieces 22-47% slower. Tests (the decode
# attention asking both ways; the fixtures with lines on) beside the model's making, then alternated at gpu-q4.
#   run(command="bash wip/l2/call4.sh", carry=[".gpu", ".whl"]): results in $OUT/l2-4.tgz (~5 min).
export KVAD_ROOT=$PWD KVAD_OFFLINE=1
source scripts/gpu/env.sh
T0=$(date +%s)
O=/tmp/l2-4
mkdir -p $O
( [ -d /tmp/kvad-bench/hf ] || bash scripts/gpu/bench.sh make > $O/make.log 2>&1 ) &
S="--test-threads=1 --nocapture --skip every_kernel_compiles_with_nvrtc"
( KVAD_GPU_L2_NEXT=1,16,16,1 .gpu/bin/gpu $S > $O/t-gpu-l2lines.log 2>&1; echo "rc $?" >> $O/t-gpu-l2lines.log ) &
( .gpu/bin/cuda_decode_attention $S > $O/t-att.log 2>&1; echo "rc $?" >> $O/t-att.log ) &
wait
echo "tests+make at $(( $(date +%s)-T0 ))s"
for f in $O/t-*.log; do echo "== $f"; grep -h "test result\|panicked\|FAILED\|^rc" $f | head -8; done
tar czf $OUT/l2-4.tgz -C $O .
ALT_DEADLINE=$(( 270 - ($(date +%s)-T0) )) bash scripts/gpu/alternate.sh $O "none|.gpu/bin/kvad|" \
  "oL|.gpu/bin/kvad|KVAD_GPU_L2_NEXT=1,0,0,1" "o16L|.gpu/bin/kvad|KVAD_GPU_L2_NEXT=1,16,0,1" \
  "d16L|.gpu/bin/kvad|KVAD_GPU_L2_NEXT=0,0,16,1" -- /tmp/kvad-bench/hf \
  --backend gpu-q4 --prompt-tokens 128 --gen-tokens 128 --rounds 2
tar czf $OUT/l2-4.tgz -C $O .
echo "end at $(( $(date +%s)-T0 ))s"
