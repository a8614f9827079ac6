#!/usr/bin/env bash
# kvad beside llama.cpp on the same GGUF files of any model, paired as bench/cpu-vs-llama-paired.sh pairs them
# (each pair one llama-bench run and one `kvad bench` round back to back, llama.cpp first in odd pairs, last in
# even ones; the per-pair ratios and their median are the figure). Made for issue 35's Qwen3.5-shaped model
# (scripts/gpu/make_hybrid_bench_model.py ... q35-0.8b, then llama-quantize to Q8_0 and Q4_0).
#   bash bench/cpu-model-vs-llama.sh LLAMA_BIN_DIR Q8_0.gguf Q4_0.gguf KVAD [PAIRS] [TESTS] > out.txt
# TESTS: any of q8-tg q4-tg q8-pp q4-pp (default all): tg128 from a one-token prompt, pp512.
set -uo pipefail
L="$1"; Q8="$2"; Q4="$3"; K="$4"; PAIRS="${5:-6}"; TESTS="${6:-q8-tg q4-tg q8-pp q4-pp}"
echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) flags: $(grep -m1 -o 'avx512[a-z_]*\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')load: $(cut -d' ' -f1-3 /proc/loadavg)"
for test in $TESTS; do
  q=${test%-*}; kind=${test#*-}
  if [ "$kind" = tg ]; then la=(-p 0 -n 128); ka=(--prompt-tokens 1 --gen-tokens 128); else la=(-p 512 -n 0); ka=(--prompt-tokens 512 --gen-tokens 1); fi
  gguf="$Q8"; [ "$q" = q4 ] && gguf="$Q4"
  for i in $(seq 1 "$PAIRS"); do
    llama() { LD_LIBRARY_PATH="$L" "$L/llama-bench" -t 2 "${la[@]}" -r 1 -m "$gguf" -o csv 2>/dev/null | tail -1 | tr -d '"' | awk -F, '{print $(NF-1)}'; }
    kvad() {
      "$K" bench --local "$gguf" --backend "cpu-$q" --rounds 1 --warmup 0 "${ka[@]}" 2>&1 | grep -E "^[^ ]+@cpu-$q " \
        | awk -v k="$kind" '{print (k=="pp")?$2:$(NF-3)}'
    }
    if [ $((i % 2)) = 1 ]; then l=$(llama); k=$(kvad); else k=$(kvad); l=$(llama); fi
    echo "$test pair $i llama $l kvad $k ratio $(python3 -c "print(round($k/$l,3))") load $(cut -d' ' -f1 /proc/loadavg)"
  done
done
