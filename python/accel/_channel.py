"""Weight-sync channels: a producer publishes versions of a dict of arrays, consumers read the latest.

    >>> ch = accel.transport.channel("policy")          # in the producer (a trainer)
    >>> w = ch.empty((4096, 4096), "f4"); w[...] = ...   # fill in place: publish copies nothing
    >>> v = ch.publish({"w": w, "b": bias})              # other arrays are copied once
    >>> consumer.update.remote(ch)                      # `ch` is small and picklable
    >>> version, tensors = ch.latest()                  # in a consumer: the newest version
    >>> with ch.read() as (version, tensors): ...       # the same, released on exit

The producer's transport holds each version's manifest (names, references, shapes) under the
channel's name; a consumer asks it for the newest one over the authenticated connection and
then reads the arrays like any reference: read-only mapped views on the producer's host (no
copy), streamed over TCP into `out` (a dict of preallocated arrays) or new arrays elsewhere.

The producer keeps the newest `keep` versions (at least 2) published, so it writes version N+1
while readers still hold N; older versions are freed at the next publish. A reader's mapped view
keeps the bytes it maps intact for as long as it lives, whatever the producer frees (the
transport never recycles a mapped buffer), so a slow reader never sees a version change under
it; it only costs the producer a fresh buffer instead of a recycled one. After publishing an
array from `ch.empty`, the producer must not write it again: take new ones for the next version
(the pool recycles the buffers of freed versions, so this is warm).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import threading
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from . import _buffers as _b
from ._native import BufferFreed, TransportError

_native: Any = importlib.import_module("accel._native")

# The producer side of each channel this process owns, by name: an unpickled copy of a channel
# in its own producer process publishes through the same state.
_producers: dict[str, _Producer] = {}
_producers_lock = threading.Lock()
_RETRIES = 8
_MAX_MANIFEST = 64 * 1024 - 8  # one control frame, with the version (MAX_MANIFEST in channel.rs)


class _Producer:
    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.version = 0
        self.lock = threading.Lock()
        self.versions: deque[tuple[int, list[_b.Ref]]] = deque()


def _encode(version: int, refs: list[tuple[str, _b.Ref]]) -> bytes:
    """The manifest: owner, host and endpoint once (every array of a version is the producer's),
    then one compact row per array, so a version of about 600 arrays fits one control frame."""
    first = refs[0][1]
    rows = [[name, r.segment, r.buffer, r.nbytes, list(r.shape), r.dtype, r.kind] for name, r in refs]
    doc = {"version": version, "owner": first.owner, "host": first.host, "endpoint": first.endpoint, "tensors": rows}
    return json.dumps(doc, separators=(",", ":")).encode()


def _decode(manifest: bytes) -> list[tuple[str, _b.Ref]]:
    doc = json.loads(manifest)
    owner, host, endpoint = str(doc["owner"]), str(doc["host"]), str(doc["endpoint"])
    out = []
    for name, segment, buffer, nbytes, shape, dtype, kind in doc["tensors"]:
        ref = _b.Ref(
            owner=owner,
            host=host,
            endpoint=endpoint,
            segment=str(segment),
            buffer=int(buffer),
            nbytes=int(nbytes),
            shape=tuple(int(x) for x in shape),
            dtype=str(dtype),
            kind=str(kind),
        )
        out.append((str(name), ref))
    return out


class Channel:
    """A named, versioned set of arrays owned by one process (the producer).

    Created with `accel.transport.channel(name)` in the producer; pickled (e.g. passed to Ray
    tasks and actors) to reach consumers, on any host of the cluster.
    """

    def __init__(self, name: str, *, keep: int = 2, _remote: tuple[str, str, str] | None = None) -> None:
        if not isinstance(name, str) or not 0 < len(name.encode()) <= 256:
            raise ValueError("a channel name is a string of 1 to 256 bytes")
        if keep < 2:
            raise ValueError("a channel keeps at least 2 versions (the producer writes N+1 while readers hold N)")
        self.name = name
        self.keep = keep
        if _remote is None:
            info = _b.info()
            self.owner, self.host, self.endpoint = info["owner"], info["host"], info["endpoint"]
            with _producers_lock:
                if name in _producers:
                    raise ValueError(f"this process already owns a channel named {name!r}")
                _producers[name] = _Producer(keep)
        else:
            self.owner, self.host, self.endpoint = _remote

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (_attach, (self.name, self.keep, self.owner, self.host, self.endpoint))

    def __repr__(self) -> str:
        return f"Channel({self.name!r}, owner={self.owner!r})"

    # -------------------------------------------------------------- producer

    def _producer(self) -> _Producer:
        st = _b._start()
        p = _producers.get(self.name)
        if st.owner != self.owner or p is None:
            raise TransportError(f"channel {self.name!r} is owned by {self.owner}; only its producer publishes")
        return p

    def empty(self, shape: int | tuple[int, ...] | list[int], dtype: Any = np.float32) -> np.ndarray:
        """A writable array in the producer's shared memory; publishing it copies nothing."""
        self._producer()
        return _b.empty(shape, dtype)

    def publish(self, tensors: Mapping[str, Any]) -> int:
        """Publish a new version: a dict of arrays (from `empty`: in place; others: copied
        once). Returns its version number; versions older than the newest `keep` are freed."""
        p = self._producer()
        if not tensors:
            raise ValueError("a version holds at least one array")
        with p.lock:
            refs: list[tuple[str, _b.Ref]] = []
            try:
                for name, arr in tensors.items():
                    if not isinstance(name, str):
                        raise TypeError(f"tensor names are strings, got {name!r}")
                    a = arr if isinstance(arr, np.ndarray) else np.asarray(arr)
                    if a.dtype.fields is not None or a.dtype.hasobject:
                        raise TypeError(f"{name}: channels carry plain numeric arrays, not {a.dtype}")
                    refs.append((name, _b.put(a)))
                version = p.version + 1
                manifest = _encode(version, refs)
                if len(manifest) > _MAX_MANIFEST:
                    raise ValueError(
                        f"a version of {len(refs)} arrays needs a {len(manifest)}-byte manifest, over the "
                        f"{_MAX_MANIFEST}-byte limit: publish fewer, larger arrays (e.g. one flat buffer per bucket)"
                    )
                _native.transport_channel_publish(self.name, version, manifest)
            except BaseException:
                for _, r in refs:
                    _b.free(r)
                raise
            p.version = version
            p.versions.append((version, [r for _, r in refs]))
            while len(p.versions) > p.keep:
                _, old = p.versions.popleft()
                for r in old:
                    _b.free(r)
            return version

    @property
    def version(self) -> int:
        """The newest published version (0 before the first), asked of the producer."""
        got = self._latest_manifest()
        return 0 if got is None else got[0]

    # -------------------------------------------------------------- consumers

    def _latest_manifest(self) -> tuple[int, bytes] | None:
        _b._start()
        got = _native.transport_channel_latest(self.owner, self.endpoint, self.name)
        return None if got is None else (int(got[0]), bytes(got[1]))

    def latest(self, out: Mapping[str, np.ndarray] | None = None) -> tuple[int, dict[str, np.ndarray]]:
        """The newest complete version: `(version, {name: array})`.

        On the producer's host the arrays are read-only views of its shared memory (no copy);
        on other hosts they are streamed over TCP into `out[name]` where `out` has that name
        (C-contiguous, same shape and dtype), else into new arrays. With `out` on the producer's
        host the views are copied into it. Raises LookupError before the first version.
        """
        for _ in range(_RETRIES):
            got = self._latest_manifest()
            if got is None:
                raise LookupError(f"channel {self.name!r} has no version yet")
            version, manifest = got
            result: dict[str, np.ndarray] = {}
            try:
                for name, ref in _decode(manifest):
                    dst = None if out is None else out.get(name)
                    result[name] = _b.get(ref, out=dst)
            except BufferFreed:
                continue  # the producer moved on by `keep` versions meanwhile: take the newest
            return version, result
        raise TransportError(f"channel {self.name!r}: the producer outran {_RETRIES} reads in a row")

    @contextlib.contextmanager
    def read(self, out: Mapping[str, np.ndarray] | None = None) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        """`with ch.read() as (version, tensors):` the newest version, released on exit (the
        dict is emptied; views kept elsewhere keep their bytes until they go)."""
        version, tensors = self.latest(out)
        try:
            yield version, tensors
        finally:
            tensors.clear()

    def close(self) -> None:
        """Producer: free every kept version and give up the name."""
        p = _producers.get(self.name)
        if p is None or _b._start().owner != self.owner:
            return
        with p.lock:
            while p.versions:
                for r in p.versions.popleft()[1]:
                    _b.free(r)
        with _producers_lock:
            _producers.pop(self.name, None)


def _attach(name: str, keep: int, owner: str, host: str, endpoint: str) -> Channel:
    return Channel(name, keep=keep, _remote=(owner, host, endpoint))


def _reset_after_fork() -> None:
    _producers.clear()


os.register_at_fork(after_in_child=_reset_after_fork)
