#!/usr/bin/env bash
# Session 23, call 3: the landing build (main + relacq + cubin) on every goal: `bench.sh make tg batch pp` (tg128 all
# three backends --rounds 3, batch 32 at gpu-bf16, a 2,048-token prompt), then CUBIN against PTX alternated with
# what time is left (the lease-2 figures left it open: 631.1 [629.3–633.1] vs 633.2 [632.4–633.9]).
source scripts/gpu/call.sh final3
call_wait
echo "model at $(($(date +%s) - T0))s"
s=$(date +%s)
.gpu/bin/kvad bench /tmp/kvad-bench/hf --backend gpu-q4 --prompt-tokens 8 --gen-tokens 1 --rounds 1 --warmup 0 \
  >"$O/cold.log" 2>&1
echo "first run $(($(date +%s) - s)) s" | tee -a "$O/cold.log"; grep "kvad:" "$O/cold.log"
OUT_SAVE=$OUT; OUT=$O KVAD_BENCH_REF=0 bash scripts/gpu/bench.sh tg batch pp 2>&1 | grep -v "^  round" | tail -40
OUT=$OUT_SAVE
call_pack
echo "benches done at $(($(date +%s) - T0))s"
ALT_ROUNDS=3 ALT_DEADLINE=$(call_left 520) bash scripts/gpu/alternate.sh $O "cubin|.gpu/bin/kvad|" \
  "ptx|.gpu/bin/kvad|KVAD_GPU_CUBIN=0" -- /tmp/kvad-bench/hf --backend gpu-q4 --prompt-tokens 128 --gen-tokens 128 --rounds 2
call_pack
echo "end at $(($(date +%s) - T0))s"
