"""Weight sync between shardings: a trainer's ranks hold a model one way, inference ranks need
it another; the bytes each destination rank needs go straight from a source rank that holds
them, planned once, landed in a back buffer while the front one serves, then switched at once.

    >>> src = Layout.sharded({"w": ((4096, 4096), "bf16")}, ranks=4, dim=0)   # trainer: rows
    >>> dst = Layout.sharded({"w": ((4096, 4096), "f16")}, ranks=8, dim=1)    # inference: columns
    >>> p = plan(src.on(trainer_hosts), dst.on(worker_hosts))  # once; each rank takes its part
    >>> sender = Sender(p.for_source(r))                       # in trainer rank r
    >>> shipment = sender.publish(version, {"w": my_rows})     # ~300 bytes per buffer: send via Ray
    >>> receiver = Receiver(p.for_destination(d))              # in inference rank d
    >>> receiver.receive(shipments)    # every piece, in parallel, into the back buffer
    >>> receiver.commit(version)       # the switch: readers see the new version from here on
    >>> with receiver.read() as (version, tensors): ...       # serving reads

A layout is a dict of tensors (global shape, dtype) and each rank's box of each tensor (a
``(start, stop)`` per dimension; the rank holds its box as one C-order array). Layouts come from
plain slices (`Layout`, `Layout.sharded`), from DTensor-style mesh placements
(`Layout.from_placements`) or from PyTorch DTensors (`Layout.from_dtensor`, when torch is
installed). The plan (`accel_reshard`, in Rust) gives every destination each element it holds
exactly once, choosing among replicas the source that keeps the busiest link least busy, and
groups the moves into one buffer per (source rank, class of identical destination ranks).

Each step a sender packs its buffers (the copy a put makes anyway) and leases each to its
readers (`accel.transport.put(buf, readers=N)`). A receiver reads every buffer at once over
the transport's paths (a read-only mapping on the same host, TCP streams otherwise, relayed
among a class's readers when two or more are remote), converting dtypes as it unpacks (floats
among themselves: bf16 to fp16 and back). Versions give a consistent cut: a receiver lands one
version from every source or raises `WeightSyncError` and keeps serving what it had.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import math
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from . import _native, _syncmetrics
from . import _buffers as _b
from ._errors import did_you_mean
from ._native import AccelError, TransportError

__all__ = [
    "Layout",
    "Plan",
    "SourcePlan",
    "DestinationPlan",
    "plan",
    "Sender",
    "Receiver",
    "Shipment",
    "Landed",
    "LayoutError",
    "WeightSyncError",
    "host",
    "stats",
]

# How each dtype name of a layout is stored in numpy: bf16 as its raw 16 bits (numpy has no
# bfloat16); the sizes are the planner's (checked at import against `reshard_dtypes`).
_STORAGE: dict[str, npt.DTypeLike] = {
    "f64": np.float64,
    "f32": np.float32,
    "f16": np.float16,
    "bf16": np.uint16,
    "i64": np.int64,
    "i32": np.int32,
    "i16": np.int16,
    "i8": np.int8,
    "u8": np.uint8,
    "bool": np.bool_,
}
_FLOAT = {name for name, _, is_float in _native.reshard_dtypes() if is_float}
assert {n: s for n, s, _ in _native.reshard_dtypes()} == {n: np.dtype(d).itemsize for n, d in _STORAGE.items()}
# numpy dtypes to layout names; uint16 stays unnamed (it is bf16's storage, not a dtype of its own).
_NAMES = {np.dtype(d): n for n, d in _STORAGE.items() if n != "bf16"}
_CHUNK = 8 << 20  # elements converted at a time through a float32 temporary


class LayoutError(AccelError, ValueError):
    """A layout, or a pair of layouts, that cannot be planned: the message names the tensor and
    the rank (a box outside the shape, a gap no source covers, a dtype that does not convert)."""


class WeightSyncError(TransportError):
    """A sync that did not land: a source or destination died or failed mid-sync, or the
    shipments are not one consistent version. The receiver keeps serving what it had.
    `source` is the source rank at fault (or None) and `version` the version that failed."""

    def __init__(self, message: str, *, version: int | None = None, source: int | None = None):
        super().__init__(message)
        self.version = version
        self.source = source


def host() -> str:
    """This process's host id as the transport sees it (ranks with one host id share memory):
    what a layout's ``hosts`` should hold for a rank running here."""
    return _b.info()["host"]


def stats() -> dict[str, object]:
    """This process's weight-sync counters and its last step (also in
    `accel.transport.prometheus()`)."""
    return _syncmetrics.snapshot()


Box = tuple[tuple[int, int], ...]


def _dtype_name(dtype: Any) -> str:
    if isinstance(dtype, str) and dtype in _STORAGE:
        return dtype
    try:
        return _NAMES[np.dtype(dtype)]
    except (TypeError, KeyError):
        hint = did_you_mean(dtype, _STORAGE)
        raise LayoutError(f"unknown dtype {dtype!r}{hint} (layouts name one of {', '.join(sorted(_STORAGE))})") from None


def _box(spec: Any, shape: tuple[int, ...], where: str) -> Box:
    """A box from ``((start, stop), ...)`` or a tuple of slices; missing trailing dims are whole."""
    items = list(spec) if isinstance(spec, (tuple, list)) else [spec]
    if len(items) > len(shape):
        raise LayoutError(f"{where}: {len(items)} ranges for a tensor of {len(shape)} dimension(s)")
    out = []
    for n, item in zip(shape, items + [slice(None)] * (len(shape) - len(items))):
        if isinstance(item, slice):
            start, stop, step = item.indices(n)
            if step != 1:
                raise LayoutError(f"{where}: a box takes contiguous ranges, not a step of {step}")
            out.append((start, max(start, stop)))
        else:
            lo, hi = (int(x) for x in item)
            out.append((lo, hi))
    return tuple(out)


class Layout:
    """A sharded model state: ``tensors`` maps each name to (global shape, dtype), ``ranks``
    lists each rank's boxes (name -> box); ``hosts`` optionally says where each rank runs
    (`host()` of its process), so the plan knows which ranks share memory and links."""

    def __init__(
        self,
        tensors: Mapping[str, tuple[Sequence[int], Any]],
        ranks: Sequence[Mapping[str, Any]],
        hosts: Sequence[str] | None = None,
    ) -> None:
        self.tensors: dict[str, tuple[tuple[int, ...], str]] = {
            str(name): (tuple(int(x) for x in shape), _dtype_name(dtype)) for name, (shape, dtype) in tensors.items()
        }
        self.ranks: list[dict[str, Box]] = []
        for r, boxes in enumerate(ranks):
            held = {}
            for name, spec in boxes.items():
                if name not in self.tensors:
                    raise LayoutError(f"rank {r} holds {name!r}, which is not among the tensors{_known(name, self.tensors)}")
                held[name] = _box(spec, self.tensors[name][0], f"rank {r}, tensor {name!r}")
            self.ranks.append(held)
        if hosts is not None and len(hosts) != len(self.ranks):
            raise LayoutError(f"{len(hosts)} hosts for {len(self.ranks)} ranks")
        self.hosts: list[str] = [str(h) for h in hosts] if hosts is not None else [""] * len(self.ranks)

    @classmethod
    def sharded(
        cls,
        tensors: Mapping[str, tuple[Sequence[int], Any]],
        ranks: int,
        dim: int | Mapping[str, int | None] = 0,
        replicas: int = 1,
    ) -> Layout:
        """``ranks`` ranks holding ``replicas`` copies of an even split (torch.chunk's: the last
        parts may be smaller) of every tensor along ``dim`` (one for all, or per tensor; None:
        whole); rank r holds part ``r % (ranks // replicas)``."""
        if ranks < 1 or replicas < 1 or ranks % replicas:
            raise LayoutError(f"{ranks} ranks do not hold {replicas} equal replicas")
        parts = ranks // replicas
        out: list[dict[str, Any]] = [{} for _ in range(ranks)]
        if isinstance(dim, Mapping):
            _only_tensors(dim, tensors, "dim")
        for name, (shape, _) in tensors.items():
            d = dim.get(name, 0) if isinstance(dim, Mapping) else dim
            if d is not None:
                d = _axis(d, len(shape), name)
            for r in range(ranks):
                box = [(0, int(n)) for n in shape]
                if d is not None:
                    box[d] = _chunk(int(shape[d]), parts, r % parts)
                out[r][name] = tuple(box)
        return cls(tensors, out)

    @classmethod
    def from_placements(
        cls,
        tensors: Mapping[str, tuple[Sequence[int], Any]],
        mesh: Sequence[int] | np.ndarray[Any, Any],
        placements: Mapping[str, Sequence[str]],
    ) -> Layout:
        """DTensor's rule without torch: ``mesh`` is the device mesh's shape (a tuple: ranks
        row-major) or its numpy array of ranks (``DeviceMesh.mesh``); ``placements[name]`` gives, per mesh dimension, ``"S(d)"``
        (shard tensor dimension d, as torch.chunk does) or ``"R"`` (replicate). Several mesh
        dimensions sharding one tensor dimension split it in mesh-dimension order."""
        if isinstance(mesh, np.ndarray):
            ranks_of = mesh
        else:
            dims = tuple(int(x) for x in mesh)
            ranks_of = np.arange(math.prod(dims)).reshape(dims)
        out: list[dict[str, Any]] = [{} for _ in range(int(ranks_of.size))]
        _only_tensors(placements, tensors, "placements")
        for name, (shape, _) in tensors.items():
            places = list(placements.get(name, ["R"] * ranks_of.ndim))
            if len(places) != ranks_of.ndim:
                raise LayoutError(f"tensor {name!r}: {len(places)} placements for a {ranks_of.ndim}-dimensional mesh")
            for coord in np.ndindex(*ranks_of.shape):
                box = [(0, int(n)) for n in shape]
                for mesh_dim, p in enumerate(places):
                    d = _shard_dim(p, name, len(shape))
                    if d is None:
                        continue
                    lo, hi = box[d]
                    a, b = _chunk(hi - lo, ranks_of.shape[mesh_dim], coord[mesh_dim])
                    box[d] = (lo + a, lo + b)
                out[int(ranks_of[coord])][name] = tuple(box)
        return cls(tensors, out)

    @classmethod
    def from_dtensor(cls, state: Mapping[str, Any]) -> Layout:
        """The layout of a state dict of PyTorch DTensors (FSDP2's and tensor parallelism's
        parameters): each one's global shape, dtype, device mesh and placements (``Shard(d)``,
        ``Replicate()``; ``Partial`` is a sum not yet reduced, and is refused)."""
        tensors: dict[str, tuple[tuple[int, ...], str]] = {}
        placements: dict[str, list[str]] = {}
        mesh: Any = None
        for name, t in state.items():
            if not hasattr(t, "placements") or not hasattr(t, "device_mesh"):
                raise LayoutError(f"{name!r} is not a DTensor (it has no placements and device mesh)")
            ranks = np.asarray(t.device_mesh.mesh.tolist())
            if mesh is None:
                mesh = ranks
            elif not np.array_equal(mesh, ranks):
                raise LayoutError(f"{name!r} lives on another device mesh; a layout has one mesh")
            tensors[name] = (tuple(int(x) for x in t.shape), _torch_dtype(t.dtype))
            placements[name] = [_placement(p, name) for p in t.placements]
        if mesh is None:
            raise LayoutError("an empty state dict has no layout")
        return cls.from_placements(tensors, mesh, placements)

    def on(self, hosts: Sequence[str]) -> Layout:
        """The same layout with each rank's host (`host()` of each rank's process)."""
        return Layout({n: t for n, t in self.tensors.items()}, self.ranks, hosts)

    def with_dtypes(self, dtypes: Mapping[str, Any] | Any) -> Layout:
        """The same layout storing tensors as other dtypes (one for all, or per name)."""
        if isinstance(dtypes, Mapping):
            _only_tensors(dtypes, self.tensors, "with_dtypes")

        def pick(name: str) -> Any:
            return dtypes.get(name, self.tensors[name][1]) if isinstance(dtypes, Mapping) else dtypes

        return Layout({n: (s, pick(n)) for n, (s, _) in self.tensors.items()}, self.ranks, self.hosts)

    def shape_of(self, rank: int, name: str) -> tuple[int, ...]:
        """The local array shape of ``name`` on ``rank`` (its box's extent)."""
        return tuple(hi - lo for lo, hi in self.ranks[rank][name])

    def nbytes(self, rank: int) -> int:
        """Bytes ``rank`` holds."""
        return sum(
            math.prod(hi - lo for lo, hi in box) * np.dtype(_STORAGE[self.tensors[n][1]]).itemsize
            for n, box in self.ranks[rank].items()
        )

    def to_json(self) -> str:
        doc = {
            "tensors": [{"name": n, "shape": list(s), "dtype": d} for n, (s, d) in self.tensors.items()],
            "ranks": [
                {"host": h, "slices": {n: [list(r) for r in box] for n, box in boxes.items()}}
                for h, boxes in zip(self.hosts, self.ranks)
            ],
        }
        return json.dumps(doc, separators=(",", ":"))


def _known(name: object, tensors: Mapping[str, Any]) -> str:
    """`; did you mean 'w1'? (tensors: w1, w2)`: the nearest tensor name and the list."""
    return f"{did_you_mean(name, tensors)} (tensors: {', '.join(sorted(tensors))})"


def _only_tensors(given: Mapping[str, Any], tensors: Mapping[str, Any], what: str) -> None:
    """Refuses a per-tensor argument naming a tensor the layout does not have (a typo would
    otherwise be silently ignored and the tensor take the default)."""
    for name in given:
        if name not in tensors:
            raise LayoutError(f"{what} names {name!r}, which is not among the tensors{_known(name, tensors)}")


def _axis(d: Any, ndim: int, name: str) -> int:
    """Dimension ``d`` of a tensor of ``ndim`` dimensions (negative counts from the end, as in
    numpy and torch), or a LayoutError naming the valid range."""
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
        raise LayoutError(f"tensor {name!r}: dim must be an integer or None, not {d!r}")
    if not -ndim <= int(d) < ndim:
        valid = f"0 to {ndim - 1}, or -{ndim} to -1 from the end" if ndim else "none: it is a scalar"
        raise LayoutError(f"tensor {name!r} has {ndim} dimension(s): dim {d} is out of range (valid: {valid})")
    return int(d) % ndim


def _chunk(n: int, parts: int, i: int) -> tuple[int, int]:
    """Part ``i`` of ``n`` split as torch.chunk splits it (DTensor's Shard)."""
    size = -(-n // parts) if parts else n
    lo = min(n, size * i)
    return lo, min(n, lo + size)


def _shard_dim(p: str, name: str, ndim: int) -> int | None:
    text = p.replace(" ", "")
    if text in ("R", "Replicate()"):
        return None
    for prefix in ("S(", "Shard(", "Shard(dim="):
        if text.startswith(prefix) and text.endswith(")"):
            try:
                d = int(text[len(prefix) : -1])
            except ValueError:
                break
            if not -ndim <= d < ndim:
                raise LayoutError(f"tensor {name!r}: {p} shards a dimension it does not have ({ndim})")
            return d % ndim
    raise LayoutError(f"tensor {name!r}: placement {p!r} is not S(d) or R (a Partial sum must be reduced first)")


def _placement(p: Any, name: str) -> str:
    if type(p).__name__ == "_StridedShard":  # FSDP2 over TP: interleaved, not one box per rank
        raise LayoutError(f"tensor {name!r}: a strided shard ({p!r}) holds no single box; gather it first")
    if getattr(p, "is_shard", lambda: False)():
        return f"S({int(p.dim)})"
    if getattr(p, "is_replicate", lambda: False)():
        return "R"
    raise LayoutError(f"tensor {name!r}: placement {p!r} cannot be synced (reduce a Partial first)")


def _torch_dtype(dtype: Any) -> str:
    name = str(dtype).removeprefix("torch.")
    table = {"float64": "f64", "float32": "f32", "float16": "f16", "bfloat16": "bf16", "int64": "i64", "int32": "i32"}
    table.update({"int16": "i16", "int8": "i8", "uint8": "u8", "bool": "bool"})
    if name not in table:
        raise LayoutError(f"dtype {dtype} has no layout name (known: {sorted(table)})")
    return table[name]


# --- the plan -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Piece:
    tensor: str
    box: Box
    offset: int
    nbytes: int


@dataclass(frozen=True)
class _Buffer:
    readers: tuple[int, ...]
    relay: bool
    nbytes: int
    pieces: tuple[_Piece, ...]


@dataclass(frozen=True)
class SourcePlan:
    """What source rank ``rank`` packs each step: its boxes and its buffers (picklable; hand
    each trainer rank its own)."""

    plan_id: str
    rank: int
    dtypes: dict[str, str]  # tensor -> dtype the source holds
    boxes: dict[str, Box]
    buffers: tuple[_Buffer, ...]


@dataclass(frozen=True)
class DestinationPlan:
    """What destination rank ``rank`` reads each step: its boxes, their dtypes, and each
    buffer it reads as (source rank, buffer index, the buffer)."""

    plan_id: str
    rank: int
    sources: int
    src_dtypes: dict[str, str]
    dtypes: dict[str, str]
    boxes: dict[str, Box]
    fetches: tuple[tuple[int, int, _Buffer], ...]


class Plan:
    """The moves between two layouts, computed once (`plan`). ``links`` is the bytes each
    host's link carries per sync under the planner's model, ``bytes`` what the destinations
    receive in all, ``seconds`` what planning took."""

    def __init__(self, src: Layout, dst: Layout, key: tuple[str, str], raw: dict[str, Any], seconds: float) -> None:
        self.src, self.dst, self.seconds = src, dst, seconds
        self.id = hashlib.sha256((key[0] + "\0" + key[1]).encode()).hexdigest()[:16]
        self._names = [t["name"] for t in raw["tensors"]]
        self.links: dict[str, dict[str, int]] = raw["links"]
        self.bytes: int = int(raw["bytes"])
        self.classes: list[list[int]] = raw["classes"]
        self._sources: list[list[dict[str, Any]]] = raw["sources"]
        self._fetches = [[(int(f["src"]), int(f["buffer"])) for f in fs] for fs in raw["destinations"]]
        self._built: dict[tuple[int, int], _Buffer] = {}

    def _buffer(self, src: int, index: int) -> _Buffer:
        """One buffer of the plan as objects (built per rank's part: a large plan holds
        hundreds of thousands of pieces, and each rank needs only its own)."""
        made = self._built.get((src, index))
        if made is not None:
            return made
        b = self._sources[src][index]
        pieces = tuple(
            _Piece(self._names[p["tensor"]], tuple((lo, hi) for lo, hi in p["box"]), int(p["offset"]), int(p["nbytes"]))
            for p in b["pieces"]
        )
        made = _Buffer(readers=tuple(b["readers"]), relay=bool(b["relay"]), nbytes=int(b["nbytes"]), pieces=pieces)
        self._built[(src, index)] = made
        return made

    @property
    def busiest_link(self) -> int:
        """Bytes on the busiest link per sync."""
        return max([*self.links["out"].values(), *self.links["in"].values(), 0])

    def for_source(self, rank: int) -> SourcePlan:
        return SourcePlan(
            plan_id=self.id,
            rank=rank,
            dtypes={n: d for n, (_, d) in self.src.tensors.items()},
            boxes=dict(self.src.ranks[rank]),
            buffers=tuple(self._buffer(rank, i) for i in range(len(self._sources[rank]))),
        )

    def for_destination(self, rank: int) -> DestinationPlan:
        return DestinationPlan(
            plan_id=self.id,
            rank=rank,
            sources=len(self.src.ranks),
            src_dtypes={n: d for n, (_, d) in self.src.tensors.items()},
            dtypes={n: d for n, (_, d) in self.dst.tensors.items()},
            boxes={n: b for n, b in self.dst.ranks[rank].items() if math.prod(hi - lo for lo, hi in b) > 0},
            fetches=tuple((s, i, self._buffer(s, i)) for s, i in self._fetches[rank]),
        )


_plans: dict[tuple[str, str], Plan] = {}


def plan(src: Layout, dst: Layout) -> Plan:
    """The moves from ``src`` into ``dst`` (cached: the same pair of layouts is planned once
    per process). Raises LayoutError naming the tensor and rank of any mistake."""
    key = (src.to_json(), dst.to_json())
    cached = _plans.get(key)
    if cached is not None:
        return cached
    t0 = time.perf_counter()
    try:
        raw = json.loads(_native.reshard_plan(*key))
    except ValueError as e:
        raise LayoutError(str(e)) from None
    made = Plan(src, dst, key, raw, time.perf_counter() - t0)
    _plans[key] = made
    return made


# --- moving the bytes -----------------------------------------------------------------------


@dataclass(frozen=True)
class Shipment:
    """One source rank's version: a reference per buffer of its plan. Small and picklable:
    what travels from trainers to inference workers through Ray."""

    plan_id: str
    version: int
    rank: int
    refs: tuple[_b.Ref, ...]


def _local(box: Box, origin: Box) -> tuple[slice, ...]:
    return tuple(slice(lo - o, hi - o) for (lo, hi), (o, _) in zip(box, origin))


def _extent(box: Box) -> tuple[int, ...]:
    return tuple(hi - lo for lo, hi in box)


class Sender:
    """A source rank's side: packs its buffers each step and leases each to its readers,
    keeping the newest ``keep`` versions until they are read (older ones are freed)."""

    def __init__(self, plan: SourcePlan, *, keep: int = 2) -> None:
        self.plan = plan
        self.keep = max(1, keep)
        self._versions: list[tuple[int, list[_b.Ref]]] = []
        self._lock = threading.Lock()

    def publish(self, version: int, tensors: Mapping[str, Any]) -> Shipment:
        """Packs ``tensors`` (this rank's local arrays: each its box's shape, in the layout's
        dtype; bf16 as uint16 bits or a torch bfloat16 tensor; a DTensor's ``to_local()``) as
        version ``version``."""
        t0 = time.perf_counter()
        arrays = {name: self._array(name, tensors) for name in {p.tensor for b in self.plan.buffers for p in b.pieces}}
        refs = []
        total = 0
        try:
            for buf in self.plan.buffers:
                out = _b.empty(buf.nbytes, np.uint8)
                for p in buf.pieces:
                    dt = np.dtype(_STORAGE[self.plan.dtypes[p.tensor]])
                    view = out[p.offset : p.offset + p.nbytes].view(dt).reshape(_extent(p.box))
                    np.copyto(view, arrays[p.tensor][_local(p.box, self.plan.boxes[p.tensor])])
                refs.append(_b.put(out, readers=len(buf.readers)))
                total += buf.nbytes
        except BaseException:
            for ref in refs:
                _b.free(ref)
            _syncmetrics.record("send", False, 0, {})
            raise
        with self._lock:
            self._versions.append((version, refs))
            while len(self._versions) > self.keep:
                for ref in self._versions.pop(0)[1]:
                    _b.free(ref)  # read by all (already freed: False) or abandoned by a failed sync
        _syncmetrics.record("send", True, total, {"pack": time.perf_counter() - t0})
        return Shipment(self.plan.plan_id, int(version), self.plan.rank, tuple(refs))

    def _array(self, name: str, tensors: Mapping[str, Any]) -> np.ndarray[Any, Any]:
        if name not in tensors:
            raise KeyError(f"source rank {self.plan.rank} was not given {name!r}, which its plan sends")
        value = tensors[name]
        if type(value).__module__.startswith("torch") and str(getattr(value, "dtype", "")) == "torch.bfloat16":
            torch = importlib.import_module("torch")  # the caller has torch: it handed us a tensor
            value = value.detach().contiguous().view(torch.int16)  # DLPack to numpy has no bf16
        arr, _ = _b._as_array(value)
        want = np.dtype(_STORAGE[self.plan.dtypes[name]])
        if arr.dtype.itemsize == want.itemsize and arr.dtype != want and self.plan.dtypes[name] == "bf16":
            arr = arr.view(want)  # torch bfloat16 arrives through DLPack as 2-byte elements
        shape = _extent(self.plan.boxes[name])
        if arr.shape != shape or arr.dtype != want:
            raise ValueError(f"{name!r}: source rank {self.plan.rank} holds {shape} {want}, was given {arr.shape} {arr.dtype}")
        return arr

    def close(self) -> None:
        """Frees every version still published."""
        with self._lock:
            for _, refs in self._versions:
                for ref in refs:
                    _b.free(ref)
            self._versions.clear()


@dataclass
class Landed:
    """One receive: the version, bytes landed (source dtype), seconds in all, and per source
    rank the bytes and GB/s of its buffers."""

    version: int
    nbytes: int
    seconds: float
    sources: dict[int, tuple[int, float]] = field(default_factory=dict)


def _convert(src: np.ndarray[Any, Any], dst: np.ndarray[Any, Any], src_dt: str, dst_dt: str) -> None:
    """Writes ``src`` (stored as ``src_dt``) into ``dst`` as ``dst_dt``; bf16 through float32,
    rounding to nearest even, in chunks so the temporary stays small."""
    if src_dt == dst_dt:
        np.copyto(dst, src)
        return
    if src.ndim == 0 or src.size <= _CHUNK:
        _convert_block(src, dst, src_dt, dst_dt)
        return
    step = max(1, _CHUNK // max(1, src.size // src.shape[0]))  # whole rows (first dimension) at a time
    for i in range(0, src.shape[0], step):
        _convert_block(src[i : i + step], dst[i : i + step], src_dt, dst_dt)


def _convert_block(src: np.ndarray[Any, Any], dst: np.ndarray[Any, Any], src_dt: str, dst_dt: str) -> None:
    wide = (src.astype(np.uint32) << 16).view(np.float32) if src_dt == "bf16" else src
    if dst_dt == "bf16":
        bits = np.asarray(wide, dtype=np.float32).view(np.uint32)
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        nan = np.isnan(np.asarray(wide, dtype=np.float32))
        dst[...] = np.where(nan, np.uint16(0x7FC0), rounded)
    else:
        with np.errstate(over="ignore"):  # beyond the target's range is infinity, as IEEE rounds it
            np.copyto(dst, wide, casting="unsafe")


class Receiver:
    """A destination rank's side: two sets of arrays (front serves, back receives), a version
    landed into the back and switched in by `commit`. ``double_buffer=False`` keeps one set
    (half the memory): receiving then writes what readers read, so it waits for them and
    serving pauses for the whole receive."""

    def __init__(self, plan: DestinationPlan, *, double_buffer: bool = True, threads: int = 8) -> None:
        self.plan = plan
        self.double_buffer = double_buffer
        self._sets = [self._arrays() for _ in range(2 if double_buffer else 1)]
        self._front = 0
        self._version: int | None = None
        self._landed: int | None = None
        self._readers = [0, 0]
        self._writing_since: float | None = None  # one set: when a receive began overwriting it
        self._previous: int | None = None  # the version the back set still holds whole
        self._cond = threading.Condition()
        self._pool = ThreadPoolExecutor(max_workers=max(1, min(threads, len(plan.fetches) or 1)))
        self._staging: dict[tuple[int, int], np.ndarray[Any, Any]] = {}

    def _arrays(self) -> dict[str, np.ndarray[Any, Any]]:
        return {n: np.zeros(_extent(b), _STORAGE[self.plan.dtypes[n]]) for n, b in self.plan.boxes.items()}

    @property
    def version(self) -> int | None:
        """The version in service (None before the first commit)."""
        return self._version

    @property
    def nbytes(self) -> int:
        """Memory this receiver holds for weights (both sets)."""
        return sum(a.nbytes for s in self._sets for a in s.values())

    @property
    def staging_bytes(self) -> int:
        """Memory this receiver keeps for buffers streamed over TCP (reused every step)."""
        return sum(a.nbytes for a in self._staging.values())

    @contextlib.contextmanager
    def read(self) -> Iterator[tuple[int | None, dict[str, np.ndarray[Any, Any]]]]:
        """The version in service and its arrays, held until the block ends (a receive waits
        for readers of the set it would overwrite)."""
        with self._cond:
            self._cond.wait_for(lambda: self._writing_since is None)
            i = self._front
            self._readers[i] += 1
            version = self._version
        try:
            yield version, self._sets[i]
        finally:
            with self._cond:
                self._readers[i] -= 1
                self._cond.notify_all()

    def receive(self, shipments: Sequence[Shipment], *, timeout: float = 600.0) -> Landed:
        """Lands one version from every source rank into the back set: every buffer at once,
        each unpacked (and converted) as it arrives. Raises WeightSyncError if the shipments
        are not one version of this plan, or a source fails or dies; the front keeps serving."""
        t0 = time.perf_counter()
        by_rank = self._check(shipments)
        version = next(iter(by_rank.values())).version if by_rank else -1
        back = (self._front + 1) % len(self._sets)
        with self._cond:
            self._landed = self._previous = None
            if not self._cond.wait_for(lambda: self._readers[back] == 0, timeout=timeout):
                raise WeightSyncError(f"readers held the back buffer for {timeout} s", version=version)
            if not self.double_buffer:
                self._writing_since = t0  # serving pauses from here to the commit
        target = self._sets[back]
        futures = [self._pool.submit(self._fetch, by_rank[s], i, buf, target) for s, i, buf in self.plan.fetches]
        landed = Landed(version, 0, 0.0)
        failure: WeightSyncError | None = None
        for (s, _, buf), fut in zip(self.plan.fetches, futures):
            try:
                seconds = fut.result()
            except Exception as e:  # any failure of a fetch or its unpacking fails the sync cleanly
                failure = failure or WeightSyncError(
                    f"version {version}: source rank {s} failed mid-sync ({type(e).__name__}: {e}); "
                    f"destination rank {self.plan.rank} keeps serving version {self._version}",
                    version=version,
                    source=s,
                )
                continue
            nbytes, secs = landed.sources.get(s, (0, 0.0))
            landed.sources[s] = (nbytes + buf.nbytes, max(secs, seconds))
            landed.nbytes += buf.nbytes
        if failure is not None:
            _syncmetrics.record("receive", False, 0, {})
            self.abort(version if self.double_buffer else None)
            raise failure
        landed.seconds = time.perf_counter() - t0
        with self._cond:
            self._landed = version
        rates = {str(s): (n / t / 1e9 if t > 0 else 0.0) for s, (n, t) in landed.sources.items()}
        _syncmetrics.record("receive", True, landed.nbytes, {"total": landed.seconds}, rates)
        return landed

    def _check(self, shipments: Sequence[Shipment]) -> dict[int, Shipment]:
        by_rank: dict[int, Shipment] = {}
        for s in shipments:
            if not isinstance(s, Shipment):
                raise WeightSyncError(f"expected Shipments, got {type(s).__name__}")
            if s.plan_id != self.plan.plan_id:
                raise WeightSyncError(f"source rank {s.rank} shipped for another plan ({s.plan_id}, not {self.plan.plan_id})")
            by_rank[s.rank] = s
        versions = {s.version for s in by_rank.values()}
        if len(versions) > 1:
            raise WeightSyncError(f"shipments of versions {sorted(versions)}: a sync lands one version from every source")
        missing = sorted({src for src, _, _ in self.plan.fetches} - set(by_rank))
        if missing:
            raise WeightSyncError(f"no shipment from source rank(s) {missing}", version=min(versions) if versions else None)
        return by_rank

    def _fetch(self, ship: Shipment, index: int, buf: _Buffer, target: dict[str, np.ndarray[Any, Any]]) -> float:
        t0 = time.perf_counter()
        ref = ship.refs[index]
        relay = buf.relay or os.environ.get("ACCEL_TRANSPORT_RELAY") == "1"
        if ref.chosen_path == "tcp" and not (relay and ref.readers >= 2):
            # Streamed into this rank's own staging array, kept from step to step (warm pages).
            staging = self._staging.get((ship.rank, index))
            if staging is None or staging.nbytes != ref.nbytes:
                staging = self._staging[(ship.rank, index)] = np.empty(ref.nbytes, np.uint8)
            raw = _b.get(ref, out=staging)
        else:
            raw = _b.get(ref, relay=relay)  # a mapping on this host; a relayed copy otherwise
        seconds = time.perf_counter() - t0
        for p in buf.pieces:
            src_dt, dst_dt = self.plan.src_dtypes[p.tensor], self.plan.dtypes[p.tensor]
            piece = raw[p.offset : p.offset + p.nbytes].view(np.dtype(_STORAGE[src_dt])).reshape(_extent(p.box))
            _convert(piece, target[p.tensor][_local(p.box, self.plan.boxes[p.tensor])], src_dt, dst_dt)
        return seconds

    def commit(self, version: int) -> float:
        """Switches the landed ``version`` into service; returns how long readers were held
        off (seconds). With one set there is nothing to switch."""
        t0 = time.perf_counter()
        with self._cond:
            if self._landed != version:
                raise WeightSyncError(f"version {version} has not landed on destination rank {self.plan.rank}", version=version)
            if self.double_buffer:
                self._front = (self._front + 1) % 2
                self._previous = self._version  # still whole in the back set, until a receive
            self._version = version
            self._landed = None
            if not self.double_buffer and self._writing_since is not None:
                t0, self._writing_since = self._writing_since, None  # readers waited since receive began
                self._cond.notify_all()
        pause = time.perf_counter() - t0
        _syncmetrics.phase("receive", "pause", pause)
        return pause

    def rollback(self, version: int) -> bool:
        """Undoes the switch to ``version`` (another rank could not switch): the previous
        version, still whole in the back set, serves again. False if there is nothing to undo
        (not switched to ``version``, one set, or a receive has begun overwriting it)."""
        with self._cond:
            if not self.double_buffer or self._version != version or self._previous is None:
                return False
            self._front = (self._front + 1) % 2
            self._version, self._previous = self._previous, None
            return True

    def abort(self, version: int | None = None) -> None:
        """Drops a landed version that will not be committed (another rank failed)."""
        with self._cond:
            if version is None or self._landed == version:
                self._landed = None
                if not self.double_buffer and self._writing_since is not None:
                    # The one set was overwritten: nothing consistent is left to serve.
                    self._version, self._writing_since = None, None
                    self._cond.notify_all()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
