#!/usr/bin/env bash
# Session 21, lease 3: the 6-bit head's quants held as v = q + 32 (no sign extension in the unpacking; the minimum
# through the activations' sum, as Q4's) against call2's signed form (.gpu/q6s/kvad, d35f134) and main f994186
# (.gpu/old/kvad, 8-bit head). run(command="bash docs/gpu-results/session21-2026-12-02/q6/call3.sh",
# carry=[".gpu", ".whl"]): results in $OUT/q6o.tgz.
source scripts/gpu/call.sh q6o
call_test q6 .gpu/bin/cuda_q6
call_test gpu .gpu/bin/gpu
call_wait
call_trace q6o
call_pack
ALT_DEADLINE=$(call_left 470) bash scripts/gpu/alternate.sh $O "main|.gpu/old/kvad|" "q6s|.gpu/q6s/kvad|" \
  "q6o|.gpu/bin/kvad|" -- /tmp/kvad-bench/hf --backend gpu-q4 --prompt-tokens 128 --gen-tokens 128 --rounds 2
call_pack
echo "end at $(($(date +%s) - T0))s"
