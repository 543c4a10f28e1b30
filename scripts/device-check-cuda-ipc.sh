#!/usr/bin/env bash
# Verifies the CUDA IPC backend of the transport (crates/transport, cargo feature `cuda-ipc`) on
# a GPU machine: a producer process allocates 64 MiB on device 0, exports a cuIpc handle, and a
# consumer process opens it through the `Backend` trait and checks every byte.
#
# Prepared for the `device` tool. Build the checker here (it loads libcuda at run time, so it
# builds without CUDA), then carry it:
#   cargo build --release -p accel-transport --features cuda-ipc --example cuda_ipc_check
#   run(command="bash scripts/device-check-cuda-ipc.sh",
#       carry=["target/release/examples/cuda_ipc_check"], timeout_s=300)
# Without the carried binary it builds one with cargo, if the machine has cargo.
# Results go to $OUT (the device tool's output folder) or /tmp/accel-device-check.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/accel-device-check}"
mkdir -p "$out"

{ nvidia-smi -L || echo "nvidia-smi: not found"; } 2>&1 | tee "$out/nvidia-smi.txt"

bin=target/release/examples/cuda_ipc_check
if [ ! -x "$bin" ]; then
  if command -v cargo >/dev/null 2>&1; then
    cargo build --release -q -p accel-transport --features cuda-ipc --example cuda_ipc_check
  else
    echo "error: no carried $bin and no cargo to build it" | tee "$out/error.txt" >&2
    exit 3
  fi
fi

set +e
timeout 120 "$bin" 2>&1 | tee "$out/cuda_ipc_check.txt"
rc=${PIPESTATUS[0]}
set -e
echo "exit status: $rc" | tee -a "$out/cuda_ipc_check.txt"
exit "$rc"
