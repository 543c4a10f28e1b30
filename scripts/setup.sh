#!/usr/bin/env bash
# Creates .venv at the repository root with Ray 2.60, numpy and the test tools, and builds and
# installs the accel Python package (the Rust extension through maturin) into it. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv"
  python3 -m venv .venv
fi
# Every Python package is pinned with its files' hashes (pip's hash-checking mode): a changed or
# substituted file on the index is refused. python/requirements-dev.in says what we want;
# requirements-dev.txt is its pip-compile lock (Ray 2.60, numpy, the test tools, maturin, psycopg
# for the lab's PostgreSQL store, ziglang and cargo-zigbuild for scripts/wheel.sh).
if ! .venv/bin/python -c "import ray, numpy, ml_dtypes, pytest, mypy, psycopg, ziglang" >/dev/null 2>&1 || [ ! -x .venv/bin/maturin ] || [ ! -x .venv/bin/cargo-zigbuild ]; then
  echo "== installing Python packages into .venv (pinned, hashes checked)"
  # `python -m pip`, not .venv/bin/pip: a copied .venv's scripts still name the original's python.
  .venv/bin/python -m pip install -q --require-hashes -r python/requirements-pip.txt
  .venv/bin/python -m pip install -q --require-hashes -r python/requirements-dev.txt
fi
# NIXL (the transport's nixl path): the nixl-cu12 wheel alone, without its dependencies. The
# `nixl` meta-package would pull in torch and the CUDA libraries (~6 GB); the wheel bundles UCX
# and needs only numpy, and moves host memory without a GPU.
if ! .venv/bin/python -c "import nixl_cu12" >/dev/null 2>&1; then
  echo "== installing nixl-cu12 (--no-deps, hash checked) into .venv"
  .venv/bin/python -m pip install -q --no-deps --require-hashes -r python/requirements-nixl.txt
fi
# The lab's PostgreSQL store (docs/lab.md): Debian's postgresql server, whose initdb and pg_ctl
# python/tests/test_lab_store.py runs in a temp dir (psycopg is in the lock above).
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  echo "== installing Debian's postgresql"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends postgresql >/dev/null
fi
# The extension is abi3 (_native.abi3.so); an older per-version build would shadow it.
rm -f python/accel/_native.cpython-*.so
echo "== building the accel extension into .venv (maturin, profile pyext)"
VIRTUAL_ENV="$PWD/.venv" PATH="$PWD/.venv/bin:$PATH" .venv/bin/maturin develop -q
