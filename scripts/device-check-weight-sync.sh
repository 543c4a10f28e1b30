#!/usr/bin/env bash
# The weight sync's device path on one NVIDIA GPU (scripts/weight_sync_device_check.py): two
# processes, a bf16 model in device memory landed resharded into the other process's device
# memory, bf16 -> bf16 (device to device through CUDA IPC) and bf16 -> FP8 E4M3 with 128x128
# block scales; GB/s against cuMemcpyDtoD of the same bytes in the same run, the route of every
# piece, and every byte compared with the host path's result. Under 5 minutes on an H100/H200.
# Chained from scripts/device-check.sh; the evidence goes to $OUT.
#
# Needs on the device machine: the NVIDIA driver (libcuda) and python3 with numpy; the
# extension built here travels as a carried path (it is git-ignored):
#   run(command="bash scripts/device-check-weight-sync.sh", carry=["python/accel/_native.abi3.so"], timeout_s=400)
# NOTE: not yet run on hardware (no GPU machine was lent to the task that wrote it; docs/hardware.md).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/accel-device-check}"
mkdir -p "$out"
py="${PYTHON:-.venv/bin/python}"
[ -x "$py" ] || py=python3
if ! "$py" -c "import numpy" 2>/dev/null; then
  echo "numpy is not importable with $py: the weight-sync device check needs it" | tee "$out/weight_sync.txt"
  exit 3
fi
{ nvidia-smi -L || echo "nvidia-smi: not found"; } 2>&1 | tee "$out/nvidia-smi-weight-sync.txt"
set +e
timeout 290 "$py" scripts/weight_sync_device_check.py --mib "${ACCEL_WEIGHT_SYNC_MIB:-1024}" 2>&1 | tee "$out/weight_sync.txt"
rc=${PIPESTATUS[0]}
set -e
echo "exit status: $rc" | tee -a "$out/weight_sync.txt"
exit "$rc"
