#!/usr/bin/env bash
# Builds the `kvad` wheel from a clean clone: `bash scripts/wheel.sh [OUT_DIR]` (default target/wheels).
#
# The wheel (packaging/pyproject.toml) carries the `kvad` and `kvad-serve` binaries, the web UI embedded in the
# latter, tagged manylinux_2_28 x86_64: both are linked by zig against glibc 2.28's symbols (maturin --zig), and
# maturin's audit refuses the tag if either needs anything newer. maturin packs one Cargo package's binaries, so
# kvad-serve is built first as a wheel of its own, taken out of it and handed to the kvad wheel as a data script
# (installed beside kvad, where `kvad serve` looks for it).
#
# Installs what it needs itself: maturin and zig (PyPI's ziglang), pinned, into the ignored venv .venv-wheel/, and
# the web UI's node modules (npm ci). Needs cargo, python3 and npm. Publishing is a manual step (README, "Install").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="$(mkdir -p "${1:-target/wheels}" && cd "${1:-target/wheels}" && pwd)"
TARGET_DIR="$(mkdir -p "${CARGO_TARGET_DIR:-target}" && cd "${CARGO_TARGET_DIR:-target}" && pwd)"
export CARGO_TARGET_DIR="$TARGET_DIR"

TOOLS="$PWD/.venv-wheel"
if ! "$TOOLS/bin/python" -c "import ziglang" >/dev/null 2>&1 || ! "$TOOLS/bin/maturin" --version 2>/dev/null | grep -q ' 1\.16\.0$'; then
  echo "== maturin and zig into .venv-wheel"
  python3 -m venv "$TOOLS"
  "$TOOLS/bin/python" -m pip install --quiet maturin==1.16.0 ziglang==0.17.1
fi
# maturin finds zig as `python3 -m ziglang`, so this venv's python comes first.
export PATH="$TOOLS/bin:$PATH"

# kvad-serve embeds web/dist: build it when missing or older than its sources.
if [ ! -f web/dist/index.html ] || [ -n "$(find web/src web/index.html web/package-lock.json -newer web/dist/index.html -print -quit)" ]; then
  echo "== web UI (npm ci, npm run build)"
  (cd web && npm ci --no-audit --no-fund && npm run build)
fi

build=(build --release --locked --strip --zig --compatibility manylinux_2_28 --target x86_64-unknown-linux-gnu)
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "== kvad-serve"
maturin "${build[@]}" --manifest-path crates/server/Cargo.toml --bindings bin --out "$tmp/server"
python3 -m zipfile -e "$tmp"/server/*.whl "$tmp/server/unpacked"
data="$TARGET_DIR/wheel/kvad.data/scripts"
rm -rf "$TARGET_DIR/wheel/kvad.data" && mkdir -p "$data"
cp "$tmp"/server/unpacked/*.data/scripts/kvad-serve "$data/kvad-serve"
chmod 755 "$data/kvad-serve"

echo "== kvad (with kvad-serve)"
# packaging/pyproject.toml names the data folder relative to itself; it is under the default target dir.
if [ "$TARGET_DIR" != "$PWD/target" ]; then
  rm -rf target/wheel/kvad.data && mkdir -p target/wheel && cp -r "$TARGET_DIR/wheel/kvad.data" target/wheel/
fi
(cd packaging && maturin "${build[@]}" --out "$OUT")
ls -1 "$OUT"/kvad-*.whl
