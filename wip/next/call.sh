#!/usr/bin/env bash
# One device call for wip/next (session 22; NVRTC and ptxas only): (1) relacq, the split kernels' last-block count
# by one acq_rel add where __threadfence took two sequentially consistent fences on the critical path (same bits);
# (2) cluster3, the decode attention's split rows merged in a thread-block cluster with as few fewer blocks a row
# as make one row's clusters fit at once (the 8B shape on the H200: 3 a row where 4 did not fit, session 22).
# Stage: main's kvad → .gpu/old/kvad; `git am wip/next/*.patch` on a branch → scripts/gpu/stage.sh, keeping kvad,
# cuda_decode_attention, cuda_kernels, cuda_norm_defer and gpu.
#   run(command="bash wip/next/call.sh", carry=[".gpu", ".whl"]): results in $OUT/next.tgz (~9 min).
# In the new binary KVAD_GPU_ATT_CLUSTER=0 is relacq alone; unset, both (set, it also says how many clusters fit).
source scripts/gpu/call.sh next
call_test att .gpu/bin/cuda_decode_attention
call_test gpu .gpu/bin/gpu
call_test kernels .gpu/bin/cuda_kernels
call_test defer .gpu/bin/cuda_norm_defer
call_wait
KVAD_GPU_ATT_CLUSTER=1 .gpu/bin/kvad bench /tmp/kvad-bench/hf --backend gpu-q4 --prompt-tokens 8 --gen-tokens 1 \
  --rounds 1 >"$O/say.log" 2>&1
grep "kvad: decode" "$O/say.log"
call_trace cluster3
call_trace relacq KVAD_GPU_ATT_CLUSTER=0
call_pack
ALT_ROUNDS=3 ALT_DEADLINE=$(call_left 520) bash scripts/gpu/alternate.sh $O "main|.gpu/old/kvad|" \
  "relacq|.gpu/bin/kvad|KVAD_GPU_ATT_CLUSTER=0" "cluster3|.gpu/bin/kvad|" -- /tmp/kvad-bench/hf --backend gpu-q4 \
  --prompt-tokens 128 --gen-tokens 128 --rounds 2
call_pack
echo "end at $(($(date +%s) - T0))s"
