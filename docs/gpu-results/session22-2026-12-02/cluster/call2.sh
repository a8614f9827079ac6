#!/usr/bin/env bash
# Second call: whether the 8B shape's one-row decode took the clusters (KVAD_GPU_ATT_CLUSTER set: says how many fit
# at once), and with the occupancy check skipped (=2), alternated against the L2 merge (=0); a trace if time is left.
source scripts/gpu/call.sh cluster2
call_wait
KVAD_GPU_ATT_CLUSTER=1 .gpu/bin/kvad bench /tmp/kvad-bench/hf --backend gpu-q4 --prompt-tokens 8 --gen-tokens 1 --rounds 1 >$O/say.log 2>&1
grep "kvad: decode" $O/say.log
echo "said at $(($(date +%s) - T0))s"
call_pack
ALT_ROUNDS=3 ALT_DEADLINE=$(call_left 330) bash scripts/gpu/alternate.sh $O "l2|.gpu/bin/kvad|KVAD_GPU_ATT_CLUSTER=0" \
  "force|.gpu/bin/kvad|KVAD_GPU_ATT_CLUSTER=2" -- /tmp/kvad-bench/hf --backend gpu-q4 --prompt-tokens 128 --gen-tokens 128 --rounds 2
call_pack
echo "alternated at $(($(date +%s) - T0))s"
[ "$(call_left 400)" -gt 0 ] && call_trace force KVAD_GPU_ATT_CLUSTER=2
call_pack
echo "end at $(($(date +%s) - T0))s"
