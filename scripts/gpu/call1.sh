#!/usr/bin/env bash
# Lease call 1: llama.cpp's build started, the GPU tests, then the Qwen3-MoE side by side as far as time allows.
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
S=$(date +%s)
bash .gpu/moe_side.sh start
( bash scripts/gpu/test.sh > "$OUT/gputest.log" 2>&1; echo "test.sh rc=$?" >> "$OUT/gputest.log" )
grep -E '^test |test result|panicked|rc=' "$OUT/gputest.log" | tail -60
LIMIT=$((560 - $(date +%s) + S)) bash .gpu/moe_side.sh
