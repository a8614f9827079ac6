# Sourced by a device call's script (wip/*/call*.sh, run through the `device` tool from the repository root): what
# every such call begins with and how it keeps its results, so a call script says only what it measures.
#   source scripts/gpu/call.sh NAME     → $O (/tmp/NAME, the results), $T0; the 8B bench model made alongside
#   call_test LOG [NAME=value…] PROGRAM [ARGS…]   a test run in the background into $O/t-LOG.log (its rc appended)
#   call_wait                            waits for those and the model, prints each log's verdict, packs
#   call_left SECONDS                    seconds left of SECONDS since $T0 (alternate.sh's ALT_DEADLINE)
#   call_pack                            $O into $OUT/NAME.tgz (again after each step: a time-out keeps what was done)
#   call_trace NAME [NAME=value…]        a gpu-q4 decode traced (KVAD_GPU_TRACE) into $O/trace-NAME-summary.txt
export KVAD_ROOT=$PWD KVAD_OFFLINE=1
source scripts/gpu/env.sh
CALL_NAME=$1
T0=$(date +%s)
O=/tmp/$CALL_NAME
mkdir -p "$O"
nvidia-smi --query-gpu=name,driver_version --format=csv >"$O/device.txt" 2>&1
( [ -d /tmp/kvad-bench/hf ] || bash scripts/gpu/bench.sh make >"$O/make.log" 2>&1 ) &
# The arguments a test binary takes on the device: one test at a time, its output shown, NVRTC's compile check
# left to this machine (it needs no GPU).
CALL_TEST_ARGS="--test-threads=1 --nocapture --skip every_kernel_compiles_with_nvrtc"

call_test() {
  local log=$1
  shift
  # shellcheck disable=SC2086
  ( env "$@" $CALL_TEST_ARGS >"$O/t-$log.log" 2>&1; echo "rc $?" >>"$O/t-$log.log" ) &
}

call_pack() {
  tar czf "$OUT/$CALL_NAME.tgz" -C "$O" .
}

call_wait() {
  wait
  echo "tests and model at $(($(date +%s) - T0)) s"
  for f in "$O"/t-*.log; do
    [ -e "$f" ] || continue
    echo "== $f"
    grep -h "test result\|panicked\|FAILED\|^rc" "$f" | head -8
  done
  call_pack
}

call_left() {
  echo $(($1 - ($(date +%s) - T0)))
}

call_trace() {
  local name=$1
  shift
  env "$@" KVAD_GPU_TRACE="$O/trace-$name.txt" .gpu/bin/kvad bench /tmp/kvad-bench/hf --backend gpu-q4 \
    --prompt-tokens 128 --gen-tokens 64 --rounds 1 >"$O/trace-$name.log" 2>&1
  python3 scripts/gpu/trace.py "$O/trace-$name.txt" >"$O/trace-$name-summary.txt" 2>&1
  rm -f "$O/trace-$name.txt"
  head -20 "$O/trace-$name-summary.txt"
}
