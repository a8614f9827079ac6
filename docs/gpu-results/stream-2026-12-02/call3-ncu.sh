export KVAD_ROOT=$PWD KVAD_OFFLINE=1
source scripts/gpu/env.sh
T0=$(date +%s)
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
( timeout 170 bash scripts/gpu/bench.sh make > /tmp/make.log 2>&1; echo "make rc $?" ) &
( .gpu/bin/kvad bench fixtures/models/llama-gguf/model.gguf --backend gpu-q4 --prompt-tokens 8 --gen-tokens 2 --rounds 1 > /tmp/warm.log 2>&1 ) &
wait
echo "made at $(( $(date +%s)-T0 ))s"
S="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats"
for v in register stream; do
  if [ $v = register ]; then e="KVAD_GPU_STREAM=0"; k='regex:^gemvs_q4d_1_r(4_nn|8_gb)$'; else e="X=1"; k='regex:_st$'; fi
  env $e KVAD_GPU_GRAPHS=0 timeout 110 "$NCU" --clock-control none $S --kernel-name "$k" --launch-skip 40 --launch-count 6 \
    .gpu/bin/kvad bench /tmp/kvad-bench/hf --backend gpu-q4 --prompt-tokens 16 --gen-tokens 4 --rounds 1 --warmup 0 > $OUT/ncu-$v.txt 2>&1
  echo "ncu $v rc=$? at $(( $(date +%s)-T0 ))s"
done
grep -E "gemvs_|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Stall Long|No Eligible" $OUT/ncu-register.txt | head -60
