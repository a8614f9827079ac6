#!/usr/bin/env bash
# The routed benchmark on the device (after scripts/gpu/prepare.sh and stage.sh here): the Qwen3-30B-A3B shape
# (scripts/gpu/make_moe_bench_model.py, 24 layers, a BF16 GGUF in llama.cpp's qwen3moe layout) made in
# $KVAD_BENCH_DIR (default /tmp/kvad-moe), then kvad's one-stream decode (128-token prompt, 128 generated) and a
# 2,048-token prompt at gpu-bf16, gpu-q8 and gpu-q4, interleaved rounds. JSON of every sample goes to $OUT (or /tmp).
#   bash scripts/gpu/bench_moe.sh [make] [tg] [pp]     (no argument: all)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source scripts/gpu/env.sh
export KVAD_ROOT="$PWD"
W="${KVAD_BENCH_DIR:-/tmp/kvad-moe}"
O="${OUT:-/tmp}"
K=.gpu/bin/kvad
LAYERS="${KVAD_MOE_LAYERS:-24}"
steps="${*:-make tg pp}"
mkdir -p "$W"
M="$W/qwen3moe-${LAYERS}l-bf16.gguf"
if [[ " $steps " == *" make "* && ! -f "$M" ]]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/gguf-*.whl && export PYTHONPATH=/tmp/site
  python3 scripts/gpu/make_moe_bench_model.py "$M" .gpu/smollm2-tokenizer.gguf "$LAYERS" || exit 1
fi
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
if [[ " $steps " == *" tg "* ]]; then
  $K bench "$M" --backend gpu-bf16,gpu-q8,gpu-q4 --prompt-tokens 128 --gen-tokens 128 --rounds 3 --out "$O/moe-tg.json"
fi
if [[ " $steps " == *" pp "* ]]; then
  $K bench "$M" --backend gpu-bf16,gpu-q8,gpu-q4 --prompt-tokens 2048 --gen-tokens 8 --rounds 3 --out "$O/moe-pp.json"
fi
