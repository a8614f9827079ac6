#!/usr/bin/env bash
# The GPU tests, on a machine with an NVIDIA GPU (built elsewhere by scripts/gpu/stage.sh into .gpu/bin):
#   bash scripts/gpu/test.sh
# Kernel tests against the CPU reference, then every fixture on gpu-bf16/q8/q4 against PyTorch and the CPU.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source scripts/gpu/env.sh
export KVAD_ROOT="$PWD"
.gpu/bin/kvad doctor || true
for t in cuda_kernels cuda_attention cuda_decode_attention cuda_norm_defer cuda_q6 cuda_delta gpu gpu_passes embed; do
  echo "== $t"
  # NVRTC compiling every kernel for two architectures is checked by CI (scripts/test.sh), not here.
  ".gpu/bin/$t" --test-threads=1 --nocapture --skip every_kernel_compiles_with_nvrtc
done
# Per-layer state on the device: recurrent slots snapshotted, restored, copied and returned (toy layer); pages of
# layers of different widths (K/V beside a latent) copied.
echo "== kvad_models_lib gpu::slots gpu::pages"
.gpu/bin/kvad_models_lib --test-threads=1 --nocapture gpu::
