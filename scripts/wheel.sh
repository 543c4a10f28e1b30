#!/usr/bin/env bash
# Builds the accel wheel into dist/: the Python package, the native extension and the `accel`
# binary (as the package's `accel` console script), so `pip install dist/accel-*.whl` needs no
# Rust. One wheel for every CPython >= 3.9 (the extension is abi3, pyo3's `abi3-py39`) on every
# Linux with glibc >= BASELINE: both the extension and the binary link through zig against that
# glibc (maturin --zig, cargo-zigbuild; ziglang and cargo-zigbuild come from PyPI into .venv via
# scripts/setup.sh), and maturin's audit tags the wheel manylinux_2_17 (= manylinux2014).
# python/tests/test_wheel.py checks the tag and the symbol versions, and installs the wheel on
# Debian 11's Python 3.9.
set -euo pipefail
cd "$(dirname "$0")/.."

# The oldest glibc the wheel runs on: the floor of Rust's x86_64/aarch64 Linux targets.
BASELINE=2.17

[ -x .venv/bin/maturin ] && [ -x .venv/bin/cargo-zigbuild ] || bash scripts/setup.sh
export VIRTUAL_ENV="$PWD/.venv" PATH="$PWD/.venv/bin:$PATH"
target="$(uname -m)-unknown-linux-gnu"

echo "== building the accel binary (cargo zigbuild, profile pyext, glibc $BASELINE)"
cargo zigbuild -q --profile pyext -p accel-cli --target "$target.$BASELINE"
mkdir -p python/accel/_bin
install -m 0755 "target/$target/pyext/accel" python/accel/_bin/accel

echo "== building the wheel (maturin --zig, profile pyext, manylinux_${BASELINE/./_})"
rm -f dist/accel-*.whl
maturin build -q --profile pyext --zig --target "$target" --compatibility "manylinux_${BASELINE/./_}" --out dist
ls dist/accel-*.whl
