#!/usr/bin/env bash
# Variants of a decode benchmark alternated in one lease (leases differ by up to 3% at the same kernels, so only
# alternated figures compare), twice round (ALT_ROUNDS), then each variant's median [min–max] per backend. On the
# device, after scripts/gpu/stage.sh here and `bash scripts/gpu/bench.sh make` there:
#   bash scripts/gpu/alternate.sh OUT "new|.gpu/bin/kvad|" "pool|.gpu/bin/kvad|KVAD_GPU_KV_TOKENS=16384" \
#     "old|.gpu/old/kvad|" -- /tmp/kvad-bench/hf --backend gpu-q8,gpu-q4 --prompt-tokens 128 --gen-tokens 128 --rounds 2
# Each variant is name|kvad binary|environment (space-separated NAME=value, may be empty). JSON of every run goes to
# OUT/tg-NAME-ROUND.json. ALT_DEADLINE (seconds, default 420) stops starting runs past it, so a call's time limit
# still leaves the JSON so far. Before the clock starts, each variant runs once at 8 prompt tokens, 1 generated,
# so every binary's kernels are compiled and cached first: a new binary's first run otherwise spends a minute or
# more in NVRTC, which cost session 21's third lease half its alternation.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="$1"
shift
variants=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  variants+=("$1")
  shift
done
shift || true
mkdir -p "$out"
# The benchmark's arguments for the warm-up: the same, but short and without warm-up rounds of its own.
args=("$@")
warm=()
while [ $# -gt 0 ]; do
  case "$1" in
    --prompt-tokens) warm+=("$1" 8); shift ;;
    --gen-tokens) warm+=("$1" 1); shift ;;
    --rounds) warm+=("$1" 1); shift ;;
    --warmup) warm+=("$1" 0); shift ;;
    *) warm+=("$1") ;;
  esac
  shift
done
set -- "${args[@]+"${args[@]}"}"
for v in "${variants[@]}"; do
  IFS='|' read -r name bin envs <<<"$v"
  w0=$(date +%s)
  # shellcheck disable=SC2086
  env $envs "$bin" bench "${warm[@]}" >"$out/warm-$name.log" 2>&1 || echo "alternate: $name's warm-up failed ($out/warm-$name.log)"
  # A binary's first run includes compiling its kernels: how long it took is a figure of its own.
  echo "alternate: $name's warm-up took $(($(date +%s) - w0)) s" | tee -a "$out/warm-$name.log"
done
t0=$(date +%s)
for round in $(seq "${ALT_ROUNDS:-2}"); do
  for v in "${variants[@]}"; do
    IFS='|' read -r name bin envs <<<"$v"
    if [ $(($(date +%s) - t0)) -gt "${ALT_DEADLINE:-420}" ]; then
      echo "alternate: past ${ALT_DEADLINE:-420} s, not starting $name round $round"
      continue
    fi
    # shellcheck disable=SC2086
    env $envs "$bin" bench "$@" --out "$out/tg-$name-$round.json" >"$out/tg-$name-$round.log" 2>&1
    grep -h "decode" "$out/tg-$name-$round.log" | sed "s/^/$name$round /" | cut -c1-120
  done
done
python3 - "$out" "${variants[@]}" <<'PY'
import glob, json, statistics, sys
out = sys.argv[1]
for v in sys.argv[2:]:
    name = v.split("|")[0]
    by = {}
    for f in sorted(glob.glob(f"{out}/tg-{name}-*.json")):
        for var in json.load(open(f))["variants"]:
            by.setdefault(var["variant"].split("@")[-1], []).extend(s["decode_tps"] for s in var["samples"])
    print(name, "  ".join(f"{b} {statistics.median(x):.1f} [{min(x):.1f}–{max(x):.1f}] n={len(x)}" for b, x in by.items()))
PY
