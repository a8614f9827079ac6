#!/usr/bin/env bash
# Device call for session 20's wip/microlat patch (bits unchanged, so measured against main's binary): argmax_rows
# with its 49,152 logits in one round trip a thread (12 float4s, where 4 at a time took three) and the step's first
# rms_norm loading its weights beside x (one round trip, where the output's loop loaded them after the sum).
# Stage main's kvad into .gpu/old/ first, then the patch's (git am wip/microlat/*.patch on a branch; stage.sh).
#   run(command="bash wip/microlat/call1.sh", carry=[".gpu", ".whl"]): results in $OUT/microlat.tgz (~6 min).
source scripts/gpu/call.sh microlat
call_test kernels .gpu/bin/cuda_kernels
call_test gpu .gpu/bin/gpu
call_wait
KVAD_GPU_TRACE=$O/trace.txt .gpu/bin/kvad bench /tmp/kvad-bench/hf --backend gpu-q4 --prompt-tokens 128 \
  --gen-tokens 64 --rounds 1 >$O/trace.log 2>&1
python3 scripts/gpu/trace.py $O/trace.txt >$O/trace-summary.txt 2>&1
rm -f $O/trace.txt
head -20 $O/trace-summary.txt
call_pack
ALT_DEADLINE=$(call_left 480) bash scripts/gpu/alternate.sh $O "main|.gpu/old/kvad|" "micro|.gpu/bin/kvad|" \
  -- /tmp/kvad-bench/hf --backend gpu-q4,gpu-q8 --prompt-tokens 128 --gen-tokens 128 --rounds 2
call_pack
echo "end at $(($(date +%s) - T0))s"
