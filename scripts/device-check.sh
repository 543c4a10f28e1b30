#!/usr/bin/env bash
# Live NVIDIA check: run discovery on this machine, capture it, discover the capture, and assert
# that the two reports agree; also compare accel's GPU-to-GPU classes with `nvidia-smi topo -m`.
#
# Usage: bash scripts/device-check.sh [OUT_DIR]
#   ACCEL=path/to/accel   use a prebuilt binary (the device machine has no crates.io access:
#                         build here with `cargo build --release -p accel-cli` and carry target/release/accel)
# Exit status 0 = agreement; the evidence (live.json, replay.json, topo.txt, nvidia-smi.txt,
# capture/) is left in OUT_DIR for docs/hardware.md.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-${OUT:-$(mktemp -d)}}"
mkdir -p "$OUT"
ACCEL="${ACCEL:-target/release/accel}"
if [ ! -x "$ACCEL" ]; then
  cargo build --release -q -p accel-cli
fi
echo "== accel: $($ACCEL --version)   out: $OUT"
command -v nvidia-smi >/dev/null && { nvidia-smi -L | tee "$OUT/nvidia-smi-L.txt"; nvidia-smi topo -m > "$OUT/nvidia-smi.txt" || true; }

start=$(date +%s%N)
"$ACCEL" discover --json --no-network > "$OUT/live.json"
end=$(date +%s%N)
echo "== live discovery took $(( (end - start) / 1000000 )) ms"
"$ACCEL" topo --no-network | tee "$OUT/topo.txt"
"$ACCEL" topo --json --no-network > "$OUT/topo.json"
"$ACCEL" labels --no-network | tee "$OUT/labels-ray.txt"
"$ACCEL" capture "$OUT/capture" --no-network
"$ACCEL" discover --root "$OUT/capture/capture.bundle" --json > "$OUT/replay.json"

python3 - "$OUT" <<'PY'
import json, sys, re, os
out = sys.argv[1]
live = json.load(open(f"{out}/live.json"))
replay = json.load(open(f"{out}/replay.json"))
nv = [a for a in live["accelerators"] if a["vendor"] == "nvidia"]
assert nv, "no NVIDIA accelerator discovered"
assert all(a.get("uuid") and a.get("memory_bytes") for a in nv), "NVML did not fill uuid/memory: %r" % nv
warn = [w for w in live["warnings"] if w["source"] == "nvidia"]
print("nvidia warnings:", warn)
for key in ("accelerators", "links", "domains", "nics", "numa_nodes", "pci"):
    if live.get(key) != replay.get(key):
        print(f"MISMATCH in {key}")
        print(json.dumps(live.get(key), indent=1)[:3000])
        print(json.dumps(replay.get(key), indent=1)[:3000])
        sys.exit(1)
print(f"live and replay agree: {len(nv)} NVIDIA GPUs, {len(live['links'])} links, {len(live['nics'])} NICs")
# GPU-to-GPU classes against nvidia-smi topo -m, where it ran.
path = f"{out}/nvidia-smi.txt"
if os.path.exists(path) and len(nv) > 1:
    rows = [l.split() for l in open(path) if re.match(r"^GPU\d+\s", l)]
    topo = json.load(open(f"{out}/topo.json"))
    n = len(rows)
    theirs = [[c for c in r[1:1 + n]] for r in rows]
    ours = [[str(c) for c in row[:n]] for row in topo["matrix"][:n]]
    norm = lambda c: "NV" if c.startswith("NV") else c
    bad = [(i, j, theirs[i][j], ours[i][j]) for i in range(n) for j in range(n)
           if norm(theirs[i][j]) != norm(ours[i][j]) and theirs[i][j] != ours[i][j]]
    assert not bad, f"classes differ from nvidia-smi topo -m: {bad}"
    print("GPU-to-GPU classes agree with nvidia-smi topo -m")
PY
echo "== device check passed; evidence in $OUT"

# The transport's GPU paths (CUDA IPC, NIXL VRAM, the path choice on this topology); skip with
# ACCEL_DEVICE_CHECK_TRANSPORT=0.
if [ "${ACCEL_DEVICE_CHECK_TRANSPORT:-1}" = 1 ]; then
  echo "== transport GPU paths"
  OUT="$OUT" bash scripts/device-check-gpu-paths.sh || status=1
fi

# The weight sync's device path (bf16 and FP8, resharded, device to device, GB/s against
# cuMemcpyDtoD, every byte compared); skip with ACCEL_DEVICE_CHECK_WEIGHT_SYNC=0.
if [ "${ACCEL_DEVICE_CHECK_WEIGHT_SYNC:-1}" = 1 ]; then
  echo "== weight sync device path"
  OUT="$OUT" bash scripts/device-check-weight-sync.sh || status=1
fi
exit "${status:-0}"
