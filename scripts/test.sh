#!/usr/bin/env bash
# Runs every test of accel on a fresh Debian machine, installing what the tests need first
# (Debian packages, and a .venv with Ray 2.60 and the accel Python package, via scripts/setup.sh):
# formatting, lints, docs, the dependency-direction invariants, the Rust test suite (unit,
# snapshot, broken-input and property tests, the cross-check against hwloc's lstopo) and the
# Python test suite (discovery, placement and transport on a real local Ray cluster); last, that
# the run left nothing new in /tmp or /dev/shm (scripts/leftovers.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages the tests use: hwloc (lstopo, the discovery cross-check); slurmctld, slurmd
# and scontrol (the Slurm export's real-daemon test); chromium (the agent dashboard's headless
# browser test); tcpdump and iproute2 (the transport's packet capture across two network
# namespaces).
missing=()
command -v lstopo >/dev/null 2>&1 || missing+=(hwloc)
command -v slurmctld >/dev/null 2>&1 || missing+=(slurmctld)
command -v slurmd >/dev/null 2>&1 || missing+=(slurmd)
command -v scontrol >/dev/null 2>&1 || missing+=(slurm-client)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v tcpdump >/dev/null 2>&1 || missing+=(tcpdump)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)  # test_wheel.py: Debian 11, Python 3.9
if ((${#missing[@]})); then
  echo "== installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

bash scripts/setup.sh

# A test run leaves nothing behind: what is in /tmp and /dev/shm now is compared with what is
# there after the last test (scripts/leftovers.sh; the snapshot file itself is never reported).
leftovers=$(mktemp)
trap 'rm -f "$leftovers"' EXIT
bash scripts/leftovers.sh snapshot "$leftovers"

echo "== cargo fmt --check"
cargo fmt --all --check

echo "== cargo clippy --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -q -- -D warnings

echo "== cargo doc"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps -q

echo "== invariants: the model, discovery, the planners and the transport never pull in an async runtime or Python"
for crate in accel-model accel-discover accel-plan accel-reshard accel-transport accel-export; do
  if cargo tree -q -p "$crate" -e normal | grep -E '\b(tokio|pyo3|async-std)\b'; then
    echo "error: $crate depends on an async runtime or pyo3" >&2
    exit 1
  fi
done

echo "== cargo test"
cargo test

echo "== fuzzing (scripts/fuzz.sh: transport frames, plugin answers, captures; ACCEL_FUZZ_SECONDS each, default 60)"
bash scripts/fuzz.sh

echo "== mypy --strict python/accel (types of accel._native: python/accel/_native.pyi)"
.venv/bin/python -m mypy --strict python/accel

echo "== wheel (scripts/wheel.sh; test_wheel.py installs it without Rust)"
bash scripts/wheel.sh

echo "== pytest (one temp root for the run, removed at its end: python/tests/conftest.py)"
cargo build -q -p accel-cli
ACCEL_REQUIRE_SLURM=1 ACCEL_REQUIRE_WHEEL=1 .venv/bin/python -m pytest python/tests

echo "== leftovers: nothing new in /tmp or /dev/shm since the start (scripts/leftovers.sh)"
bash scripts/leftovers.sh check "$leftovers"
