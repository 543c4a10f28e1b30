"""The planner from Python: clusters of sample machines, placements, explanations, requests as
dicts, JSON or YAML, Ray node specs and visibility environments (no Ray cluster needed)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

import accel
import accel.ray as aray

SCALE_UP_4 = {"bundles": [{"count": 4, "connectivity": "scale-up"}]}


def test_minimal_request_on_samples():
    cluster = accel.cluster({"dgx-h100": 2})
    p = accel.Planner(cluster)
    p.mark_used("dgx-h100-0", ["GPU0", "GPU1", "GPU2"])
    placement = p.allocate(SCALE_UP_4)
    (bundle,) = placement["bundles"]
    assert bundle["node"] == "dgx-h100-0"
    assert [d["label"] for d in bundle["devices"]] == ["GPU4", "GPU5", "GPU6", "GPU7"]
    assert bundle["score"]["same_numa"] and bundle["score"]["min_pair_gbps"] > 0
    # The whole node stays whole for an 8-GPU job; release gives the devices back.
    assert p.plan({"bundles": [{"count": 8, "connectivity": "scale-up"}]})["bundles"][0]["node"] == "dgx-h100-1"
    p.release(placement["id"])
    assert len(p.free_devices("dgx-h100-0")) == 5


def test_explanation_names_constraint_and_nearest():
    cluster = accel.cluster({"mi210-2hive": 1})
    with pytest.raises(accel.PlacementError) as err:
        accel.plan(cluster, {"bundles": [{"count": 5, "connectivity": "scale-up"}]})
    e = err.value
    assert isinstance(e, accel.AccelError)
    assert e.constraint == "connectivity"
    assert "no node has 5 free accelerators all joined by scale-up links" in str(e)
    assert "best available: mi210-2hive-0 has 4" in str(e)
    assert e.nearest.startswith("count 4 on mi210-2hive-0")


def test_request_forms(tmp_path):
    cluster = accel.cluster("dgx-h100:1")
    yaml_text = "bundles:\n  - count: 2\n    connectivity: scale-up\n    same_numa: true\n"
    json_file = tmp_path / "r.json"
    json_file.write_text('{"bundles": [{"count": 2, "connectivity": "scale-up", "same_numa": true}]}')
    long_json = json_file.read_text().replace(" ", " " * 40)  # longer than any file name
    forms = (yaml_text, str(json_file), json_file, long_json)
    got = {str(accel.plan(cluster, r)["bundles"][0]["devices"]) for r in forms}
    assert len(got) == 1
    with pytest.raises(accel.PlacementError, match="invalid request"):
        accel.plan(cluster, {"bundles": [{"count": 2, "connectivity": "nvlink"}]})


def test_capability_constraints_across_vendors():
    cluster = accel.cluster({"dgx-h100": 1, "mi300x": 1})
    amd = accel.plan(cluster, {"bundles": [{"count": 2, "vendor": ["amd"]}]})
    assert amd["bundles"][0]["node"] == "mi300x-0"
    big = accel.plan(cluster, {"bundles": [{"count": 1, "min_memory_gb": 150}]})
    assert big["bundles"][0]["node"] == "mi300x-0"
    # fp8 from the SKU registry: Hopper has it, CDNA2 (MI210) does not.
    mixed = accel.cluster({"mi210-2hive": 1, "dgx-h100": 1})
    assert accel.plan(mixed, {"bundles": [{"count": 2, "dtypes": ["fp8"]}]})["bundles"][0]["node"] == "dgx-h100-0"
    with pytest.raises(accel.PlacementError) as err:
        accel.plan(accel.cluster({"mi210-2hive": 1}), {"bundles": [{"count": 2, "dtypes": ["fp8"]}]})
    assert err.value.constraint == "capability" and "dtypes [fp8]" in str(err.value)


def test_node_spec_and_visibility():
    m = accel.sample("dgx-h100")
    spec = aray.node_spec(m, "n0", {"rack": "r1"})
    assert spec["num_gpus"] == 8
    assert spec["resources"]["accel_dev_nvidia_7"] == 1
    # The names the placement code asks for are the ones discovery exports.
    assert set(spec["resources"]) == {aray.device_resource(a["vendor"], a["index"]) for a in m["accelerators"]}
    assert spec["labels"]["accel.io/node"] == "n0" and spec["labels"]["accel.io/rack"] == "r1"
    ids = [m["accelerators"][i]["id"] for i in (6, 4)]
    assert aray.visibility_env(m, ids) == {
        # By UUID: the same GPUs whatever subset of the host a container sees.
        "CUDA_VISIBLE_DEVICES": ",".join(m["accelerators"][i]["uuid"] for i in (6, 4)),
        # Index fallback (no UUID) is PCI bus order; CUDA's own default is "fastest first".
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        # Ray picks its GPU manager by probing the node: none of them may rewrite visibility.
        "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1",
        "RAY_EXPERIMENTAL_NOSET_HIP_VISIBLE_DEVICES": "1",
        "RAY_EXPERIMENTAL_NOSET_ZE_AFFINITY_MASK": "1",
    }
    amd = accel.sample("mi300x")
    env = aray.visibility_env(amd, [amd["accelerators"][1]["id"]])
    assert env["HIP_VISIBLE_DEVICES"] == "1" and env["RAY_EXPERIMENTAL_NOSET_HIP_VISIBLE_DEVICES"] == "1"


def test_ray_counts_neuron_devices_in_cores():
    # Ray counts Neuron devices in logical NeuronCores: a trn2.48xlarge has 16 devices of 8
    # physical cores, presented as 4 each by the runtime's default LNC=2 (the Neuron docs).
    trn2 = accel.sample("trn2")
    spec = aray.node_spec(trn2, "n0")
    resource = trn2["accelerators"][0]["vocabulary"]["ray_resource"]  # the plugin names it
    assert spec["num_gpus"] == 0 and spec["resources"][resource] == 64
    ids = [trn2["accelerators"][i]["id"] for i in (1, 3)]
    env = aray.visibility_env(trn2, ids)
    var = trn2["accelerators"][1]["vocabulary"]["visibility_env"]  # the plugin names it
    assert env[var] == "4-7,12-15"
    assert env[f"RAY_EXPERIMENTAL_NOSET_{var}"] == "1"


def test_gaudi_visibility_takes_module_ids():
    # The sample's module ids (OAM slots) differ from PCI order: 3,1,0,2,7,5,4,6.
    m = accel.sample("gaudi2-modules")
    ids = [m["accelerators"][i]["id"] for i in (0, 2)]
    env = aray.visibility_env(m, ids)
    var = m["accelerators"][0]["vocabulary"]["visibility_env"]
    assert env[var] == "3,0" and len(env) == 2  # the variable and its Ray switch
    assert aray.node_spec(m, "n0")["resources"][m["accelerators"][0]["vocabulary"]["ray_resource"]] == 8


def test_ray_start_dry_run():
    out = subprocess.run(
        [sys.executable, "-m", "accel.ray", "start", "--sample", "dgx-h100", "--node-name", "n7", "--dry-run", "--head"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert out.startswith("ray start --num-gpus=8 ")
    assert "accel_dev_nvidia_0" in out and "accel.io/node=n7" in out and out.rstrip().endswith("--head")


def test_cli_plan_exit_status(accel_bin, tmp_path):
    cluster = tmp_path / "cluster.json"
    cluster.write_text(subprocess.run([accel_bin, "cluster", "--sample", "dgx-h100:2"], check=True, capture_output=True, text=True).stdout)
    ok = tmp_path / "ok.json"
    ok.write_text('{"bundles": [{"count": 4, "connectivity": "scale-up"}]}')
    bad = tmp_path / "bad.json"
    bad.write_text('{"bundles": [{"count": 9, "connectivity": "scale-up"}]}')
    good = subprocess.run([accel_bin, "plan", "--cluster", cluster, "--request", ok, "--json"], capture_output=True, text=True)
    assert good.returncode == 0 and '"node": "dgx-h100-0"' in good.stdout
    yaml = tmp_path / "ok.yaml"
    yaml.write_text("bundles:\n  - count: 4\n    connectivity: scale-up\n")
    from_yaml = subprocess.run([accel_bin, "plan", "--cluster", cluster, "--request", yaml, "--json"], capture_output=True, text=True)
    assert from_yaml.returncode == 0 and from_yaml.stdout == good.stdout
    fail = subprocess.run([accel_bin, "plan", "--cluster", cluster, "--request", bad], capture_output=True, text=True)
    assert fail.returncode == 1  # a valid request that cannot be met
    assert "no node has 9 accelerators" in fail.stderr and "nearest feasible" in fail.stderr
    malformed = tmp_path / "malformed.json"
    malformed.write_text('{"bundles": [{"count": -1}]}')
    invalid = subprocess.run([accel_bin, "plan", "--cluster", cluster, "--request", malformed], capture_output=True, text=True)
    assert invalid.returncode == 2 and "accel: error:" in invalid.stderr  # invalid input


def test_impossible_request_returns_at_once_with_a_bounded_search():
    # Regression: a cpus constraint no node can meet enumerated every device subset (the step
    # budget only started after a first candidate).
    planner = accel.Planner(accel.cluster({"mi300x": 1, "dgx-h100": 1}))
    with pytest.raises(accel.PlacementError) as err:
        planner.plan({"bundles": [{"count": 6, "cpus": 100000}]})
    assert err.value.constraint == "cpus"
    assert planner.last_search_steps() <= 8 * 200_000


def test_planning_releases_the_gil():
    # Regression: the binding held the GIL while planning, freezing every other thread of a Ray
    # driver. A thread plans, 50 times, a request whose exact multi-bundle search runs to its
    # step budget in each of 8 racks of 8 nodes (tens of ms each), while this thread stamps the
    # time whenever it runs (taking a stamp needs the GIL). A call that held the GIL could see at
    # most one stamp inside it (one taken after the thread's start time but before the call
    # began); two in one call mean it let the GIL go.
    cluster = accel.cluster({"dgx-h100": 64}, rack_size=8)
    planner = accel.Planner(cluster)
    request = {"bundles": [{"count": 1}] * 6, "same": "rack"}
    spans: list[tuple[float, float]] = []
    stamps: list[float] = []
    done = threading.Event()

    def plan() -> None:
        for _ in range(50):
            start = time.perf_counter()
            try:
                planner.plan(request)
            except accel.PlacementError:
                pass
            spans.append((start, time.perf_counter()))
        done.set()

    thread = threading.Thread(target=plan)
    thread.start()
    while not done.wait(0.0005):  # each wait gives the GIL up, so the planner is never starved
        stamps.append(time.perf_counter())
    thread.join()
    assert planner.last_search_steps() > 0
    most = max(sum(1 for t in stamps if a < t < b) for a, b in spans)
    assert most >= 2, f"no Python code ran during any of 50 native plans ({len(stamps)} stamps in all)"


def test_engine_groups_for_vllm_and_sglang_follow_the_plan():
    cluster = accel.cluster({"dgx-h100": 2})
    p = accel.Planner(cluster)
    p.mark_used("dgx-h100-0", ["GPU1", "GPU6"])  # six free on the first node, eight on the second
    placement = p.plan({"bundles": [{"count": 1}] * 12})
    by_bundle = {b["bundle"]: b for b in placement["bundles"]}
    groups = aray.engine_groups(placement, 2)
    assert sorted(i for g in groups for i in g) == list(range(12))
    for g in groups:
        assert len({by_bundle[i]["node"] for i in g}) == 1, "a tensor-parallel group never crosses nodes"
        indices = [by_bundle[i]["devices"][0]["index"] for i in g]
        assert indices == sorted(indices)
    assert aray.vllm_env(groups[0]) == {"VLLM_RAY_BUNDLE_INDICES": ",".join(map(str, groups[0]))}
    assert aray.sglang_env([3, 1]) == {"SGLANG_RAY_BUNDLE_INDICES": "3,1"}
    assert len({by_bundle[i]["node"] for i in range(12)}) == 2  # 12 devices need both nodes
    with pytest.raises(accel.InvalidRequest, match="must not cross nodes"):
        aray.engine_groups(placement, 5)
    with pytest.raises(accel.InvalidRequest, match="one device per bundle"):
        aray.engine_groups(p.plan({"bundles": [{"count": 2}]}), 2)


def test_a_bundle_may_ask_for_several_nics_per_device():
    # "2 RDMA NICs at PIX or PXB to each device": trn2 has them (EFA), a DGX H100 has one each.
    request = {"bundles": [{"count": 1, "nic": "pxb", "nics": 2}]}
    assert accel.plan(accel.cluster({"trn2": 1}), request)["bundles"][0]["node"] == "trn2-0"
    with pytest.raises(accel.Infeasible) as err:
        accel.plan(accel.cluster({"dgx-h100": 1}), request)
    assert err.value.constraint == "nic" and "each with 2 RDMA NICs at PXB or closer" in str(err.value)
    assert accel.plan(accel.cluster({"dgx-h100": 1}), {"bundles": [{"count": 1, "nic": "pxb", "nics": 1}]})


def test_unhealthy_devices_are_left_out_of_plans_and_ray_resources():
    m = accel.sample("dgx-h100")
    m["accelerators"][2]["health"] = {"state": "unhealthy", "reasons": ["XID 79"]}
    m["accelerators"][5]["health"] = {"state": "unknown", "reasons": ["nvidia:errors: NVML call failed"]}
    cluster = {"nodes": [{"name": "n0", "machine": m}]}
    got = accel.plan(cluster, {"bundles": [{"count": 6}]})
    assert [d["label"] for d in got["bundles"][0]["devices"]] == ["GPU0", "GPU1", "GPU3", "GPU4", "GPU6", "GPU7"]
    with pytest.raises(accel.Infeasible) as err:
        accel.plan(cluster, {"bundles": [{"count": 7}]})
    assert err.value.constraint == "health" and "GPU2 (unhealthy: XID 79)" in err.value.nearest
    # Unknown health is placed only where the cluster allows it.
    allowed = {**cluster, "health": {"unknown": "allow"}}
    assert len(accel.plan(allowed, {"bundles": [{"count": 7}]})["bundles"][0]["devices"]) == 7
    spec = aray.node_spec(m, "n0")
    assert spec["labels"]["accel.io/unhealthy-devices"] == "GPU2.GPU5"
    assert spec["num_gpus"] == 6 and aray.device_resource("nvidia", 2) not in spec["resources"]
    # The node's operator may allow unknown health on that node alone: labels and plans follow.
    allowing = aray.allow_unknown_health(m)
    assert aray.node_spec(allowing, "n0")["labels"]["accel.io/unhealthy-devices"] == "GPU2"
    assert len(accel.plan({"nodes": [{"name": "n0", "machine": allowing}]}, {"bundles": [{"count": 7}]})["bundles"][0]["devices"]) == 7


def test_repair_places_a_lost_bundle_again_inside_its_clique_or_says_why():
    # Two NVL72 cliques of three trays each; a gang of two trays in one clique loses one tray.
    planner = accel.Planner(accel.cluster({"gb200-nvl72-tray": 6}, clique_trays=3))
    gang = {"bundles": [{"count": 4, "connectivity": "scale-up"}] * 2, "same": "nvlink_clique", "strategy": "spread"}
    placed = planner.allocate(gang)
    clique = {b["node"] for b in placed["bundles"]}
    lost = placed["bundles"][1]["node"]
    fixed = planner.repair(placed["id"], [1])
    assert fixed["id"] == placed["id"]
    assert fixed["bundles"][0] == placed["bundles"][0]
    assert fixed["bundles"][1]["node"] not in clique
    label = {n["name"]: n["labels"]["nvlink_clique"] for n in planner.cluster["nodes"]}
    assert label[fixed["bundles"][1]["node"]] == label[lost]
    # The lost tray's devices stay out until they are synced back.
    assert planner.free_devices(lost) == []
    # The clique now has no free tray left: losing another bundle cannot be repaired in it.
    with pytest.raises(accel.Infeasible, match="inside nvlink_clique="):
        planner.repair(placed["id"], [1])
