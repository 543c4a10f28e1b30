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
    for verb in ("version", "discover", "health"):
        out = call(verb)
        assert out.returncode == 0, out.stderr
        jsonschema.validate(json.loads(out.stdout), schema(f"{verb}.response"))
    devices = json.loads(call("discover").stdout)["accelerators"]
    assert len(devices) == 8
    iso = call("isolate", {"protocol": 1, "devices": devices[2:4]})
    answer = json.loads(iso.stdout)
    jsonschema.validate(answer, schema("isolate.response"))
    assert list(answer["env"].values()) == ["2,3"]
    assert call("metrics").returncode == 3  # not provided


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
