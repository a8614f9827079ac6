#!/usr/bin/env bash
# The GPU benchmarks of docs/performance.md, on the device (after scripts/gpu/stage.sh here):
#   bash scripts/gpu/bench.sh [make] [agree] [tg] [batch] [pp] [trace]     (no argument: all but trace)
# make: the Llama-3-8B-shaped model and its PyTorch reference into $KVAD_BENCH_DIR (default /tmp/kvad-bench);
# agree: top-1 against PyTorch bf16 (safetensors and GGUF); tg: one stream, 128-token prompt, 128 generated;
# batch: 32 sequences together; pp: a 2,048-token prompt; trace: each backend's decode step kernel by kernel inside
# the graph (KVAD_GPU_TRACE, summed by scripts/gpu/trace.py). JSON of every sample goes to $OUT (or /tmp).
# KVAD_OLD=path/to/old/kvad: tg alternates this build with that one, twice; KVAD_AB_ENV="NAME=value …": tg
# alternates this build with and without those settings, twice.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source scripts/gpu/env.sh
export KVAD_ROOT="$PWD"
W="${KVAD_BENCH_DIR:-/tmp/kvad-bench}"
O="${OUT:-/tmp}"
K=.gpu/bin/kvad
steps="${*:-make agree tg batch pp}"
# The PyTorch reference is only for agree (it takes most of make's time).
[[ " $steps " == *" agree "* ]] || export KVAD_BENCH_REF=0
mkdir -p "$W"
if [[ " $steps " == *" make "* && ! -f "$W/teacher.json" ]]; then
  if ls .whl/gguf-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
  fi
  if [ ! -d .gpu/smollm2-tokenizer ]; then
    # The tokenizer travels as a tensor-less GGUF (scripts/gpu/tokenizer_gguf.py, made by scripts/gpu/prepare.sh).
    python3 -c "from transformers import AutoTokenizer as T
T.from_pretrained('.gpu', gguf_file='smollm2-tokenizer.gguf').save_pretrained('.gpu/smollm2-tokenizer')"
  fi
  python3 scripts/gpu/make_bench_model.py "$W" .gpu/smollm2-tokenizer
fi
if [[ " $steps " == *" agree "* ]]; then
  KVAD_BIG_MODELS="$W/hf@gpu-bf16,$W/model-bf16.gguf@gpu-bf16,$W/hf@gpu-q8,$W/hf@gpu-q4,$W/hf@cpu-q4" \
    KVAD_BIG_REF="$W/teacher.json" .gpu/bin/gpu_big --nocapture
fi
if [[ " $steps " == *" tg "* ]]; then
  tg=("$W/hf" --backend gpu-bf16,gpu-q8,gpu-q4 --prompt-tokens 128 --gen-tokens 128 --rounds 2)
  if [ -n "${KVAD_AB_ENV:-}" ]; then
    # The build with and without an environment setting (KVAD_AB_ENV="NAME=value": a switch a branch adds to
    # measure a change, say), alternated twice.
    bash scripts/gpu/alternate.sh "$O" "env|$K|$KVAD_AB_ENV" "plain|$K|" -- "${tg[@]}"
  elif [ -n "${KVAD_OLD:-}" ]; then
    # A change against the build before it (KVAD_OLD: that build's kvad, e.g. .gpu/old/kvad copied there before
    # staging the change), alternated twice in this one lease: only alternated figures compare.
    bash scripts/gpu/alternate.sh "$O" "new|$K|" "old|$KVAD_OLD|" -- "${tg[@]}"
  else
    $K bench "$W/hf" --backend gpu-bf16,gpu-q8,gpu-q4 --prompt-tokens 128 --gen-tokens 128 --rounds 3 --out "$O/tg128.json"
  fi
fi
if [[ " $steps " == *" batch "* ]]; then
  $K bench "$W/hf" --backend gpu-bf16 --batch 32 --prompt-tokens 128 --gen-tokens 128 --rounds 2 --out "$O/batch32.json"
fi
if [[ " $steps " == *" pp "* ]]; then
  $K bench "$W/hf" --backend gpu-bf16,gpu-q8,gpu-q4 --prompt-tokens 2048 --gen-tokens 2 --rounds 3 --out "$O/pp2048.json"
fi
if [[ " $steps " == *" trace "* ]]; then
  for be in gpu-q4 gpu-q8 gpu-bf16; do
    KVAD_GPU_TRACE="$O/trace-$be.txt" $K bench "$W/hf" --backend "$be" --prompt-tokens 128 --gen-tokens 64 --rounds 1 \
      --warmup 0 > /dev/null
    python3 scripts/gpu/trace.py "$O/trace-$be.txt" | tee "$O/trace-$be-summary.txt"
    rm -f "$O/trace-$be.txt"
  done
fi
