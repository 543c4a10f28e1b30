"""Discovery through the Python API agrees with the CLI and fails with accel's exceptions."""

from __future__ import annotations

import json
import subprocess

import pytest

import accel


def test_python_and_cli_agree_on_a_capture(capture, accel_bin):
    root = capture("hwloc-2p8co2t-8ve")
    from_py = accel.discover(root)
    from_cli = json.loads(subprocess.run([accel_bin, "discover", "--root", root, "--json"], check=True, capture_output=True, text=True).stdout)
    assert from_py == from_cli
    assert from_py["schema_version"] == 1
    assert len(from_py["accelerators"]) == 8
    assert {a["numa_node"] for a in from_py["accelerators"]} == {0}


def test_live_machine():
    machine = accel.discover()
    assert machine["numa_nodes"], "every Linux machine has at least one NUMA node"


def test_errors_are_accel_exceptions(tmp_path, capture):
    with pytest.raises(accel.DiscoveryError, match="no sys/ directory"):
        accel.discover(tmp_path)
    bad = tmp_path / "bad.toml"
    bad.write_text("[[sku]]\nid = 3\n")
    with pytest.raises(accel.AccelError, match="bad.toml:2:6"):
        accel.discover(capture("hwloc-2p8co2t-8ve"), sku_files=[bad])
