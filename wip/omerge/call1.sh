#!/usr/bin/env bash
# Device call for session 20's wip/omerge patch: the o product merging the decode attention's split rows as it
# reads them (`_gbm`, KVAD_GPU_O_MERGE=1) — no last block, counter or second grid end in the attention — against
# the attention's own merge, gpu-q4 and gpu-q8; with its bit test, the attention's (whose merge moved into a shared
# function) and the fixtures with and without it; a trace with it.
# Apply on a branch (git am wip/omerge/*.patch), stage (scripts/gpu/stage.sh), then
#   run(command="bash wip/omerge/call1.sh", carry=[".gpu", ".whl"]): results in $OUT/omerge.tgz (~9 min).
source scripts/gpu/call.sh omerge
call_test merge .gpu/bin/cuda_o_merge
call_test att .gpu/bin/cuda_decode_attention
call_test gpu .gpu/bin/gpu
call_test gpu-merge KVAD_GPU_O_MERGE=1 .gpu/bin/gpu
call_wait
KVAD_GPU_O_MERGE=1 KVAD_GPU_TRACE=$O/trace-merge.txt .gpu/bin/kvad bench /tmp/kvad-bench/hf --backend gpu-q4 \
  --prompt-tokens 128 --gen-tokens 64 --rounds 1 >$O/trace-merge.log 2>&1
python3 scripts/gpu/trace.py $O/trace-merge.txt >$O/trace-merge-summary.txt 2>&1
rm -f $O/trace-merge.txt
head -20 $O/trace-merge-summary.txt
call_pack
ALT_DEADLINE=$(call_left 500) bash scripts/gpu/alternate.sh $O "main|.gpu/bin/kvad|" \
  "merge|.gpu/bin/kvad|KVAD_GPU_O_MERGE=1" -- /tmp/kvad-bench/hf --backend gpu-q4,gpu-q8 \
  --prompt-tokens 128 --gen-tokens 128 --rounds 2
call_pack
echo "end at $(($(date +%s) - T0))s"
