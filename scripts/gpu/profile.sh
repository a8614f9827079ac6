#!/usr/bin/env bash
# Where a decode step's time goes (issue 8), on the device after scripts/gpu/stage.sh here: ncu's
# gpu__time_duration of every kernel of a short `kvad bench --batch N` (ncu profiles each kernel node of the decode
# graphs alone, its default `--graph-profiling node`; inside a graph with PDL neighbours overlap, so the sum is an
# upper bound), summed per kernel for the last decode pass; then the step's wall time, for the gaps. Makes the 8B-shaped model if it is
# not there.
#   bash scripts/gpu/profile.sh [BATCH] [BACKEND...]   (default: 32 gpu-bf16; results in $OUT or /tmp/profile)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source scripts/gpu/env.sh
export KVAD_ROOT="${KVAD_ROOT:-$PWD}" KVAD_OFFLINE=1
R="${OUT:-/tmp/profile}"
N="${1:-32}"; shift || true
BACKENDS=("${@:-gpu-bf16}")
mkdir -p "$R"
K=.gpu/bin/kvad
B=/tmp/kvad-bench
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/device.txt"
date -u | tee -a "$R/device.txt"
if [ ! -d .gpu/smollm2-tokenizer ]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
  python3 -c "from transformers import AutoTokenizer as T
T.from_pretrained('.gpu', gguf_file='smollm2-tokenizer.gguf').save_pretrained('.gpu/smollm2-tokenizer')"
fi
[ -f "$B/hf/config.json" ] || KVAD_BENCH_REF=0 python3 scripts/gpu/make_bench_model.py "$B" .gpu/smollm2-tokenizer
date -u
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
for be in "${BACKENDS[@]}"; do
echo "== $be, $N rows"
timeout 240 "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv \
  --log-file "$R/ncu-$be-$N.csv" $K bench "$B/hf" --backend "$be" --batch "$N" --prompt-tokens 128 --gen-tokens 4 \
  --rounds 1 --warmup 0 2>&1 | tail -5
date -u
python3 - "$R/ncu-$be-$N.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
hdr, rows = rows[0], rows[1:]
ix = {h: i for i, h in enumerate(hdr)}
ks = [(r[ix["Kernel Name"]], r[ix["Grid Size"]], r[ix["Block Size"]], float(r[ix["Metric Value"]].replace(",", ""))) for r in rows]
starts = [i for i, k in enumerate(ks) if k[0].startswith("embed")]
print("passes:", len(starts), "kernels:", len(ks))
for a, b in zip(starts, starts[1:] + [len(ks)]):
    print(" pass at", a, "kernels", b - a, "sum us %.1f" % (sum(k[3] for k in ks[a:b]) / 1e3))
a = starts[-1]
last = ks[a:]
agg = collections.OrderedDict()
for n, g, bl, t in last:
    key = (n[:90], g, bl)
    c, s = agg.get(key, (0, 0.0))
    agg[key] = (c + 1, s + t)
tot = sum(t for *_, t in last)
print("last pass: %d kernels, %.1f us" % (len(last), tot / 1e3))
for (n, g, bl), (c, s) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    print("%8.1f us %5.1f%% x%-3d %6.2f us each  %s grid%s block%s" % (s / 1e3, 100 * s / tot, c, s / c / 1e3, n, g, bl))
PY
$K bench "$B/hf" --backend "$be" --batch "$N" --prompt-tokens 128 --gen-tokens 128 --rounds 2 \
  --out "$R/bench-$be-$N.json" 2>&1 | grep -E "gpu-|DECODE"
done
date -u
