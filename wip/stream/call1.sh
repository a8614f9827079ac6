#!/usr/bin/env bash
# Device call for branch `stream` (q4 weights streamed through shared memory, gemv_stream.cu). Here first:
#   CARGO_TARGET_DIR=... bash scripts/gpu/stage.sh; rm .gpu/bin/kvad-serve .gpu/bin/gpu_big
# Then: run(command="bash wip/stream/call1.sh", carry=[".gpu", ".whl"]). Results in $OUT/stream2.tgz.
export KVAD_ROOT=$PWD KVAD_OFFLINE=1
source scripts/gpu/env.sh
T0=$(date +%s)
O=/tmp/stream2
mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv > $O/device.txt 2>&1
( [ -d /tmp/kvad-bench/hf ] || bash scripts/gpu/bench.sh make > $O/make.log 2>&1 ) &
( .gpu/bin/kvad bench fixtures/models/llama-gguf/model.gguf --backend gpu-q4 --prompt-tokens 8 --gen-tokens 2 --rounds 1 > $O/warm.log 2>&1 ) &
S="--test-threads=1 --nocapture --skip every_kernel_compiles_with_nvrtc"
( .gpu/bin/cuda_gemv_stream $S > $O/t-stream.log 2>&1; echo "rc $?" >> $O/t-stream.log ) &
( .gpu/bin/cuda_norm_defer $S > $O/t-defer.log 2>&1; echo "rc $?" >> $O/t-defer.log ) &
( .gpu/bin/cuda_kernels $S > $O/t-kernels.log 2>&1; echo "rc $?" >> $O/t-kernels.log ) &
( .gpu/bin/gpu $S > $O/t-gpu.log 2>&1; echo "rc $?" >> $O/t-gpu.log ) &
( KVAD_GPU_STREAM=0 .gpu/bin/gpu $S > $O/t-gpu-register.log 2>&1; echo "rc $?" >> $O/t-gpu-register.log ) &
wait
echo "tests+make at $(( $(date +%s)-T0 ))s"
for f in $O/t-*.log; do echo "== $f"; grep -h "test result\|panicked\|FAILED\|^rc" $f | head -8; done
tar czf $OUT/stream2.tgz -C $O .
ALT_DEADLINE=$(( 430 - ($(date +%s)-T0) )) bash scripts/gpu/alternate.sh $O "stream|.gpu/bin/kvad|" \
  "register|.gpu/bin/kvad|KVAD_GPU_STREAM=0" \
  "carve|.gpu/bin/kvad|KVAD_GPU_CARVEOUT=100" "regcarve|.gpu/bin/kvad|KVAD_GPU_STREAM=0 KVAD_GPU_CARVEOUT=100" "gbcarve|.gpu/bin/kvad|KVAD_GPU_STREAM=gb KVAD_GPU_CARVEOUT=100" -- /tmp/kvad-bench/hf \
  --backend gpu-q4 --prompt-tokens 128 --gen-tokens 128 --rounds 2
tar czf $OUT/stream2.tgz -C $O .
KVAD_GPU_CARVEOUT=100 KVAD_GPU_TRACE=$O/trace.raw timeout 120 .gpu/bin/kvad bench /tmp/kvad-bench/hf --backend gpu-q4 --prompt-tokens 128 \
  --gen-tokens 64 --rounds 1 --warmup 0 > $O/trace.log 2>&1
python3 scripts/gpu/trace.py $O/trace.raw > $O/trace.txt 2>&1; head -24 $O/trace.txt; rm -f $O/trace.raw
tar czf $OUT/stream2.tgz -C $O .
echo "end at $(( $(date +%s)-T0 ))s"
