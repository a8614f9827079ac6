#!/usr/bin/env bash
# Issue 3's comparison, interleaved: llama-bench and `kvad bench` alternate, RUNS times, on the same machine minute.
#   bash bench/cpu-vs-llama.sh LLAMA_BIN_DIR GGUF_DIR KVAD [RUNS] > out.txt
# LLAMA_BIN_DIR holds llama-bench (llama.cpp 0c1e570, built with -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON
# -DGGML_F16C=ON -DGGML_AVX512=OFF); GGUF_DIR holds smol-Q8_0.gguf and smol-Q4_0.gguf made by its llama-quantize
# --allow-requantize from the shipped Q4_1 file.
set -uo pipefail
L="$1"; G="$2"; K="$3"; RUNS="${4:-3}"
echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) load: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$RUNS"); do
  echo "## run $r"
  LD_LIBRARY_PATH="$L" "$L/llama-bench" -t 2 -p 512 -n 128 -r 2 -m "$G/smol-Q8_0.gguf" -m "$G/smol-Q4_0.gguf" -o csv 2>/dev/null \
    | tr -d '"' | awk -F, 'NR>1 {printf "llama.cpp %-40s pp%s tg%s %8.1f ± %.1f tok/s\n", $6, $(NF-7), $(NF-6), $(NF-1), $NF}'
  "$K" bench --local --backend cpu-q8,cpu-q4 --rounds 2 --warmup 1 --prompt-tokens 1 --gen-tokens 128 2>&1 | grep -E '^smollm2'
  "$K" bench --local --backend cpu-q8,cpu-q4 --rounds 2 --warmup 1 --prompt-tokens 512 --gen-tokens 16 2>&1 | grep -E '^smollm2'
  echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
done
