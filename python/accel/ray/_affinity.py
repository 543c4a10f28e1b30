"""CPU affinity for a planned bundle's worker.

A bundle's environment (computed in Rust with its plan, `accel_discover::bundle`) carries the
CPUs of its devices' NUMA nodes in `ACCEL_CPUS` (a Linux cpulist) and its devices' RDMA NICs in
`NCCL_IB_HCA` and `UCX_NET_DEVICES`.

Every worker process of the bundle starts through this module (`runtime_env["py_executable"]`
is `python -m accel.ray._worker`; Ray's `worker_process_setup_hook` applies to a whole job
only): it pins the process to those CPUs that exist on the node (`os.sched_setaffinity`), then
runs Ray's worker script in place, so the pinning holds before any user code runs.
"""

from __future__ import annotations

import logging
import os
import sys

from .. import _native

CPUS_VAR: str = _native.CPUS_VAR


def py_executable() -> str:
    """The command Ray starts a bundle's workers with: this interpreter through this module."""
    return f"{sys.executable} -m accel.ray._worker"


def pin() -> None:
    """Pins this process to `ACCEL_CPUS`, as far as this node has those CPUs (Ray's worker
    setup hook). A bundle whose CPUs are all absent here, or a malformed list, keeps its
    affinity, with a warning."""
    text = os.environ.get(CPUS_VAR, "")
    try:
        wanted = set(_native.parse_cpulist(text))  # accel_model::CpuSet, the one cpulist reader
    except ValueError as e:
        logging.getLogger("accel").warning("%s: %s; affinity left as is", CPUS_VAR, e)
        return
    if not wanted:
        return
    usable = wanted & os.sched_getaffinity(0)
    if not usable:
        logging.getLogger("accel").warning("%s=%s names no CPU this process may use; affinity left as is", CPUS_VAR, text)
        return
    os.sched_setaffinity(0, usable)
