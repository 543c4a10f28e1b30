"""`accel cluster build --from-ray` against a real Ray 2.60 cluster (`ray.cluster_utils.Cluster`)
whose nodes carry sample machines published as `python -m accel.ray start` publishes them; and
`python -m accel.ray cluster-json`, the Python side it runs, without Ray."""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys

import pytest

import accel
import accel.ray as aray
from accel.ray import _export

# Node name -> (sample, planner labels given to `ray start`, as `accel.ray start` would).
NODES = {
    "gpu-a": ("dgx-h100", {"rack": "r1"}),
    "gpu-b": ("mi300x", {"rack": "r2"}),
}


def _run(accel_bin: pathlib.Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(accel_bin), *args], capture_output=True, text=True, timeout=120, env=env)


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        for name, (sample, labels) in NODES.items():
            spec = aray.node_spec(accel.sample(sample), name, labels)
            c.add_node(num_cpus=1, num_gpus=spec["num_gpus"], resources=spec["resources"], labels=spec["labels"])
        c.wait_for_nodes()
        ray.init(address=c.address, log_to_driver=False)
        for name, (sample, _) in NODES.items():
            aray.publish_machine(name, accel.sample(sample))
        yield c.address
    finally:
        ray.shutdown()
        c.shutdown()


def test_build_from_ray_with_labels_then_plan_and_export(ray_cluster: str, accel_bin: pathlib.Path, tmp_path: pathlib.Path) -> None:
    labels = tmp_path / "labels.txt"
    labels.write_text("# the file's labels join Ray's\ngpu-a zone=z1\ngpu-b zone=z2 rack=r9\n")
    out = tmp_path / "cluster.json"
    env = dict(os.environ, ACCEL_PYTHON=sys.executable)
    args = ["cluster", "build", "--from-ray", "--address", ray_cluster, "--labels", str(labels), "-o", str(out)]
    done = _run(accel_bin, *args, env=env)
    assert done.returncode == 0, done.stderr
    assert "2 nodes (gpu-a, gpu-b)" in done.stdout
    cluster = json.loads(out.read_text())
    nodes = {n["name"]: n for n in cluster["nodes"]}
    assert sorted(nodes) == ["gpu-a", "gpu-b"]
    # Ray's accel.io/* labels became planner labels; the file's were merged over them.
    assert nodes["gpu-a"]["labels"]["rack"] == "r1" and nodes["gpu-a"]["labels"]["zone"] == "z1"
    assert nodes["gpu-b"]["labels"]["rack"] == "r9"
    assert len(cluster["machines"][nodes["gpu-b"]["machine"]]["accelerators"]) == 8
    assert cluster["machines"][nodes["gpu-a"]["machine"]]["accelerators"][0]["vendor"] == "nvidia"

    request = tmp_path / "request.json"
    request.write_text(json.dumps({"bundles": [{"count": 4, "vendor": ["amd"]}], "select": {"zone": "z2"}}))
    placed = _run(accel_bin, "plan", "--cluster", str(out), "--request", str(request), "--json")
    assert placed.returncode == 0, placed.stderr
    assert json.loads(placed.stdout)["bundles"][0]["node"] == "gpu-b"

    slurm = tmp_path / "slurm"
    done = _run(accel_bin, "export", "slurm", "--cluster", str(out), "--out-dir", str(slurm))
    assert done.returncode == 0, done.stderr
    assert "NodeName=gpu-a " in (slurm / "nodes.conf").read_text()


def test_cluster_json_is_a_cluster_file_of_its_own(ray_cluster: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "accel.ray", "cluster-json", "--address", ray_cluster], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)  # stdout holds the document alone
    assert [n["name"] for n in doc["nodes"]] == ["gpu-a", "gpu-b"]
    planner = accel.Planner(doc)
    assert planner.plan({"bundles": [{"count": 8, "vendor": ["nvidia"]}]})["bundles"][0]["node"] == "gpu-a"


def test_an_interpreter_without_accel_is_one_clear_line(accel_bin: pathlib.Path, tmp_path: pathlib.Path) -> None:
    # An interpreter with neither accel nor Ray: `-I` ignores the environment and user site.
    shim = tmp_path / "bare-python"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -I -S \"$@\"\n")
    shim.chmod(0o755)
    env = dict(os.environ, ACCEL_PYTHON=str(shim))
    done = _run(accel_bin, "cluster", "build", "--from-ray", env=env)
    assert done.returncode == 2
    assert done.stderr.startswith("accel: error: --from-ray: the accel Python package is not installed in"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    # The right install command: this project's wheel, never the unrelated PyPI `accel`.
    assert "pip install dist/accel-*.whl" in done.stderr and "not `pip install accel`" in done.stderr, done.stderr

    env["ACCEL_PYTHON"] = str(tmp_path / "no-such-python")
    done = _run(accel_bin, "cluster", "build", "--from-ray", env=env)
    assert done.returncode == 2 and "set ACCEL_PYTHON" in done.stderr, done.stderr


def test_cluster_json_without_ray_says_so(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    assert _export.main([]) == 2
    err = capsys.readouterr().err
    assert "Ray is not installed in" in err and err.count("\n") == 1


def test_a_dead_ray_address_fails_fast_in_one_line(accel_bin: pathlib.Path) -> None:
    pytest.importorskip("ray")
    env = dict(os.environ, ACCEL_PYTHON=sys.executable)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = _run(accel_bin, "cluster", "build", "--from-ray", "--address", f"127.0.0.1:{port}", env=env)
    assert done.returncode == 2
    assert done.stderr.startswith("accel: error: --from-ray: ") and f"cannot reach Ray at 127.0.0.1:{port}" in done.stderr, done.stderr
    assert _export.unreachable("gcs-head") == "--address 'gcs-head' is not HOST:PORT"
    assert _export.unreachable("auto") is None
