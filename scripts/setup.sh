#!/usr/bin/env bash
# Creates .venv at the repository root with Ray 2.60, numpy and the test tools, and builds and
# installs the accel Python package (the Rust extension through maturin) into it. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv"
  python3 -m venv .venv
fi
if ! .venv/bin/python -c "import ray, numpy, pytest, mypy" >/dev/null 2>&1 || [ ! -x .venv/bin/maturin ]; then
  echo "== installing Python packages into .venv"
  # `python -m pip`, not .venv/bin/pip: a copied .venv's scripts still name the original's python.
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r python/requirements-dev.txt
fi
# NIXL (the transport's nixl path): the nixl-cu12 wheel alone, without its dependencies. The
# `nixl` meta-package would pull in torch and the CUDA libraries (~6 GB); the wheel bundles UCX
# and needs only numpy, and moves host memory without a GPU.
if ! .venv/bin/python -c "import nixl_cu12" >/dev/null 2>&1; then
  echo "== installing nixl-cu12 (--no-deps) into .venv"
  .venv/bin/python -m pip install -q --no-deps "nixl-cu12==1.5.1"
fi
# The lab's PostgreSQL store (docs/lab.md): psycopg 3 (binary wheel) in .venv, and Debian's
# postgresql server, whose initdb and pg_ctl python/tests/test_lab_store.py runs in a temp dir.
if ! .venv/bin/python -c "import psycopg" >/dev/null 2>&1; then
  echo "== installing psycopg[binary] into .venv"
  .venv/bin/python -m pip install -q "psycopg[binary]>=3.2,<4"
fi
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  echo "== installing Debian's postgresql"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends postgresql >/dev/null
fi
# zig and cargo-zigbuild (from PyPI, pinned): scripts/wheel.sh links the wheel's extension and
# binary through them against glibc 2.17, so the wheel runs on older Linux than this one.
if [ ! -x .venv/bin/cargo-zigbuild ] || ! .venv/bin/python -c "import ziglang" >/dev/null 2>&1; then
  echo "== installing ziglang and cargo-zigbuild into .venv"
  .venv/bin/python -m pip install -q "ziglang==0.15.2" "cargo-zigbuild==0.24.1"
fi
# The extension is abi3 (_native.abi3.so); an older per-version build would shadow it.
rm -f python/accel/_native.cpython-*.so
echo "== building the accel extension into .venv (maturin, profile pyext)"
VIRTUAL_ENV="$PWD/.venv" PATH="$PWD/.venv/bin:$PATH" .venv/bin/maturin develop -q
