#!/usr/bin/env bash
# Session 24, call 1: issue 33 (one engine for every architecture) on the H200. The GPU tests of this build (kernels,
# attention, the fixtures on gpu-bf16/q8/q4, the device state tests), then one-stream decode of main before the
# issue (cb9c1be, staged as .gpu/old/kvad) and after it (.gpu/bin/kvad) alternated on the 8B shape.
#   run(command="bash docs/gpu-results/session24-2026-12-04/call1/call.sh", carry=[".gpu", ".whl"]) → $OUT/s24a.tgz
source scripts/gpu/call.sh s24a
call_test kernels .gpu/bin/cuda_kernels
call_test att .gpu/bin/cuda_attention
call_test dec .gpu/bin/cuda_decode_attention
call_test defer .gpu/bin/cuda_norm_defer
call_test q6 .gpu/bin/cuda_q6
call_test gpu .gpu/bin/gpu
call_test state .gpu/bin/kvad_models_lib gpu::
call_wait
.gpu/bin/kvad doctor >"$O/doctor.txt" 2>&1
ALT_ROUNDS=2 ALT_DEADLINE=$(call_left 540) bash scripts/gpu/alternate.sh "$O" "new|.gpu/bin/kvad|" \
  "old|.gpu/old/kvad|" -- /tmp/kvad-bench/hf --backend gpu-bf16,gpu-q8,gpu-q4 --prompt-tokens 128 --gen-tokens 128 \
  --rounds 2
call_pack
echo "end at $(($(date +%s) - T0))s"
