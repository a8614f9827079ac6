#!/usr/bin/env bash
# Device call for session 19's wip/qkv6 patch (apply on a branch: git am wip/qkv6/*.patch; stage): the q4 one-input
# norm-free products whose height-6 blocks fit one wave at 8 blocks an SM (q/k/v: 1,024 blocks against height 4's
# 1,536 at 9 an SM, 1.3 waves; KVAD_GPU_ONE_WAVE6=8, spilling 28 bytes, or 7: 1.1 waves) against main, and a trace
# of main and of 8.
#   run(command="bash wip/qkv6/call1.sh", carry=[".gpu", ".whl"]): results in $OUT/qkv6.tgz (~8 min).
source scripts/gpu/call.sh qkv6
call_test kernels-w6 KVAD_GPU_ONE_WAVE6=8 .gpu/bin/cuda_kernels
call_test kernels-w6b7 KVAD_GPU_ONE_WAVE6=7 .gpu/bin/cuda_kernels
call_test gpu-w6 KVAD_GPU_ONE_WAVE6=8 .gpu/bin/gpu
call_test gpu-w6b7 KVAD_GPU_ONE_WAVE6=7 .gpu/bin/gpu
call_wait
for v in main w6; do
  env $([ $v = w6 ] && echo KVAD_GPU_ONE_WAVE6=8) KVAD_GPU_TRACE=$O/trace-$v.txt .gpu/bin/kvad bench \
    /tmp/kvad-bench/hf --backend gpu-q4 --prompt-tokens 128 --gen-tokens 64 --rounds 1 >$O/trace-$v.log 2>&1
  python3 scripts/gpu/trace.py $O/trace-$v.txt >$O/trace-$v-summary.txt 2>&1
  rm -f $O/trace-$v.txt
  head -20 $O/trace-$v-summary.txt
done
call_pack
ALT_DEADLINE=$(call_left 520) bash scripts/gpu/alternate.sh $O "main|.gpu/bin/kvad|" \
  "w6|.gpu/bin/kvad|KVAD_GPU_ONE_WAVE6=8" "w6b7|.gpu/bin/kvad|KVAD_GPU_ONE_WAVE6=7" -- /tmp/kvad-bench/hf \
  --backend gpu-q4 --prompt-tokens 128 --gen-tokens 128 --rounds 2
call_pack
echo "end at $(($(date +%s) - T0))s"
