#!/usr/bin/env bash
# Device call for session 18's wip/attcluster patch (apply on a branch: git am wip/attcluster/*.patch; stage):
# the decode attention's split rows merged through a thread-block cluster (KVAD_GPU_ATT_CLUSTER=1) against the
# last block's merge, plus a trace of main's decode step (where a gpu-q4 step goes at 9 blocks an SM).
#   run(command="bash wip/attcluster/call1.sh", carry=[".gpu", ".whl"]): results in $OUT/attc1.tgz (~8 min).
export KVAD_ROOT=$PWD KVAD_OFFLINE=1
source scripts/gpu/env.sh
T0=$(date +%s)
O=/tmp/attc1
mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv > $O/device.txt 2>&1
( [ -d /tmp/kvad-bench/hf ] || bash scripts/gpu/bench.sh make > $O/make.log 2>&1 ) &
S="--test-threads=1 --nocapture --skip every_kernel_compiles_with_nvrtc"
( .gpu/bin/cuda_decode_attention $S > $O/t-att.log 2>&1; echo "rc $?" >> $O/t-att.log ) &
( KVAD_GPU_ATT_CLUSTER=1 .gpu/bin/gpu $S > $O/t-gpu-cluster.log 2>&1; echo "rc $?" >> $O/t-gpu-cluster.log ) &
# Several query heads a block (GM 4 and 8: G < GM at a group of 3, wider partials), clustered too.
( KVAD_GPU_ATT_HEADS=8 .gpu/bin/cuda_decode_attention $S > $O/t-att-heads8.log 2>&1; echo "rc $?" >> $O/t-att-heads8.log ) &
wait
echo "tests+make at $(( $(date +%s)-T0 ))s"
for f in $O/t-*.log; do echo "== $f"; grep -h "test result\|panicked\|FAILED\|^rc" $f | head -8; done
tar czf $OUT/attc1.tgz -C $O .
for v in last cluster; do
  env $([ $v = cluster ] && echo KVAD_GPU_ATT_CLUSTER=1) KVAD_GPU_TRACE=$O/trace-$v.txt .gpu/bin/kvad bench /tmp/kvad-bench/hf \
    --backend gpu-q4 --prompt-tokens 128 --gen-tokens 64 --rounds 1 > $O/trace-$v.log 2>&1
  python3 scripts/gpu/trace.py $O/trace-$v.txt > $O/trace-$v-summary.txt 2>&1; rm -f $O/trace-$v.txt
  head -20 $O/trace-$v-summary.txt
done
tar czf $OUT/attc1.tgz -C $O .
ALT_DEADLINE=$(( 500 - ($(date +%s)-T0) )) bash scripts/gpu/alternate.sh $O "last|.gpu/bin/kvad|" \
  "cluster|.gpu/bin/kvad|KVAD_GPU_ATT_CLUSTER=1" -- /tmp/kvad-bench/hf \
  --backend gpu-q4,gpu-q8 --prompt-tokens 128 --gen-tokens 128 --rounds 2
tar czf $OUT/attc1.tgz -C $O .
echo "end at $(( $(date +%s)-T0 ))s"
ALT_DEADLINE=$(( 560 - ($(date +%s)-T0) )) bash scripts/gpu/alternate.sh $O/long "last|.gpu/bin/kvad|" \
  "cluster|.gpu/bin/kvad|KVAD_GPU_ATT_CLUSTER=1" -- /tmp/kvad-bench/hf \
  --backend gpu-q4 --prompt-tokens 1024 --gen-tokens 128 --rounds 1
tar czf $OUT/attc1.tgz -C $O .
echo "end at $(( $(date +%s)-T0 ))s"
