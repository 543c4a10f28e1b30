"""CPU and NIC affinity for a planned bundle's worker.

`affinity_env` gives a bundle's variables: `ACCEL_CPUS` (the CPUs of the planned devices' NUMA
nodes) and the nearest RDMA NICs of the planned devices in the variables their libraries read:
`NCCL_IB_HCA` (NCCL and RCCL, exact names: `=mlx5_0,mlx5_3`) and `UCX_NET_DEVICES` (UCX, and
so NIXL's UCX backend and Ray's NIXL transport: `mlx5_0:1,mlx5_3:1`).

Every worker process of the bundle starts through this module (`runtime_env["py_executable"]`
is `python -m accel.ray._worker`; Ray's `worker_process_setup_hook` applies to a whole job
only): it pins the process to those CPUs that exist on the node (`os.sched_setaffinity`), then
runs Ray's worker script in place, so the pinning holds before any user code runs.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

CPUS_VAR = "ACCEL_CPUS"


def py_executable() -> str:
    """The command Ray starts a bundle's workers with: this interpreter through this module."""
    return f"{sys.executable} -m accel.ray._worker"


def parse_cpulist(text: str) -> set[int]:
    """`0-3,8,10-11` as a set; malformed parts are skipped."""
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        try:
            first, last = int(lo), int(hi or lo)
        except ValueError:
            continue
        if 0 <= first <= last < 1 << 16:
            out.update(range(first, last + 1))
    return out


def format_cpulist(cpus: set[int]) -> str:
    """A set as `0-3,8,10-11`."""
    runs: list[str] = []
    for c in sorted(cpus):
        if runs and runs[-1].endswith(f"-{c - 1}"):
            runs[-1] = runs[-1].rsplit("-", 1)[0] + f"-{c}"
        elif runs and runs[-1] == str(c - 1):
            runs[-1] = f"{c - 1}-{c}"
        else:
            runs.append(str(c))
    return ",".join(runs)


def affinity_env(machine: dict[str, Any], devices: list[dict[str, Any]]) -> dict[str, str]:
    """The bundle's CPU and NIC variables, from the planned devices (their `numa_node` and the
    nearest RDMA NIC, `nic`, as the planner gives them) and the machine's NUMA nodes."""
    env: dict[str, str] = {}
    numa = {d.get("numa_node") for d in devices if d.get("numa_node") is not None}
    cpus: set[int] = set()
    for node in machine.get("numa_nodes", []):
        if node.get("id") in numa:
            cpus |= parse_cpulist(str(node.get("cpus", "")))
    if cpus:
        env[CPUS_VAR] = format_cpulist(cpus)
    nics = list(dict.fromkeys(str(d["nic"]) for d in devices if d.get("nic")))
    if nics:
        env["NCCL_IB_HCA"] = "=" + ",".join(nics)
        env["UCX_NET_DEVICES"] = ",".join(f"{n}:1" for n in nics)
    return env


def pin() -> None:
    """Pins this process to `ACCEL_CPUS`, as far as this node has those CPUs (Ray's worker
    setup hook). A bundle whose CPUs are all absent here keeps its affinity, with a warning."""
    wanted = parse_cpulist(os.environ.get(CPUS_VAR, ""))
    if not wanted:
        return
    usable = wanted & os.sched_getaffinity(0)
    if not usable:
        logging.getLogger("accel").warning("%s=%s names no CPU this process may use; affinity left as is", CPUS_VAR, os.environ[CPUS_VAR])
        return
    os.sched_setaffinity(0, usable)

