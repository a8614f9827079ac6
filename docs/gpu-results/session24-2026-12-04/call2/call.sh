#!/usr/bin/env bash
# Session 24, call 2: the two GPU tests call 1 failed, again after the fix (a GPU state's prefix copied by its
# length); then 32 sequences at gpu-bf16 and a 2,048-token prompt on each GPU backend, before (cb9c1be,
# .gpu/old/kvad) and after issue 33 (.gpu/bin/kvad), alternated twice; one-stream decode again if time is left.
#   run(command="bash docs/gpu-results/session24-2026-12-04/call2/call.sh", carry=[".gpu", ".whl"]) → $OUT/s24b.tgz
source scripts/gpu/call.sh s24b
call_test gpu .gpu/bin/gpu
call_test state .gpu/bin/kvad_models_lib gpu::
call_wait
for r in 1 2; do
  for v in new old; do
    bin=.gpu/bin/kvad
    [ "$v" = old ] && bin=.gpu/old/kvad
    $bin bench /tmp/kvad-bench/hf --backend gpu-bf16 --batch 32 --prompt-tokens 128 --gen-tokens 128 --rounds 2 \
      --out "$O/batch32-$v-$r.json" >"$O/batch32-$v-$r.log" 2>&1
    $bin bench /tmp/kvad-bench/hf --backend gpu-bf16,gpu-q8,gpu-q4 --prompt-tokens 2048 --gen-tokens 2 --rounds 3 \
      --out "$O/pp2048-$v-$r.json" >"$O/pp2048-$v-$r.log" 2>&1
    grep -h "median\|tok/s" "$O/batch32-$v-$r.log" "$O/pp2048-$v-$r.log" | grep -v "round" | head -8
    call_pack
  done
done
ALT_ROUNDS=1 ALT_DEADLINE=$(call_left 540) bash scripts/gpu/alternate.sh "$O" "new|.gpu/bin/kvad|" \
  "old|.gpu/old/kvad|" -- /tmp/kvad-bench/hf --backend gpu-bf16,gpu-q8,gpu-q4 --prompt-tokens 128 --gen-tokens 128 \
  --rounds 2
call_pack
echo "end at $(($(date +%s) - T0))s"
