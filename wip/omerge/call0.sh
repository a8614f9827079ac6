#!/usr/bin/env bash
# Session 20's last minutes of device time (~165 s of command): wip/omerge's bit test, the attention's, the fixtures
# with KVAD_GPU_O_MERGE=1, and a trace with and without it (no alternated bench: call-both.sh is that). Run once, on the
# patch before its launcher took more than 24 arguments: every test failed at launch (call0-results/); the time ran
# out before the traces.
source scripts/gpu/call.sh omerge0
call_test merge .gpu/bin/cuda_o_merge
call_test att .gpu/bin/cuda_decode_attention
call_test gpu-merge KVAD_GPU_O_MERGE=1 .gpu/bin/gpu
call_wait
for v in merge main; do
  env $([ $v = merge ] && echo KVAD_GPU_O_MERGE=1) KVAD_GPU_TRACE=$O/trace-$v.txt .gpu/bin/kvad bench \
    /tmp/kvad-bench/hf --backend gpu-q4 --prompt-tokens 128 --gen-tokens 64 --rounds 1 >$O/trace-$v.log 2>&1
  python3 scripts/gpu/trace.py $O/trace-$v.txt >$O/trace-$v-summary.txt 2>&1
  rm -f $O/trace-$v.txt
  head -3 $O/trace-$v-summary.txt; tail -1 $O/trace-$v-summary.txt
  grep decode $O/trace-$v.log | head -2
  call_pack
done
echo "end at $(($(date +%s) - T0))s"
