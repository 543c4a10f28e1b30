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
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from . import _device, _native, _syncmetrics
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
    "f8e4m3": np.uint8,
    "f8e5m2": np.uint8,
}
_FLOAT = {name for name, _, is_float in _native.reshard_dtypes() if is_float}
assert {n: s for n, s, _ in _native.reshard_dtypes()} == {n: np.dtype(d).itemsize for n, d in _STORAGE.items()}
# numpy dtypes to layout names; uint16 and uint8 stay the integers (bf16's and FP8's storage are
# not dtypes of their own); ml_dtypes' and torch's names for the ML types are known by name.
_NAMES = {np.dtype(d): n for n, d in _STORAGE.items() if n not in ("bf16", "f8e4m3", "f8e5m2")}
_ML_NAMES = {"bfloat16": "bf16", "float8_e4m3fn": "f8e4m3", "float8_e5m2": "f8e5m2"}
_SCALES = ("tensor", "block")
_CHUNK = 8 << 20  # elements converted at a time through a float32 temporary


_TORCH_NAMES = {"bf16": "bfloat16", "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2"}
_torch: Any = None


def framework_tensor(arr: np.ndarray[Any, Any], dtype: str) -> Any:
    """``arr`` (in its storage dtype) as the frameworks hold ``dtype``: a torch tensor sharing
    its memory when torch is installed, else a numpy view in ml_dtypes' type when that is
    installed, else ``arr`` itself (bf16 as its 16 bits, FP8 as bytes)."""
    global _torch
    if _torch is None:
        try:
            _torch = importlib.import_module("torch")
        except ImportError:
            _torch = False
    if _torch:
        t = _torch.from_numpy(np.ascontiguousarray(arr))
        return t.view(getattr(_torch, _TORCH_NAMES[dtype])) if dtype in _TORCH_NAMES else t
    if dtype in _TORCH_NAMES:
        try:
            ml = importlib.import_module("ml_dtypes")
        except ImportError:
            return arr
        return arr.view(getattr(ml, _TORCH_NAMES[dtype]))
    return arr


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
    named = _ML_NAMES.get(str(dtype).removeprefix("torch.")) or _ML_NAMES.get(getattr(dtype, "name", ""))
    if named is not None:
        return named
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
    """A sharded model state: ``tensors`` maps each name to (global shape, dtype) or (global
    shape, FP8 dtype, scale), the scale being ``"tensor"`` or ``"block"`` (128x128); ``ranks``
    lists each rank's boxes (name -> box); ``hosts`` optionally says where each rank runs
    (`host()` of its process), so the plan knows which ranks share memory and links. A layout
    is not changed once made (its JSON is computed once)."""

    def __init__(
        self,
        tensors: Mapping[str, Sequence[Any]],
        ranks: Sequence[Mapping[str, Any]],
        hosts: Sequence[str] | None = None,
        scales: Mapping[str, str] | None = None,
    ) -> None:
        self.tensors: dict[str, tuple[tuple[int, ...], str]] = {}
        self.scales: dict[str, str] = dict(scales or {})
        for name, spec in tensors.items():
            shape, dtype = spec[0], spec[1]
            self.tensors[str(name)] = (tuple(int(x) for x in shape), _dtype_name(dtype))
            if len(spec) > 2 and spec[2] is not None:
                self.scales[str(name)] = str(spec[2])
        for name, sc in self.scales.items():
            if sc not in _SCALES:
                raise LayoutError(f"tensor {name!r}: scale {sc!r} is not one of {_SCALES}")
            if name not in self.tensors:
                raise LayoutError(f"a scale for {name!r}, which is not among the tensors")
        self._json: str | None = None
        self._digest: str | None = None
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
        tensors: Mapping[str, Sequence[Any]],
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
        for name, (shape, *_) in tensors.items():
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
        tensors: Mapping[str, Sequence[Any]],
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
        for name, (shape, *_) in tensors.items():
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
        return Layout({n: t for n, t in self.tensors.items()}, self.ranks, hosts, self.scales)

    def with_dtypes(self, dtypes: Mapping[str, Any] | Any, scale: str | Mapping[str, str] | None = None) -> Layout:
        """The same layout storing tensors as other dtypes (one for all, or per name); FP8
        dtypes (``f8e4m3``, ``f8e5m2``) take a ``scale`` (``"tensor"`` or ``"block"``; one for
        all, or per name)."""
        if isinstance(dtypes, Mapping):
            _only_tensors(dtypes, self.tensors, "with_dtypes")
        if isinstance(scale, Mapping):
            _only_tensors(scale, self.tensors, "scale")

        def pick(name: str) -> Any:
            return dtypes.get(name, self.tensors[name][1]) if isinstance(dtypes, Mapping) else dtypes

        made = {n: (s, _dtype_name(pick(n))) for n, (s, _) in self.tensors.items()}
        scales = {n: sc for n, sc in self.scales.items() if made[n][1].startswith("f8")}
        for n, (_, d) in made.items():
            want = scale.get(n) if isinstance(scale, Mapping) else scale
            if want is not None and d.startswith("f8"):
                scales[n] = want
        return Layout(made, self.ranks, self.hosts, scales)

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
        if self._json is not None:
            return self._json
        tensors: list[dict[str, Any]] = []
        for n, (s, d) in self.tensors.items():
            t: dict[str, Any] = {"name": n, "shape": list(s), "dtype": d}
            if n in self.scales:
                t["scale"] = self.scales[n]
            tensors.append(t)
        doc = {
            "tensors": tensors,
            "ranks": [
                {"host": h, "slices": {n: [list(r) for r in box] for n, box in boxes.items()}}
                for h, boxes in zip(self.hosts, self.ranks)
            ],
        }
        self._json = json.dumps(doc, separators=(",", ":"))
        return self._json

    def digest(self) -> str:
        """SHA-256 of the layout's JSON, computed once (a layout is not changed once made)."""
        if self._digest is None:
            self._digest = hashlib.sha256(self.to_json().encode()).hexdigest()
        return self._digest


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
    scales_at: int | None = None  # quantised: where its f32 scales start in the piece


@dataclass(frozen=True)
class _Buffer:
    readers: tuple[int, ...]
    relay: bool
    nbytes: int
    pieces: tuple[_Piece, ...]


@dataclass(frozen=True)
class _Quant:
    """How a tensor is quantised at the source: the FP8 dtype and its scale ("tensor": one,
    "block": one per 128x128 block)."""

    dtype: str
    scale: str


@dataclass(frozen=True)
class SourcePlan:
    """What source rank ``rank`` packs each step: its boxes and its buffers (picklable; hand
    each trainer rank its own). ``quant`` names the tensors it quantises to FP8."""

    plan_id: str
    rank: int
    dtypes: dict[str, str]  # tensor -> dtype the source holds
    boxes: dict[str, Box]
    buffers: tuple[_Buffer, ...]
    quant: dict[str, _Quant] = field(default_factory=dict)
    routes: tuple[tuple[_device.Route, ...], ...] = ()  # per buffer, per reader


@dataclass(frozen=True)
class DestinationPlan:
    """What destination rank ``rank`` reads each step: its boxes, their dtypes, and each
    buffer it reads as (source rank, buffer index, the buffer). A quantised tensor ``n`` comes
    with its scales in ``scale_names[n]`` (``n + "_scale"`` per tensor, ``n + "_scale_inv"``
    per 128x128 block, the names vLLM and SGLang load)."""

    plan_id: str
    rank: int
    sources: int
    src_dtypes: dict[str, str]
    dtypes: dict[str, str]
    boxes: dict[str, Box]
    fetches: tuple[tuple[int, int, _Buffer], ...]
    quant: dict[str, _Quant] = field(default_factory=dict)
    scale_names: dict[str, str] = field(default_factory=dict)
    routes: tuple[_device.Route, ...] = ()  # per fetch
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # global shapes


def scale_name(name: str, scale: str) -> str:
    """The name of tensor ``name``'s FP8 scales: ``_scale`` (one per tensor, vLLM's
    ``weight_scale``) or ``_scale_inv`` (per 128x128 block, DeepSeek's and Kimi's checkpoints)."""
    return name + ("_scale_inv" if scale == "block" else "_scale")


def scale_box(box: Box, scale: str) -> Box:
    """The scale groups a box touches: () for one per tensor, else block rows and columns."""
    if scale != "block":
        return ()
    (r0, r1), (c0, c1) = box[-2], box[-1]
    return ((r0 // 128, -(-r1 // 128)), (c0 // 128, -(-c1 // 128)))


class Plan:
    """The moves between two layouts, computed once (`plan`). ``links`` is the bytes each
    host's link carries per sync under the planner's model; ``bytes`` what the destinations
    receive in all (the pieces in the dtype they travel in, FP8 with its scales, each replica
    counted, without the buffers' 64-byte alignment padding: the sum of every rank's
    ``Landed.nbytes``); ``seconds`` what planning (or loading) took; ``templates``, ``pieces``
    and ``memory`` the plan's size (distinct geometries, pieces placed, bytes it holds). A
    rank's part is expanded when asked (`for_source`, `for_destination`)."""

    def __init__(self, src: Layout, dst: Layout, key: str, native: Any, seconds: float) -> None:
        self.src, self.dst, self.seconds = src, dst, seconds
        self.id = key[:16]
        self._key = key
        self._native = native
        summary = json.loads(native.summary())
        self._names: list[str] = [t[0] for t in summary["tensors"]]
        self._quant = {t[0]: _Quant(t[2], t[3]) for t in summary["tensors"] if t[3] is not None and t[1] != t[2]}
        self.links: dict[str, dict[str, int]] = summary["links"]
        self.bytes: int = int(summary["bytes"])
        self.classes: list[list[int]] = summary["classes"]
        self.places: tuple[list[_device.Where], list[_device.Where], bool, bool] | None = None
        self.templates: int = int(summary["templates"])
        self.pieces: int = int(summary["pieces"])
        self.memory: int = int(summary["memory"])

    def _buffer(self, raw: dict[str, Any]) -> _Buffer:
        pieces = tuple(
            _Piece(self._names[t], tuple((int(lo), int(hi)) for lo, hi in box), int(off), int(n), None if s is None else int(s))
            for t, box, off, n, s in raw["pieces"]
        )
        return _Buffer(readers=tuple(raw["readers"]), relay=bool(raw["relay"]), nbytes=int(raw["nbytes"]), pieces=pieces)

    @property
    def busiest_link(self) -> int:
        """Bytes on the busiest link per sync."""
        return max([*self.links["out"].values(), *self.links["in"].values(), 0])

    def with_places(self, src: Sequence[_device.Where], dst: Sequence[_device.Where], *, nixl: bool, cuda_ipc: bool) -> Plan:
        """Says where every rank's weights live (its process, host, device, machine), so each
        rank's part carries the route of every buffer it sends or reads (`_device.route`):
        device to device where the topology and the backends allow, through host memory with
        the reason otherwise."""
        if len(src) != len(self.src.ranks) or len(dst) < len(self.dst.ranks):
            raise LayoutError(f"{len(src)} source and {len(dst)} destination places for {len(self.src.ranks)} and {len(self.dst.ranks)} ranks")
        self.places = (list(src), list(dst), nixl, cuda_ipc)
        return self

    def _route(self, s: int, d: int) -> _device.Route:
        assert self.places is not None
        src, dst, nixl, ipc = self.places
        return _device.route(src[s], dst[d], nixl=nixl, cuda_ipc=ipc)

    def for_source(self, rank: int) -> SourcePlan:
        raw = json.loads(self._native.source(rank))
        routes: tuple[tuple[_device.Route, ...], ...] = ()
        if self.places is not None:
            routes = tuple(tuple(self._route(rank, d) for d in b["readers"]) for b in raw)
        return SourcePlan(
            plan_id=self.id,
            rank=rank,
            dtypes={n: d for n, (_, d) in self.src.tensors.items()},
            boxes=dict(self.src.ranks[rank]),
            buffers=tuple(self._buffer(b) for b in raw),
            quant={n: q for n, q in self._quant.items() if n in self.src.ranks[rank]},
            routes=routes,
        )

    def for_destination(self, rank: int) -> DestinationPlan:
        raw = json.loads(self._native.destination(rank))
        boxes = {n: b for n, b in self.dst.ranks[rank].items() if math.prod(hi - lo for lo, hi in b) > 0}
        quant = {n: q for n, q in self._quant.items() if n in boxes}
        return DestinationPlan(
            plan_id=self.id,
            rank=rank,
            sources=len(self.src.ranks),
            src_dtypes={n: d for n, (_, d) in self.src.tensors.items()},
            dtypes={n: d for n, (_, d) in self.dst.tensors.items()},
            boxes=boxes,
            fetches=tuple((int(b["src"]), int(b["buffer"]), self._buffer(b)) for b in raw),
            quant=quant,
            scale_names={n: scale_name(n, q.scale) for n, q in quant.items()},
            routes=tuple(self._route(int(b["src"]), rank) for b in raw) if self.places is not None else (),
            shapes={n: self.dst.tensors[n][0] for n in boxes},
        )

    @property
    def members(self) -> list[int]:
        """The destination ranks in the plan (a rank that left keeps its index, outside it)."""
        return sorted(r for c in self.classes for r in c)

    def with_replica(self, like: int, host: str = "") -> tuple[Plan, int]:
        """The plan with one more destination rank on ``host``, a replica of rank ``like``
        (same boxes), and its index: nothing is planned again, the plan keeps its id, and every
        other destination rank's part stays valid (the sources' buffers gain a reader: hand
        the trainers their parts again)."""
        rank = len(self.dst.ranks)
        where = host or f"dst:{rank}"
        try:
            native, made = self._native.with_replica(like, where)
        except ValueError as e:
            raise LayoutError(str(e)) from None
        assert made == rank
        dst = Layout(self.dst.tensors, [*self.dst.ranks, self.dst.ranks[like]], [*self.dst.hosts, where], self.dst.scales)
        made = Plan(self.src, dst, self._key, native, 0.0)
        if self.places is not None:
            src_places, dst_places, nixl, ipc = self.places
            made.places = (src_places, [*dst_places, _device.Where(f"joiner-{rank}", where)], nixl, ipc)
        return made, rank

    def without_replica(self, rank: int) -> Plan:
        """The plan without destination rank ``rank`` (it left or died): its replicas read on
        without it; the last rank of a shard cannot leave."""
        try:
            native = self._native.without_replica(rank)
        except ValueError as e:
            raise LayoutError(str(e)) from None
        made = Plan(self.src, self.dst, self._key, native, 0.0)
        made.places = self.places
        return made

    def predict(self, fleet: Mapping[str, Any]) -> dict[str, Any]:
        """The fabric model's time for one sync of this plan on a described cluster
        (`accel_reshard::fabric`): ``fleet`` gives ``nics`` and ``nic_gbit`` per host (and
        optionally ``host_gbit`` overrides, scale-up ``domains`` with ``scale_up_gbyte``,
        ``leaves`` with their ``oversubscription``, the ``efficiency`` a transfer reaches, relays'
        ``chunk_bytes`` and a fixed ``setup_s``; ``convert``, the sources' packing:
        ``scales_gbyte`` and ``quantize_gbyte``, one thread's GB/s of source-dtype input
        (required when the plan quantises), ``copy_gbyte``, one thread's GB/s of buffer bytes
        copied for the tensors not quantised (without it copies are free), the ``threads`` a
        host packs on at once and whether sending ``overlaps`` it; the
        sync's ``admission`` limits, ``receivers`` and ``bytes`` per source link; and ``cpu``,
        the hosts' work per byte moved: ``transfer_gbyte`` of NIC bytes one core carries, both
        ends together, the ``cores`` free for it per host, and the hosts ``shared`` by one
        machine). Returns ``floor_s`` (the busiest resource at line rate), ``seconds`` (the
        prediction), its ``links_s`` (every admission wave's), ``cpu_s`` (the busiest CPU pool,
        ``cpu_pool``) and ``convert_s`` (packing) parts, ``waves``, the bytes read to convert
        (``convert_bytes``) and copied (``copy_bytes``), ``bottleneck`` and its bytes, the bytes
        over NICs and scale-up links, and the longest relay chain (``hops``). A `LayoutError` names what the fleet lacks or gets wrong."""
        try:
            out: dict[str, Any] = json.loads(self._native.predict(json.dumps(dict(fleet))))
        except ValueError as e:
            raise LayoutError(str(e)) from None
        return out

    def link_bytes(self, rank: int) -> dict[str, int]:
        """The bytes destination rank ``rank`` reads over each source host's link per sync
        (what admission counts; buffers from its own host use no link)."""
        here = self.dst.hosts[rank] or f"dst:{rank}"
        out: dict[str, int] = {}
        for s, _, buf in self.for_destination(rank).fetches:
            there = self.src.hosts[s] or f"src:{s}"
            if there != here:
                out[there] = out.get(there, 0) + buf.nbytes
        return out

    def to_bytes(self) -> bytes:
        """The plan as bytes, for a cache (`Plan.from_bytes` reads them back, for the same
        pair of layouts only)."""
        return bytes(self._native.to_bytes(self._key))

    @classmethod
    def from_bytes(cls, src: Layout, dst: Layout, data: bytes) -> Plan:
        """A plan saved by `to_bytes`; LayoutError if it is damaged or for another pair."""
        t0 = time.perf_counter()
        key = _key(src, dst)
        try:
            tag, native = _native.reshard_plan_load(data)
        except ValueError as e:
            raise LayoutError(str(e)) from None
        if tag != key:
            raise LayoutError("this saved plan is for another pair of layouts")
        return cls(src, dst, key, native, time.perf_counter() - t0)


_plans: dict[str, Plan] = {}
_CACHE_VAR = "ACCEL_PLAN_CACHE"


def _key(src: Layout, dst: Layout) -> str:
    """A digest of both layouts (hosts, boxes, dtypes, scales): the plan's identity."""
    return hashlib.sha256(f"{src.digest()}\0{dst.digest()}".encode()).hexdigest()


def plan(src: Layout, dst: Layout, *, cache: str | None = None) -> Plan:
    """The moves from ``src`` into ``dst``, planned once per pair of layouts: kept in this
    process, and with ``cache`` (a directory; default ``ACCEL_PLAN_CACHE``, none if unset)
    saved there for other processes and later runs. Raises LayoutError naming the tensor and
    rank of any mistake."""
    key = _key(src, dst)
    cached = _plans.get(key)
    if cached is not None:
        return cached
    folder = cache if cache is not None else os.environ.get(_CACHE_VAR)
    path = os.path.join(folder, f"{key}.plan") if folder else None
    if path is not None and os.path.exists(path):
        try:
            with open(path, "rb") as f:
                made = Plan.from_bytes(src, dst, f.read())
        except (OSError, LayoutError):
            made = None  # a damaged or foreign file: plan again and replace it
        if made is not None:
            _plans[key] = made
            return made
    t0 = time.perf_counter()
    try:
        native = _native.reshard_plan(src.to_json(), dst.to_json())
    except ValueError as e:
        raise LayoutError(str(e)) from None
    made = Plan(src, dst, key, native, time.perf_counter() - t0)
    _plans[key] = made
    if path is not None:
        _save(path, made.to_bytes())
    return made


def _save(path: str, data: bytes) -> None:
    """Writes ``data`` to ``path`` through a private temporary file and a rename, so a reader
    never sees half a plan."""
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# --- moving the bytes -----------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceBuffer:
    """A buffer packed in device memory: its CUDA IPC handle, bytes, device and the packing
    process (a reader on the same node maps it and copies device to device)."""

    handle: bytes
    nbytes: int
    device: int
    pid: int


@dataclass(frozen=True)
class Shipment:
    """One source rank's version: a reference per buffer of its plan (a transport `Ref` for a
    buffer in host memory, a `DeviceBuffer` for one in device memory). Small and picklable:
    what travels from trainers to inference workers through Ray."""

    plan_id: str
    version: int
    rank: int
    refs: tuple[Any, ...]


def _local(box: Box, origin: Box) -> tuple[slice, ...]:
    return tuple(slice(lo - o, hi - o) for (lo, hi), (o, _) in zip(box, origin))


def _extent(box: Box) -> tuple[int, ...]:
    return tuple(hi - lo for lo, hi in box)


@dataclass(frozen=True)
class _DevicePlace(_device.Place):
    """A source rank's device tensor: its device, and its DLPack capsule, held while the
    version packs."""

    device_index: int = 0
    keep: Any = None


class Sender:
    """A source rank's side: packs its buffers each step and leases each to its readers,
    keeping the newest ``keep`` versions until they are read (older ones are freed)."""

    def __init__(self, plan: SourcePlan, *, keep: int = 2) -> None:
        self.plan = plan
        self.keep = max(1, keep)
        self._versions: list[tuple[int, list[_b.Ref]]] = []
        self._lock = threading.Lock()
        self._device: dict[tuple[int, int], tuple[int, bytes]] = {}  # (buffer, slot) -> (pointer, IPC handle)
        self._slot = 0
        self.staged: dict[int, str] = {}  # buffer -> why its device bytes went through host memory

    def publish(self, version: int, tensors: Mapping[str, Any]) -> Shipment:
        """Packs ``tensors`` (this rank's local arrays: each its box's shape, in the layout's
        dtype; bf16 as uint16 bits or a torch bfloat16 tensor; a DTensor's ``to_local()``) as
        version ``version``."""
        t0 = time.perf_counter()
        arrays = {name: self._array(name, tensors) for name in {p.tensor for b in self.plan.buffers for p in b.pieces}}
        grids: dict[str, list[float]] = {}  # FP8 scales, computed once per tensor and version
        refs: list[Any] = []
        total = 0
        self._slot = (self._slot + 1) % (self.keep + 1)
        try:
            for i, buf in enumerate(self.plan.buffers):
                on_device = any(isinstance(arrays[p.tensor], _device.Place) for p in buf.pieces)
                if on_device and self._device_path(i):
                    refs.append(self._pack_device(i, buf, arrays, grids))
                    total += buf.nbytes
                    continue
                out = _b.empty(buf.nbytes, np.uint8)
                for p in buf.pieces:
                    src = arrays[p.tensor]
                    q = self.plan.quant.get(p.tensor)
                    if q is not None:
                        self._quantize(p, q, self._on_host(p.tensor, src, arrays), grids, out[p.offset : p.offset + p.nbytes])
                    elif isinstance(src, _device.Place):  # device to this host buffer, the piece only
                        _device.pack(self._engine(), src, p.box, _b._into(out[p.offset : p.offset + p.nbytes])[0], False)
                    else:
                        dt = np.dtype(_STORAGE[self.plan.dtypes[p.tensor]])
                        view = out[p.offset : p.offset + p.nbytes].view(dt).reshape(_extent(p.box))
                        np.copyto(view, src[_local(p.box, self.plan.boxes[p.tensor])])
                refs.append(_b.put(out, readers=len(buf.readers)))
                total += buf.nbytes
        except BaseException:
            for ref in refs:
                if isinstance(ref, _b.Ref):
                    _b.free(ref)
            _syncmetrics.record("send", False, 0, {})
            raise
        with self._lock:
            self._versions.append((version, [r for r in refs if isinstance(r, _b.Ref)]))
            while len(self._versions) > self.keep:
                for ref in self._versions.pop(0)[1]:
                    _b.free(ref)  # read by all (already freed: False) or abandoned by a failed sync
        _syncmetrics.record("send", True, total, {"pack": time.perf_counter() - t0})
        return Shipment(self.plan.plan_id, int(version), self.plan.rank, tuple(refs))

    def _engine(self) -> _device.Engine:
        gpu = _device.cuda()
        if gpu is None:
            raise WeightSyncError(f"source rank {self.plan.rank} holds tensors in device memory, and {_device.cuda_unavailable()}")
        return gpu

    def _device_path(self, i: int) -> bool:
        """Whether buffer ``i`` goes device to device: every reader's route is CUDA IPC or NIXL
        and this process has the CUDA driver; otherwise why not is recorded in ``staged``."""
        routes = self.plan.routes[i] if i < len(self.plan.routes) else ()
        why = ""
        if not routes:
            why = "no route was planned for this buffer (plan_weight_sync plans them from each rank's device and machine)"
        elif any(r.staged for r in routes):
            why = next(r.staged_why for r in routes if r.staged)
        elif any(r.path != "cuda_ipc" for r in routes):
            why = "a reader's route is NIXL, which the weight sync drives for host buffers only so far"
        elif _device.cuda() is None:
            why = str(_device.cuda_unavailable())
        if why:
            self.staged[i] = why
            return False
        self.staged.pop(i, None)
        return True

    def _on_host(self, name: str, src: Any, arrays: dict[str, Any]) -> np.ndarray[Any, Any]:
        """A device tensor's whole box in host memory (FP8 is quantised on the host: no device
        kernel is built), copied once per version; host arrays as they are."""
        if not isinstance(src, _device.Place):
            return np.asarray(src)
        key = f"{name}\0host"
        held = arrays.get(key)
        if held is None:
            held = np.empty(src.shape, _STORAGE[self.plan.dtypes[name]])
            box = tuple((o, o + n) for o, n in zip(src.origin, src.shape))
            _device.pack(self._engine(), src, box, int(held.__array_interface__["data"][0]), False)
            arrays[key] = held
        return np.asarray(held)

    def _pack_device(self, i: int, buf: _Buffer, arrays: dict[str, Any], grids: dict[str, list[float]]) -> DeviceBuffer:
        """Packs buffer ``i`` in device memory (device-to-device copies; FP8 quantised on the
        host, then copied in) and exports it as a CUDA IPC handle."""
        gpu = _device.cuda()
        assert gpu is not None
        device = next(a.device_index for a in arrays.values() if isinstance(a, _DevicePlace))
        gpu.bind(device)
        slot = self._device.get((i, self._slot))
        if slot is None:
            ptr = gpu.alloc(buf.nbytes)
            slot = self._device[(i, self._slot)] = (ptr, gpu.export(ptr))
        ptr, handle = slot
        for p in buf.pieces:
            src = arrays[p.tensor]
            q = self.plan.quant.get(p.tensor)
            if q is not None:
                tmp = np.empty(p.nbytes, np.uint8)
                self._quantize(p, q, self._on_host(p.tensor, src, arrays), grids, tmp)
                gpu.copy2d(ptr + p.offset, p.nbytes, True, int(tmp.__array_interface__["data"][0]), p.nbytes, False, p.nbytes, 1)
                self.staged[i] = "FP8 is quantised on the host (no device kernel is built yet)"
            elif isinstance(src, _device.Place):
                _device.pack(gpu, src, p.box, ptr + p.offset, True)
            else:
                gpu.copy2d(ptr + p.offset, p.nbytes, True, int(np.ascontiguousarray(src[_local(p.box, self.plan.boxes[p.tensor])]).__array_interface__["data"][0]), p.nbytes, False, p.nbytes, 1)
        gpu.synchronize()
        return DeviceBuffer(handle, buf.nbytes, device, os.getpid())

    def _quantize(self, p: _Piece, q: _Quant, arr: np.ndarray[Any, Any], grids: dict[str, list[float]], out: np.ndarray[Any, Any]) -> None:
        """Packs piece ``p`` as FP8 with its scales (accel_reshard::fp8, in Rust): the scales
        come from the whole of this rank's box (the planner made sure each scale group lies in
        one source box), so every destination gets the same bytes."""
        box = self.plan.boxes[p.tensor]
        shape, origin = [hi - lo for lo, hi in box], [lo for lo, _ in box]
        src = (int(arr.__array_interface__["data"][0]), int(arr.nbytes))
        dtype = self.plan.dtypes[p.tensor]
        grid = grids.get(p.tensor)
        if grid is None:
            grid = grids[p.tensor] = _native.reshard_fp8_scales(src, dtype, shape, origin, q.scale, q.dtype)
        _native.reshard_fp8_pack(src, dtype, shape, origin, q.scale, q.dtype, grid, [(lo, hi) for lo, hi in p.box], _b._into(out))

    def _array(self, name: str, tensors: Mapping[str, Any]) -> Any:
        """This rank's box of ``name``: a numpy array (host memory, storage dtype), or the
        `Place` of a device tensor. Anything DLPack exports is read in place, in its own dtype
        (a torch bfloat16 or float8 tensor needs no integer view)."""
        if name not in tensors:
            raise KeyError(f"source rank {self.plan.rank} was not given {name!r}, which its plan sends")
        value = tensors[name]
        shape = _extent(self.plan.boxes[name])
        if not isinstance(value, np.ndarray) and hasattr(value, "__dlpack__"):
            if hasattr(value, "detach"):
                value = value.detach()  # a torch parameter: DLPack refuses tensors that need grad
            t = _device.describe(value)
            if t.dtype not in (self.plan.dtypes[name], _device.RAW.get(self.plan.dtypes[name])) or t.shape != shape:
                raise ValueError(f"{name!r}: source rank {self.plan.rank} holds {shape} {self.plan.dtypes[name]}, was given {t.shape} {t.dtype}")
            if t.on_host:
                return np.ascontiguousarray(_device.host_array(t))
            if not t.contiguous:
                raise ValueError(f"{name!r}: a device tensor must be contiguous (call .contiguous() first)")
            if t.device_type not in _device.CUDA_TYPES:
                raise WeightSyncError(f"{name!r} is in {t.device} memory: the weight sync moves host and CUDA memory")
            return _DevicePlace(t.address, shape, tuple(lo for lo, _ in self.plan.boxes[name]), t.itemsize, True, t.device_id, t.capsule)
        arr, _ = _b._as_array(value)
        want = np.dtype(_STORAGE[self.plan.dtypes[name]])
        if arr.dtype.itemsize == want.itemsize and arr.dtype != want and self.plan.dtypes[name] == "bf16":
            arr = arr.view(want)  # torch bfloat16 arrives through DLPack as 2-byte elements
        if arr.shape != shape or arr.dtype != want:
            raise ValueError(f"{name!r}: source rank {self.plan.rank} holds {shape} {want}, was given {arr.shape} {arr.dtype}")
        return np.ascontiguousarray(arr) if name in self.plan.quant else arr

    def close(self) -> None:
        """Frees every version still published (and its device buffers)."""
        with self._lock:
            for _, refs in self._versions:
                for ref in refs:
                    _b.free(ref)
            self._versions.clear()
            gpu = _device.cuda() if self._device else None
            for ptr, _ in self._device.values():
                if gpu is not None:
                    gpu.free(ptr)
            self._device.clear()


@dataclass
class Landed:
    """One receive: the version; ``nbytes``, the bytes of the pieces landed as they travel
    (the source dtype, or FP8 with its scales; over all ranks these add up to ``Plan.bytes``);
    ``read_bytes``, the bytes of the buffers read (the pieces plus the 64-byte alignment
    between them: what crossed the links); seconds in all; and per source rank the bytes read
    and GB/s of its buffers."""

    version: int
    nbytes: int
    seconds: float
    sources: dict[int, tuple[int, float]] = field(default_factory=dict)
    read_bytes: int = 0
    routes: list[PieceRoute] = field(default_factory=list)


@dataclass(frozen=True)
class PieceRoute:
    """How one piece came: from which source rank, which tensor and box, the transport's path
    and its reason, and whether device bytes were staged through host memory (and why)."""

    source: int
    tensor: str
    box: Box
    path: str
    reason: str
    staged: bool = False
    why: str = ""


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
    serving pauses for the whole receive.

    ``targets`` gives the sets yourself (one, or two with double buffering): dicts of tensors
    any DLPack producer made (torch CUDA tensors, say), one per name of the rank's boxes and FP8
    scales, each its box's shape in the dtype it travels in (no conversion happens on a
    device). Pieces land there in place: device to device where the route allows, host to
    device otherwise (`Landed.routes` says which, per piece)."""

    def __init__(
        self,
        plan: DestinationPlan,
        *,
        double_buffer: bool = True,
        threads: int = 8,
        targets: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        self.plan = plan
        self._shapes = plan.shapes
        self._places: list[dict[str, _device.Place]] = []
        if targets is not None:
            self.double_buffer = len(targets) > 1
            self._sets = [self._adopt(t) for t in targets]
            if len(targets) not in (1, 2):
                raise ValueError("targets are one set, or two for double buffering")
        else:
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
        self._receiving: int | None = None  # the version a receive is landing now
        self._refused: str | None = None  # why this rank must not serve (too far behind)

    def _adopt(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Checks a set of caller's tensors against the plan and records where each lives."""
        places: dict[str, _device.Place] = {}
        want = {n: (_extent(b), self.plan.dtypes[n]) for n, b in self.plan.boxes.items()}
        for n, q in self.plan.quant.items():
            want[self.plan.scale_names[n]] = (_extent(scale_box(self.plan.boxes[n], q.scale)), "f32")
        missing = sorted(set(want) - set(given))
        if missing:
            raise ValueError(f"destination rank {self.plan.rank}: no target for {missing[:3]}")
        for n, (shape, dtype) in want.items():
            if n in self.plan.boxes and n not in self.plan.quant and self.plan.src_dtypes[n] != dtype:
                raise ValueError(f"{n!r}: targets take the dtype a piece travels in ({self.plan.src_dtypes[n]}), not {dtype}: convert at the source or land in host arrays")
            t = _device.describe(given[n])
            if t.shape != shape or t.dtype not in (dtype, _device.RAW.get(dtype)) or not t.contiguous or t.readonly:
                raise ValueError(f"{n!r}: the target must be a writable, contiguous {shape} {dtype} tensor, not {t.shape} {t.dtype}")
            if not t.on_host and t.device_type not in _device.CUDA_TYPES:
                raise ValueError(f"{n!r} is in {t.device} memory: targets are host or CUDA memory")
            box = self.plan.boxes.get(n) or scale_box(self.plan.boxes[n.rsplit("_scale", 1)[0]], "block")
            places[n] = _DevicePlace(t.address, shape, tuple(lo for lo, _ in box), t.itemsize, not t.on_host, t.device_id, t.capsule)
        self._places.append(places)
        return dict(given)

    def _arrays(self) -> dict[str, np.ndarray[Any, Any]]:
        """One set of target arrays, zeroed and touched now: a receive never pays the first
        touch of its pages (with two sets, the second step would), and memory that is not there
        fails here, not in a sync."""
        made = {n: np.empty(_extent(b), _STORAGE[self.plan.dtypes[n]]) for n, b in self.plan.boxes.items()}
        for n, q in self.plan.quant.items():
            made[self.plan.scale_names[n]] = np.empty(_extent(scale_box(self.plan.boxes[n], q.scale)), np.float32)
        for a in made.values():
            a.fill(0)
        return made

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
            if self._refused is not None:
                raise WeightSyncError(self._refused, version=self._version)
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
        with self._cond:
            if self._receiving is not None:
                raise WeightSyncError(
                    f"destination rank {self.plan.rank} is still landing version {self._receiving} (it missed a "
                    f"deadline); version {version} waits for the next step",
                    version=version,
                )
            self._receiving = version
        try:
            return self._receive(by_rank, version, t0, timeout)
        finally:
            with self._cond:
                self._receiving = None

    def _receive(self, by_rank: dict[int, Shipment], version: int, t0: float, timeout: float) -> Landed:
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
        for j, ((s, i, buf), fut) in enumerate(zip(self.plan.fetches, futures)):
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
            landed.read_bytes += buf.nbytes
            landed.nbytes += sum(p.nbytes for p in buf.pieces)
            r = self._route_of(j, by_rank[s].refs[i])
            landed.routes.extend(PieceRoute(s, p.tensor, p.box, r.path, r.reason, r.staged, r.staged_why) for p in buf.pieces)
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

    def _fetch(self, ship: Shipment, index: int, buf: _Buffer, target: dict[str, Any]) -> float:
        t0 = time.perf_counter()
        ref = ship.refs[index]
        places = self._places[self._set_of(target)] if self._places else None
        if isinstance(ref, DeviceBuffer):
            gpu = _device.cuda()
            if gpu is None:
                raise WeightSyncError(f"source rank {ship.rank} packed a buffer in device memory, and {_device.cuda_unavailable()}")
            gpu.bind(ref.device)
            base = gpu.open(ref.handle)
            for p in buf.pieces:
                self._land(p, base + p.offset, True, target, places, gpu)
            gpu.synchronize()
            return time.perf_counter() - t0
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
        if places is not None:  # the caller's tensors: host to device (or host) in place
            base = int(raw.__array_interface__["data"][0])
            gpu = _device.cuda() if any(pl.device for pl in places.values()) else None
            for p in buf.pieces:
                self._land(p, base + p.offset, False, target, places, gpu)
            return seconds
        for p in buf.pieces:
            q = self.plan.quant.get(p.tensor)
            if q is not None:
                self._unpack_fp8(raw, p, q, target)
                continue
            src_dt, dst_dt = self.plan.src_dtypes[p.tensor], self.plan.dtypes[p.tensor]
            piece = raw[p.offset : p.offset + p.nbytes].view(np.dtype(_STORAGE[src_dt])).reshape(_extent(p.box))
            _convert(piece, target[p.tensor][_local(p.box, self.plan.boxes[p.tensor])], src_dt, dst_dt)
        return seconds

    def _route_of(self, j: int, ref: Any) -> _device.Route:
        """The route fetch ``j`` took: the planned one, else what the transport chose for it."""
        if j < len(self.plan.routes):
            return self.plan.routes[j]
        if isinstance(ref, DeviceBuffer):
            return _device.Route("cuda_ipc", "device_buffer", f"a CUDA IPC handle of GPU {ref.device}")
        chosen = ref.route
        return _device.Route(chosen.path, chosen.reason, chosen.detail)

    def _set_of(self, target: dict[str, Any]) -> int:
        return next(i for i, s in enumerate(self._sets) if s is target)

    def _land(self, p: _Piece, at: int, src_dev: bool, target: dict[str, Any], places: dict[str, _device.Place] | None, gpu: Any) -> None:
        """One piece at address ``at`` (device memory or host) into its place: a target tensor
        (`places`), or this receiver's own host arrays."""
        if places is None:  # a device buffer into host arrays
            arr = target[p.tensor]
            place: _device.Place = _device.Place(int(arr.__array_interface__["data"][0]), arr.shape, tuple(lo for lo, _ in self.plan.boxes[p.tensor]), arr.itemsize, False)
            scale_arr = target.get(self.plan.scale_names.get(p.tensor, ""))
            scale_place = None if scale_arr is None else _device.Place(int(scale_arr.__array_interface__["data"][0]), scale_arr.shape, (), 4, False)
        else:
            place = places[p.tensor]
            scale_place = places.get(self.plan.scale_names.get(p.tensor, ""))
        engine = gpu if (src_dev or place.device) else _device.HostEngine()
        if engine is None:
            raise WeightSyncError(f"destination rank {self.plan.rank} lands in device memory, and {_device.cuda_unavailable()}")
        _device.unpack(engine, at, src_dev, p.box, place)
        q = self.plan.quant.get(p.tensor)
        if q is None or scale_place is None or p.scales_at is None:
            return
        groups = scale_box(p.box, q.scale)
        own = scale_box(self.plan.boxes[p.tensor], q.scale)
        sp = _device.Place(scale_place.address, tuple(hi - lo for lo, hi in own), tuple(lo for lo, _ in own), 4, scale_place.device)
        if q.scale != "block":  # one scale: the same four bytes in every piece
            engine.copy2d(sp.address, 4, sp.device, at + p.scales_at, 4, src_dev, 4, 1)
        else:
            _device.unpack(engine, at + p.scales_at, src_dev, groups, sp)

    def _unpack_fp8(self, raw: np.ndarray[Any, Any], p: _Piece, q: _Quant, target: dict[str, np.ndarray[Any, Any]]) -> None:
        """An FP8 piece: its bytes into the tensor, its scales into the tensor's scale array."""
        box = self.plan.boxes[p.tensor]
        elems = math.prod(_extent(p.box))
        np.copyto(target[p.tensor][_local(p.box, box)], raw[p.offset : p.offset + elems].reshape(_extent(p.box)))
        assert p.scales_at is not None
        scales = raw[p.offset + p.scales_at : p.offset + p.nbytes].view("<f4")
        sc = target[self.plan.scale_names[p.tensor]]
        if q.scale != "block":
            sc[()] = scales[0]
            return
        groups = scale_box(p.box, "block")
        sc[_local(groups, scale_box(box, "block"))] = scales.reshape(_extent(groups))

    def hand_to(self, load_weights: Callable[[Iterator[tuple[str, Any]]], Any], *, whole: bool = False) -> tuple[int | None, Any]:
        """Hands the version in service to an engine's ``load_weights(weights)`` hook, the one
        vLLM's and SGLang's models expose (an iterable of ``(name, tensor)``): every tensor of
        this rank, then the FP8 scales under their names (`scale_name`), as torch tensors in
        their own dtype when torch is installed (bfloat16, float8_e4m3fn, float8_e5m2), else
        numpy arrays (the ML dtypes through ml_dtypes if installed, else their raw bits). The
        engines' hooks shard whole checkpoint tensors themselves: ``whole=True`` hands each
        tensor at its global shape with this rank's box filled (the rest zeros), so a hook
        sharding like this rank's layout takes exactly its box. Returns the version handed
        and what the hook returned; readers of the version are not held off meanwhile."""
        with self.read() as (version, arrays):
            def pairs() -> Iterator[tuple[str, Any]]:
                for name, box in self.plan.boxes.items():
                    arr = np.asarray(arrays[name])
                    if whole:
                        full = np.zeros(tuple(self._shapes[name]), arr.dtype)
                        full[_local(box, tuple((0, n) for n in self._shapes[name]))] = arr
                        arr = full
                    yield name, framework_tensor(arr, self.plan.dtypes[name])
                for name, sname in self.plan.scale_names.items():
                    yield sname, framework_tensor(np.asarray(arrays[sname]), "f32")

            return version, load_weights(pairs())

    def share(self) -> tuple[int | None, dict[str, _b.Ref]]:
        """The version in service as references to a copy of each array (each leased to one
        reader): what a replica that joins reads to catch up without asking the trainers."""
        with self.read() as (version, arrays):
            return version, {n: _b.put(a, readers=1) for n, a in arrays.items()}

    def catch_up(self, version: int, refs: Mapping[str, _b.Ref]) -> float:
        """Lands a replica peer's version (`share`) into the back set and switches to it;
        returns the seconds it took."""
        t0 = time.perf_counter()
        back = (self._front + 1) % len(self._sets)
        with self._cond:
            if self._receiving is not None:
                raise WeightSyncError(f"destination rank {self.plan.rank} is landing version {self._receiving}")
            self._cond.wait_for(lambda: self._readers[back] == 0)
            self._landed = self._previous = None
        target = self._sets[back]
        missing = set(target) - set(refs)
        if missing:
            raise WeightSyncError(f"the replica peer shared no {sorted(missing)[:3]}", version=version)
        for n, ref in refs.items():
            if n in target:
                _b.get(ref, out=target[n]) if ref.chosen_path == "tcp" else np.copyto(target[n], _b.get(ref))
        with self._cond:
            self._landed = version
        self.commit(version)
        return time.perf_counter() - t0

    def check_lag(self, fleet: int, max_lag: int) -> bool:
        """Refuses to serve (``read`` raises WeightSyncError) while this rank's version is more
        than ``max_lag`` behind ``fleet``, the version the others serve; True if it may serve.
        The next commit clears it."""
        with self._cond:
            behind = fleet - self._version if self._version is not None else None
            if behind is None or behind > max_lag:
                self._refused = (
                    f"destination rank {self.plan.rank} serves version {self._version}, {behind} behind the fleet's "
                    f"{fleet} (max_version_lag {max_lag}): not serving until it catches up"
                )
                return False
            return True

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
            self._refused = None
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
