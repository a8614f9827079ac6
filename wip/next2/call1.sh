#!/usr/bin/env bash
# Device call 1 for wip/next2 (docs/performance-gpu.md, "Next"). Here first:
#   git checkout -b next2 main && git am wip/next2/*.patch   (from main, after checking out main's kvad below)
#   bash scripts/gpu/prepare.sh   (a fresh machine)
#   on main: cargo build --release --locked -p kvad-cli; copy target/release/kvad to .gpu/main/kvad; strip it
#   then on the branch: bash scripts/gpu/stage.sh; rm .gpu/bin/kvad-serve .gpu/bin/gpu_big
# Then: run(command="bash wip/next2/call1.sh", carry=[".gpu", ".whl"]). Results in $OUT/call1.tgz.
export KVAD_ROOT=$PWD KVAD_OFFLINE=1
source scripts/gpu/env.sh
F=fixtures/models/llama-gguf/model.gguf
T0=$(date +%s)
O=/tmp/o1
mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv > $O/device.txt 2>&1
( bash scripts/gpu/bench.sh make > $O/make.log 2>&1 ) &
for k in .gpu/bin/kvad .gpu/main/kvad; do
  ( $k bench $F --backend gpu-q8 --prompt-tokens 8 --gen-tokens 2 --rounds 1 > $O/warm-$(basename $(dirname $k)).log 2>&1 ) &
done
S="--test-threads=1 --nocapture --skip every_kernel_compiles_with_nvrtc"
( .gpu/bin/cuda_decode_attention $S > $O/t-att.log 2>&1; echo "rc $?" >> $O/t-att.log ) &
( .gpu/bin/cuda_swiglu_fold $S > $O/t-swiglu.log 2>&1; echo "rc $?" >> $O/t-swiglu.log ) &
( .gpu/bin/cuda_norm_defer $S > $O/t-defer.log 2>&1; echo "rc $?" >> $O/t-defer.log ) &
( .gpu/bin/cuda_kernels $S > $O/t-kernels.log 2>&1; echo "rc $?" >> $O/t-kernels.log ) &
( .gpu/bin/gpu $S > $O/t-gpu.log 2>&1; echo "rc $?" >> $O/t-gpu.log ) &
( KVAD_GPU_SWIGLU_FOLD=0 .gpu/bin/gpu $S > $O/t-gpu-unfolded.log 2>&1; echo "rc $?" >> $O/t-gpu-unfolded.log ) &
( KVAD_GPU_NORM_DEFER=0 .gpu/bin/gpu $S > $O/t-gpu-tail.log 2>&1; echo "rc $?" >> $O/t-gpu-tail.log ) &
wait
echo "tests+make at $(( $(date +%s)-T0 ))s"
for f in $O/t-*.log; do echo "== $f"; grep -h "test result\|panicked\|FAILED\|^rc" $f | head -8; done
tar czf $OUT/call1.tgz -C $O .
ALT_DEADLINE=$(( 440 - ($(date +%s)-T0) )) bash scripts/gpu/alternate.sh $O "next2|.gpu/bin/kvad|" \
  "unfolded|.gpu/bin/kvad|KVAD_GPU_SWIGLU_FOLD=0" "main|.gpu/main/kvad|" -- /tmp/kvad-bench/hf \
  --backend gpu-q8,gpu-q4 --prompt-tokens 128 --gen-tokens 128 --rounds 2
tar czf $OUT/call1.tgz -C $O .
echo "end at $(( $(date +%s)-T0 ))s"
