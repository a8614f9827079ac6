#!/usr/bin/env bash
# Session 18's third device call: the decode attention and SwiGLU asking L2 for the next products' weights
# (KVAD_GPU_L2_NEXT=o,up,down; crates/models/src/gpu/l2_plan.rs): their tests (the decode attention and SwiGLU
# asking while they run, bit for bit the same; the fixtures with a plan on), then plans alternated at gpu-q4.
#   run(command="bash wip/l2/call3.sh", carry=[".gpu", ".whl"]): results in $OUT/l2-3.tgz (~8 min).
export KVAD_ROOT=$PWD KVAD_OFFLINE=1
source scripts/gpu/env.sh
T0=$(date +%s)
O=/tmp/l2-3
mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv > $O/device.txt 2>&1
( [ -d /tmp/kvad-bench/hf ] || bash scripts/gpu/bench.sh make > $O/make.log 2>&1 ) &
S="--test-threads=1 --nocapture --skip every_kernel_compiles_with_nvrtc"
( KVAD_GPU_L2_NEXT=1,32,16 .gpu/bin/gpu $S > $O/t-gpu-l2.log 2>&1; echo "rc $?" >> $O/t-gpu-l2.log ) &
( .gpu/bin/cuda_decode_attention $S > $O/t-att.log 2>&1; echo "rc $?" >> $O/t-att.log ) &
( .gpu/bin/cuda_kernels $S > $O/t-kernels.log 2>&1; echo "rc $?" >> $O/t-kernels.log ) &
wait
echo "tests+make at $(( $(date +%s)-T0 ))s"
for f in $O/t-*.log; do echo "== $f"; grep -h "test result\|panicked\|FAILED\|^rc" $f | head -8; done
tar czf $OUT/l2-3.tgz -C $O .
ALT_DEADLINE=$(( 520 - ($(date +%s)-T0) )) bash scripts/gpu/alternate.sh $O "none|.gpu/bin/kvad|" \
  "o|.gpu/bin/kvad|KVAD_GPU_L2_NEXT=1,0,0" "o16|.gpu/bin/kvad|KVAD_GPU_L2_NEXT=1,16,0" \
  "o32|.gpu/bin/kvad|KVAD_GPU_L2_NEXT=1,32,0" "d16|.gpu/bin/kvad|KVAD_GPU_L2_NEXT=0,0,16" \
  "o16d16|.gpu/bin/kvad|KVAD_GPU_L2_NEXT=1,16,16" -- /tmp/kvad-bench/hf \
  --backend gpu-q4 --prompt-tokens 128 --gen-tokens 128 --rounds 2
tar czf $OUT/l2-3.tgz -C $O .
echo "end at $(( $(date +%s)-T0 ))s"
