"""Exact-device placement on a real Ray 2.60 multi-node cluster (`ray.cluster_utils.Cluster`),
each node backed by an embedded sample machine: its per-device resources and accel labels come
from `accel.ray.node_spec`, and actors check their own visibility variables. No GPU is needed:
Ray's GPUs are logical here."""

from __future__ import annotations

import os
import time

import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402
from ray.util import placement_group as ray_placement_group  # noqa: E402
from ray.util import placement_group_table, remove_placement_group  # noqa: E402

import accel  # noqa: E402
import accel.ray as aray  # noqa: E402

# Node name -> sample; the GB200 trays form two NVLink cliques (one tray in A, two in B).
NODES = {
    "dgx-a": ("dgx-h100", {}),
    "dgx-b": ("dgx-h100", {}),
    "rtx": ("rtx-pro-6000-server", {}),
    "mi300x": ("mi300x", {}),
    "nvl-a0": ("gb200-nvl72-tray", {"nvlink_clique": "clique-a"}),
    "nvl-b0": ("gb200-nvl72-tray", {"nvlink_clique": "clique-b"}),
    "nvl-b1": ("gb200-nvl72-tray", {"nvlink_clique": "clique-b"}),
}
H100 = "nvidia-h100-sxm"


def _uuids(node: str, devices: list[dict]) -> str:
    """`CUDA_VISIBLE_DEVICES` for planned NVIDIA devices of a node: their UUIDs, in order."""
    by_id = {a["id"]: a for a in accel.sample(NODES[node][0])["accelerators"]}
    return ",".join(by_id[d["id"]]["uuid"] for d in devices)


@ray.remote(num_cpus=0)
class Probe:
    """Reports what the worker process sees."""

    def env(self):
        keys = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES")
        return {k: os.environ.get(k) for k in keys} | {"node_id": ray.get_runtime_context().get_node_id()}


@pytest.fixture(scope="module")
def cluster():
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        node_ids = {}
        for name, (sample, labels) in NODES.items():
            spec = aray.node_spec(accel.sample(sample), name, labels)
            node = c.add_node(num_cpus=1, num_gpus=spec["num_gpus"], resources=spec["resources"], labels=spec["labels"])
            node_ids[name] = node.node_id
        c.wait_for_nodes()
        ray.init(address=c.address, log_to_driver=False)
        for name, (sample, _) in NODES.items():
            aray.publish_machine(name, accel.sample(sample))
        yield node_ids
    finally:
        ray.shutdown()
        c.shutdown()


def _probe(apg, i):
    actor = Probe.options(**apg.options(i)).remote()
    try:
        return ray.get(actor.env.remote(), timeout=120)
    finally:
        ray.kill(actor)


def _free(node_id, names):
    avail = ray._private.state.available_resources_per_node().get(node_id, {})
    return [n for n in names if avail.get(n, 0) >= 1]


def test_cluster_view_from_ray(cluster):
    view = aray.cluster_from_ray()
    assert sorted(n["name"] for n in view["nodes"]) == sorted(NODES)
    labels = {n["name"]: n["labels"] for n in view["nodes"]}
    assert labels["nvl-b1"]["nvlink_clique"] == "clique-b"


def test_four_nvlink_gpus_land_on_the_fragmented_dgx(cluster):
    # GPUs 0-2 of dgx-a are already held (through the same per-device resources).
    held = ray_placement_group(
        [{"GPU": 3, "accel_dev_nvidia_0": 1, "accel_dev_nvidia_1": 1, "accel_dev_nvidia_2": 1}],
        bundle_label_selector=[{"accel.io/node": "dgx-a"}],
    )
    assert held.wait(timeout_seconds=60)
    apg = aray.placement_group({"bundles": [{"count": 4, "connectivity": "scale-up", "sku": [H100]}]})
    try:
        assert apg.node(0) == "dgx-a"  # best fit: dgx-b stays whole for an 8-GPU job
        assert [d["label"] for d in apg.devices(0)] == ["GPU4", "GPU5", "GPU6", "GPU7"]
        seen = _probe(apg, 0)
        assert seen["node_id"] == cluster["dgx-a"]
        assert seen["CUDA_VISIBLE_DEVICES"] == _uuids("dgx-a", apg.devices(0))
        assert seen["CUDA_VISIBLE_DEVICES"].count("GPU-") == 4
        m = accel.sample("dgx-h100")
        ids = {a["index"]: a["id"] for a in m["accelerators"]}
        links = {(link["a"], link["b"]) for link in m["links"]}
        for a in (4, 5, 6, 7):
            for b in (4, 5, 6, 7):
                if a < b:
                    assert (min(ids[a], ids[b]), max(ids[a], ids[b])) in links
        # Ray's accounting agrees: dgx-a has one device left, and it is GPU3.
        names = [aray.device_resource("nvidia", i) for i in range(8)]
        assert _free(cluster["dgx-a"], names) == ["accel_dev_nvidia_3"]
        whole = aray.placement_group({"bundles": [{"count": 8, "connectivity": "scale-up", "sku": [H100]}]})
        assert whole.node(0) == "dgx-b"
        whole.remove()
    finally:
        apg.remove()
        remove_placement_group(held)


def test_rdma_nic_per_gpu_gets_pix(cluster):
    # DGX H100 NICs sit at PXB and GB200 tray NICs at NODE; the RTX server and the MI300X box
    # have a NIC at PIX beside their GPUs.
    apg = aray.placement_group({"bundles": [{"count": 2, "nic": "pix"}]})
    try:
        assert apg.node(0) in ("rtx", "mi300x")
        assert all(d["nic_path"] == "PIX" for d in apg.devices(0))
        seen = _probe(apg, 0)
        assert seen["node_id"] == cluster[apg.node(0)]
        if apg.node(0) == "rtx":
            assert seen["CUDA_VISIBLE_DEVICES"] == _uuids("rtx", apg.devices(0))
        else:
            assert seen["HIP_VISIBLE_DEVICES"] == ",".join(str(d["index"]) for d in apg.devices(0))
    finally:
        apg.remove()

    # The same on NVIDIA only: the RTX server.
    apg = aray.placement_group({"bundles": [{"count": 2, "nic": "pix", "vendor": ["nvidia"]}]})
    try:
        assert apg.node(0) == "rtx"
        assert all(d["nic_path"] == "PIX" for d in apg.devices(0))
        assert _probe(apg, 0)["CUDA_VISIBLE_DEVICES"] == _uuids("rtx", apg.devices(0))
    finally:
        apg.remove()


def test_amd_xgmi_bundle_sees_hip_visible_devices(cluster):
    apg = aray.placement_group({"bundles": [{"count": 4, "vendor": ["amd"], "connectivity": "scale-up"}]})
    try:
        assert apg.node(0) == "mi300x"
        seen = _probe(apg, 0)
        assert seen["node_id"] == cluster["mi300x"]
        assert seen["HIP_VISIBLE_DEVICES"] == ",".join(str(d["index"]) for d in apg.devices(0))
        assert seen["CUDA_VISIBLE_DEVICES"] is None
    finally:
        apg.remove()


def test_nvl72_gang_stays_in_one_clique(cluster):
    gang = {
        "bundles": [{"count": 4, "connectivity": "scale-up", "family": ["blackwell"]}] * 2,
        "same": "nvlink_clique",
        "strategy": "spread",
    }
    loose = accel.plan(aray.cluster_from_ray(), {**gang, "same": None})
    assert {b["node"] for b in loose["bundles"]} == {"nvl-a0", "nvl-b0"}  # crosses cliques
    apg = aray.placement_group(gang)
    try:
        assert sorted(apg.node(i) for i in range(2)) == ["nvl-b0", "nvl-b1"]
        for i in range(2):
            seen = _probe(apg, i)
            assert seen["node_id"] == cluster[apg.node(i)]
            assert seen["CUDA_VISIBLE_DEVICES"] == _uuids(apg.node(i), apg.devices(i))
            assert [d["index"] for d in apg.devices(i)] == [0, 1, 2, 3]
    finally:
        apg.remove()


def test_ray_topology_strategy_packs_one_gpu_domain_on_accels_labels_alone(cluster):
    # Ray's own scheduler, not accel's planner: it groups nodes by `ray.io/gpu-domain`, which
    # node_spec set from each tray's NVLink clique, and selects by `ray.io/accelerator-type`,
    # which node_spec set too. Two 4-GPU GB200 bundles fit only in clique-b (two trays); the
    # DGX nodes have more free GPUs but no scale-up domain that spans nodes, and the MI300X's
    # xGMI hive is a domain of other GPUs.
    domains = {n["Labels"].get("accel.io/node"): n["Labels"].get("ray.io/gpu-domain") for n in ray.nodes() if n["Alive"]}
    assert domains["nvl-a0"] == "clique-a" and domains["nvl-b0"] == domains["nvl-b1"] == "clique-b", domains
    assert domains["dgx-a"] is None and domains["mi300x"] is not None  # one xGMI hive per MI300X box
    pg = ray_placement_group(
        [{"GPU": 4}] * 2,
        bundle_label_selector=[{"ray.io/accelerator-type": "GB200"}] * 2,
        topology_strategy={"ray.io/gpu-domain": "STRICT_PACK"},
    )
    try:
        assert pg.wait(timeout_seconds=60)
        by_id = {v: k for k, v in cluster.items()}
        placed = placement_group_table(pg)["bundles_to_node_id"]
        assert sorted(by_id[n] for n in placed.values()) == ["nvl-b0", "nvl-b1"], placed
    finally:
        remove_placement_group(pg)


def test_infeasible_request_fails_fast_without_a_pending_group(cluster):
    before = len(placement_group_table())
    started = time.monotonic()
    with pytest.raises(accel.PlacementError) as err:
        aray.placement_group({"bundles": [{"count": 6, "connectivity": "scale-up", "family": ["blackwell"]}]})
    elapsed = time.monotonic() - started
    # The RTX PRO 6000 server has 8 Blackwell GPUs, but on PCIe only; trays have 4 on NVLink.
    assert err.value.constraint == "connectivity"
    assert "no node has 6 free accelerators all joined by scale-up links; best available: nvl-" in str(err.value)
    assert "nearest feasible: count 4 on nvl-" in str(err.value)
    assert "or without the connectivity constraint: rtx (" in str(err.value)
    assert elapsed < 30  # planned, not left pending in Ray
    assert len(placement_group_table()) == before


def test_two_placements_never_share_a_device(cluster):
    req = {"bundles": [{"count": 4, "sku": [H100]}]}
    first = aray.placement_group(req)
    second = aray.placement_group(req)
    try:
        a = {(first.node(0), d["id"]) for d in first.devices(0)}
        b = {(second.node(0), d["id"]) for d in second.devices(0)}
        assert not a & b
        # Ray holds every one of those devices: none is free any more.
        for apg in (first, second):
            names = [aray.device_resource(d["vendor"], d["index"]) for d in apg.devices(0)]
            assert _free(cluster[apg.node(0)], names) == []
    finally:
        first.remove()
        second.remove()


def test_a_device_taken_between_plan_and_reserve_is_never_left_pending(cluster, monkeypatch):
    # Someone else holds all of dgx-b; the planner is made blind to it (a stale view), so every
    # plan names devices Ray cannot give: the group must be removed, not left pending.
    held = ray_placement_group(
        [{"GPU": 8, **{aray.device_resource("nvidia", i): 1 for i in range(8)}}],
        bundle_label_selector=[{"accel.io/node": "dgx-b"}],
    )
    assert held.wait(timeout_seconds=60)
    only_b = {"nodes": [n for n in aray.cluster_from_ray()["nodes"] if n["name"] == "dgx-b"]}
    monkeypatch.setattr("accel.ray._placement.sync_with_ray", lambda planner: None)
    try:
        with pytest.raises(accel.PlacementError, match="taken by other placements"):
            aray.placement_group({"bundles": [{"count": 2}]}, cluster=only_b, timeout_s=60)
        pending = [pg for pg in placement_group_table().values() if pg["state"] not in ("REMOVED", "CREATED")]
        assert pending == []
    finally:
        remove_placement_group(held)


def test_cpu_affinity_and_nic_variables_inside_real_actors(cluster):
    # dgx-b's machine as the planner sees it, with its two NUMA nodes' CPUs mapped onto this
    # host's CPUs 0 and 1 (the test host has two), so the pinning can be observed for real.
    host_cpus = sorted(os.sched_getaffinity(0))
    if len(host_cpus) < 2:
        pytest.skip("needs two CPUs")
    # An earlier test's group on dgx-b is removed asynchronously: wait for its devices.
    names = [aray.device_resource("nvidia", i) for i in range(8)]
    deadline = time.monotonic() + 60
    while len(_free(cluster["dgx-b"], names)) < 8 and time.monotonic() < deadline:
        time.sleep(0.5)
    view = aray.cluster_from_ray()
    for node in view["nodes"]:
        if node["name"] == "dgx-b":
            for numa, cpu in zip(node["machine"]["numa_nodes"], host_cpus):
                numa["cpus"] = str(cpu)
    apg = aray.placement_group(
        {"bundles": [{"count": 4, "same_numa": True}] * 2, "select": {"node": "dgx-b"}}, cluster=view
    )
    try:
        for i in range(2):
            actor = Affinity.options(**apg.options(i)).remote()
            try:
                seen = ray.get(actor.where.remote(), timeout=120)
            finally:
                ray.kill(actor)
            numa = {d["numa_node"] for d in apg.devices(i)}
            assert len(numa) == 1
            assert seen["cpus"] == [host_cpus[numa.pop()]], (i, seen)
            nics = [d["nic"] for d in apg.devices(i)]
            assert seen["NCCL_IB_HCA"] == "=" + ",".join(nics) and all(nics), seen
            assert seen["UCX_NET_DEVICES"] == ",".join(f"{n}:1" for n in nics), seen
    finally:
        apg.remove()


@ray.remote(num_cpus=0)
class Affinity:
    """Reports the CPUs this worker process may run on and its NIC variables."""

    def where(self):
        return {"cpus": sorted(os.sched_getaffinity(0))} | {
            k: os.environ.get(k) for k in ("NCCL_IB_HCA", "UCX_NET_DEVICES", "ACCEL_CPUS")
        }


# --- training gangs: tensor-parallel sub-groups in one NVLink clique each (accel.ray.gang) -----

GB200 = "nvidia-gb200"
CLIQUE_LABEL = "accel.io/nvlink-clique"  # node_spec's label for the tray's NVLink clique


def _wait_free(cluster, nodes, count, timeout_s=60):
    """Waits until each of `nodes` has its first `count` NVIDIA devices free in Ray (a removed
    group gives its resources back asynchronously)."""
    names = [aray.device_resource("nvidia", i) for i in range(count)]
    deadline = time.monotonic() + timeout_s
    while any(len(_free(cluster[n], names)) < count for n in nodes) and time.monotonic() < deadline:
        time.sleep(0.5)


@ray.remote(num_cpus=0)
class Rank:
    """One rank of a gang: reports its node and its devices."""

    def where(self):
        return {"node_id": ray.get_runtime_context().get_node_id(), "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")}


def test_gang_sub_groups_each_land_in_one_nvlink_clique(cluster):
    trays = ["nvl-a0", "nvl-b0", "nvl-b1"]
    _wait_free(cluster, trays, 4)
    clique_of = {n["NodeID"]: n["Labels"].get(CLIQUE_LABEL) for n in ray.nodes() if n["Alive"]}
    assert {clique_of[cluster[t]] for t in trays} == {"clique-a", "clique-b"}
    # Three tensor-parallel groups of four GB200 GPUs: clique-a holds one, clique-b two.
    apg = aray.placement_group(
        aray.gang({"count": 1, "sku": [GB200]}, groups=3, group_size=4, within="nvlink_clique", replicas="pack")
    )
    try:
        ranks = [Rank.options(**apg.options(i)).remote() for i in range(apg.bundle_count)]
        try:
            seen = ray.get([r.where.remote() for r in ranks], timeout=300)
        finally:
            for r in ranks:
                ray.kill(r)
        groups = aray.gang_groups(apg.placement)
        assert sorted(sorted(g) for g in groups) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
        cliques = []
        for group in groups:
            # Where the actors really run, by the Ray labels of their nodes.
            real = {clique_of[seen[i]["node_id"]] for i in group}
            assert len(real) == 1, (group, real)
            assert {apg.placement["bundles"][i]["domain"] for i in group} == real
            cliques += real
        assert sorted(cliques) == ["clique-a", "clique-b", "clique-b"]
        for i in range(apg.bundle_count):
            assert seen[i]["node_id"] == cluster[apg.node(i)]
            assert seen[i]["CUDA_VISIBLE_DEVICES"] == _uuids(apg.node(i), apg.devices(i))
    finally:
        apg.remove()


def test_gang_whose_sub_groups_fit_no_clique_is_infeasible_without_a_pending_group(cluster):
    _wait_free(cluster, ["nvl-a0", "nvl-b0", "nvl-b1"], 4)
    gang = aray.gang({"count": 1, "sku": [GB200]}, groups=2, group_size=6, within="nvlink_clique", replicas="pack")
    # The twelve bundles fit the twelve GB200 GPUs; two groups of six do not (clique-a has four).
    assert len(accel.plan(aray.cluster_from_ray(), {"bundles": gang["bundles"]})["bundles"]) == 12
    before = len(placement_group_table())
    with pytest.raises(accel.Infeasible) as err:
        aray.placement_group(gang)
    assert err.value.constraint == "groups", err.value  # not `free`: every GB200 GPU is free
    assert len(placement_group_table()) == before
    pending = [pg for pg in placement_group_table().values() if pg["state"] not in ("REMOVED", "CREATED")]
    assert pending == []
