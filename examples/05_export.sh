#!/usr/bin/env bash
# Guide chapter 5: hand the same facts to Kubernetes and Slurm (docs/guide/05-export.md).
set -euo pipefail

# Kubernetes DRA: ResourceSlices with the standard PCIe/NUMA attributes (kubectl apply -f -).
accel export dra --sample gb200-nvl72-tray --node-name tray-1 > slices.yaml
grep -c 'resource.kubernetes.io/pciBusID' slices.yaml

# Node Feature Discovery: a features.d file, written through a temporary file and a rename.
accel export nfd --sample dgx-h100 --output accel.features
grep -E '^(# \+expiry-time|nvidia.com/gpu.count)=' accel.features

# Slurm: gres.conf, nodes.conf, topology.conf and topology.yaml for a cluster file.
accel cluster --sample dgx-h100:4 --rack-size 2 > cluster.json
accel export slurm --cluster cluster.json --out-dir slurm
head -n 3 slurm/gres.conf
cat slurm/topology.conf
