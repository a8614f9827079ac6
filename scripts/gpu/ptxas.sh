#!/usr/bin/env bash
# Registers and spills of every kernel on sm_90, without a GPU: the kernels' PTX as NVRTC makes it (the
# kernel_ptx example) through NVIDIA's ptxas (from the nvidia-cuda-nvcc wheel, pinned, into .venv-test/nvcc).
# Prints the kernels that spill, then the registers of those named (a grep pattern), with the blocks of 128
# threads an SM can then hold by registers (65,536 an SM, given in units of 8 a thread).
#   bash scripts/gpu/ptxas.sh ['gemvs_q4d_1_r|attention_decode_4_g4'] [DEFINE…]   (a measuring variant: KVAD_TRACE)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
pattern="${1:-gemvs_q4d_1_r|gemvs_q8d_1_r|gemvs_bf16_1_r|attention_decode_4_g4|silu_mul_act8}"
shift || true
NVRTC_LIB=.venv-test/nvrtc/nvidia/cu13/lib
PTXAS=.venv-test/nvcc/nvidia/cu13/bin/ptxas
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if [ ! -f "$NVRTC_LIB/libnvrtc.so.13" ]; then
  python3 -m pip download --quiet --no-deps --only-binary=:all: nvidia-cuda-nvrtc==13.5.37 -d "$tmp"
  mkdir -p .venv-test/nvrtc
  python3 -m zipfile -e "$tmp"/nvidia_cuda_nvrtc-*.whl .venv-test/nvrtc
fi
if [ ! -x "$PTXAS" ]; then
  python3 -m pip download --quiet --no-deps --only-binary=:all: nvidia-cuda-nvcc==13.5.37 -d "$tmp"
  mkdir -p .venv-test/nvcc
  python3 -m zipfile -e "$tmp"/nvidia_cuda_nvcc-*.whl .venv-test/nvcc
  chmod +x "$PTXAS"
fi
LD_LIBRARY_PATH="$PWD/$NVRTC_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  cargo run --quiet --release --locked -p kvad-tensor --example kernel_ptx -- "$tmp" 9 0 "$@"
for unit in "$tmp"/unit-*.ptx; do
  "$PTXAS" -arch=sm_90 -v "$unit" -o /dev/null 2>> "$tmp/ptxas.log"
done
python3 - "$tmp/ptxas.log" "$pattern" <<'PY'
import re, sys
info, cur = {}, None
for line in open(sys.argv[1]):
    m = re.search(r"Function properties for (\S+)", line)
    if m:
        cur = m.group(1)
        info[cur] = {"spill": 0, "regs": 0}
        continue
    m = re.search(r"(\d+) bytes spill stores", line)
    if m and cur:
        info[cur]["spill"] = int(m.group(1))
    m = re.search(r"Used (\d+) registers", line)
    if m and cur:
        info[cur]["regs"] = int(m.group(1))
spills = sorted((k for k, v in info.items() if v["spill"]), key=lambda k: -info[k]["spill"])
print(f"{len(info)} kernels; {len(spills)} spill:")
for k in spills:
    print(f"  {k}: {info[k]['spill']} bytes of spill stores, {info[k]['regs']} registers")
print("registers (blocks of 128 threads an SM by registers):")
for k in sorted(k for k in info if re.search(sys.argv[2], k)):
    r = info[k]["regs"]
    # Registers are given a warp in units of 256: 8 a thread.
    print(f"  {k}: {r} ({65536 // (128 * max(8, -(-r // 8) * 8))})")
PY
