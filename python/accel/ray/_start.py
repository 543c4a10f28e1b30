"""`ray start` with accel's view of the node: one custom resource per device, the device-kind
counts, `accel.io/*` labels, and the machine published to Ray's KV for the planner."""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import shutil
import socket
import subprocess
import sys
from typing import Any

from .. import discover
from .._plan import sample
from ._placement import _label_value, node_spec, publish_machine


def ray_start_command(machine: dict[str, Any], name: str, ray_args: list[str]) -> list[str]:
    """The `ray start` command line for a node backed by `machine`."""
    spec = node_spec(machine, name)
    cmd = ["ray", "start", f"--num-gpus={spec['num_gpus']}"]
    if spec["resources"]:
        cmd.append("--resources=" + json.dumps(spec["resources"], sort_keys=True, separators=(",", ":")))
    cmd.append("--labels=" + ",".join(f"{k}={v}" for k, v in sorted(spec["labels"].items())))
    return cmd + list(ray_args)


def agent_commands(
    name: str,
    *,
    head: bool,
    accel_bin: str,
    listen: str = "127.0.0.1:9477",
    sample: str | None = None,
    root: str | None = None,
    token_file: str | None = None,
    session_dir: str = "/tmp/ray/session_latest",
    temp_dir: str = "/tmp/ray",
) -> list[list[str]]:
    """The node agent and its Ray sidecar started beside `ray start` (`--agent`): the agent
    serves this node; on the head it also serves the cluster document the head's sidecar
    writes, and the sidecar writes the Prometheus file-SD entry of every node's agent."""
    state = os.path.join(session_dir, "accel")
    agent = [accel_bin, "agent", "--listen", listen, "--node-name", name, "--transport-dir", os.path.join(state, "transport")]
    if sample:
        agent += ["--sample", sample]
    elif root:
        agent += ["--root", root]
    host, _, port = listen.rpartition(":")
    local = f"127.0.0.1:{port}" if host in ("0.0.0.0", "[::]", "") else listen
    sidecar = [sys.executable, "-m", "accel.ray", "sidecar", "--node-name", name, "--agent-url", f"http://{local}"]
    if token_file:
        agent += ["--token-file", token_file]
        sidecar += ["--token-file", token_file]
    if head:
        cluster = os.path.join(state, "cluster.json")
        agent += ["--cluster-file", cluster]
        sidecar += ["--cluster-file", cluster, "--file-sd", os.path.join(temp_dir, "accel_prom_metrics_service_discovery.json")]
    return [agent, sidecar]


def _start_agent(args: argparse.Namespace, name: str, ray_args: list[str]) -> int:
    """Starts the agent and the sidecar as daemons (logs in the session's logs directory)."""
    from ._agent import install_grafana_dashboard, ray_session_dir

    accel_bin = os.environ.get("ACCEL_BIN") or shutil.which("accel")
    if not accel_bin:
        print("accel: --agent needs the `accel` binary on PATH (or ACCEL_BIN)", file=sys.stderr)
        return 2
    temp_dir = next((a.split("=", 1)[1] for a in ray_args if a.startswith("--temp-dir=")), None)
    session = os.path.realpath(ray_session_dir(temp_dir))
    head = "--head" in ray_args
    cmds = agent_commands(
        name,
        head=head,
        accel_bin=accel_bin,
        listen=args.agent_listen,
        sample=args.sample,
        root=args.root,
        token_file=args.agent_token_file,
        session_dir=session,
        temp_dir=temp_dir or os.path.dirname(session),
    )
    os.makedirs(os.path.join(session, "accel"), exist_ok=True)
    os.makedirs(os.path.join(session, "logs"), exist_ok=True)
    for cmd, log in zip(cmds, ("accel-agent", "accel-sidecar")):
        with open(os.path.join(session, "logs", log + ".log"), "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True)
        print(f"accel: started {log} (pid {proc.pid}): {shlex.join(cmd)}", file=sys.stderr)
    if head:
        print(f"accel: Grafana dashboard {install_grafana_dashboard(temp_dir=temp_dir)}", file=sys.stderr)
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m accel.ray",
        description="Start a Ray node with the resources and labels accel discovers on this machine.",
    )
    parser.add_argument("command", choices=["start"])
    parser.add_argument("--node-name", help="the planner's name for this node (default: the hostname)")
    parser.add_argument("--sample", help="use an embedded sample machine instead of this one (demos, tests)")
    parser.add_argument("--root", help="discover a captured machine (a directory holding sys/ and proc/)")
    parser.add_argument("--dry-run", action="store_true", help="print the ray start command and exit")
    parser.add_argument("--agent", action="store_true", help="also start `accel agent` and its Ray sidecar on this node")
    parser.add_argument("--agent-listen", default="127.0.0.1:9477", help="the agent's address (non-loopback needs a token)")
    parser.add_argument("--agent-token-file", help="the agent's bearer token file")
    args, ray_args = parser.parse_known_args(argv)
    machine = sample(args.sample) if args.sample else discover(args.root)
    # The node's name is a label value too (accel.io/node), so it takes the label alphabet.
    name = _label_value(args.node_name or machine.get("host", {}).get("hostname") or socket.gethostname())
    cmd = ray_start_command(machine, name, ray_args)
    if args.dry_run:
        print(shlex.join(cmd))
        if args.agent:
            for extra in agent_commands(
                name,
                head="--head" in ray_args,
                accel_bin=os.environ.get("ACCEL_BIN") or shutil.which("accel") or "accel",
                listen=args.agent_listen,
                sample=args.sample,
                root=args.root,
                token_file=args.agent_token_file,
            ):
                print(shlex.join(extra))
        return 0
    rc = subprocess.call(cmd)
    if rc != 0:
        return rc
    import ray

    ray.init(address="auto", logging_level=logging.ERROR)
    try:
        publish_machine(name, machine)
    finally:
        ray.shutdown()
    print(f"accel: node {name} published ({len(machine.get('accelerators', []))} accelerators)", file=sys.stderr)
    if args.agent:
        return _start_agent(args, name, ray_args)
    return 0
