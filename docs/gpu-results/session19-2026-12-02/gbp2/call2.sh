#!/usr/bin/env bash
# Device call (session 19): SwiGLU letting the down product launch at once (KVAD_GPU_SILU_EARLY=1) against main,
# gpu-q4 alone, three rounds each (call1: with the pipelined `_gbp` products it recovered 582.5 → 585.6).
#   run(command="bash wip/gbpipe/call2.sh", carry=[".gpu", ".whl"]): results in $OUT/gbp2.tgz (~5 min).
source scripts/gpu/call.sh gbp2
call_wait
ALT_DEADLINE=$(call_left 400) bash scripts/gpu/alternate.sh $O "main|.gpu/bin/kvad|" \
  "early|.gpu/bin/kvad|KVAD_GPU_SILU_EARLY=1" -- /tmp/kvad-bench/hf --backend gpu-q4,gpu-q8 \
  --prompt-tokens 128 --gen-tokens 128 --rounds 2
call_pack
echo "end at $(($(date +%s) - T0))s"
