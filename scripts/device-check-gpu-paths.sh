#!/usr/bin/env bash
# The transport's GPU paths on a machine with NVIDIA GPUs: CUDA IPC (device-check-cuda-ipc.sh),
# NIXL moving VRAM between two processes (scripts/gpu_paths_check.py: GPU 0 -> the last GPU, every
# page checked; with one GPU it is GPU 0 -> GPU 0 through NIXL), and the path choice printed on the
# live topology. Chained from scripts/device-check.sh; the evidence goes to $OUT.
#
# Needs on the device machine: the NVIDIA driver (libcuda), python3 with numpy and the nixl-cu12
# wheel (the device machine reaches no registry: carry a venv that has them, e.g.
# carry=[".venv", "target/release/accel"]), and for CUDA IPC the carried
# target/release/examples/cuda_ipc_check (see device-check-cuda-ipc.sh).
# NOTE: not run yet (no GPU machine was lent to the task that wrote it; docs/hardware.md).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/accel-device-check}"
mkdir -p "$out"
py="${PYTHON:-.venv/bin/python}"
[ -x "$py" ] || py=python3
rc=0
echo "== CUDA IPC"
bash scripts/device-check-cuda-ipc.sh || rc=1
echo "== NIXL VRAM and the path choice"
if "$py" -c "import nixl_cu12" 2>/dev/null; then
  timeout 300 "$py" scripts/gpu_paths_check.py 2>&1 | tee "$out/gpu_paths.txt" || rc=1
else
  echo "nixl_cu12 is not importable with $py: NIXL VRAM not checked" | tee "$out/gpu_paths.txt"
  rc=1
fi
exit "$rc"
