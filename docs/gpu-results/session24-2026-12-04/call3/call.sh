#!/usr/bin/env bash
# Session 24, call 3: where the 1.5% of 32 sequences at gpu-bf16 went (call 2: 6,360.6 after against 6,458.5
# before). Three builds alternated twice on that command: before the issue (cb9c1be, .gpu/old/kvad), the lab-out
# branch alone (c76041d: the measuring switches removed, nothing else; .gpu/lab/kvad), and after (.gpu/bin/kvad).
#   run(command="bash docs/gpu-results/session24-2026-12-04/call3/call.sh", carry=[".gpu", ".whl"]) → $OUT/s24c.tgz
source scripts/gpu/call.sh s24c
call_wait
ALT_ROUNDS=2 ALT_DEADLINE=$(call_left 500) bash scripts/gpu/alternate.sh "$O" "new|.gpu/bin/kvad|" \
  "lab|.gpu/lab/kvad|" "old|.gpu/old/kvad|" -- /tmp/kvad-bench/hf --backend gpu-bf16 --batch 32 --prompt-tokens 128 \
  --gen-tokens 128 --rounds 2
call_pack
echo "end at $(($(date +%s) - T0))s"
