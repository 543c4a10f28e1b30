"""Device memory for the weight sync: DLPack tensors described without a copy (`describe`:
torch, cupy, jax, numpy; any dtype DLPack names, bf16 and FP8 included), the CUDA driver
through ctypes (`cuda()`: libcuda loaded at run time, so a machine without it is "unavailable"
with the reason, never an import error), box copies between C-order arrays in any two memories
(`pack`, `unpack`: one strided 2-D copy per row block, by the driver's ``cuMemcpy2D`` on a GPU
or ``memmove`` in host memory), CUDA IPC handles (`export`, `opened`), and the route a
buffer takes between two ranks from the machines discovery describes (`route`).

The route is the transport's (`accel_transport::route`): GPUs of one node -> CUDA IPC over
PCIe or NIXL over their scale-up link; another node -> NIXL over an RDMA NIC at PIX/PXB from
the GPU (GPUDirect RDMA); otherwise host memory (shared memory on one host, TCP beyond). When
the bytes live on a device and no device path applies, they are staged through host memory
and the reason is said (`Route.staged`, the weight sync's per-piece report, one warning per
reason and process), never silently.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from . import _native

log = logging.getLogger("accel.device")

# DLPack device types (dlpack.h): host memory, and the ones the CUDA driver can address.
HOST_TYPES = (1, 3, 11)  # kDLCPU, kDLCUDAHost, kDLROCMHost
CUDA_TYPES = (2, 13)  # kDLCUDA, kDLCUDAManaged
DEVICE_NAMES = {1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal", 10: "rocm", 11: "rocm_host", 13: "cuda_managed", 14: "oneapi"}
# How numpy holds each layout dtype: the ML types as their raw bits.
STORAGE = {"f64": "f8", "f32": "f4", "f16": "f2", "bf16": "u2", "i64": "i8", "i32": "i4", "i16": "i2", "i8": "i1", "u8": "u1", "bool": "?", "f8e4m3": "u1", "f8e5m2": "u1", "u16": "u2", "u32": "u4", "u64": "u8"}
# The ML types numpy holds as their bits: a tensor of the raw type stands for them.
RAW = {"bf16": "u16", "f8e4m3": "u8", "f8e5m2": "u8"}


@dataclass(frozen=True)
class Tensor:
    """A DLPack tensor's memory: ``capsule`` keeps it alive while held; ``device_type`` and
    ``device_id`` are DLPack's; ``address`` is the first element; ``dtype`` a layout name;
    ``strides`` in elements (None: C order)."""

    capsule: Any
    device_type: int
    device_id: int
    address: int
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None
    readonly: bool

    @property
    def on_host(self) -> bool:
        return self.device_type in HOST_TYPES

    @property
    def itemsize(self) -> int:
        return np.dtype(STORAGE[self.dtype]).itemsize

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.itemsize

    @property
    def contiguous(self) -> bool:
        if self.strides is None:
            return True
        want, step = [], 1
        for n in reversed(self.shape):
            want.append(step)
            step *= n
        return all(s == w or n == 1 for s, w, n in zip(self.strides, reversed(want), self.shape))

    @property
    def device(self) -> str:
        return f"{DEVICE_NAMES.get(self.device_type, f'dlpack-{self.device_type}')}:{self.device_id}"


def describe(obj: Any) -> Tensor:
    """The memory of any DLPack producer, without a copy (TypeError if it exports none)."""
    capsule, kind, index, address, dtype, shape, strides, readonly = _native.dlpack_describe(obj)
    return Tensor(capsule, kind, index, address, dtype, tuple(shape), None if strides is None else tuple(strides), readonly)


class _Holder:
    """An array interface over memory someone else owns, keeping the owner (a capsule) alive."""

    def __init__(self, t: Tensor) -> None:
        itemsize = t.itemsize
        self.keep = t.capsule
        self.__array_interface__ = {
            "shape": t.shape,
            "typestr": np.dtype(STORAGE[t.dtype]).str,
            "data": (t.address, t.readonly),
            "strides": None if t.strides is None else tuple(s * itemsize for s in t.strides),
            "version": 3,
        }


def host_array(t: Tensor) -> np.ndarray[Any, Any]:
    """A numpy view of a host tensor's memory in its storage dtype (bf16 as its 16 bits, FP8 as
    bytes), alive as long as the view is; ValueError for device memory."""
    if not t.on_host:
        raise ValueError(f"the tensor is in {t.device} memory, not host memory")
    return np.asarray(_Holder(t))


# --- the CUDA driver ------------------------------------------------------------------------


class _Memcpy2D(ctypes.Structure):
    """CUDA_MEMCPY2D (cuda.h), for cuMemcpy2D_v2."""

    _fields_ = [
        ("srcXInBytes", ctypes.c_size_t),
        ("srcY", ctypes.c_size_t),
        ("srcMemoryType", ctypes.c_int),
        ("srcHost", ctypes.c_void_p),
        ("srcDevice", ctypes.c_uint64),
        ("srcArray", ctypes.c_void_p),
        ("srcPitch", ctypes.c_size_t),
        ("dstXInBytes", ctypes.c_size_t),
        ("dstY", ctypes.c_size_t),
        ("dstMemoryType", ctypes.c_int),
        ("dstHost", ctypes.c_void_p),
        ("dstDevice", ctypes.c_uint64),
        ("dstArray", ctypes.c_void_p),
        ("dstPitch", ctypes.c_size_t),
        ("WidthInBytes", ctypes.c_size_t),
        ("Height", ctypes.c_size_t),
    ]


_MEM_HOST, _MEM_DEVICE = 1, 2  # CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_DEVICE
_IPC_LAZY_PEER = 1  # CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS


class CudaError(RuntimeError):
    """A CUDA driver call failed (the call and its CUresult named)."""


class Cuda:
    """The CUDA driver (libcuda.so.1) through ctypes: the calls the device path makes."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib
        self.lock = threading.Lock()
        self.contexts: dict[int, int] = {}
        self.opened: dict[bytes, int] = {}

    def check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise CudaError(f"{what} failed: CUresult {rc}")

    def bind(self, device: int) -> None:
        """Makes ``device``'s primary context current on this thread."""
        with self.lock:
            ctx = self.contexts.get(device)
            if ctx is None:
                dev, c = ctypes.c_int(), ctypes.c_void_p()
                self.check(self.lib.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")
                self.check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(c), dev), "cuDevicePrimaryCtxRetain")
                ctx = self.contexts[device] = int(c.value or 0)
        self.check(self.lib.cuCtxSetCurrent(ctypes.c_void_p(ctx)), "cuCtxSetCurrent")

    def alloc(self, nbytes: int) -> int:
        ptr = ctypes.c_uint64()
        self.check(self.lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(max(1, nbytes))), "cuMemAlloc")
        return int(ptr.value)

    def free(self, ptr: int) -> None:
        self.lib.cuMemFree_v2(ctypes.c_uint64(ptr))

    def copy2d(self, dst: int, dst_pitch: int, dst_dev: bool, src: int, src_pitch: int, src_dev: bool, width: int, height: int) -> None:
        p = _Memcpy2D()
        p.srcMemoryType, p.dstMemoryType = (_MEM_DEVICE if src_dev else _MEM_HOST), (_MEM_DEVICE if dst_dev else _MEM_HOST)
        if src_dev:
            p.srcDevice = src
        else:
            p.srcHost = src
        if dst_dev:
            p.dstDevice = dst
        else:
            p.dstHost = dst
        p.srcPitch, p.dstPitch, p.WidthInBytes, p.Height = src_pitch, dst_pitch, width, height
        self.check(self.lib.cuMemcpy2D_v2(ctypes.byref(p)), "cuMemcpy2D")

    def export(self, ptr: int) -> bytes:
        """The CUDA IPC handle (64 bytes) of the allocation at ``ptr``."""
        h = (ctypes.c_char * 64)()
        self.check(self.lib.cuIpcGetMemHandle(h, ctypes.c_uint64(ptr)), "cuIpcGetMemHandle")
        return bytes(h)

    def open(self, handle: bytes) -> int:
        """Another process's allocation, mapped here (cached per handle)."""
        with self.lock:
            ptr = self.opened.get(handle)
            if ptr is None:
                out = ctypes.c_uint64()
                h = (ctypes.c_char * 64).from_buffer_copy(handle)
                self.check(self.lib.cuIpcOpenMemHandle_v2(ctypes.byref(out), h, _IPC_LAZY_PEER), "cuIpcOpenMemHandle")
                ptr = self.opened[handle] = int(out.value)
            return ptr

    def close(self, handle: bytes) -> None:
        with self.lock:
            ptr = self.opened.pop(handle, None)
        if ptr is not None:
            self.lib.cuIpcCloseMemHandle(ctypes.c_uint64(ptr))

    def synchronize(self) -> None:
        self.check(self.lib.cuCtxSynchronize(), "cuCtxSynchronize")


_cuda: Cuda | None = None
_cuda_why: str | None = None
_cuda_lock = threading.Lock()


def cuda() -> Cuda | None:
    """This process's CUDA driver, or None (`cuda_unavailable` says why)."""
    global _cuda, _cuda_why
    with _cuda_lock:
        if _cuda is None and _cuda_why is None:
            try:
                lib = ctypes.CDLL("libcuda.so.1")
            except OSError as e:
                _cuda_why = f"no CUDA driver (libcuda.so.1: {e})"
                return None
            count = ctypes.c_int()
            if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
                _cuda_why = "the CUDA driver sees no GPU here"
                return None
            _cuda = Cuda(lib)
        return _cuda


def cuda_unavailable() -> str | None:
    """Why there is no CUDA driver here (None when there is one)."""
    cuda()
    return _cuda_why


# --- box copies -----------------------------------------------------------------------------


class Engine(Protocol):
    """What moves bytes: ``copy2d`` copies ``height`` rows of ``width`` bytes between two
    pitched regions, each in host or device memory."""

    def copy2d(self, dst: int, dst_pitch: int, dst_dev: bool, src: int, src_pitch: int, src_dev: bool, width: int, height: int) -> None: ...


class HostEngine:
    """Box copies in host memory (memmove per row): the weight sync's host paths and the test
    of the box arithmetic the CUDA engine shares."""

    def copy2d(self, dst: int, dst_pitch: int, dst_dev: bool, src: int, src_pitch: int, src_dev: bool, width: int, height: int) -> None:
        if dst_dev or src_dev:
            raise ValueError("host memory only")
        if dst_pitch == src_pitch == width:
            ctypes.memmove(dst, src, width * height)
            return
        for r in range(height):
            ctypes.memmove(dst + r * dst_pitch, src + r * src_pitch, width)


@dataclass(frozen=True)
class Place:
    """A C-order array somewhere: its address, extent, where it starts in the tensor (global
    coordinates), bytes per element, and whether the address is device memory."""

    address: int
    shape: tuple[int, ...]
    origin: tuple[int, ...]
    itemsize: int
    device: bool


def _rows(place: Place, box: Sequence[tuple[int, int]]) -> tuple[list[int], int, int, int]:
    """For ``box`` inside ``place``: the byte offset of each run of rows (one per index of the
    dimensions before the last two), the pitch, the width in bytes and the rows per run."""
    n = len(place.shape)
    strides = [place.itemsize] * n
    for d in range(n - 2, -1, -1):
        strides[d] = strides[d + 1] * place.shape[d + 1]
    local = [(lo - o, hi - o) for (lo, hi), o in zip(box, place.origin)]
    if n == 0:
        return [0], place.itemsize, place.itemsize, 1
    width = (local[-1][1] - local[-1][0]) * place.itemsize
    if n == 1:
        return [local[0][0] * place.itemsize], width, width, 1
    height = local[-2][1] - local[-2][0]
    pitch = strides[-2]
    base = local[-1][0] * place.itemsize + local[-2][0] * pitch
    offsets = [base]
    for d in range(n - 3, -1, -1):
        lo, hi = local[d]
        offsets = [o + i * strides[d] for i in range(lo, hi) for o in offsets]
    return sorted(offsets), pitch, width, height


def pack(engine: Engine, src: Place, box: Sequence[tuple[int, int]], dst: int, dst_dev: bool) -> int:
    """Copies ``box`` of ``src`` into ``dst`` as one C-order array; returns its bytes."""
    offsets, pitch, width, height = _rows(src, box)
    at = dst
    for off in offsets:
        engine.copy2d(at, width, dst_dev, src.address + off, pitch, src.device, width, height)
        at += width * height
    return at - dst


def unpack(engine: Engine, src: int, src_dev: bool, box: Sequence[tuple[int, int]], dst: Place) -> int:
    """Copies a C-order array of ``box`` at ``src`` into ``box`` of ``dst``; returns its bytes."""
    offsets, pitch, width, height = _rows(dst, box)
    at = src
    for off in offsets:
        engine.copy2d(dst.address + off, pitch, dst.device, at, width, src_dev, width, height)
        at += width * height
    return at - src


# --- the route ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Where:
    """Where a rank's weights live: its process (owner id), host, device (-1: host memory) and
    its machine as discovery describes it (JSON; None if unknown)."""

    owner: str
    host: str
    device: int = -1
    machine: str | None = None


@dataclass(frozen=True)
class Route:
    """How a buffer goes from a source rank to a destination rank: the transport's path, the
    reason code, the facts in words, and ``staged``: the bytes leave or enter device memory
    through host memory (``staged_why`` says why)."""

    path: str
    reason: str
    detail: str
    staged: bool = False
    staged_why: str = ""


_warned: set[str] = set()


def route(src: Where, dst: Where, *, nixl: bool, cuda_ipc: bool) -> Route:
    """The route from ``src``'s buffer to ``dst`` (see the module documentation)."""
    path, reason, detail = _native.transport_route_ends(
        (src.owner, src.host, src.device, src.machine), (dst.owner, dst.host, dst.device, dst.machine), nixl, cuda_ipc
    )
    device_end = src.device >= 0 or dst.device >= 0
    staged = device_end and path not in ("cuda_ipc", "nixl")
    why = ""
    if staged:
        why = detail if reason in ("no_device_path", "no_close_rdma_nic") else f"{detail}; the device bytes go through host memory"
        if reason not in _warned:
            _warned.add(reason)
            log.warning("weight sync: device memory staged through host memory (%s): %s", reason, why)
    return Route(path, reason, detail, staged, why)
