"""The transport's core: this process's owner state, references, and putting, reading and
freeing buffers (`put`, `get`, `empty`, `free`, `route`, the cluster secret).

Private. `accel.transport` is the API and re-exports what is public here; `accel._channel`
builds weight-sync channels on the same functions. This module imports neither of them, so the
two never import each other (`transport` -> `_channel` -> `_buffers`).
"""

from __future__ import annotations

import atexit
import ctypes
import os
import secrets
import stat
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from . import _native, _nixl, _raysecret
from ._errors import InvalidArgument
from ._native import BufferFreed, OwnerGone, TransportError

SECRET_VAR = "ACCEL_TRANSPORT_SECRET"
SECRET_FILE_VAR = "ACCEL_TRANSPORT_SECRET_FILE"
# The transport's paths (`accel_transport::Path`); a read takes the ones built here.
PATHS: tuple[str, ...] = tuple(_native.TRANSPORT_PATHS)
# DLPack device types that are host memory (kDLCPU, kDLCUDAHost, kDLROCMHost).
_DLPACK_HOST = (1, 3, 11)


@dataclass(frozen=True)
class Route:
    """The path a reference takes to this process, the reason code (a metric label) and the
    topology facts behind it in words."""

    path: str
    reason: str
    detail: str


# A reference's fields, in the order its constructor and its pickle take them.
_REF_FIELDS = ("owner", "host", "endpoint", "segment", "buffer", "nbytes", "shape", "dtype", "kind", "path", "nixl", "device", "readers")


class Ref(_native.Ref):
    """A reference to a published buffer. Small and picklable; holding it keeps nothing alive.

    Its fields live in Rust (`accel._native.Ref`, around the transport's descriptor): owner
    (`<pid>-<start time>-<incarnation nonce>`: a restarted owner is another owner), host,
    endpoint (the owner's TCP listener), segment, buffer, nbytes, shape, dtype (numpy's
    descriptor), kind (what get() hands back: numpy, torch, dlpack or bytes), path (a forced
    path or "auto"), nixl (the NIXL ticket), device (-1: host memory) and readers (a lease).
    """

    __slots__ = ()

    @property
    def chosen_path(self) -> str:
        """The path get() takes for this reference in the calling process."""
        _start()
        return _native.transport_path(self)

    @property
    def route(self) -> Route:
        """The path get() takes here, and why (see route() for device memory and topology)."""
        return route(self)

    def replace(self, **changes: Any) -> Ref:
        """A copy with some fields changed (`copy.replace` calls this too)."""
        fields = _REF_FIELDS
        unknown = set(changes) - set(fields)
        if unknown:
            raise TypeError(f"Ref has no field {sorted(unknown)[0]!r}")
        return type(self)(**{f: changes.get(f, getattr(self, f)) for f in fields})

    __replace__ = replace


class _State:
    def __init__(self) -> None:
        self.pid = -1
        self.owner = self.host = self.endpoint = ""
        self.lock = threading.Lock()
        self.pending: dict[int, tuple[int, str]] = {}  # id(SharedBuffer) -> (buffer id, segment)


_state = _State()


def _reset_after_fork() -> None:
    global _state
    _state = _State()


os.register_at_fork(after_in_child=_reset_after_fork)


def secret_file() -> str:
    """Where this node's cluster secret lives: ACCEL_TRANSPORT_SECRET_FILE, by default
    ~/.config/accel/transport-secret (mode 0600, one per node, the same on every node)."""
    return os.environ.get(SECRET_FILE_VAR) or os.path.join(os.path.expanduser("~"), ".config", "accel", "transport-secret")


def _read_secret_file(path: str) -> str | None:
    """The secret in ``path`` (None if there is none), refused unless the file belongs to this
    user and no one else may read or write it: a file another user owns (one they planted, or
    could rewrite with their own secret) is never used. The checks are made on the file
    opened, not on the name, so the name cannot be swapped between check and read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, encoding="utf-8") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TransportError(f"{path} is not a regular file")
        if st.st_uid != os.geteuid():
            raise TransportError(
                f"{path} belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()}): "
                "a secret file must be this user's own (chown it, or make a new one)"
            )
        if st.st_mode & 0o077:
            raise TransportError(f"{path} is readable by other users (mode {st.st_mode & 0o777:o}): chmod 600 it")
        return f.read().strip() or None


def ensure_secret_file(path: str | None = None) -> str:
    """Makes sure the node's secret file exists (mode 0600): it keeps what is there, else
    writes this process's ACCEL_TRANSPORT_SECRET, else a fresh secret. Returns its path."""
    path = path or secret_file()
    if _read_secret_file(path) is None:
        os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
        secret = os.environ.get(SECRET_VAR) or secrets.token_hex(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(secret + "\n")
    return path


def _start() -> _State:
    st = _state
    if st.pid == os.getpid():
        return st
    with st.lock:
        if st.pid != os.getpid():
            config = dict(os.environ)
            if not config.get(SECRET_VAR):
                from_file = _read_secret_file(secret_file())
                if from_file:
                    config[SECRET_VAR] = from_file  # never copied into the environment
                else:
                    # In a Ray cluster, the cluster's secret from Ray's KV (accel._raysecret);
                    # else a fresh one. Child processes (multiprocessing, a local Ray cluster)
                    # inherit it.
                    mine = _raysecret.cluster_secret() or secrets.token_hex(32)
                    os.environ[SECRET_VAR] = config[SECRET_VAR] = mine
            # A secret of this process's own (a variable, a file) becomes the cluster's if it
            # has none yet, so workers on nodes without the file agree with this one.
            _raysecret.cluster_secret(seed=config[SECRET_VAR])
            st.owner, st.host, st.endpoint = _native.transport_start(config)
            st.pid = os.getpid()
    return st


def share_with_ray() -> None:
    """Makes this process's secret the Ray cluster's if the cluster has none yet (a driver that
    started its transport before `ray.init`); a no-op outside Ray or before the transport
    started."""
    if _state.pid == os.getpid():
        secret = os.environ.get(SECRET_VAR) or _read_secret_file(secret_file())
        if secret:
            _raysecret.cluster_secret(seed=secret)


def info() -> dict[str, str]:
    """This process's owner id, host id and TCP endpoint."""
    st = _start()
    return {"owner": st.owner, "host": st.host, "endpoint": st.endpoint}


def _bytes(sb: _native.SharedBuffer) -> memoryview:
    """The bytes of `sb` as a memoryview, without a copy, read-only when `sb` is.

    Built with ctypes from the address Rust hands out (the buffer protocol is not in Python
    3.9's limited API, which the abi3 extension targets). The lifetime chain: a numpy array
    made from it holds the memoryview, which holds the ctypes array, which holds `sb`, which
    holds the mapping; so any view keeps the mapping alive. A read-only memoryview makes
    read-only arrays that numpy refuses to make writable.
    """
    raw = (ctypes.c_char * len(sb)).from_address(sb.address)
    raw._accel_buffer = sb  # type: ignore[attr-defined]  # the ctypes array keeps `sb` alive
    view = memoryview(raw).cast("B")
    return view.toreadonly() if sb.readonly else view


def _array(sb: _native.SharedBuffer, dtype: np.dtype[Any], shape: tuple[int, ...]) -> npt.NDArray[Any]:
    """A zero-copy numpy array of `shape` and `dtype` over `sb` (see _bytes for its lifetime)."""
    count = int(np.prod(shape, dtype=np.int64)) if dtype.itemsize else 0
    return np.frombuffer(_bytes(sb), dtype=dtype, count=count).reshape(shape)


def _shared(arr: np.ndarray[Any, Any]) -> _native.SharedBuffer | None:
    """The SharedBuffer under `arr`'s base chain (see _bytes), or None."""
    base: Any = arr
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    sb = getattr(base, "_accel_buffer", None) if isinstance(base, ctypes.Array) else None
    return sb if isinstance(sb, _native.SharedBuffer) else None


def _into(arr: np.ndarray[Any, Any]) -> tuple[int, int]:
    """(address, nbytes) of `arr` for the Rust side to write into; the caller holds `arr`
    until that call returns."""
    if not (arr.flags.writeable and arr.flags.c_contiguous):
        raise ValueError("the destination must be a writable, C-contiguous array")
    return int(arr.__array_interface__["data"][0]), int(arr.nbytes)


def _forget_pending(key: int, buffer: int) -> None:
    st = _state
    if st.pending.pop(key, None) is not None and st.pid == os.getpid():
        try:
            _native.transport_discard(buffer)
        except TransportError:
            pass


def empty(shape: int | tuple[int, ...] | list[int], dtype: npt.DTypeLike = np.float32) -> npt.NDArray[Any]:
    """A writable array in this owner's shared memory. Fill it, then put() it: no copy.

    Dropping it without put() returns its memory to the pool.
    """
    st = _start()
    dt = np.dtype(dtype)
    if dt.hasobject:
        raise TypeError("object arrays cannot travel through shared memory")
    dims = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    nbytes = int(np.prod(dims, dtype=np.int64)) * dt.itemsize
    buffer, segment, sb = _native.transport_alloc(nbytes)
    st.pending[id(sb)] = (buffer, segment)
    weakref.finalize(sb, _forget_pending, id(sb), buffer)
    return _array(sb, dt, dims)


def _dlpack_host(obj: Any) -> None:
    """Refuses DLPack producers whose memory is on a device (cupy, CUDA torch tensors)."""
    dev = getattr(obj, "__dlpack_device__", None)
    if dev is None:
        return
    kind, index = dev()
    if int(kind) not in _DLPACK_HOST:
        raise TransportError(
            f"this tensor lives in device memory (DLPack device type {int(kind)}, index {int(index)}); "
            "accel.transport moves host memory here (no GPU path is verified on this machine: see "
            "README, 'Tensor transport'): copy it to the CPU first"
        )


def _as_array(obj: Any) -> tuple[np.ndarray[Any, Any], str]:
    if isinstance(obj, np.ndarray):
        return obj, "numpy"
    mod = type(obj).__module__
    if mod.startswith("torch") and hasattr(obj, "__dlpack__"):
        t = obj.detach()
        _dlpack_host(t)
        return np.from_dlpack(t.contiguous()), "torch"
    if hasattr(obj, "__dlpack__"):
        # Any DLPack producer (cupy, jax, a torch subclass...): zero-copy into numpy.
        _dlpack_host(obj)
        return np.from_dlpack(obj), "dlpack"
    try:
        view = memoryview(obj)
    except TypeError:
        raise InvalidArgument(
            f"put() takes a numpy array, a buffer (bytes, bytearray, memoryview) or a CPU tensor, "
            f"not {type(obj).__name__}"
        ) from None
    return np.asarray(view), "bytes"


def put(obj: Any, *, path: str | None = None, readers: int = 0) -> Ref:
    """Publish `obj` (a numpy array, any buffer-protocol object, or a CPU torch tensor).

    An array made by empty() is published in place; anything else is copied once into this
    owner's pre-faulted shared-memory pool. Raises PoolExhausted past the pool bound.
    readers=N leases the buffer to N readers: each get() of the reference, in any process,
    counts one read once it holds the array (a view it maps keeps its bytes on its own), and
    the N-th frees the buffer, so no free() is needed; a further get() raises BufferFreed.
    """
    if path is not None and path not in PATHS and path != "auto":
        raise InvalidArgument(f"unknown path {path!r}; expected one of {PATHS} or 'auto'")
    if not isinstance(readers, int) or isinstance(readers, bool) or not 0 <= readers < 1 << 32:
        raise InvalidArgument(f"readers must be an int from 0 to 2**32-1, got {readers!r}")
    st = _start()
    arr, kind = _as_array(obj)
    if arr.dtype.hasobject:
        raise TypeError("object arrays cannot travel through shared memory")
    root = _shared(arr)
    entry = st.pending.get(id(root)) if root is not None else None
    if (
        root is not None
        and entry is not None
        and arr.flags.c_contiguous
        and arr.nbytes == len(root)
        and arr.__array_interface__["data"][0] == root.address
    ):
        st.pending.pop(id(root))
        buffer, segment = entry
        view = arr
    else:
        buffer, segment, sb = _native.transport_alloc(arr.nbytes)
        view = _array(sb, arr.dtype, arr.shape)
        np.copyto(view, arr, casting="no")
    ticket = b""
    if arr.nbytes and (path == "nixl" or os.environ.get("ACCEL_TRANSPORT_NIXL") == "1"):
        ticket = _nixl_ticket(st, view)
    del view
    _native.transport_publish(buffer, readers)
    return Ref(
        owner=st.owner,
        host=st.host,
        endpoint=st.endpoint,
        segment=segment,
        buffer=buffer,
        nbytes=int(arr.nbytes),
        shape=tuple(arr.shape),
        dtype=np.lib.format.dtype_to_descr(arr.dtype),
        kind=kind,
        path=path or "auto",
        nixl=ticket,
        readers=readers,
    )


def _nixl_agent(st: _State) -> _nixl.Agent:
    try:
        agent = _nixl.agent(st.owner)
    except _nixl.NixlUnavailable as e:
        raise TransportError(str(e)) from e
    _native.transport_enable_path("nixl")
    return agent


def _nixl_ticket(st: _State, view: np.ndarray) -> bytes:
    """Registers the buffer's segment with this process's NIXL agent (once per segment)."""
    addr = int(view.__array_interface__["data"][0])
    try:
        return _nixl_agent(st).ticket(addr, int(view.nbytes), addr, int(view.nbytes)).encode()
    except _nixl.NixlFailed as e:
        raise TransportError(str(e)) from e


def route(
    ref: Ref, *, dst_device: int = -1, machine: str | None = None, nixl: bool | None = None, cuda_ipc: bool = False
) -> Route:
    """The automatic path from ``ref``'s owner to this process (into accelerator ``dst_device``
    of ``machine``, a Machine JSON from discovery, or host memory), and why: same process ->
    local; GPUs of one node -> NIXL over their scale-up link or CUDA IPC over PCIe; device
    memory to another node -> GPUDirect RDMA through NIXL when an RDMA NIC sits at PIX/PXB from
    the GPU; shared memory or TCP otherwise. ``nixl``/``cuda_ipc`` say which of those backends
    work here (default: NIXL if installed; CUDA IPC is not built into this package)."""
    _start()
    have_nixl = _nixl.available() if nixl is None else nixl
    path, reason, detail = _native.transport_route(ref, dst_device, machine, have_nixl, cuda_ipc)
    return Route(path, reason, detail)


def _finish(arr: np.ndarray[Any, Any], ref: Ref) -> Any:
    if ref.kind == "torch":
        import torch  # type: ignore[import-not-found, unused-ignore]  # the owner had torch, so the consumer is expected to

        return torch.from_dlpack(arr) if arr.flags.writeable else torch.from_numpy(arr.copy())
    return arr  # numpy arrays export __dlpack__: torch/cupy/jax.from_dlpack take them zero-copy


def get(
    ref: Ref,
    *,
    path: str | None = None,
    writable: bool = False,
    copy: bool = False,
    out: np.ndarray[Any, Any] | None = None,
    relay: bool | None = None,
) -> Any:
    """The referenced array, in any process.

    Same process: a read-only view of the owner's buffer (writable=True: a copy). Same host: a read-only zero-copy mapping,
    or with writable=True a private copy-on-write one. Other hosts: streamed over TCP into a new
    array. copy=True always returns a private copy. out=array receives the bytes into a
    caller's C-contiguous array of the same shape and dtype (and returns it): over TCP the
    stream lands there directly. Raises OwnerGone (the owner exited),
    StaleReference (it restarted), BufferFreed, AuthError, TransportError.

    relay=True (default: ACCEL_TRANSPORT_RELAY=1) makes the readers of a buffer leased to
    several (put(x, readers=N), N >= 2) that stream it over TCP pass it on to each other, on a
    schedule the owner hands out as they join (a chain, or a tree of ACCEL_TRANSPORT_RELAY_FANOUT
    children): the owner sends it once, and each reader forwards every piece as it lands. A
    relay that fails or stalls sends its readers to the owner. The array returned is this
    process's own read-only copy (other readers stream from it), so relay takes no out=.

    One native call does the read (`accel._native.transport_get`: the path, the fetch, its
    time in the metrics and a leased read's release); a NIXL read takes a second one.
    """
    st = _start()
    dtype = np.lib.format.descr_to_dtype(ref.dtype)
    if out is not None and (out.shape != tuple(ref.shape) or out.dtype != dtype or not out.flags.c_contiguous):
        raise ValueError(f"out must be a C-contiguous {dtype} array of shape {tuple(ref.shape)}")
    chosen, sb, private = _native.transport_get(ref, path, writable, copy, None if out is None else _into(out), relay)
    if chosen == "nixl":
        arr = np.empty(ref.shape, dtype=dtype) if out is None else out
        _get_nixl(ref, st, arr)
    elif sb is None:
        assert out is not None  # the bytes went into `out`
        arr = out
    else:
        arr = _array(sb, dtype, tuple(ref.shape))
        if private:  # a private array was asked for, and these bytes are someone else's
            arr = arr.copy()
    return _finish(arr, ref)


def _get_nixl(ref: Ref, st: _State, arr: np.ndarray) -> None:
    """A one-sided NIXL read of ``ref`` into ``arr``, then the owner confirms the buffer is
    still published (a freed id never comes back, so the bytes read are the buffer's); the read
    is counted and a lease released in the same call (`transport_finish`)."""
    if not ref.nixl:
        _native.transport_finish(ref, 0.0, False, False)
        raise TransportError(
            "this reference carries no NIXL ticket: the owner publishes with put(x, path='nixl') "
            "or runs with ACCEL_TRANSPORT_NIXL=1"
        )
    ticket = _nixl.Ticket.decode(ref.nixl)
    agent = _nixl_agent(st)
    timeout = 5.0 + ref.nbytes / 50e6  # a hang guard: 50 MB/s is far below any NIXL path
    t0 = time.perf_counter()
    try:
        agent.read(ticket, arr.reshape(-1).view(np.uint8), timeout)
    except _nixl.NixlDisconnected as e:
        agent.forget(ticket.agent)
        _native.transport_finish(ref, 0.0, False, False)
        raise OwnerGone(f"the owner of this reference ({ref.owner}) has exited (NIXL: {e})") from e
    except _nixl.NixlFailed as e:
        # Say why, if the owner can: gone (OwnerGone) or the buffer freed (BufferFreed).
        _native.transport_finish(ref, 0.0, False, True)
        raise TransportError(str(e)) from e
    _native.transport_finish(ref, time.perf_counter() - t0, True, True)


def free(ref: Ref) -> bool:
    """Release the buffer (from any process). False if it was already freed or its owner is gone."""
    _start()
    try:
        _native.transport_free(ref)
    except (BufferFreed, OwnerGone):
        return False
    return True


def _at_exit() -> None:
    if _state.pid == os.getpid():
        _native.transport_shutdown()


atexit.register(_at_exit)
