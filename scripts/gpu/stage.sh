#!/usr/bin/env bash
# Builds what the GPU machine runs (it has CUDA but no Rust) into .gpu/ (ignored): the release `kvad` and
# `kvad-serve`, the kernel benchmarks (gpu_gemv, gpu_mma_few, gpu_delta) and the GPU test binaries, stripped. The `device`
# tool then carries .gpu/ there; run scripts/gpu/test.sh on it. Once per machine before this:
# scripts/gpu/prepare.sh (what the benchmarks need).
#   bash scripts/gpu/stage.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
mkdir -p .gpu/bin
cargo build --release --locked -p kvad-cli
cargo build --release --locked -p kvad-server
cargo build --release --locked -p kvad-tensor --example gpu_gemv --example gpu_mma_few --example gpu_delta
for b in kvad kvad-serve examples/gpu_gemv examples/gpu_mma_few examples/gpu_delta; do
  cp "${CARGO_TARGET_DIR:-target}/release/$b" .gpu/bin/
  strip ".gpu/bin/$(basename $b)"
done
# The test binaries: their paths come from cargo's JSON messages. kvad-models' own unit tests (its --lib binary,
# staged as kvad_models_lib) hold the device state tests (gpu::slots).
cargo test --locked --no-run --message-format=json -p kvad-tensor --test cuda_kernels --test cuda_decode_attention --test cuda_norm_defer --test cuda_attention --test cuda_q6 --test cuda_delta -p kvad-models --lib --test gpu --test gpu_big -p kvad-engine --test gpu_passes --test embed \
  | python3 -c '
import json, shutil, subprocess, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        name = m["target"]["name"] + ("_lib" if m["target"]["kind"] == ["lib"] else "")
        dst = ".gpu/bin/" + name
        shutil.copy(m["executable"], dst)
        subprocess.run(["strip", dst], check=True)
        print("staged", dst)
'
# kvad and kvad-serve packed too: the benchmarks carry these 9 MB rather than .gpu/bin's 50.
mkdir -p .gpu/pack && tar cJf .gpu/pack/bins.tar.xz -C .gpu/bin kvad kvad-serve
du -sh .gpu/bin/* .gpu/pack/*
