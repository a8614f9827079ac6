#!/usr/bin/env bash
# Issue 8 on the device, decode attention for passes over 8 rows: the kernel and fixture tests, then 32 sequences
# at gpu-bf16 on the 8B shape with the default kernel of such passes (new: the keys split over a block's warps,
# attention_split.cu) alternated in the same binary with the 8-warp key-stream kernel (old: KVAD_GPU_ATT_CHUNKS=0)
# and the block-wide chunk kernels (chunks, simt: KVAD_GPU_ATT_CHUNKS=chunks|simt; which run: $BATCH_VARIANTS),
# one stream, and ncu's time of each kernel at 32 rows ($NCU_VARIANTS). With KVAD_BASE_BIN (a folder holding
# another build's kvad, cuda_kernels and gpu, e.g. main's) that build's full tests run first and its kvad joins
# the alternation as "base".
#   bash scripts/gpu/att32b.sh [test] [batch] [one] [ncu]      (no argument: all)
# Results (logs, JSONs) in /tmp/att32b, packed after each step into $OUT/results.tgz when $OUT is set (the device
# tool brings back 8 files at most).
# Binaries: $KVAD_BIN (default .gpu/bin, what scripts/gpu/stage.sh writes).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source scripts/gpu/env.sh
export KVAD_ROOT="${KVAD_ROOT:-$PWD}" KVAD_OFFLINE=1
R=/tmp/att32b
mkdir -p "$R"
pack() { [ -n "${OUT:-}" ] && tar czf "$OUT/results.tgz" -C "$R" . ; true; }
steps="${*:-test batch one ncu}"
has() { [[ " $steps " == *" $1 "* ]]; }
N="${KVAD_BIN:-.gpu/bin}"
BASE="${KVAD_BASE_BIN:-}"
B=/tmp/kvad-bench
LOG="$R/stdout.txt"
exec > >(tee -a "$LOG") 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/device.txt"
date -u | tee -a "$R/device.txt"
# The benchmark model is made while the tests run (CPU work, no timings taken meanwhile).
if has batch || has one || has ncu; then
  if [ ! -d .gpu/smollm2-tokenizer ]; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
    python3 -c "from transformers import AutoTokenizer as T
T.from_pretrained('.gpu', gguf_file='smollm2-tokenizer.gguf').save_pretrained('.gpu/smollm2-tokenizer')"
  fi
  if [ ! -f "$B/hf/config.json" ]; then
    KVAD_BENCH_REF=0 python3 scripts/gpu/make_bench_model.py "$B" .gpu/smollm2-tokenizer > "$R/make-model.log" 2>&1 &
    MAKER=$!
  fi
fi
tests() {  # label, binary folder, test filter (empty: all)
  for t in cuda_kernels cuda_attention gpu; do
    [ -x "$2/$t" ] || continue  # cuda_attention: split from cuda_kernels in session 15
    echo "== $1 $t ${3:-}"
    timeout 240 "$2/$t" --test-threads=1 ${3:-} > "$R/test-$1-$t.log" 2>&1
    echo "rc=$?"
    grep -E "^test |test result|panicked|FAILED" "$R/test-$1-$t.log" | tail -30
  done
}
if has test; then
  [ -n "$BASE" ] && tests base "$BASE"
  # The other kernel tests' code is the base build's when it ran above: only the attention ones again.
  if [ -n "$BASE" ]; then tests new "$N" attention; else tests new "$N"; fi
  [ -n "$BASE" ] && { echo "== new gpu (all)"; timeout 120 "$N/gpu" --test-threads=1 > "$R/test-new-gpu-all.log" 2>&1; echo "rc=$?"; grep "test result" "$R/test-new-gpu-all.log"; }
  date -u
  pack
fi
[ -n "${MAKER:-}" ] && { wait "$MAKER"; echo "model made rc=$?"; date -u; }
run() {  # variant name, binary, env, bench arguments
  local v=$1 k=$2 e=$3; shift 3
  env $e "$k/kvad" bench "$B/hf" --backend gpu-bf16 "$@" --out "$R/$v-$RANDOM.json" 2>&1 | grep -E "gpu-|DECODE" | sed "s/^/[$v] /"
}
OLD="KVAD_GPU_ATT_CHUNKS=0"
if has batch; then
  A=(--batch 32 --prompt-tokens 128 --gen-tokens 128 --rounds 2)
  for v in ${BATCH_VARIANTS:-new chunks old new chunks old}; do
    case $v in
      new) run b32-new "$N" "X=1" "${A[@]}" ;;
      old) run b32-old "$N" "$OLD" "${A[@]}" ;;
      simt | chunks) run b32-$v "$N" "KVAD_GPU_ATT_CHUNKS=$v" "${A[@]}" ;;
    esac
  done
  [ -n "$BASE" ] && run b32-base "$BASE" "X=1" "${A[@]}"
  date -u
  pack
fi
if has one; then
  O=(--prompt-tokens 128 --gen-tokens 128 --rounds 2)
  run one-new "$N" "X=1" "${O[@]}"
  if [ -n "$BASE" ]; then run one-base "$BASE" "X=1" "${O[@]}"; else run one-old "$N" "$OLD" "${O[@]}"; fi
fi
if has ncu; then
  # ncu's time of every attention kernel of the last 32-row decode pass (context 131), graphs off so each kernel
  # is launched alone.
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  for v in ${NCU_VARIANTS:-new chunks simt old}; do
    e="KVAD_GPU_ATT_CHUNKS=$v"; [ $v = old ] && e="$OLD"; [ $v = new ] && e="X=1"
    env $e KVAD_GPU_GRAPHS=0 timeout 150 "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv \
      --kernel-name regex:attention_ --log-file "$R/ncu-$v.csv" "$N/kvad" bench "$B/hf" --backend gpu-bf16 \
      --batch 32 --prompt-tokens 128 --gen-tokens 4 --rounds 1 --warmup 0 > /dev/null 2>&1
    echo "ncu $v rc=$?"
    python3 - "$R/ncu-$v.csv" "$v" <<'PY'
import csv, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
ix = {h: i for i, h in enumerate(rows[0])}
ks = [(r[ix["Kernel Name"]], r[ix["Grid Size"]], float(r[ix["Metric Value"]].replace(",", ""))) for r in rows[1:]]
last = [k for k in ks if k[1].startswith("(32,")][-32:]  # the last 32-row pass: one attention a layer
ts = sorted(t / 1e3 for _, _, t in last)
print("[%s ncu] %s grid%s x%d: median %.2f us [%.2f-%.2f], %.1f us a step" % (sys.argv[2], last[0][0], last[0][1],
      len(ts), ts[len(ts) // 2], ts[0], ts[-1], sum(ts)))
PY
  done
  pack
fi
date -u
pack
