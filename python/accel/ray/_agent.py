"""The cluster view behind `accel agent`'s dashboard, and the sidecar that feeds it.

The Rust agent does not speak Ray's GCS protocol. A small sidecar process (started by
`python -m accel.ray start --agent`, one per node) does it for the agent, over Ray's own client:

- every node's sidecar reads its agent's latest readings (`GET /v1/readings`) and stores them in
  Ray's internal KV (namespace `accel`, key `readings:<node>`), beside the machine that
  `accel.ray start` already stored (`machine:<node>`);
- the head node's sidecar also builds the cluster document (`cluster_document()`): every alive
  accel node with its machine and latest readings, every placement group with the accel
  devices each bundle holds (from the bundles' `accel_dev_*` resources), and every actor with the
  placement group, bundle and devices it runs on. It writes the document atomically to a file,
  which the head agent serves at `/v1/cluster` (`accel agent --cluster-file`).

Nothing here guesses: a device is shown as held only when a bundle reserved its per-device
resource, and readings are as old as `readings_at` says (one sidecar interval at most).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import socket
import ssl
import sys
import tempfile
import time
import urllib.request
from typing import Any

from ._placement import KV_NAMESPACE, KV_PREFIX, _ray_nodes, cluster_from_ray, device_resource

READINGS_PREFIX = "readings:"
# Ray renames a bundle's resources `<name>_group_<bundle index>_<placement group id>`.
_BUNDLE_RESOURCE = re.compile(r"^(?P<name>.+)_group_(?P<bundle>\d+)_(?P<pg>[0-9a-f]+)$")


def agent_context(cert: str | None) -> ssl.SSLContext | None:
    """How a process on this node trusts its own agent over TLS: exactly the agent's certificate
    file (`--tls-cert`), as a trust anchor of its own, whatever name it was issued for (the
    agent is reached at 127.0.0.1). None without TLS."""
    if not cert:
        return None
    context = ssl.create_default_context(cafile=cert)
    context.check_hostname = False
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    return context


def fetch_readings(agent_url: str, token: str | None = None, timeout_s: float = 5.0, context: ssl.SSLContext | None = None) -> dict[str, Any]:
    """The agent's latest readings document (`GET /v1/readings`)."""
    req = urllib.request.Request(agent_url.rstrip("/") + "/v1/readings")
    if token:
        req.add_header("Authorization", "Bearer " + token)
    with urllib.request.urlopen(req, timeout=timeout_s, context=context) as resp:  # noqa: S310 (the local agent)
        doc: dict[str, Any] = json.loads(resp.read(16 << 20))
    return doc


def publish_readings(name: str, doc: dict[str, Any], agent_url: str = "") -> None:
    """Stores a node's readings in Ray's KV (needs `ray.init`), stamped with the time, with the
    address its agent listens on (for the Prometheus file-SD entry)."""
    from ray.experimental import internal_kv

    payload = {"readings": doc.get("readings", {}), "readers": doc.get("readers", []), "at": time.time(), "agent_url": agent_url}
    internal_kv._internal_kv_put(READINGS_PREFIX + name, json.dumps(payload), overwrite=True, namespace=KV_NAMESPACE)


def _kv_json(key: str) -> Any:
    from ray.experimental import internal_kv

    raw = internal_kv._internal_kv_get(key, namespace=KV_NAMESPACE)
    return None if raw is None else json.loads(raw)


def _devices_for(machine: dict[str, Any], resources: dict[str, Any]) -> list[str]:
    """The accelerator ids of `machine` whose per-device resource is among `resources`."""
    names = set(resources)
    return [a["id"] for a in machine.get("accelerators", []) if device_resource(a["vendor"], a["index"]) in names]


def _actors() -> list[dict[str, Any]]:
    """Every actor with its node, placement group, bundle and raw resource names, from the GCS
    actor table (the state API needs the dashboard; this does not)."""
    import ray
    from ray._private import state
    from ray.core.generated import gcs_pb2

    accessor = state.state._connect_and_get_accessor()
    table: Any = getattr(gcs_pb2, "ActorTableData")  # generated protobuf code, untyped
    out = []
    for raw in accessor.get_actor_table(None, None):
        data = table.FromString(raw)
        required = dict(data.required_resources)
        pg_id = ""
        bundle = None
        plain: dict[str, float] = {}
        for key, value in required.items():
            m = _BUNDLE_RESOURCE.match(key)
            if m:
                pg_id, bundle = m.group("pg"), int(m.group("bundle"))
                plain[m.group("name")] = value
            elif "_group_" not in key:
                plain.setdefault(key, value)
        if not pg_id and data.placement_group_id:
            pg_id = data.placement_group_id.hex()
        out.append(
            {
                "id": data.actor_id.hex(),
                "class_name": data.class_name,
                "state": table.ActorState.Name(data.state),
                "node_id": data.address.node_id.hex(),
                "placement_group_id": pg_id,
                "bundle_index": bundle,
                "resources": plain,
            }
        )
    del ray
    return out


def cluster_document() -> dict[str, Any]:
    """The whole cluster as the dashboard draws it (needs `ray.init`)."""
    from ray.util import placement_group_table

    view = cluster_from_ray()
    ray_nodes = _ray_nodes()
    by_ray_id = {node["NodeID"]: name for name, node in ray_nodes.items()}
    machines = {n["name"]: n["machine"] for n in view["nodes"]}
    nodes = []
    for n in view["nodes"]:
        stored = _kv_json(READINGS_PREFIX + n["name"]) or {}
        ray_node = ray_nodes.get(n["name"], {})
        nodes.append(
            {
                "name": n["name"],
                "ray_node_id": ray_node.get("NodeID", ""),
                "alive": bool(ray_node.get("Alive", False)),
                "labels": n["labels"],
                "machine": n["machine"],
                "readings": stored.get("readings", {"devices": [], "links": []}),
                "readers": stored.get("readers", []),
                "readings_at": stored.get("at"),
                "agent_url": stored.get("agent_url", ""),
                "address": ray_node.get("NodeManagerAddress", ""),
            }
        )
    pgs = []
    for pg_id, pg in sorted(placement_group_table().items()):
        # Ray keeps a removed group in its table: it holds nothing, so the view drops it.
        if pg.get("state") == "REMOVED":
            continue
        bundles = []
        for index, resources in sorted(pg.get("bundles", {}).items()):
            node = by_ray_id.get(pg.get("bundles_to_node_id", {}).get(index, ""), "")
            devices = _devices_for(machines.get(node, {}), resources) if node else []
            bundles.append({"index": int(index), "node": node, "resources": resources, "devices": devices})
        pgs.append(
            {"id": pg_id, "name": pg.get("name", ""), "state": pg.get("state", ""), "strategy": pg.get("strategy", ""), "bundles": bundles}
        )
    actors = []
    for actor in _actors():
        node = by_ray_id.get(actor["node_id"], "")
        actor["node"] = node
        actor["devices"] = _devices_for(machines.get(node, {}), actor["resources"]) if node else []
        actors.append(actor)
    return {"source": "ray", "updated_at": time.time(), "nodes": nodes, "placement_groups": pgs, "actors": actors}


def prometheus_file_sd(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Prometheus file-based service discovery for every node's agent in a cluster document:
    one target group for `/metrics` and one for `/metrics/transport` (`__metrics_path__`). An
    agent listening on a wildcard address is reached at its Ray node's address."""
    groups: list[dict[str, Any]] = []
    for node in doc.get("nodes", []):
        url = node.get("agent_url") or ""
        scheme, sep, rest = url.partition("://")
        if not sep or scheme not in ("http", "https"):
            continue
        hostport = rest.rstrip("/")
        host, _, port = hostport.rpartition(":")
        if host in ("0.0.0.0", "[::]", "") and node.get("address"):
            hostport = f"{node['address']}:{port}"
        labels = {"job": "accel-agent", "accel_node": node["name"]}
        if scheme == "https":
            labels["__scheme__"] = "https"
        groups.append({"targets": [hostport], "labels": labels})
        groups.append({"targets": [hostport], "labels": labels | {"__metrics_path__": "/metrics/transport"}})
    return groups


def grafana_dashboard() -> dict[str, Any]:
    """The Grafana dashboard of the agent's metrics (device utilisation, memory, power,
    temperature, link throughput and errors, reader health), on a `datasource` variable so it
    works with Ray's provisioned Prometheus data source."""

    def panel(i: int, title: str, expr: str, unit: str, legend: str = "{{accel_node}} #{{index}} {{model}}") -> dict[str, Any]:
        return {
            "id": i,
            "type": "timeseries",
            "title": title,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"h": 8, "w": 12, "x": 12 * ((i - 1) % 2), "y": 8 * ((i - 1) // 2)},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "targets": [{"refId": "A", "expr": expr, "legendFormat": legend, "datasource": {"type": "prometheus", "uid": "${datasource}"}}],
        }

    sel = '{accel_node=~"$node"}'
    panels = [
        panel(1, "Accelerator utilisation", f"accel_hw_gpu_utilization_ratio{sel}", "percentunit"),
        panel(2, "Accelerator memory used", f"accel_hw_gpu_memory_usage_bytes{sel}", "bytes"),
        panel(3, "Power", f"accel_hw_power_watts{sel}", "watt"),
        panel(4, "Temperature", f"accel_hw_temperature_celsius{sel}", "celsius"),
        panel(
            5,
            "Scale-up link throughput",
            f"sum by (accel_node, index, model, direction) (rate(accel_hw_gpu_link_io_bytes_total{sel}[1m]))",
            "Bps",
            "{{accel_node}} #{{index}} {{direction}}",
        ),
        panel(6, "Errors (ECC, RAS, links)", f"increase(accel_hw_errors_total{sel}[5m])", "short", "{{accel_node}} #{{index}} {{error_type}}"),
        panel(7, "Readers up", f"accel_reader_up{sel}", "short", "{{accel_node}} {{reader}} ({{source}})"),
        panel(
            8,
            "Transport bytes",
            f"sum by (accel_node, path, role) (rate(accel_transport_bytes_total{sel}[1m]))",
            "Bps",
            "{{accel_node}} {{path}} {{role}}",
        ),
    ]
    return {
        "uid": "accel-accelerators",
        "title": "accel: accelerators and links",
        "tags": ["accel", "ray"],
        "schemaVersion": 39,
        "time": {"from": "now-30m", "to": "now"},
        "refresh": "10s",
        "templating": {
            "list": [
                {"name": "datasource", "type": "datasource", "query": "prometheus", "current": {}, "hide": 0},
                {
                    "name": "node",
                    "type": "query",
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "query": "label_values(accel_device_info, accel_node)",
                    "includeAll": True,
                    "multi": True,
                    "current": {"text": "All", "value": "$__all"},
                    "refresh": 2,
                },
            ]
        },
        "panels": panels,
    }


def default_ray_temp_dir() -> str:
    """Ray's temp dir when none is given (`RAY_TMPDIR`, `TMPDIR`, `/tmp`, then `ray`)."""
    try:
        from ray._common.utils import get_default_ray_temp_dir

        return str(get_default_ray_temp_dir())
    except ImportError:
        return os.path.join(os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp", "ray")


def install_grafana_dashboard(directory: str | None = None, session_dir: str | None = None) -> str:
    """Writes the dashboard into Ray's Grafana dashboards directory
    (`RAY_METRICS_GRAFANA_DASHBOARD_OUTPUT_DIR`, default
    `<session>/metrics/grafana/dashboards` of `session_dir`, or of the session Ray's
    `session_latest` link names), where Ray's provisioning shows it in the "Ray" folder.
    Returns the file written."""
    directory = directory or os.environ.get("RAY_METRICS_GRAFANA_DASHBOARD_OUTPUT_DIR")
    if not directory:
        if session_dir is None:
            latest = os.path.join(default_ray_temp_dir(), "session_latest")
            if not os.path.islink(latest):
                raise FileNotFoundError(f"no Ray session at {latest}; start Ray first or pass session_dir")
            session_dir = os.path.realpath(latest)
        directory = os.path.join(session_dir, "metrics", "grafana", "dashboards")
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "accel_grafana_dashboard.json")
    write_json_atomic(path, grafana_dashboard())
    return path


def write_json_atomic(path: str, doc: Any) -> None:
    """Writes `doc` to `path` through a temporary file and a rename, so the agent never reads
    half a document."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".cluster-", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def gcs_reachable(address: str, timeout_s: float = 2.0) -> bool:
    """Whether the Ray cluster's GCS (`host:port`) still accepts connections."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def run_sidecar(
    name: str,
    agent_url: str,
    *,
    token: str | None = None,
    cluster_file: str | None = None,
    file_sd: str | None = None,
    interval_s: float = 5.0,
    once: bool = False,
    gcs_address: str | None = None,
    ready_file: str | None = None,
    context: ssl.SSLContext | None = None,
) -> str:
    """Publishes this node's readings every `interval_s`, and on the head (`cluster_file` given)
    writes the cluster document, stamped with `interval_s` so the agent can tell when it went
    stale. Needs `ray.init(address=...)` first. A failing agent read is reported on stderr and
    retried. After the first round it writes `ready_file`. With `gcs_address`, it returns
    "gone" once the cluster's GCS refuses two rounds in a row (Ray stopped); with `once`, "once"
    after one round."""
    missed = 0
    first = True
    while True:
        if gcs_address is not None:
            if gcs_reachable(gcs_address):
                missed = 0
            else:
                missed += 1
                if missed >= 2:
                    print(f"accel sidecar: the Ray cluster at {gcs_address} is gone; exiting", file=sys.stderr)
                    return "gone"
                time.sleep(min(interval_s, 1.0))
                continue
        try:
            publish_readings(name, fetch_readings(agent_url, token, context=context), agent_url)
        except OSError as e:
            print(f"accel sidecar: cannot read the agent at {agent_url}: {e}", file=sys.stderr)
        if cluster_file:
            doc = cluster_document()
            doc["interval_s"] = interval_s
            write_json_atomic(cluster_file, doc)
            if file_sd:
                write_json_atomic(file_sd, prometheus_file_sd(doc))
        if first and ready_file:
            with open(ready_file, "w") as f:
                f.write(f"{time.time()}\n")
        first = False
        if once:
            return "once"
        time.sleep(interval_s)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m accel.ray sidecar", description=run_sidecar.__doc__)
    parser.add_argument("--node-name", required=True, help="this node's accel name (accel.io/node)")
    parser.add_argument("--agent-url", default="http://127.0.0.1:9477", help="the local agent")
    parser.add_argument("--token-file", help="the agent's bearer token file")
    parser.add_argument("--agent-cert", help="the agent's TLS certificate (its --tls-cert), trusted for an https:// --agent-url")
    parser.add_argument("--cluster-file", help="head only: where to write the cluster document")
    parser.add_argument("--file-sd", help="head only: where to write the Prometheus file-SD entry of every agent")
    parser.add_argument("--address", default="auto", help="the Ray cluster (default: auto)")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between rounds")
    parser.add_argument("--once", action="store_true", help="one round, then exit")
    parser.add_argument("--ready-file", help="written after the first round (`accel.ray start` waits for it)")
    args = parser.parse_args(argv)
    token = None
    if args.token_file:
        with open(args.token_file) as f:
            token = f.readline().strip()
    import ray

    ray.init(address=args.address, logging_level=logging.ERROR, log_to_driver=False)
    how = "once"
    try:
        how = run_sidecar(
            args.node_name,
            args.agent_url,
            token=token,
            cluster_file=args.cluster_file,
            file_sd=args.file_sd,
            interval_s=args.interval,
            once=args.once,
            gcs_address=str(ray.get_runtime_context().gcs_address),
            ready_file=args.ready_file,
            context=agent_context(args.agent_cert),
        )
    finally:
        if how != "gone":
            ray.shutdown()
    if how == "gone":
        # Ray's client would wait for the vanished cluster at shutdown: leave without it.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


__all__ = ["KV_PREFIX", "cluster_document", "fetch_readings", "grafana_dashboard", "install_grafana_dashboard"]
__all__ += ["prometheus_file_sd", "publish_readings", "run_sidecar", "write_json_atomic"]
