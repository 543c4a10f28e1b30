#!/usr/bin/env bash
# Guide chapter 1: discover a node and read its matrix (docs/guide/01-discover.md).
set -euo pipefail

# This machine (an empty matrix and a note on a machine without accelerators).
accel topo

# A captured DGX H100 embedded in the binary: NV18 between every pair of GPUs (NVSwitch),
# each GPU's NUMA node and CPU affinity, and the NICs at PIX/PXB/NODE/SYS from each GPU.
accel topo --sample dgx-h100

# The same as JSON: endpoint names and the path class of every pair.
accel topo --sample dgx-h100 --json > matrix.json
python3 - <<'PY'
import json
m = json.load(open("matrix.json"))
print(json.dumps(m, indent=1)[:400])
PY

# The whole machine description (docs/schema.md), and the Ray arguments derived from it.
accel discover --sample mi300x --json | python3 -c 'import json,sys; m=json.load(sys.stdin); print(len(m["accelerators"]), "accelerators,", len(m["links"]), "links")'
accel labels --sample dgx-h100 --format ray
