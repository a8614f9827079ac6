#!/usr/bin/env bash
# Session 21, lease 2: the q4 backends' output head in 6 bits (DevFormat::Q6). Staged: .gpu/old/kvad = main
# f994186 (8-bit head), .gpu/bin = the change. run(command="bash docs/gpu-results/session21-2026-12-02/q6/call2.sh",
# carry=[".gpu", ".whl"]): results in $OUT/q6.tgz.
source scripts/gpu/call.sh q6
call_test q6 .gpu/bin/cuda_q6
call_test kernels .gpu/bin/cuda_kernels
call_test gpu .gpu/bin/gpu
call_wait
call_trace q6
call_pack
ALT_DEADLINE=$(call_left 560) bash scripts/gpu/alternate.sh $O "main|.gpu/old/kvad|" "q6|.gpu/bin/kvad|" \
  "q6h2|.gpu/bin/kvad|KVAD_GPU_Q6_HEIGHT=2" -- /tmp/kvad-bench/hf --backend gpu-q4 \
  --prompt-tokens 128 --gen-tokens 128 --rounds 2
call_pack
echo "end at $(($(date +%s) - T0))s"
