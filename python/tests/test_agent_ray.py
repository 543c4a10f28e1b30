"""The agent's Ray-side pieces that need no cluster: the commands `accel.ray start --agent`
runs, the Grafana dashboard and the Prometheus file-SD entry, and the transport and weight-sync
metrics of a real process served by a real agent."""

from __future__ import annotations

import json
import os
import pathlib
import re
import socket
import subprocess
import time
import urllib.request

import numpy as np

import accel.transport as transport
from accel import weights
from accel.ray import _agent
from accel.ray._start import agent_commands

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_agent_commands_head_and_worker():
    head, head_sidecar = agent_commands(
        "n0", head=True, accel_bin="/x/accel", listen="0.0.0.0:9477", sample="gb200-nvl72-tray", token_file="/t", session_dir="/s", temp_dir="/tmp/ray"
    )
    assert head[:3] == ["/x/accel", "agent", "--listen"]
    assert ["--sample", "gb200-nvl72-tray"] == head[head.index("--sample") : head.index("--sample") + 2]
    assert "--cluster-file" in head and "/s/accel/cluster.json" in head
    assert "--token-file" in head and "--token-file" in head_sidecar
    assert head_sidecar[head_sidecar.index("--agent-url") + 1] == "http://127.0.0.1:9477", "the sidecar talks to its agent over loopback"
    assert head_sidecar[head_sidecar.index("--file-sd") + 1] == "/tmp/ray/accel_prom_metrics_service_discovery.json"
    worker, worker_sidecar = agent_commands("n1", head=False, accel_bin="accel", session_dir="/s")
    assert "--cluster-file" not in worker and "--cluster-file" not in worker_sidecar and "--file-sd" not in worker_sidecar


def test_grafana_dashboard_uses_only_documented_metrics(tmp_path, monkeypatch):
    dash = _agent.grafana_dashboard()
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    documented = (REPO / "docs" / "metrics.md").read_text()
    for expr in exprs:
        for name in re.findall(r"accel_[a-z_]+", expr):
            base = name.removesuffix("_total") if name.endswith("_total") and name != "accel_hw_errors_total" else name
            assert base in documented or name in documented, f"{name} is not in docs/metrics.md"
    monkeypatch.setenv("RAY_METRICS_GRAFANA_DASHBOARD_OUTPUT_DIR", str(tmp_path / "dash"))
    path = _agent.install_grafana_dashboard()
    assert json.loads(pathlib.Path(path).read_text())["uid"] == "accel-accelerators"
    assert pathlib.Path(path).parent == tmp_path / "dash"


def test_file_sd_lists_every_agent_and_its_transport_path():
    doc = {
        "nodes": [
            {"name": "a", "agent_url": "http://0.0.0.0:9477", "address": "10.0.0.5"},
            {"name": "b", "agent_url": "http://127.0.0.1:9478", "address": "10.0.0.6"},
            {"name": "c", "agent_url": "", "address": "10.0.0.7"},
        ]
    }
    groups = _agent.prometheus_file_sd(doc)
    assert [g["targets"] for g in groups] == [["10.0.0.5:9477"]] * 2 + [["127.0.0.1:9478"]] * 2
    assert groups[1]["labels"]["__metrics_path__"] == "/metrics/transport"
    assert all(g["labels"]["job"] == "accel-agent" for g in groups)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_transport_metrics_of_a_live_process_reach_the_agent(accel_bin, tmp_path):
    ref = transport.put(bytearray(b"x" * 4096))
    try:
        assert bytes(transport.get(ref))[:1] == b"x"
    finally:
        transport.free(ref)
    # One weight sync in this process (4 rows to 2 columns), so its series are written too.
    model = {"w": ((8, 8), "f32")}
    plan = weights.plan(weights.Layout.sharded(model, ranks=4, dim=0), weights.Layout.sharded(model, ranks=2, dim=1))
    ships = [weights.Sender(plan.for_source(r)).publish(1, {"w": np.ones((2, 8), np.float32)}) for r in range(4)]
    receiver = weights.Receiver(plan.for_destination(0))
    receiver.receive(ships)
    receiver.commit(1)
    path = transport.write_metrics(str(tmp_path))
    assert os.path.basename(path) == f"accel-transport-{os.getpid()}.prom"
    (tmp_path / "accel-transport-999999999.prom").write_text("accel_transport_live_buffers 7\n")  # no such process
    port = _free_port()
    agent = subprocess.Popen(
        [str(accel_bin), "agent", "--sample", "mi300x", "--listen", f"127.0.0.1:{port}", "--transport-dir", str(tmp_path)],
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics/transport", timeout=2) as r:
                    text = r.read().decode()
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
    finally:
        agent.terminate()
        agent.wait(timeout=10)
    assert f'accel_transport_transfers_total{{pid="{os.getpid()}",path=' in text, text
    assert f'accel_weight_sync_steps_total{{pid="{os.getpid()}",role="receive",outcome="ok"}}' in text, text
    assert f'accel_weight_sync_last_seconds{{pid="{os.getpid()}",role="receive",phase="pause"}}' in text
    assert "999999999" not in text, "a dead process's file is skipped"
    assert text.count("# TYPE accel_transport_transfers_total counter") == 1


def test_a_network_agent_gets_tls_and_its_sidecar_reads_it_over_tls(accel_bin, tmp_path):
    """Beyond loopback the agent needs TLS: `--agent-tls-cert/--agent-tls-key` reach it, and its
    sidecar reads `https://127.0.0.1:PORT` trusting exactly the agent's certificate; the
    Prometheus entry says https."""
    import subprocess

    from tlsfiles import tls_files

    agent, sidecar = agent_commands("n0", head=True, accel_bin="accel", listen="0.0.0.0:9477", token_file="/t", tls_cert="/c.pem", tls_key="/k.pem", session_dir="/s")
    assert agent[agent.index("--tls-cert") + 1] == "/c.pem" and agent[agent.index("--tls-key") + 1] == "/k.pem"
    assert sidecar[sidecar.index("--agent-url") + 1] == "https://127.0.0.1:9477" and sidecar[sidecar.index("--agent-cert") + 1] == "/c.pem"
    [group, _] = _agent.prometheus_file_sd({"nodes": [{"name": "a", "agent_url": "https://0.0.0.0:9477", "address": "10.0.0.5"}]})
    assert group["labels"]["__scheme__"] == "https" and group["targets"] == ["10.0.0.5:9477"]
    _, cert, key = tls_files(tmp_path / "tls")
    token = tmp_path / "token"
    token.write_text("tls-token-0123456789abcdef\n")
    token.chmod(0o600)
    proc = subprocess.Popen([str(accel_bin), "agent", "--sample", "gb200-nvl72-tray", "--node-name", "n0", "--listen", "127.0.0.1:0", "--token-file", str(token), "--tls-cert", str(cert), "--tls-key", str(key)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        assert line.startswith("accel agent: serving https://"), line
        url = line.strip().split("serving ", 1)[1].rstrip("/")
        doc = _agent.fetch_readings(url, "tls-token-0123456789abcdef", context=_agent.agent_context(str(cert)))
        assert doc["node"] == "n0" and doc["readings"]["devices"], "the recorded readings, read over TLS"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
