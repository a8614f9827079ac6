#!/usr/bin/env bash
# Session 18's second device call: main with 9 blocks an SM for q4's norm-free product and 8 greedy steps ahead as
# the defaults (their tests: the fixtures, the deferred norm), then alternated at gpu-q4 against the measuring
# instances past them — 10 and 12 blocks (KVAD_GPU_NN_BLOCKS; 48 and 40 registers, spilling), o/down at 2 blocks
# an SM (KVAD_GPU_GB_BLOCKS=2; 64 registers, spilling) — and one step at a time (KVAD_GPU_GREEDY_AHEAD=1).
#   run(command="bash wip/blocks/call2.sh", carry=[".gpu", ".whl"]): results in $OUT/blocks2.tgz (~6 min).
export KVAD_ROOT=$PWD KVAD_OFFLINE=1
source scripts/gpu/env.sh
T0=$(date +%s)
O=/tmp/blocks2
mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv > $O/device.txt 2>&1
( [ -d /tmp/kvad-bench/hf ] || bash scripts/gpu/bench.sh make > $O/make.log 2>&1 ) &
S="--test-threads=1 --nocapture --skip every_kernel_compiles_with_nvrtc"
( .gpu/bin/gpu $S > $O/t-gpu.log 2>&1; echo "rc $?" >> $O/t-gpu.log ) &
( .gpu/bin/cuda_norm_defer $S > $O/t-defer.log 2>&1; echo "rc $?" >> $O/t-defer.log ) &
( KVAD_GPU_GB_BLOCKS=2 .gpu/bin/cuda_norm_defer $S > $O/t-defer-gb2.log 2>&1; echo "rc $?" >> $O/t-defer-gb2.log ) &
( .gpu/bin/cuda_kernels $S > $O/t-kernels.log 2>&1; echo "rc $?" >> $O/t-kernels.log ) &
wait
echo "tests+make at $(( $(date +%s)-T0 ))s"
for f in $O/t-*.log; do echo "== $f"; grep -h "test result\|panicked\|FAILED\|^rc" $f | head -8; done
tar czf $OUT/blocks2.tgz -C $O .
ALT_DEADLINE=$(( 500 - ($(date +%s)-T0) )) bash scripts/gpu/alternate.sh $O "main|.gpu/bin/kvad|" \
  "b10|.gpu/bin/kvad|KVAD_GPU_NN_BLOCKS=10" "b12|.gpu/bin/kvad|KVAD_GPU_NN_BLOCKS=12" \
  "gb2|.gpu/bin/kvad|KVAD_GPU_GB_BLOCKS=2" "ahead1|.gpu/bin/kvad|KVAD_GPU_GREEDY_AHEAD=1" -- /tmp/kvad-bench/hf \
  --backend gpu-q4 --prompt-tokens 128 --gen-tokens 128 --rounds 2
tar czf $OUT/blocks2.tgz -C $O .
echo "end at $(( $(date +%s)-T0 ))s"
