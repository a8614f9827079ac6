#!/usr/bin/env bash
# Session 24, call 4: the device state tests after the window kind's pages (kvad-models' unit tests, gpu::).
#   run(command="bash docs/gpu-results/session24-2026-12-04/call4/call.sh", carry=[".gpu"])
export KVAD_ROOT=$PWD
source scripts/gpu/env.sh
.gpu/bin/kvad_models_lib --test-threads=1 --nocapture gpu:: 2>&1 | tee "$OUT/state.log" | grep -v "^$" | tail -20
