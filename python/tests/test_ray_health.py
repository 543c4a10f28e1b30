"""Health that acts while a job runs, on a real multi-node Ray 2.60 cluster
(`ray.cluster_utils.Cluster`) whose nodes are copies of the GB200 tray capture (its recorded NVML
readings): a device of a running job turns bad mid-run (its recorded uncorrectable-ECC count
flipped in that node's copy), the node's monitor reports it within two probe periods in REP #71's
shape, new placements avoid it, `check()` names it, the node agent's page data and metric name it,
two passing probes in a row bring it back (logged), and under the `drain` policy the node is
drained through Ray's own drain call with the reason."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

import accel  # noqa: E402
import accel.ray as aray  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
BUNDLE = REPO / "test_data" / "hosts" / "gb200-nvl72-tray" / "capture.bundle"
PERIOD_S = 1.0
RECOVER_AFTER = 2


def unpack(bundle: pathlib.Path, out: pathlib.Path) -> None:
    """An `accel-capture 1` bundle as a directory tree, so readers see edits to its files."""
    data = bundle.read_bytes()
    pos = data.index(b"\n") + 1
    while pos < len(data):
        end = data.index(b"\n", pos)
        line = data[pos:end].decode()
        pos = end + 1
        if not line:
            continue
        kind, path, *rest = line.split(" ", 2)
        target = out / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if kind == "F":
            size = int(rest[0])
            target.write_bytes(data[pos : pos + size])
            pos += size + 1
        elif kind == "L":
            os.symlink(rest[0], target)
        else:
            target.mkdir(exist_ok=True)


def readings(root: pathlib.Path) -> pathlib.Path:
    return root / "accel" / "nvml-metrics.json"


def flip(root: pathlib.Path, pci: str, bad: bool) -> None:
    """Sets the recorded uncorrectable-ECC count of the device at `pci` (NVML's bus id form)."""
    path = readings(root)
    doc = json.loads(path.read_text())
    [dev] = [d for d in doc["devices"] if d["pci_bus_id"].lower()[-12:] == pci.lower()]
    dev["ecc_uncorrected_volatile"] = 3 if bad else 0
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    tmp.replace(path)


def wait_for(what: str, fn: Any, timeout_s: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@ray.remote(num_cpus=0)
class Trainer:
    """The job: a step is a read of the devices it was given."""

    def step(self) -> str:
        return os.environ.get("CUDA_VISIBLE_DEVICES", "")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("health")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    roots = {}
    try:
        for name in ("tray-a", "tray-b"):
            root = tmp / name
            unpack(BUNDLE, root)
            roots[name] = root
            spec = aray.node_spec(accel.discover(root), name)
            c.add_node(num_cpus=1, num_gpus=spec["num_gpus"], resources=spec["resources"], labels=spec["labels"])
        c.wait_for_nodes()
        ray.init(address=c.address, log_to_driver=False)
        for name, root in roots.items():
            aray.publish_machine(name, accel.discover(root))
            aray.publish_source(name, {"root": str(root)})
        yield {"roots": roots, "cluster": c}
    finally:
        ray.shutdown()
        c.shutdown()


def status(monitor: Any) -> dict[str, Any]:
    out: dict[str, Any] = ray.get(monitor.status.remote(), timeout=60)
    return out


def test_the_unpacked_capture_probes_healthy_in_rep71_shape(cluster: dict[str, Any]) -> None:
    r = json.loads(accel._native.probe_json(root=str(cluster["roots"]["tray-a"])))
    assert set(r) >= {"metrics", "devices", "events", "passed", "detail"}
    assert r["passed"] and [d["label"] for d in r["devices"]] == ["GPU0", "GPU1", "GPU2", "GPU3"]
    assert len(r["metrics"]["devices"]) == 4


def test_a_device_that_turns_bad_mid_run_is_reported_withdrawn_named_and_recovered(cluster: dict[str, Any], accel_bin: pathlib.Path) -> None:
    root = cluster["roots"]["tray-a"]
    agent = subprocess.Popen([str(accel_bin), "agent", "--root", str(root), "--listen", "127.0.0.1:0", "--interval", "0.5", "--node-name", "tray-a"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert agent.stderr is not None
    line = wait_for("the agent to serve", lambda: (lambda ln: ln if "serving " in ln else None)(agent.stderr.readline()), 60)
    url = line.strip().split("serving ", 1)[1].rstrip("/")
    monitors = aray.start_monitors(["tray-a"], period_s=PERIOD_S, policy="withdraw", recover_after=RECOVER_AFTER)
    monitor = monitors["tray-a"]
    apg = aray.placement_group({"bundles": [{"count": 1}], "select": {"node": "tray-a"}})
    try:
        trainer = Trainer.options(**apg.options(0)).remote()
        assert ray.get(trainer.step.remote(), timeout=120).startswith("GPU-")
        [dev] = apg.devices(0)
        label, device_id = dev["label"], dev["id"]
        pci = device_id.split("-", 1)[1]
        wait_for("two healthy probes", lambda: status(monitor)["seq"] >= 2)
        aray.check(["tray-a"])  # every device passed

        # The job's device turns bad mid-run.
        seq_at_flip = status(monitor)["seq"]
        flip(root, pci, bad=True)
        withdrawn = wait_for("the withdrawal", lambda: [e for e in status(monitor)["events"] if e["kind"] == "withdrawn"])
        [event] = withdrawn
        assert (event["label"], event["device"]) == (label, device_id)
        assert event["reasons"] == ["3 uncorrectable ECC errors"]
        assert event["seq"] - seq_at_flip <= 2, "reported within two periods"
        assert ray.get(trainer.step.remote(), timeout=60)  # the job itself keeps running

        last = aray.health("tray-a")["last"]  # type: ignore[index]
        assert set(last) >= {"metrics", "devices", "events", "passed", "detail"} and last["passed"] is False
        [bad] = [d for d in last["devices"] if not d["passed"]]
        assert (bad["label"], bad["state"]) == (label, "unhealthy") and label in last["detail"]
        with pytest.raises(aray.DeviceUnhealthy) as err:
            aray.check(["tray-a"])
        assert err.value.nodes == {"tray-a": {label: "unhealthy: 3 uncorrectable ECC errors"}}

        # The agent's page data and a metric name the device.
        def agent_says() -> bool:
            node = json.loads(urllib.request.urlopen(url + "/v1/node", timeout=10).read())
            page = [a for a in node["accelerators"] if a["id"] == device_id][0]["health"]
            metrics = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
            series = [m for m in metrics.splitlines() if m.startswith("accel_device_health{") and f'device="{label}"' in m]
            return page["state"] == "unhealthy" and len(series) == 1 and 'state="unhealthy"' in series[0] and 'reason="3 uncorrectable ECC errors"' in series[0]

        wait_for("the agent to name the device", agent_says, 30)

        # The job ends; new placements avoid the device.
        ray.kill(trainer)
        apg.remove()
        with pytest.raises(accel.Infeasible) as no:
            aray.placement_group({"bundles": [{"count": 4}], "select": {"node": "tray-a"}}, timeout_s=30)
        assert no.value.constraint == "health" and label in str(no.value)
        three = aray.placement_group({"bundles": [{"count": 3}], "select": {"node": "tray-a"}}, timeout_s=60)
        assert label not in [d["label"] for d in three.devices(0)]
        three.remove()

        # Recovery: healthy for RECOVER_AFTER probes in a row restores it, and says so.
        seq_at_fix = status(monitor)["seq"]
        flip(root, pci, bad=False)
        recovered = wait_for("the recovery", lambda: [e for e in status(monitor)["events"] if e["kind"] == "recovered"])
        assert recovered[0]["label"] == label and recovered[0]["seq"] - seq_at_fix >= RECOVER_AFTER
        assert recovered[0]["seq"] - seq_at_fix <= RECOVER_AFTER + 1
        aray.check(["tray-a"])
        whole = aray.placement_group({"bundles": [{"count": 4}], "select": {"node": "tray-a"}}, timeout_s=60)
        assert label in [d["label"] for d in whole.devices(0)]
        whole.remove()
        session = pathlib.Path(ray._private.worker._global_node.get_session_dir_path())
        logs = "".join(p.read_text(errors="replace") for p in (session / "logs").glob("worker-*") if p.is_file())
        assert re.search(rf"node tray-a {label} withdrawn", logs) and re.search(rf"node tray-a {label} recovered", logs)
    finally:
        flip(root, pci if "pci" in locals() else "0008:01:00.0", bad=False)
        ray.get(monitor.stop.remote(), timeout=60)
        ray.kill(monitor)
        agent.terminate()
        agent.wait(timeout=30)


def test_the_drain_policy_drains_the_node_through_rays_own_call(cluster: dict[str, Any]) -> None:
    root = cluster["roots"]["tray-b"]
    apg = aray.placement_group({"bundles": [{"count": 1}], "select": {"node": "tray-b"}})
    trainer = Trainer.options(**apg.options(0)).remote()
    assert ray.get(trainer.step.remote(), timeout=120)
    node_id = [n["NodeID"] for n in ray.nodes() if n["Alive"] and (n.get("Labels") or {}).get("accel.io/node") == "tray-b"][0]
    monitor = aray.start_monitors(["tray-b"], period_s=PERIOD_S, policy="drain")["tray-b"]
    wait_for("a healthy probe", lambda: status(monitor)["seq"] >= 1)
    [dev] = apg.devices(0)
    flip(root, dev["id"].split("-", 1)[1], bad=True)
    doc = wait_for("the drain", lambda: (aray.health("tray-b") or {}).get("drained"))
    assert doc["kind"] == "drained" and doc["node_id"] == node_id
    assert doc["reason"] == f"accel: {dev['label']} unhealthy: 3 uncorrectable ECC errors"
    # Ray's own view: the node drains (the job's actor keeps it up), nothing new lands there.
    assert node_id in ray._private.state.state.get_draining_nodes()
    assert ray.get(trainer.step.remote(), timeout=60)
    late = Trainer.options(label_selector={"accel.io/node": "tray-b"}).remote()
    ready, _ = ray.wait([late.step.remote()], timeout=5)
    assert not ready, "a drained node takes no new work"
    ray.kill(late)
    # Once the job is gone (the monitor left after draining), Ray retires the node.
    ray.kill(trainer)
    apg.remove()
    wait_for("the drained node to exit", lambda: not any(n["NodeID"] == node_id and n["Alive"] for n in ray.nodes()), 60)
