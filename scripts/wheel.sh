#!/usr/bin/env bash
# Builds the accel wheel into dist/: the Python package, the native extension and the `accel`
# binary (as the package's `accel` console script), so `pip install dist/accel-*.whl` needs no
# Rust. Uses the .venv that scripts/setup.sh makes (for maturin) and the `pyext` profile that
# setup.sh's extension build already compiled, so only the CLI itself and the link are new work.
# The wheel is tagged manylinux by maturin's own audit of the glibc symbols it uses.
set -euo pipefail
cd "$(dirname "$0")/.."

[ -x .venv/bin/maturin ] || bash scripts/setup.sh

echo "== building the accel binary (cargo, profile pyext)"
cargo build -q --profile pyext -p accel-cli
mkdir -p python/accel/_bin
install -m 0755 target/pyext/accel python/accel/_bin/accel

echo "== building the wheel (maturin, profile pyext)"
rm -f dist/accel-*.whl
VIRTUAL_ENV="$PWD/.venv" PATH="$PWD/.venv/bin:$PATH" .venv/bin/maturin build -q --profile pyext --out dist
ls dist/accel-*.whl
