#!/usr/bin/env bash
# Device call for session 17's measuring instances (on main, behind switches; docs/performance-gpu.md, "session
# 17"): q4's one-input norm-free product at 8 and 9 blocks an SM (KVAD_GPU_NN_BLOCKS), q4's one-input deferring
# products at height 4 in blocks of 1,024 threads (KVAD_GPU_GB_ROWS=4), greedy steps run ahead on the device
# (KVAD_GPU_GREEDY_AHEAD=8; its test, greedy_steps_ahead_equal_steps_one_at_a_time, is in the `gpu` binary).
# Here first:
#   bash scripts/gpu/prepare.sh   (a fresh machine)
#   CARGO_TARGET_DIR=... bash scripts/gpu/stage.sh; rm .gpu/bin/kvad-serve .gpu/bin/gpu_big
# Then: run(command="bash wip/blocks/call1.sh", carry=[".gpu", ".whl"]). Results in $OUT/blocks1.tgz (~7 min).
export KVAD_ROOT=$PWD KVAD_OFFLINE=1
source scripts/gpu/env.sh
T0=$(date +%s)
O=/tmp/blocks1
mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv > $O/device.txt 2>&1
( [ -d /tmp/kvad-bench/hf ] || bash scripts/gpu/bench.sh make > $O/make.log 2>&1 ) &
( .gpu/bin/kvad bench fixtures/models/llama-gguf/model.gguf --backend gpu-q4 --prompt-tokens 8 --gen-tokens 2 --rounds 1 > $O/warm.log 2>&1 ) &
S="--test-threads=1 --nocapture --skip every_kernel_compiles_with_nvrtc"
( KVAD_GPU_NN_BLOCKS=9 .gpu/bin/gpu $S > $O/t-gpu-b9.log 2>&1; echo "rc $?" >> $O/t-gpu-b9.log ) &
( .gpu/bin/gpu $S greedy_steps_ahead > $O/t-gpu-ahead.log 2>&1; echo "rc $?" >> $O/t-gpu-ahead.log ) &
( KVAD_GPU_GB_ROWS=4 .gpu/bin/gpu $S > $O/t-gpu-gb4.log 2>&1; echo "rc $?" >> $O/t-gpu-gb4.log ) &
( KVAD_GPU_GB_ROWS=4 .gpu/bin/cuda_norm_defer $S > $O/t-defer-gb4.log 2>&1; echo "rc $?" >> $O/t-defer-gb4.log ) &
( KVAD_GPU_NN_BLOCKS=8 .gpu/bin/cuda_norm_defer $S > $O/t-defer-b8.log 2>&1; echo "rc $?" >> $O/t-defer-b8.log ) &
wait
echo "tests+make at $(( $(date +%s)-T0 ))s"
for f in $O/t-*.log; do echo "== $f"; grep -h "test result\|panicked\|FAILED\|^rc" $f | head -8; done
tar czf $OUT/blocks1.tgz -C $O .
ALT_DEADLINE=$(( 480 - ($(date +%s)-T0) )) bash scripts/gpu/alternate.sh $O "b7|.gpu/bin/kvad|" \
  "b8|.gpu/bin/kvad|KVAD_GPU_NN_BLOCKS=8" "b9|.gpu/bin/kvad|KVAD_GPU_NN_BLOCKS=9" \
  "gb4|.gpu/bin/kvad|KVAD_GPU_GB_ROWS=4" "ahead8|.gpu/bin/kvad|KVAD_GPU_GREEDY_AHEAD=8" -- /tmp/kvad-bench/hf \
  --backend gpu-q4 --prompt-tokens 128 --gen-tokens 128 --rounds 2
tar czf $OUT/blocks1.tgz -C $O .
echo "end at $(( $(date +%s)-T0 ))s"
