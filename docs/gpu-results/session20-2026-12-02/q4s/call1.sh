#!/usr/bin/env bash
# Device call (session 20): q4 on the device as Q4_0 (f16 scale alone, 18 bytes a block, the minimum −8d made in
# the kernels) against the (d, m) pairs (20 bytes) — the same bits, 10% fewer bytes — with wip/qkv6's height-6 q/k/v
# and wip/oneterm's first-term-only activations measured beside it. .gpu/old/kvad: the pairs' binary (ada220e with
# both measuring variants); .gpu/bin: this one. Run from wip/q4s/ as
#   run(command="bash wip/q4s/call1.sh", carry=[".gpu", ".whl"]): results in $OUT/q4s.tgz (~9 min).
source scripts/gpu/call.sh q4s
call_test kernels .gpu/bin/cuda_kernels
call_test defer .gpu/bin/cuda_norm_defer
call_test gpu .gpu/bin/gpu
call_test gpu-w6 KVAD_GPU_ONE_WAVE6=8 .gpu/bin/gpu
call_test gpu-1t KVAD_GPU_Q4_ONE_TERM=9 .gpu/bin/gpu
call_wait
KVAD_GPU_TRACE=$O/trace-new.txt .gpu/bin/kvad bench /tmp/kvad-bench/hf --backend gpu-q4 --prompt-tokens 128 \
  --gen-tokens 64 --rounds 1 >$O/trace-new.log 2>&1
python3 scripts/gpu/trace.py $O/trace-new.txt >$O/trace-new-summary.txt 2>&1
rm -f $O/trace-new.txt
head -20 $O/trace-new-summary.txt
call_pack
ALT_DEADLINE=$(call_left 530) bash scripts/gpu/alternate.sh $O "old|.gpu/old/kvad|" "new|.gpu/bin/kvad|" \
  "w6|.gpu/bin/kvad|KVAD_GPU_ONE_WAVE6=8" "t9|.gpu/bin/kvad|KVAD_GPU_Q4_ONE_TERM=9" \
  "t10|.gpu/bin/kvad|KVAD_GPU_Q4_ONE_TERM=10" -- /tmp/kvad-bench/hf \
  --backend gpu-q4 --prompt-tokens 128 --gen-tokens 128 --rounds 2
call_pack
echo "end at $(($(date +%s) - T0))s"
