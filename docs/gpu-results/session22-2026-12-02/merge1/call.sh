#!/usr/bin/env bash
# One device call for wip/merge1's two patches (session 21, NVRTC- and ptxas-checked only). Stage three builds:
#   main's kvad into .gpu/old/kvad; `git am wip/merge1/0001-*.patch` on a branch → its kvad into .gpu/m1/kvad;
#   `git am wip/merge1/0002-*.patch` on top → scripts/gpu/stage.sh (.gpu/bin), keeping kvad, cuda_decode_attention,
#   cuda_q6, cuda_kernels and gpu (carry ≤ 64 MiB in all).
#   run(command="bash wip/merge1/call.sh", carry=[".gpu", ".whl"]): results in $OUT/merge1.tgz (~8 min).
# merge1 changes no bit (the tests say so); q6offset changes the head's arithmetic (within its tests' bounds).
source scripts/gpu/call.sh merge1
call_test att .gpu/bin/cuda_decode_attention
call_test q6 .gpu/bin/cuda_q6
call_test kernels .gpu/bin/cuda_kernels
call_test gpu .gpu/bin/gpu
call_wait
call_trace both
call_pack
ALT_DEADLINE=$(call_left 540) bash scripts/gpu/alternate.sh $O "main|.gpu/old/kvad|" "merge1|.gpu/m1/kvad|" \
  "both|.gpu/bin/kvad|" -- /tmp/kvad-bench/hf --backend gpu-q4 --prompt-tokens 128 --gen-tokens 128 --rounds 2
call_pack
echo "end at $(($(date +%s) - T0))s"
