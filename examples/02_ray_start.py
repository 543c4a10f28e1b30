"""Guide chapter 2: start Ray with accel (docs/guide/02-ray.md).

On a real node you run `python -m accel.ray start [ray start args...]`. Here the same node specs
make a local two-node Ray cluster, each node standing in for an embedded sample machine."""

import os
import subprocess
import sys

import ray
from ray.cluster_utils import Cluster

import accel
import accel.ray as aray

# What `python -m accel.ray start` runs: `ray start` with one resource per device and accel labels.
cmd = subprocess.run(
    [sys.executable, "-m", "accel.ray", "start", "--sample", "dgx-h100", "--node-name", "dgx-a", "--dry-run", "--head"],
    capture_output=True, text=True, check=True,
).stdout
print(cmd)
assert "accel_dev_nvidia_7" in cmd and "accel.io/node=dgx-a" in cmd

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
NODES = {"dgx-a": "dgx-h100", "mi300x-a": "mi300x"}
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
try:
    for name, sample in NODES.items():
        spec = aray.node_spec(accel.sample(sample), name)
        cluster.add_node(num_cpus=1, num_gpus=spec["num_gpus"], resources=spec["resources"], labels=spec["labels"])
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    for name, sample in NODES.items():
        aray.publish_machine(name, accel.sample(sample))  # what `accel.ray start` does after `ray start`
    total = ray.cluster_resources()
    devices = sorted(k for k in total if k.startswith("accel_dev_"))
    print(f"{len(devices)} device resources: {devices[0]} ... {devices[-1]}")
    assert len(devices) == 16
    view = aray.cluster_from_ray()  # the planner's cluster, read back from Ray
    assert sorted(n["name"] for n in view["nodes"]) == sorted(NODES)
    for node in view["nodes"]:
        machine = accel.sample(NODES[node["name"]])
        spec = aray.node_spec(machine, node["name"])
        print(f"{node['name']}: {len(node['machine']['accelerators'])} accelerators, labels {node['labels']}")
        # The machine and the labels Ray holds are the ones the node started with.
        assert len(node["machine"]["accelerators"]) == len(machine["accelerators"]) > 0
        assert node["labels"] and set(node["labels"].values()) <= set(spec["labels"].values()), node["labels"]
finally:
    ray.shutdown()
    cluster.shutdown()
