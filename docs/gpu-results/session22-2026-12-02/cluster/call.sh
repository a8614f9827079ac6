#!/usr/bin/env bash
# One device call for the decode attention's split rows merged in a thread-block cluster (session 22; NVRTC and
# ptxas only before it). Stage from the branch: scripts/gpu/stage.sh, keeping kvad, cuda_decode_attention and gpu.
#   run(command="bash wip/cluster/call.sh", carry=[".gpu", ".whl"]): results in $OUT/cluster.tgz (~8 min).
# Clusters change no bit (the tests say so); KVAD_GPU_ATT_CLUSTER=0 is the same binary merging through L2 as main.
source scripts/gpu/call.sh cluster
call_test att .gpu/bin/cuda_decode_attention
call_test gpu .gpu/bin/gpu
call_wait
call_trace cluster
call_trace l2 KVAD_GPU_ATT_CLUSTER=0
call_pack
ALT_ROUNDS=3 ALT_DEADLINE=$(call_left 500) bash scripts/gpu/alternate.sh $O "l2|.gpu/bin/kvad|KVAD_GPU_ATT_CLUSTER=0" \
  "cluster|.gpu/bin/kvad|" -- /tmp/kvad-bench/hf --backend gpu-q4 --prompt-tokens 128 --gen-tokens 128 --rounds 2
call_pack
echo "end at $(($(date +%s) - T0))s"
