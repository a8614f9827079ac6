#!/usr/bin/env bash
# Issue 8 on the device, after scripts/gpu/stage.sh here: the kernel and fixture tests, then 32 sequences at
# gpu-bf16 on the 8B shape with the decode attention of more warps and the float4 RMSNorm (new) alternated with
# both off in the same binary (old: KVAD_GPU_ATT_WARPS=8 KVAD_GPU_NORM_V4=0), one variant of each alone, one
# stream new/old, and ncu's times of the attention and norm kernels of a 32-row step.
#   bash scripts/gpu/att32.sh [test] [batch] [one] [ncu]      (no argument: all; results in $OUT or /tmp/att32)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source scripts/gpu/env.sh
export KVAD_ROOT="${KVAD_ROOT:-$PWD}" KVAD_OFFLINE=1
R="${OUT:-/tmp/att32}"
mkdir -p "$R"
steps="${*:-test batch one ncu}"
has() { [[ " $steps " == *" $1 "* ]]; }
K=.gpu/bin/kvad
B=/tmp/kvad-bench
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/device.txt"
date -u | tee -a "$R/device.txt"
if has test; then
  for t in cuda_kernels gpu; do
    echo "== $t"
    timeout 200 ".gpu/bin/$t" --test-threads=1 > "$R/test-$t.log" 2>&1
    echo "rc=$?"
    grep -E "^test |test result|panicked|FAILED" "$R/test-$t.log" | tail -30
  done
  date -u
fi
if [ ! -d .gpu/smollm2-tokenizer ]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
  python3 -c "from transformers import AutoTokenizer as T
T.from_pretrained('.gpu', gguf_file='smollm2-tokenizer.gguf').save_pretrained('.gpu/smollm2-tokenizer')"
fi
[ -f "$B/hf/config.json" ] || KVAD_BENCH_REF=0 python3 scripts/gpu/make_bench_model.py "$B" .gpu/smollm2-tokenizer >/dev/null 2>&1
date -u
run() {  # variant name, env, bench arguments
  local v=$1 e=$2; shift 2
  env $e $K bench "$B/hf" --backend gpu-bf16 "$@" --out "$R/$v-$RANDOM.json" 2>&1 | grep -E "gpu-|DECODE" | sed "s/^/[$v] /"
}
OLD="KVAD_GPU_ATT_WARPS=8 KVAD_GPU_NORM_V4=0"
if has batch; then
  A=(--batch 32 --prompt-tokens 128 --gen-tokens 128 --rounds 2)
  for v in new old new old; do
    if [ $v = new ]; then run b32-new "X=1" "${A[@]}"; else run b32-old "$OLD" "${A[@]}"; fi
  done
  run b32-att-only "KVAD_GPU_NORM_V4=0" "${A[@]}"
  run b32-att16 "KVAD_GPU_ATT_WARPS=16" "${A[@]}"
  date -u
fi
if has one; then
  for v in new old; do
    if [ $v = new ]; then run one-new "X=1" --prompt-tokens 128 --gen-tokens 128 --rounds 2
    else run one-old "$OLD" --prompt-tokens 128 --gen-tokens 128 --rounds 2; fi
  done
fi
if has ncu; then
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  for v in new old; do
    e="X=1"; [ $v = old ] && e="$OLD"
    env $e KVAD_GPU_GRAPHS=0 timeout 100 "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv \
      --kernel-name regex:'attention|rms_norm' --log-file "$R/ncu-$v.csv" $K bench "$B/hf" --backend gpu-bf16 \
      --batch 32 --prompt-tokens 128 --gen-tokens 4 --rounds 1 --warmup 0 > /dev/null 2>&1
    python3 - "$R/ncu-$v.csv" "$v" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
ix = {h: i for i, h in enumerate(rows[0])}
ks = [(r[ix["Kernel Name"]], r[ix["Grid Size"]], float(r[ix["Metric Value"]].replace(",", ""))) for r in rows[1:]]
last = [k for k in ks if k[1].startswith("(32,")][-97:]  # the last 32-row pass: 32 attentions, 65 norms
agg = collections.defaultdict(lambda: [0, 0.0])
for n, g, t in last:
    agg[(n, g)][0] += 1; agg[(n, g)][1] += t
for (n, g), (c, s) in agg.items():
    print("[%s ncu] %-28s grid%s x%d %.2f us each, %.1f us a step" % (sys.argv[2], n, g, c, s / c / 1e3, s / 1e3))
PY
  done
fi
date -u
