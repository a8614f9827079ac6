#!/usr/bin/env bash
# The GPU tests, on a machine with an NVIDIA GPU (built elsewhere by scripts/gpu/stage.sh into .gpu/bin):
#   bash scripts/gpu/test.sh
# Kernel tests against the CPU reference, then every fixture on gpu-bf16/q8/q4 against PyTorch and the CPU.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source scripts/gpu/env.sh
export KVAD_ROOT="$PWD"
.gpu/bin/kvad doctor || true
for t in cuda_kernels cuda_decode_attention gpu; do
  echo "== $t"
  # NVRTC compiling every kernel for two architectures is checked by CI (scripts/test.sh), not here.
  ".gpu/bin/$t" --test-threads=1 --nocapture --skip every_kernel_compiles_with_nvrtc
done
# The fixtures again with f32 activations in the q8/q4 GEMVs (the kernels before dp4a), at the same bound.
echo "== gpu (KVAD_GPU_GEMV=split)"
KVAD_GPU_GEMV=split .gpu/bin/gpu --test-threads=1 --nocapture
# The norm tail holding its row in shared memory (KVAD_GPU_TAIL_SMEM=1, off until measured): its kernel test
# against a separate quantisation, and the fixtures.
echo "== cuda_kernels, gpu (KVAD_GPU_TAIL_SMEM=1)"
KVAD_GPU_TAIL_SMEM=1 .gpu/bin/cuda_kernels --test-threads=1 --nocapture kernels_writing_8bit gemv
KVAD_GPU_TAIL_SMEM=1 .gpu/bin/gpu --test-threads=1 --nocapture
# The decode attention with a KV head's query heads split over blocks (KVAD_GPU_ATT_HEADS, off until measured).
for h in 1 2; do
  echo "== cuda_decode_attention, gpu (KVAD_GPU_ATT_HEADS=$h)"
  KVAD_GPU_ATT_HEADS=$h .gpu/bin/cuda_decode_attention --test-threads=1 --nocapture
  KVAD_GPU_ATT_HEADS=$h .gpu/bin/gpu --test-threads=1 --nocapture
done
# The dp4a products with a lane's next chunk of weights in flight (KVAD_GPU_GS_PREFETCH=1, off until measured).
echo "== cuda_kernels, gpu (KVAD_GPU_GS_PREFETCH=1)"
KVAD_GPU_GS_PREFETCH=1 .gpu/bin/cuda_kernels --test-threads=1 --nocapture kernels_writing_8bit gemv
KVAD_GPU_GS_PREFETCH=1 .gpu/bin/gpu --test-threads=1 --nocapture
