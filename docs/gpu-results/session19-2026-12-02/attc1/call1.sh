#!/usr/bin/env bash
# Device call for session 18's wip/attcluster patch (apply on a branch: git am wip/attcluster/*.patch; stage):
# the decode attention's split rows merged through a thread-block cluster (KVAD_GPU_ATT_CLUSTER=1) against the
# last block's merge, plus a trace of main's decode step (where a gpu-q4 step goes at 9 blocks an SM).
#   run(command="bash wip/attcluster/call1.sh", carry=[".gpu", ".whl"]): results in $OUT/attc1.tgz (~8 min).
source scripts/gpu/call.sh attc1
call_test att .gpu/bin/cuda_decode_attention
call_test gpu-cluster KVAD_GPU_ATT_CLUSTER=1 .gpu/bin/gpu
# Several query heads a block (GM 4 and 8: G < GM at a group of 3, wider partials), clustered too.
call_test att-heads8 KVAD_GPU_ATT_HEADS=8 .gpu/bin/cuda_decode_attention
call_wait
for v in last cluster; do
  env $([ $v = cluster ] && echo KVAD_GPU_ATT_CLUSTER=1) KVAD_GPU_TRACE=$O/trace-$v.txt .gpu/bin/kvad bench /tmp/kvad-bench/hf \
    --backend gpu-q4 --prompt-tokens 128 --gen-tokens 64 --rounds 1 > $O/trace-$v.log 2>&1
  python3 scripts/gpu/trace.py $O/trace-$v.txt > $O/trace-$v-summary.txt 2>&1; rm -f $O/trace-$v.txt
  head -20 $O/trace-$v-summary.txt
done
call_pack
ALT_DEADLINE=$(call_left 500) bash scripts/gpu/alternate.sh $O "last|.gpu/bin/kvad|" \
  "cluster|.gpu/bin/kvad|KVAD_GPU_ATT_CLUSTER=1" -- /tmp/kvad-bench/hf \
  --backend gpu-q4,gpu-q8 --prompt-tokens 128 --gen-tokens 128 --rounds 2
call_pack
ALT_DEADLINE=$(call_left 560) bash scripts/gpu/alternate.sh $O/long "last|.gpu/bin/kvad|" \
  "cluster|.gpu/bin/kvad|KVAD_GPU_ATT_CLUSTER=1" -- /tmp/kvad-bench/hf \
  --backend gpu-q4 --prompt-tokens 1024 --gen-tokens 128 --rounds 1
call_pack
echo "end at $(( $(date +%s)-T0 ))s"
