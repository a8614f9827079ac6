#!/usr/bin/env bash
# Passes of 9–32 rows on the device (issues 5 and 8), after scripts/gpu/stage.sh here: each variant of the build
# alternated with the old path in the same binary (KVAD_GPU_MMA_FEW=0: cuBLAS after a per-product dequantisation,
# no graph; KVAD_DEVICE_GREEDY=0: the server samples greedy replies on the CPU from full logits rows).
#   bash scripts/gpu/few.sh [test] [engine] [sched] [batch]      (no argument: all of them)
# test: the kernel and fixture tests; engine: `kvad bench --batch 16` on the 1.5B shape at gpu-q8; sched: the
# scheduler goal (scripts/gpu/sched.sh) with step traces; batch: 32 sequences on the 8B shape at gpu-bf16.
# Everything lands in $OUT/few.tgz (or /tmp/few.tgz); summaries go to stdout.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source scripts/gpu/env.sh
export KVAD_ROOT="${KVAD_ROOT:-$PWD}" KVAD_OFFLINE=1
R=/tmp/few-results
rm -rf "$R" && mkdir -p "$R"
steps="${*:-test engine sched batch}"
K=.gpu/bin/kvad
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/device.txt"
date -u | tee -a "$R/device.txt"
has() { [[ " $steps " == *" $1 "* ]]; }
base() { env KVAD_GPU_MMA_FEW=0 KVAD_DEVICE_GREEDY=0 "$@"; }

if has test; then
  for t in cuda_kernels gpu; do
    echo "== $t"
    ".gpu/bin/$t" --test-threads=1 > "$R/test-$t.log" 2>&1
    echo "rc=$?"
    grep -E "^test |test result|panicked|FAILED" "$R/test-$t.log" | tail -40
  done
fi

if [ ! -d .gpu/smollm2-tokenizer ]; then
  if ls .whl/gguf-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
  fi
  python3 -c "from transformers import AutoTokenizer as T
T.from_pretrained('.gpu', gguf_file='smollm2-tokenizer.gguf').save_pretrained('.gpu/smollm2-tokenizer')"
fi
S=/tmp/kvad-sched
if has engine || has sched; then
  [ -f "$S/hf/config.json" ] || KVAD_BENCH_SHAPE=1.5b python3 scripts/gpu/make_bench_model.py "$S" .gpu/smollm2-tokenizer
fi

if has engine; then
  for v in new base new base; do
    pre=""; [ "$v" = base ] && pre=base
    $pre $K bench "$S/hf" --backend gpu-q8 --batch 16 --prompt-tokens 64 --gen-tokens 128 --rounds 2 \
      --out "$R/engine16-$v-$RANDOM.json" 2>&1 | grep -E "gpu-|DECODE" | sed "s/^/[$v] /"
  done
  $K bench "$S/hf" --backend gpu-q8 --batch 1 --prompt-tokens 64 --gen-tokens 128 --rounds 2 \
    --out "$R/engine1.json" 2>&1 | grep -E "gpu-|DECODE" | sed "s/^/[one] /"
fi

if has sched; then
  i=0
  for v in base new base new; do
    i=$((i + 1))
    mkdir -p "$R/sched-$i-$v"
    pre=""; [ "$v" = base ] && pre=base
    OUT="$R/sched-$i-$v" KVAD_STEP_TRACE=1 $pre bash scripts/gpu/sched.sh > "$R/sched-$i-$v/stdout.txt" 2>&1
    echo "[$v] $(grep -E '"ratio"|concurrent_tok_s|one_stream_tok_s' -A3 "$R/sched-$i-$v/sched16.json" | tr -d ' \n' | head -c 600)"
    # Steps of 16 replies: engine time, its forward and sampling parts, and the time between steps.
    awk '/kvad-step parts=16 /{for(i=1;i<=NF;i++){split($i,a,"=");if(a[1]=="forward_ms")f+=a[2];if(a[1]=="sample_ms")s+=a[2]};n++}
         /kvad-runner parts=16 /{for(i=1;i<=NF;i++){split($i,a,"=");if(a[1]=="engine_ms")e+=a[2];if(a[1]=="after_ms")af+=a[2];if(a[1]=="gap_ms")g+=a[2]};m++}
         END{if(n&&m)printf "  16-row steps: %d, forward %.3f ms, sample %.3f ms, engine %.3f ms, after %.3f ms, gap %.3f ms (means)\n",n,f/n,s/n,e/m,af/m,g/m}' \
      "$R/sched-$i-$v/serve.log"
    awk '/kvad-step parts=1 rows=1 /{for(i=1;i<=NF;i++){split($i,a,"=");if(a[1]=="forward_ms")f+=a[2];if(a[1]=="sample_ms")s+=a[2]};n++}
         END{if(n)printf "  1-row steps: %d, forward %.3f ms, sample %.3f ms (means)\n",n,f/n,s/n}' "$R/sched-$i-$v/serve.log"
  done
fi

if has batch; then
  B=/tmp/kvad-bench
  [ -f "$B/hf/config.json" ] || KVAD_BENCH_REF=0 python3 scripts/gpu/make_bench_model.py "$B" .gpu/smollm2-tokenizer
  for v in new base new base; do
    pre=""; [ "$v" = base ] && pre=base
    $pre $K bench "$B/hf" --backend gpu-bf16 --batch 32 --prompt-tokens 128 --gen-tokens 128 --rounds 2 \
      --out "$R/batch32-$v-$RANDOM.json" 2>&1 | grep -E "gpu-|DECODE" | sed "s/^/[$v] /"
  done
fi
tar czf "${OUT:-/tmp}/few.tgz" -C "$R" .
ls -la "$R"
