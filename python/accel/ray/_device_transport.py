"""The ACCEL_TORCH Ray tensor transport: `@ray.method(tensor_transport="ACCEL_TORCH")` for
torch tensors in every dtype (bfloat16 and float8 travel as themselves), in host or CUDA
memory. Ray 2.60 ties one transport name to one ``data_type``, so numpy arrays keep "ACCEL".

Host tensors go as accel buffers (`accel.transport.put`: shared memory on a host, TCP beyond);
CUDA tensors as CUDA IPC handles of their allocation (`accel._device`), which a receiver on the
same node maps and copies device to device into a tensor on its own GPU. A CUDA tensor cannot
go to another node this way: the receive says so (use Ray's NIXL transport, or
`accel.weights`, whose route takes NIXL over a close RDMA NIC). Abortable like ACCEL: a receive
Ray aborts stops before its next tensor, so a failed transfer never kills the two actors.
Registered by `accel.ray.register_transport()` when torch imports.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, field
from typing import Any, List, Optional

from .. import _device
from .. import transport as _t
from . import _rdt

TRANSPORT_NAME = "ACCEL_TORCH"
_TORCH_DTYPES = {
    "f64": "float64",
    "f32": "float32",
    "f16": "float16",
    "bf16": "bfloat16",
    "i64": "int64",
    "i32": "int32",
    "i16": "int16",
    "i8": "int8",
    "u8": "uint8",
    "bool": "bool",
    "f8e4m3": "float8_e4m3fn",
    "f8e5m2": "float8_e5m2",
}


@dataclass(frozen=True)
class _Item:
    """One tensor: its dtype and shape, and either a host buffer (``ref``) or a CUDA IPC
    handle of its allocation with the tensor's offset in it."""

    dtype: str
    shape: tuple[int, ...]
    host: str
    ref: Any = None
    handle: bytes = b""
    offset: int = 0
    nbytes: int = 0
    device: int = -1


@dataclass
class AccelTorchMetadata(_rdt.TensorTransportMetadata):  # type: ignore[misc,unused-ignore]
    """Ray's per-object metadata plus one `_Item` per tensor."""

    items: List[Any] = field(default_factory=list)


_held: dict[str, list[Any]] = {}  # obj_id -> the source tensors whose memory is exported
_lock = threading.Lock()


def _torch() -> Any:
    import torch  # type: ignore[import-not-found, unused-ignore]  # this transport is registered only when it imports

    return torch


def _base_of(gpu: _device.Cuda, ptr: int) -> tuple[int, int]:
    """The allocation holding ``ptr`` (CUDA IPC exports whole allocations) and its size."""
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    gpu.check(gpu.lib.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr)), "cuMemGetAddressRange")
    return int(base.value), int(size.value)


class AccelTorchTransport(_rdt.TensorTransportManager):  # type: ignore[misc,unused-ignore]
    """One-sided, abortable; see the module documentation."""

    def tensor_transport_backend(self) -> str:
        return TRANSPORT_NAME

    @staticmethod
    def is_one_sided() -> bool:
        return True

    @staticmethod
    def can_abort_transport() -> bool:
        return True

    def actor_has_tensor_transport(self, actor: Any) -> bool:
        return True

    def extract_tensor_transport_metadata(self, obj_id: str, rdt_object: List[Any]) -> AccelTorchMetadata:
        here = _t.info()["host"]
        items: list[_Item] = []
        keep: list[Any] = []
        device = "cpu"
        for tensor in rdt_object:
            t = _device.describe(tensor.detach())
            if t.on_host:
                arr = _device.host_array(t)
                items.append(_Item(t.dtype, t.shape, here, ref=_t.put(arr)))
                continue
            gpu = _device.cuda()
            if gpu is None or t.device_type not in _device.CUDA_TYPES or not t.contiguous:
                why = _device.cuda_unavailable() or f"a {t.device} tensor that is not contiguous CUDA memory"
                raise _t.TransportError(f"ACCEL_TORCH cannot export this tensor: {why}")
            gpu.bind(t.device_id)
            base, _ = _base_of(gpu, t.address)
            items.append(_Item(t.dtype, t.shape, here, handle=gpu.export(base), offset=t.address - base, nbytes=t.nbytes, device=t.device_id))
            keep.append(tensor)
            device = "cuda"
        with _lock:
            _held[obj_id] = keep
        torch = _torch()
        meta = [(torch.Size(i.shape), getattr(torch, _TORCH_DTYPES[i.dtype])) for i in items]
        return AccelTorchMetadata(tensor_meta=meta, tensor_device=device, items=items)

    def get_communicator_metadata(self, src_actor: Any, dst_actor: Any, backend: Optional[str] = None) -> Any:
        return _rdt.CommunicatorMetadata()

    def recv_multiple_tensors(
        self, obj_id: str, tensor_transport_metadata: Any, communicator_metadata: Any, target_buffers: List[Any] | None = None
    ) -> List[Any]:
        torch = _torch()
        here = _t.info()["host"]
        out: List[Any] = []
        for i, item in enumerate(tensor_transport_metadata.items):
            _rdt.check_aborted(obj_id, TRANSPORT_NAME)
            dtype = getattr(torch, _TORCH_DTYPES[item.dtype])
            target = None if target_buffers is None else target_buffers[i]
            if item.ref is not None:
                arr = _t.get(item.ref, copy=True)
                got = torch.from_numpy(arr).view(dtype).reshape(item.shape)
                if target is not None:
                    target.copy_(got)
                    got = target
                out.append(got)
                continue
            if item.host != here:
                raise _t.TransportError(
                    f"ACCEL_TORCH moves CUDA tensors within a node (CUDA IPC); this one is on {item.host}: use Ray's "
                    "NIXL transport, or accel.weights (NIXL over a close RDMA NIC)"
                )
            gpu = _device.cuda()
            if gpu is None:
                raise _t.TransportError(f"a CUDA tensor arrived, and {_device.cuda_unavailable()}")
            dst = target if target is not None else torch.empty(item.shape, dtype=dtype, device=f"cuda:{torch.cuda.current_device()}")
            d = _device.describe(dst)
            gpu.bind(d.device_id)
            src = gpu.open(item.handle) + item.offset
            gpu.copy2d(d.address, item.nbytes, True, src, item.nbytes, True, item.nbytes, 1)
            gpu.synchronize()
            out.append(dst)
        return out

    def send_multiple_tensors(self, tensors: List[Any], tensor_transport_metadata: Any, communicator_metadata: Any) -> None:
        raise NotImplementedError("ACCEL_TORCH is one-sided: receivers fetch")

    def garbage_collect(self, obj_id: str, tensor_transport_meta: Any, tensors: Any) -> None:
        for item in tensor_transport_meta.items:
            if item.ref is not None:
                _t.free(item.ref)
        with _lock:
            _held.pop(obj_id, None)

    def abort_transport(self, obj_id: str, communicator_metadata: Any) -> None:
        _rdt.abort(obj_id)


def register(util: Any) -> bool:
    """Registers ACCEL_TORCH with Ray's RDT when torch imports; False (and nothing) otherwise."""
    try:
        torch = _torch()
    except ImportError:
        return False
    if TRANSPORT_NAME not in util.transport_manager_info:
        util.register_tensor_transport(TRANSPORT_NAME, ["cuda", "cpu"], AccelTorchTransport, torch.Tensor)
    return True


__all__ = ["AccelTorchTransport", "TRANSPORT_NAME", "register"]
