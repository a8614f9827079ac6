#!/usr/bin/env bash
# Device call (session 20): the kernels around the o/down products (`_gb`, one block of 512 threads at 128 registers
# an SM) leaving them room — SwiGLU in a few blocks of 1,024 threads (KVAD_GPU_SILU_BLOCKS=4 or 2: 128 SMs free
# for the down product's blocks to load their first weights during SwiGLU, where silu_mul_act8's 56 blocks held 56)
# and the `_gb` products held to 112 or 96 registers (KVAD_GPU_GB_REGS) — against main, gpu-q4; with the kernel
# tests (the Q4_1 upload's bound mended since q4s) and the fixtures under the variants.
#   run(command="bash wip/silu/call1.sh", carry=[".gpu", ".whl"]): results in $OUT/silu.tgz (~8 min).
source scripts/gpu/call.sh silu
call_test kernels .gpu/bin/cuda_kernels
call_test kernels-silu4 KVAD_GPU_SILU_BLOCKS=4 .gpu/bin/cuda_kernels
call_test gpu-var KVAD_GPU_SILU_BLOCKS=4 KVAD_GPU_GB_REGS=96 .gpu/bin/gpu
call_test defer-gb96 KVAD_GPU_GB_REGS=96 .gpu/bin/cuda_norm_defer
call_wait
KVAD_GPU_SILU_BLOCKS=4 KVAD_GPU_TRACE=$O/trace-silu4.txt .gpu/bin/kvad bench /tmp/kvad-bench/hf --backend gpu-q4 \
  --prompt-tokens 128 --gen-tokens 64 --rounds 1 >$O/trace-silu4.log 2>&1
python3 scripts/gpu/trace.py $O/trace-silu4.txt >$O/trace-silu4-summary.txt 2>&1
rm -f $O/trace-silu4.txt
head -20 $O/trace-silu4-summary.txt
call_pack
ALT_DEADLINE=$(call_left 520) bash scripts/gpu/alternate.sh $O "main|.gpu/bin/kvad|" \
  "silu4|.gpu/bin/kvad|KVAD_GPU_SILU_BLOCKS=4" "silu2|.gpu/bin/kvad|KVAD_GPU_SILU_BLOCKS=2" \
  "gb112|.gpu/bin/kvad|KVAD_GPU_GB_REGS=112" "gb96|.gpu/bin/kvad|KVAD_GPU_GB_REGS=96" -- /tmp/kvad-bench/hf \
  --backend gpu-q4 --prompt-tokens 128 --gen-tokens 128 --rounds 2
call_pack
# The server's path (kvad run, the API) at gpu-q4: one reply at a time through a real kvad-serve, stepping greedy
# steps ahead (session 19's local engine) and one step a pass (KVAD_GREEDY_AHEAD=1), beside kvad bench's figures.
for ahead in default 1; do
  [ "$(call_left 560)" -gt 40 ] || break
  D=$(mktemp -d)
  env $([ $ahead = 1 ] && echo KVAD_GREEDY_AHEAD=1) .gpu/bin/kvad-serve --data-dir "$D" --bind 127.0.0.1:5899 \
    --model /tmp/kvad-bench/hf --backend gpu-q4 --batch 1 --context 4096 >$O/serve-$ahead.log 2>&1 &
  S=$!
  for _ in $(seq 1 120); do curl -sf http://127.0.0.1:5899/v1/models >/dev/null && break; sleep 0.5; done
  .gpu/bin/kvad --json bench --remote http://127.0.0.1:5899 /tmp/kvad-bench/hf --concurrency 1 --rounds 3 \
    --warmup 1 --prompt-tokens 128 --gen-tokens 128 >$O/serve-$ahead.json 2>>$O/serve-$ahead.log
  kill $S; wait $S 2>/dev/null
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], json.dumps(d)[:600])" \
    $O/serve-$ahead.json $ahead
done
call_pack
echo "end at $(($(date +%s) - T0))s"
