"""The plugin protocol from Python: the example Ascend plugin's answers validate against the
published JSON Schemas (with `jsonschema`, patterns included), and through the protocol alone
its NPUs reach `accel.discover`, `accel.plan` and the Ray node spec and visibility."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import jsonschema
import pytest

import accel
import accel.ray as aray

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "plugins" / "ascend"
CAPTURE = EXAMPLE / "capture"
SCHEMAS = REPO / "docs" / "plugin-protocol"


def schema(name: str) -> dict:
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text())


def call(verb: str, stdin: dict | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, ACCEL_ROOT=str(CAPTURE), ACCEL_PROTOCOL="1")
    return subprocess.run(
        [sys.executable, str(EXAMPLE / "accel-plugin-ascend"), verb],
        input=json.dumps(stdin or {}),
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )


def test_schemas_are_valid_json_schemas():
    for path in SCHEMAS.glob("*.schema.json"):
        jsonschema.Draft202012Validator.check_schema(json.loads(path.read_text()))


def test_ascend_answers_validate():
    for verb in ("version", "discover", "health", "metrics"):
        out = call(verb)
        assert out.returncode == 0, out.stderr
        jsonschema.validate(json.loads(out.stdout), schema(f"{verb}.response"))
    devices = json.loads(call("discover").stdout)["accelerators"]
    assert len(devices) == 8
    iso = call("isolate", {"protocol": 1, "devices": devices[2:4]})
    answer = json.loads(iso.stdout)
    jsonschema.validate(answer, schema("isolate.response"))
    assert list(answer["env"].values()) == ["2,3"]
    # The recorded `npu-smi info` in the capture (README.md): NPUs 0-2, real readings.
    metrics = json.loads(call("metrics").stdout)["devices"]
    assert [d["pci"] for d in metrics] == [d["pci"] for d in devices[:3]]
    assert metrics[0]["power_watts"] == 105.8 and metrics[0]["memory_used_bytes"] == 3385 << 20
    assert call("nope").returncode == 3


@pytest.fixture
def ascend_plugins(monkeypatch):
    monkeypatch.setenv("ACCEL_PLUGIN_DIR", str(EXAMPLE))


def test_ascend_through_python(ascend_plugins):
    m = accel.discover(root=CAPTURE)
    npus = [a for a in m["accelerators"] if a["plugin"] == "ascend"]
    assert len(npus) == 8 and not m["warnings"]
    spec = aray.node_spec(m, "atlas-0")
    assert spec["num_gpus"] == 0 and spec["resources"][npus[0]["vocabulary"]["ray_resource"]] == 8
    var = npus[0]["vocabulary"]["visibility_env"]
    env = aray.visibility_env(m, [npus[6]["id"], npus[1]["id"]])
    assert env == {var: "6,1", f"RAY_EXPERIMENTAL_NOSET_{var}": "1"}
    placed = accel.plan({"nodes": [{"name": "atlas-0", "machine": m}]}, {"bundles": [{"count": 2, "same_numa": True}]})
    assert [d["label"] for d in placed["bundles"][0]["devices"]] == ["NPU0", "NPU1"]


def test_without_the_plugin_the_npus_are_unknown(monkeypatch):
    monkeypatch.delenv("ACCEL_PLUGIN_DIR", raising=False)
    m = accel.discover(root=CAPTURE)
    assert {a["plugin"] for a in m["accelerators"]} == {"generic-pci"}


def test_ascend_placement_group_on_real_ray(ascend_plugins):
    """A Ray node started from the plugin's own resource (`NPU`), a real placement group for a
    bundle of its NPUs, and an actor in it that sees exactly those NPUs, in the order the
    plugin's own `isolate` gave them."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    m = accel.discover(root=CAPTURE)
    spec = aray.node_spec(m, "atlas-0")
    assert spec["resources"]["NPU"] == 8 and spec["num_gpus"] == 0

    @ray.remote(num_cpus=0)
    class Probe:
        def env(self):
            return {k: os.environ.get(k) for k in ("ASCEND_RT_VISIBLE_DEVICES", "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES")}

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        c.add_node(num_cpus=1, resources=spec["resources"], labels=spec["labels"])
        c.wait_for_nodes()
        ray.init(address=c.address, log_to_driver=False)
        aray.publish_machine("atlas-0", m)
        apg = aray.placement_group({"bundles": [{"count": 2, "same_numa": True, "dtypes": ["bf16"]}]})
        try:
            devices = apg.devices(0)
            assert apg.node(0) == "atlas-0" and all(d["label"].startswith("NPU") for d in devices)
            assert apg.resources(0)["NPU"] == 2
            actor = Probe.options(**apg.options(0)).remote()
            seen = ray.get(actor.env.remote(), timeout=120)
            ray.kill(actor)
            assert seen["ASCEND_RT_VISIBLE_DEVICES"] == ",".join(d["label"][3:] for d in devices)
            assert seen["RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"] == "1"
        finally:
            apg.remove()
    finally:
        ray.shutdown()
        c.shutdown()
