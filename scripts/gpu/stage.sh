#!/usr/bin/env bash
# Builds what the GPU machine runs (it has CUDA but no Rust) into .gpu/ (ignored): the release `kvad` and
# `kvad-serve`, the kernel benchmarks (gpu_gemv, gpu_mma_few) and the GPU test binaries, stripped. The `device`
# tool then carries .gpu/ there; run scripts/gpu/test.sh on it. Once per machine before this:
# scripts/gpu/prepare.sh (what the benchmarks need).
#   bash scripts/gpu/stage.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
mkdir -p .gpu/bin
cargo build --release --locked -p kvad-cli
cargo build --release --locked -p kvad-server
cargo build --release --locked -p kvad-tensor --example gpu_gemv --example gpu_mma_few
for b in kvad kvad-serve examples/gpu_gemv examples/gpu_mma_few; do
  cp "${CARGO_TARGET_DIR:-target}/release/$b" .gpu/bin/
  strip ".gpu/bin/$(basename $b)"
done
# The test binaries: their paths come from cargo's JSON messages.
cargo test --locked --no-run --message-format=json -p kvad-tensor --test cuda_kernels --test cuda_decode_attention --test cuda_norm_defer --test cuda_attention --test cuda_q6 -p kvad-models --test gpu --test gpu_big \
  | python3 -c '
import json, shutil, subprocess, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        dst = ".gpu/bin/" + m["target"]["name"]
        shutil.copy(m["executable"], dst)
        subprocess.run(["strip", dst], check=True)
        print("staged", dst)
'
du -sh .gpu/bin/*
