#!/usr/bin/env bash
# One device call for wip/next (session 22; NVRTC and ptxas only): (1) relacq, the split kernels' last-block count
# by one acq_rel add where __threadfence took two sequentially consistent fences on the critical path (same bits);
# (2) cluster3, the decode attention's split rows merged in a thread-block cluster with as few fewer blocks a row
# as make one row's clusters fit at once (the 8B shape on the H200: 3 a row where 4 did not fit, session 22);
# (3) cubin, the kernels compiled by NVRTC to the GPU's code (no driver compile at load).
# Stage: main's kvad → .gpu/old/kvad; `git am wip/next/*.patch` on a branch → scripts/gpu/stage.sh, keeping kvad,
# cuda_decode_attention, cuda_kernels, cuda_norm_defer and gpu.
#   run(command="bash wip/next/call.sh", carry=[".gpu", ".whl"]): results in $OUT/next.tgz (~9 min).
# In the new binary KVAD_GPU_ATT_CLUSTER=0 is relacq + cubin; unset, all three (set, it also says how many clusters
# fit); KVAD_GPU_CUBIN=0 loads PTX as main does. The warm-ups' times are each binary's first run (alternate.sh):
# main's compiles PTX and the driver compiles that at load; the new one's compiles CUBINs. Session 22's first run
# of a new binary took ~160 s (cluster/call2: "said at 232s" after the model at 69 s). Left for a second call: the
# trace (call_trace all) and relacq with PTX (KVAD_GPU_CUBIN=0 KVAD_GPU_ATT_CLUSTER=0) against main, to tell
# relacq's gain from the CUBIN's code.
source scripts/gpu/call.sh next
call_test att .gpu/bin/cuda_decode_attention
call_test gpu .gpu/bin/gpu
call_test kernels .gpu/bin/cuda_kernels
call_test defer .gpu/bin/cuda_norm_defer
call_wait
ALT_ROUNDS=2 ALT_DEADLINE=$(call_left 560) bash scripts/gpu/alternate.sh $O "main|.gpu/old/kvad|" \
  "relacq|.gpu/bin/kvad|KVAD_GPU_ATT_CLUSTER=0" "all|.gpu/bin/kvad|KVAD_GPU_ATT_CLUSTER=1" -- /tmp/kvad-bench/hf \
  --backend gpu-q4 --prompt-tokens 128 --gen-tokens 128 --rounds 2
grep -h "kvad: decode\|compiled" $O/warm-*.log
call_pack
echo "end at $(($(date +%s) - T0))s"
