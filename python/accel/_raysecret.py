"""The transport's cluster secret inside a Ray cluster: one secret for the whole cluster, kept in
Ray's internal KV (namespace ``accel``), so that the driver and every worker on every node agree
with no call, file or variable from the user.

How a process chooses its secret (``accel._buffers``, in order): ``ACCEL_TRANSPORT_SECRET``; the
file ``ACCEL_TRANSPORT_SECRET_FILE`` (default ``~/.config/accel/transport-secret``); in a
process connected to Ray, this module's cluster secret (the first process that needs it makes
one and stores it, ``overwrite=False``, so every other reads the same); else a fresh random
secret that the process's children inherit. Ray's KV holds nothing a client of the cluster could
not already reach: whoever can talk to the GCS can run code on every node. This module never
imports Ray: it looks only at a Ray this process has already imported and connected.
"""

from __future__ import annotations

import os
import secrets
import sys
from typing import Any

NAMESPACE = "accel"
KEY = b"transport-secret"

_forked = False


def _after_fork() -> None:
    # A forked child holds a copy of its parent's Ray connection, which it must not use.
    global _forked
    _forked = True


os.register_at_fork(after_in_child=_after_fork)


def _connected_ray() -> Any:
    """The Ray module, if this process imported it and is connected to a cluster."""
    ray = sys.modules.get("ray")
    if ray is None or _forked:
        return None
    try:
        return ray if ray.is_initialized() else None
    except Exception:  # a half-imported or shutting-down Ray: no cluster here
        return None


def cluster_secret(seed: str | None = None) -> str | None:
    """The cluster's secret from Ray's KV, storing ``seed`` (or a fresh random one) first if the
    cluster has none yet; ``None`` when this process is not connected to Ray."""
    if _connected_ray() is None:
        return None
    from ray.experimental import internal_kv

    got = internal_kv._internal_kv_get(KEY, namespace=NAMESPACE)
    if not got:
        fresh = (seed or secrets.token_hex(32)).encode()
        # overwrite=False: of two processes racing here, the first one's secret stays, and both
        # read it back.
        internal_kv._internal_kv_put(KEY, fresh, overwrite=False, namespace=NAMESPACE)
        got = internal_kv._internal_kv_get(KEY, namespace=NAMESPACE)
    if not got:
        return None
    return bytes(got).decode().strip() or None
