"""`ray start` with accel's view of the node: one custom resource per device, the device-kind
counts, `accel.io/*` labels, and the machine published to Ray's KV for the planner."""

from __future__ import annotations

import argparse
import json
import logging
import shlex
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
    args, ray_args = parser.parse_known_args(argv)
    machine = sample(args.sample) if args.sample else discover(args.root)
    # The node's name is a label value too (accel.io/node), so it takes the label alphabet.
    name = _label_value(args.node_name or machine.get("host", {}).get("hostname") or socket.gethostname())
    cmd = ray_start_command(machine, name, ray_args)
    if args.dry_run:
        print(shlex.join(cmd))
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
    return 0
