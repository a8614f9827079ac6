#!/usr/bin/env bash
# Session 23, call 2: main + relacq + cubin (what would land) on a fresh lease. (1) the touched GPU tests; (2) the
# 8B same-weights agreement (bench.sh make agree: gpu_big, never run since the 6-bit head); (3) each binary's first
# run from an empty kernel cache (KVAD_ROOT=/tmp/cold-*), the three side by side while agree runs; (4) alternation
# old main | new (CUBIN) | new on PTX (KVAD_GPU_CUBIN=0), gpu-q4, --rounds 2, twice each.
mkdir -p /tmp/kvad-bench/hf   # keeps call.sh from starting a make without the reference
source scripts/gpu/call.sh final
rmdir /tmp/kvad-bench/hf
( bash scripts/gpu/bench.sh make agree >"$O/agree.log" 2>&1; echo "rc $?" >>"$O/agree.log" ) &
AG=$!
call_test att .gpu/bin/cuda_decode_attention
call_test gpu .gpu/bin/gpu
call_test kernels .gpu/bin/cuda_kernels
call_test defer .gpu/bin/cuda_norm_defer
while [ ! -f /tmp/kvad-bench/teacher.json ] && kill -0 $AG 2>/dev/null; do sleep 2; done
echo "model and reference at $(($(date +%s) - T0))s"
cold() {  # name bin env…: a first run from an empty kernel cache, timed
  local name=$1 bin=$2; shift 2
  local s=$(date +%s)
  env KVAD_ROOT=/tmp/cold-$name "$@" $bin bench /tmp/kvad-bench/hf --backend gpu-q4 --prompt-tokens 8 \
    --gen-tokens 1 --rounds 1 --warmup 0 >"$O/cold-$name.log" 2>&1
  echo "cold $name: first run $(($(date +%s) - s)) s" | tee -a "$O/cold-$name.log"
}
cold new .gpu/bin/kvad & C1=$!
cold old .gpu/old/kvad & C2=$!
cold ptx .gpu/bin/kvad KVAD_GPU_CUBIN=0 & C3=$!
wait $C1 $C2 $C3
echo "cold runs done at $(($(date +%s) - T0))s"
wait
echo "tests and agree done at $(($(date +%s) - T0))s"
for f in $O/t-*.log; do echo "== $f"; grep -h "test result\|^rc\|FAILED\|panicked" $f; done
grep -h "top-1\|test result\|^rc" $O/agree.log | cut -c1-220
grep -h "kvad:\|cold" $O/cold-*.log
ALT_ROUNDS=2 ALT_DEADLINE=$(call_left 560) bash scripts/gpu/alternate.sh $O "main|.gpu/old/kvad|KVAD_ROOT=/tmp/cold-old" \
  "new|.gpu/bin/kvad|KVAD_ROOT=/tmp/cold-new" "ptx|.gpu/bin/kvad|KVAD_ROOT=/tmp/cold-ptx KVAD_GPU_CUBIN=0" -- \
  /tmp/kvad-bench/hf --backend gpu-q4 --prompt-tokens 128 --gen-tokens 128 --rounds 2
call_pack
echo "end at $(($(date +%s) - T0))s"
