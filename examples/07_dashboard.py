"""Guide chapter 7: run the node agent and read it as a dashboard or Prometheus would
(docs/guide/07-dashboard.md). Starts `accel agent` on a free loopback port with an embedded
capture (recorded readings), reads /v1/node, /v1/health and /metrics, and stops it."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

ACCEL = shutil.which("accel") or sys.exit("accel is not on PATH (see docs/guide/README.md)")


def free_port() -> int:
    """A port nothing listens on now (the agent binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:
        return bytes(response.read())


port = free_port()
base = f"http://127.0.0.1:{port}"
agent = subprocess.Popen(
    [ACCEL, "agent", "--sample", "gb200-nvl72-tray", "--listen", f"127.0.0.1:{port}", "--interval", "1"],
    stdout=subprocess.DEVNULL,
    stderr=subprocess.PIPE,
    text=True,
)
try:
    # Wait until the first sample is in: /v1/health answers once the server is up.
    deadline = time.monotonic() + 60
    while True:
        if agent.poll() is not None:
            sys.exit(f"accel agent exited {agent.returncode}: {agent.stderr.read() if agent.stderr else ''}")
        try:
            health = json.loads(get(f"{base}/v1/health"))
            break
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                sys.exit("accel agent did not answer within 60 s")
            time.sleep(0.2)
    print("health:", health["status"])

    # The node's model: the same document as `accel discover --json`.
    node = json.loads(get(f"{base}/v1/node"))
    gpus = [a for a in node["accelerators"] if a["vocabulary"].get("label") == "GPU"]
    print(f"node: {len(gpus)} GPUs, {len(node['links'])} links")
    assert len(gpus) == 4, node["accelerators"]

    # OpenMetrics: what Prometheus scrapes. Print a few series.
    metrics = get(f"{base}/metrics").decode()
    wanted = ("accel_device_info", "accel_hw_power_watts", "accel_hw_gpu_memory_usage_bytes")
    shown = [line for line in metrics.splitlines() if line.startswith(wanted)]
    for name in wanted:
        series = sorted(line for line in shown if line.startswith(name + "{"))  # the first device's first
        assert series, f"no {name} series in /metrics:\n{metrics[:2000]}"
        print(f"{series[0]}   (+{len(series) - 1} more)")
    assert metrics.rstrip().endswith("# EOF"), "OpenMetrics text ends with # EOF"
finally:
    agent.terminate()
    try:
        agent.wait(timeout=10)
    except subprocess.TimeoutExpired:
        agent.kill()
        agent.wait()
print(f"dashboard was at {base}/ (open it in a browser while the agent runs)")
