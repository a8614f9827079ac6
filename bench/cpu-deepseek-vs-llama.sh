#!/usr/bin/env bash
# Issue 34's CPU goal: the DeepSeek-V2-Lite shape (scripts/gpu/make_mla_bench_model.py, 27 layers, random weights;
# numpy draws them where there is no torch) as one Q4_0 GGUF made by llama.cpp's llama-quantize, decoded on two
# threads by llama-bench and by `kvad bench` at cpu-q4, in pairs seconds apart; odd pairs run llama.cpp first, even
# pairs last. Each pair's ratio is the figure (these machines drift by tens of percent from minute to minute).
#   bash bench/cpu-deepseek-vs-llama.sh LLAMA_BIN_DIR Q4_0.GGUF KVAD [PAIRS] [GEN] > out.txt
set -uo pipefail
L="$1"; G="$2"; K="$3"; PAIRS="${4:-4}"; N="${5:-32}"
echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# isa: $(grep -m1 -o 'avx512_vnni\|avx_vnni' /proc/cpuinfo || echo 'no VNNI') $(grep -m1 -o avx512f /proc/cpuinfo || echo 'no AVX-512')"
llama() { "$L/llama-bench" -t 2 -p 0 -n "$N" -r 1 -m "$G" -o csv 2>/dev/null | tail -1 | tr -d '"' | awk -F, '{print $(NF-1)}'; }
kvad() { "$K" bench --local "$G" --backend cpu-q4 --threads 2 --rounds 1 --warmup 0 --prompt-tokens 1 --gen-tokens "$N" 2>&1 | grep -E '^[^ ]+@cpu-q4 ' | awk '{print $(NF-3)}'; }
# One untimed kvad run first: it maps the file and writes its weight cache once.
"$K" bench --local "$G" --backend cpu-q4 --threads 2 --rounds 1 --warmup 0 --prompt-tokens 1 --gen-tokens 2 2>&1 | tail -3
for i in $(seq 1 "$PAIRS"); do
  if [ $((i % 2)) = 1 ]; then l=$(llama); k=$(kvad); else k=$(kvad); l=$(llama); fi
  echo "tg$N pair $i llama $l kvad $k ratio $(python3 -c "print(round(float('$k')/float('$l'),3))" 2>/dev/null) load $(cut -d' ' -f1 /proc/loadavg)"
done
