#!/usr/bin/env bash
# One device call for both of session 20's patches (they touch different files): on a branch,
#   git am wip/microlat/*.patch wip/omerge/*.patch
# stage main's kvad first into .gpu/old/ (git stash / a worktree of main; cargo build --release -p kvad-cli; strip),
# then this branch (scripts/gpu/stage.sh), and
#   run(command="bash wip/omerge/call-both.sh", carry=[".gpu", ".whl"]): results in $OUT/both.tgz (~9 min).
# microlat changes no bit, so it is measured as the branch against main's binary; omerge by its switch.
source scripts/gpu/call.sh both
call_test merge .gpu/bin/cuda_o_merge
call_test att .gpu/bin/cuda_decode_attention
call_test kernels .gpu/bin/cuda_kernels
call_test gpu .gpu/bin/gpu
call_test gpu-merge KVAD_GPU_O_MERGE=1 .gpu/bin/gpu
call_wait
call_trace merge KVAD_GPU_O_MERGE=1
call_pack
ALT_DEADLINE=$(call_left 520) bash scripts/gpu/alternate.sh $O "main|.gpu/old/kvad|" "micro|.gpu/bin/kvad|" \
  "merge|.gpu/bin/kvad|KVAD_GPU_O_MERGE=1" -- /tmp/kvad-bench/hf --backend gpu-q4 \
  --prompt-tokens 128 --gen-tokens 128 --rounds 2
call_pack
echo "end at $(($(date +%s) - T0))s"
