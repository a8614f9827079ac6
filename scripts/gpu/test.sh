#!/usr/bin/env bash
# The GPU tests, on a machine with an NVIDIA GPU (built elsewhere by scripts/gpu/stage.sh into .gpu/bin):
#   bash scripts/gpu/test.sh
# Kernel tests against the CPU reference, then every fixture on gpu-bf16/q8/q4 against PyTorch and the CPU.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source scripts/gpu/env.sh
export KVAD_ROOT="$PWD"
.gpu/bin/kvad doctor || true
for t in cuda_kernels gpu; do
  echo "== $t"
  ".gpu/bin/$t" --test-threads=1 --nocapture
done
# The fixtures again with the dp4a GEMVs (8-bit activations for q8/q4), at their own stated bounds.
echo "== gpu (KVAD_GPU_GEMV=dp4a)"
KVAD_GPU_GEMV=dp4a .gpu/bin/gpu --test-threads=1 --nocapture
