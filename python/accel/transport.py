"""Direct tensor transport: pass a small reference through Ray, move the bytes directly.

    >>> from accel import transport
    >>> ref = transport.put(array)        # in the owner: publish, get a ~300-byte reference
    >>> arr = transport.get(ref)          # in any process: the array (zero-copy on one host)
    >>> buf = transport.empty((n,), "f4") # write in place into shared memory, then put(buf)
    >>> transport.free(ref)               # or let Ray's tensor transport free it
    >>> ref = transport.put(array, readers=2)  # a lease: freed after two gets
    >>> ch = transport.channel("policy")  # versioned weight sync (see accel._channel)

Paths, chosen from where the two ends are and how they connect (and overridable per call, per
reference or with ACCEL_TRANSPORT_PATH): ``local`` (same process: the owner's own array),
``shm`` (same host: a read-only mapping of the owner's shared-memory segment), ``tcp`` (other
hosts: an authenticated stream, encrypted beyond loopback), ``nixl`` (a one-sided NIXL read;
opt-in on the owner: ``put(x, path="nixl")`` or ACCEL_TRANSPORT_NIXL=1). ``route(ref)`` says
which path a reference takes and why. Buffers live until freed or until their owner exits; a
reference object going away frees nothing. See README.md ("Tensor transport") for
configuration and security.
"""

from __future__ import annotations

import os
import secrets
from typing import Any

from . import _native, _nixl, _syncmetrics

# The core (references, put/get/empty/free, routes, the secret) lives in `_buffers`, which both
# this module and `_channel` build on; this module re-exports its public names.
from ._buffers import (
    PATHS as PATHS,
    SECRET_FILE_VAR as SECRET_FILE_VAR,
    SECRET_VAR as SECRET_VAR,
    Ref as Ref,
    Route as Route,
    _start as _start,  # accel.ray._transport starts this process's transport through it
    empty as empty,
    ensure_secret_file as ensure_secret_file,
    free as free,
    get as get,
    info as info,
    put as put,
    route as route,
    secret_file as secret_file,
)
from ._channel import Channel as Channel
from ._native import (
    AuthError as AuthError,
    BufferFreed as BufferFreed,
    OwnerGone as OwnerGone,
    PoolExhausted as PoolExhausted,
    StaleReference as StaleReference,
    TransportError as TransportError,
)

__all__ = [
    "Ref",
    "Route",
    "route",
    "put",
    "get",
    "empty",
    "free",
    "reserve",
    "channel",
    "stats",
    "prometheus",
    "write_metrics",
    "sweep",
    "info",
    "TransportError",
    "PoolExhausted",
    "OwnerGone",
    "StaleReference",
    "BufferFreed",
    "AuthError",
]

# References and routes are named by this module, where users meet them: a pickled Ref (the
# ~300 bytes that travel through Ray) reads `accel.transport.Ref`, as before the split.
Ref.__module__ = Route.__module__ = __name__


def reserve(nbytes: int, count: int = 1) -> None:
    """Pre-fault `count` pooled buffers for arrays of `nbytes` bytes, so that the first put or
    empty() of that size is warm (creating and faulting a segment is the cold cost). Returns
    once they are in the pool, with the spare that the pool grows ahead of demand when two
    buffers of a size from 1 MiB are live at once (``ACCEL_TRANSPORT_SPARES``, default 1)."""
    _start()
    buffers = [_native.transport_alloc(int(nbytes))[0] for _ in range(count)]  # mappings dropped here
    for buffer in buffers:
        _native.transport_discard(buffer)
    _native.transport_settle()


def channel(name: str, *, keep: int = 2) -> Channel:
    """A weight-sync channel owned by this process, publishing versions of a dict of arrays
    under `name` and keeping the newest `keep` (see `accel._channel`)."""
    return Channel(name, keep=keep)


def stats() -> dict[str, Any]:
    """Per-path transfers, bytes, errors and latency histogram, for each role of this process:
    ``paths`` (what it fetched as a consumer) and ``served`` (what its TCP server sent as the
    owner, errors including failed handshakes and unknown buffers; ``local`` and ``shm`` reads
    never reach the owner, so only their consumer counts them); pool usage of this owner."""
    _start()
    stats: dict[str, Any] = _native.transport_stats()
    return stats


def prometheus() -> str:
    """The Prometheus text exposition of stats() (served by the node agent): every transfer
    series is labelled ``path`` and ``role`` (``fetch`` or ``serve``); then this process's
    weight-sync series (``accel_weight_sync_*``, see `accel.weights`), once it has synced."""
    _start()
    return str(_native.transport_prometheus()) + _syncmetrics.prometheus()


def write_metrics(directory: str) -> str:
    """Writes prometheus() to ``<directory>/accel-transport-<pid>.prom`` (atomically, through a
    rename) and returns the path. ``accel agent --transport-dir <directory>`` serves the files
    of live processes at ``/metrics/transport``, each series labelled with its ``pid``; call this
    periodically (or at the end of a step) from processes that should be seen."""
    text = prometheus()
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"accel-transport-{os.getpid()}.prom")
    tmp = f"{path}.{secrets.token_hex(4)}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return path


def shm_dir() -> str:
    return os.environ.get("ACCEL_TRANSPORT_SHM_DIR") or "/dev/shm"


def sweep() -> int:
    """Remove shared-memory segments whose owner process has exited; returns how many."""
    return int(_native.transport_sweep(shm_dir()))


def trim() -> None:
    """Return this owner's pooled (idle) shared memory to the system (and drop its NIXL
    registrations, which would otherwise outlive the segments)."""
    _start()
    agent = _nixl.current()
    if agent is not None:
        agent.deregister_all()
    _native.transport_trim()
