"""Guide chapter 3: place work, and read why a request cannot be met (docs/guide/03-placement.md)."""

import os

import ray
from ray.cluster_utils import Cluster

import accel
import accel.ray as aray

# Planning needs no Ray: a cluster of two DGX H100 and one MI300X box.
cluster = accel.cluster({"dgx-h100": 2, "mi300x": 1})
placement = accel.plan(cluster, {"bundles": [{"count": 4, "connectivity": "scale-up", "vendor": ["amd"]}]})
bundle = placement["bundles"][0]
print("4 xGMI-linked AMD GPUs:", bundle["node"], [d["label"] for d in bundle["devices"]])
assert bundle["node"].startswith("mi300x")

# A request that cannot be met says which constraint failed and what would work instead.
try:
    accel.plan(cluster, {"bundles": [{"count": 16, "connectivity": "scale-up"}]})
    raise SystemExit("expected a PlacementError")
except accel.PlacementError as e:
    print("infeasible:", e)
    print("constraint:", e.constraint, "| nearest:", e.nearest)
    assert e.constraint == "count"  # no node has 16 devices; the nearest is 8 on one DGX

# On Ray: a real placement group on the planned node, holding exactly the planned devices.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
rc = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
try:
    spec = aray.node_spec(accel.sample("dgx-h100"), "dgx-a")
    rc.add_node(num_cpus=1, num_gpus=spec["num_gpus"], resources=spec["resources"], labels=spec["labels"])
    rc.wait_for_nodes()
    ray.init(address=rc.address, log_to_driver=False)
    aray.publish_machine("dgx-a", accel.sample("dgx-h100"))

    @ray.remote(num_cpus=0)
    def visible() -> str:
        return os.environ.get("CUDA_VISIBLE_DEVICES", "")

    pg = aray.placement_group({"bundles": [{"count": 2, "connectivity": "scale-up"}]})
    try:
        seen = ray.get(visible.options(**pg.options(0)).remote(), timeout=120)
        print("planned", [d["label"] for d in pg.devices(0)], "on", pg.node(0), "-> the task sees", seen)
        # NVIDIA devices are isolated by UUID (what NVML and CUDA both name them by).
        assert seen == pg.env(0)["CUDA_VISIBLE_DEVICES"]
        assert len(seen.split(",")) == 2 and all(v.startswith("GPU-") for v in seen.split(","))
    finally:
        pg.remove()
finally:
    ray.shutdown()
    rc.shutdown()
