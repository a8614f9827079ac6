#!/usr/bin/env bash
# Issue 3's comparison with fine interleaving: each pair is one llama-bench run and one `kvad bench` round of the
# same test back to back (seconds apart), PAIRS pairs per test; the machine's speed drifts by tens of percent from
# minute to minute, so the per-pair ratios (and their median) are the figure, not the absolute rates.
#   bash bench/cpu-vs-llama-paired.sh LLAMA_BIN_DIR GGUF_DIR KVAD [PAIRS] [TESTS] > out.txt
# TESTS: any of q8-tg q4-tg q8-pp q4-pp (default all). GGUFs as for bench/cpu-vs-llama.sh.
# Odd pairs run llama.cpp first and even pairs last. Each pair also runs kvad on llama.cpp's own GGUF ("same file": the same weight bytes, Q8_0/Q4_0 blocks taken as
# they are) right after its default model (SmolLM2's shipped Q4_1 file, whose q4 blocks carry a minimum too).
set -uo pipefail
L="$1"; G="$2"; K="$3"; PAIRS="${4:-6}"; TESTS="${5:-q8-tg q4-tg q8-pp q4-pp}"
echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) load: $(cut -d' ' -f1-3 /proc/loadavg)"
for test in $TESTS; do
  q=${test%-*}; kind=${test#*-}
  if [ "$kind" = tg ]; then la=(-p 0 -n 128); ka=(--prompt-tokens 1 --gen-tokens 128); col=3; else la=(-p 512 -n 0); ka=(--prompt-tokens 512 --gen-tokens 1); col=1; fi
  gguf="$G/smol-Q8_0.gguf"; [ "$q" = q4 ] && gguf="$G/smol-Q4_0.gguf"
  for i in $(seq 1 "$PAIRS"); do
    llama() { LD_LIBRARY_PATH="$L" "$L/llama-bench" -t 2 "${la[@]}" -r 1 -m "$gguf" -o csv 2>/dev/null | tail -1 | tr -d '"' | awk -F, '{print $(NF-1)}'; }
    kvad() { "$K" bench --local "$@" --backend "cpu-$q" --rounds 1 --warmup 0 "${ka[@]}" 2>&1 | grep -E "^${1:-smollm2}" | grep -v '^kvad' | awk -v c=$col '{print (c==1)?$2:$(NF-3)}'; }
    # Odd pairs run llama.cpp first, even pairs last, so neither side always runs on a cache the other warmed.
    if [ $((i % 2)) = 1 ]; then l=$(llama); k=$(kvad); s=$(kvad "$gguf"); else k=$(kvad); s=$(kvad "$gguf"); l=$(llama); fi
    echo "$test pair $i llama $l kvad $k ratio $(python3 -c "print(round($k/$l,3))") same-file $s ratio $(python3 -c "print(round($s/$l,3))") load $(cut -d' ' -f1 /proc/loadavg)"
  done
done
