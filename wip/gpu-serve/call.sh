#!/usr/bin/env bash
# Issues 35 and 36 on the device (wip/gpu-serve and wip/gpu-chunk applied and staged): the chunked delta rule's test
# and timing, the serving tests, the GPU tests, then scripts/gpu/serve.sh while time is left. PHASE=2 goes on with serve.sh.
set -u
export KVAD_ROOT=$PWD KVAD_OFFLINE=1
source scripts/gpu/env.sh
R=$OUT/r; mkdir -p $R
T0=$(date +%s)
el(){ echo $(( $(date +%s) - T0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader > $R/device.txt 2>&1
cat $R/device.txt
[ -x .gpu/bin/kvad-serve ] || tar xJf .gpu/pack/bins.tar.xz -C .gpu/bin
if [ "${PHASE:-1}" = 1 ]; then
  ( [ -f /tmp/kvad-bench/hf/config.json ] || KVAD_BENCH_REF=0 bash scripts/gpu/bench.sh make > $R/make.log 2>&1; touch /tmp/made ) &
  A="--test-threads=1 --nocapture --skip every_kernel_compiles_with_nvrtc"
  t(){ local n=$1; shift; timeout ${TL:-200} "$@" > $R/t-$n.log 2>&1; echo "rc $?" >> $R/t-$n.log; echo "[$(el)s] $n $(tail -1 $R/t-$n.log) $(grep -E 'test result' $R/t-$n.log | tail -1)"; }
  t cuda_delta .gpu/bin/cuda_delta $A
  t gpu_passes .gpu/bin/gpu_passes $A
  t models_lib .gpu/bin/kvad_models_lib $A gpu::
  TL=120 t gpu_delta .gpu/bin/gpu_delta
  grep -iE "rows|chunk|us" $R/t-gpu_delta.log | tail -24
  TL=260 t gpu .gpu/bin/gpu $A
  grep -E "FAILED|panicked" $R/t-*.log | head -20
  while [ ! -f /tmp/made ] && [ $(el) -lt 400 ]; do sleep 3; done
  tail -3 $R/make.log
fi
LIMIT=$(( ${BUDGET:-570} - $(el) )) OUT=$R bash scripts/gpu/serve.sh bf16 one rate q8 q4 2>&1 | tail -20
