#!/usr/bin/env bash
# Runs every test of accel on a fresh Debian machine, installing what the tests need first:
# formatting, lints, docs, the dependency-direction invariants, and the whole test suite
# (unit, snapshot, broken-input and property tests, and the cross-check against hwloc's lstopo).
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages the tests use: hwloc (lstopo, the discovery cross-check).
missing=()
command -v lstopo >/dev/null 2>&1 || missing+=(hwloc)
if ((${#missing[@]})); then
  echo "== installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

echo "== cargo fmt --check"
cargo fmt --all --check

echo "== cargo clippy --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -q -- -D warnings

echo "== cargo doc"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps -q

echo "== invariants: the model and discovery never pull in an async runtime or Python"
for crate in accel-model accel-discover; do
  if cargo tree -q -p "$crate" -e normal | grep -E '\b(tokio|pyo3|async-std)\b'; then
    echo "error: $crate depends on an async runtime or pyo3" >&2
    exit 1
  fi
done

echo "== cargo test"
cargo test --workspace
