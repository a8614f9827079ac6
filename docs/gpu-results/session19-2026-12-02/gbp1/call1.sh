#!/usr/bin/env bash
# Device call (session 19): the `_gb` products (o and down in one-stream decode) asking L2 for each lane's next
# chunk as they load the current one (KVAD_GPU_GB_PIPE=1, `_gbp`), and SwiGLU letting the down product launch at
# once (KVAD_GPU_SILU_EARLY=1), against main.
#   run(command="bash wip/gbpipe/call1.sh", carry=[".gpu", ".whl"]): results in $OUT/gbp1.tgz (~9 min).
source scripts/gpu/call.sh gbp1
call_test defer .gpu/bin/cuda_norm_defer
call_test defer-pipe KVAD_GPU_GB_PIPE=1 .gpu/bin/cuda_norm_defer
call_test gpu-pipe KVAD_GPU_GB_PIPE=1 KVAD_GPU_SILU_EARLY=1 .gpu/bin/gpu
call_test kernels .gpu/bin/cuda_kernels
call_wait
ALT_DEADLINE=$(call_left 520) bash scripts/gpu/alternate.sh $O "main|.gpu/bin/kvad|" \
  "pipe|.gpu/bin/kvad|KVAD_GPU_GB_PIPE=1" "pipe_early|.gpu/bin/kvad|KVAD_GPU_GB_PIPE=1 KVAD_GPU_SILU_EARLY=1" \
  -- /tmp/kvad-bench/hf --backend gpu-q4,gpu-q8 --prompt-tokens 128 --gen-tokens 128 --rounds 2
call_pack
if [ "$(call_left 560)" -gt 40 ]; then
  KVAD_GPU_GB_PIPE=1 KVAD_GPU_SILU_EARLY=1 KVAD_GPU_TRACE=$O/trace.txt .gpu/bin/kvad bench /tmp/kvad-bench/hf \
    --backend gpu-q4 --prompt-tokens 128 --gen-tokens 64 --rounds 1 >$O/trace.log 2>&1
  python3 scripts/gpu/trace.py $O/trace.txt >$O/trace-summary.txt 2>&1
  rm -f $O/trace.txt
  head -20 $O/trace-summary.txt
fi
call_pack
echo "end at $(($(date +%s) - T0))s"
