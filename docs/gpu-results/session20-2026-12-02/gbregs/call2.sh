#!/usr/bin/env bash
# Device call 2 (session 20): call1's `_gb` variants had launched with 128 threads (the launcher matched the `_gb`
# suffix only, so `_gb96` ran one sub-block of four: NaN) — mended (a name holding `_gb`); the `_gb` products held to
# 112 or 96 registers (KVAD_GPU_GB_REGS) against main, gpu-q4, with the deferred norm's bit test under 96.
#   run(command="bash wip/silu/call2.sh", carry=[".gpu", ".whl"]): results in $OUT/gbregs.tgz (~6 min).
source scripts/gpu/call.sh gbregs
call_test defer-gb96 KVAD_GPU_GB_REGS=96 .gpu/bin/cuda_norm_defer
call_test defer-gb112 KVAD_GPU_GB_REGS=112 .gpu/bin/cuda_norm_defer
call_wait
ALT_DEADLINE=$(call_left 400) bash scripts/gpu/alternate.sh $O "main|.gpu/bin/kvad|" \
  "gb112|.gpu/bin/kvad|KVAD_GPU_GB_REGS=112" "gb96|.gpu/bin/kvad|KVAD_GPU_GB_REGS=96" -- /tmp/kvad-bench/hf \
  --backend gpu-q4 --prompt-tokens 128 --gen-tokens 128 --rounds 2
call_pack
echo "end at $(($(date +%s) - T0))s"
