"""What accel's Ray tensor transports share: Ray 2.60's RDT base classes (placeholders when Ray
is not installed) and the set of transfers Ray aborted, which a receive checks between tensors."""

from __future__ import annotations

import threading

try:
    from ray.experimental.rdt.tensor_transport_manager import (
        CommunicatorMetadata,
        TensorTransportManager,
        TensorTransportMetadata,
    )
except ImportError:  # pragma: no cover - Ray is an optional dependency
    TensorTransportManager = object  # type: ignore[assignment,misc,unused-ignore]
    TensorTransportMetadata = object  # type: ignore[assignment,misc,unused-ignore]
    CommunicatorMetadata = None  # type: ignore[assignment,misc,unused-ignore]

_aborted: set[str] = set()
_lock = threading.Lock()


def check_aborted(obj_id: str, kind: str) -> None:
    """Raises if Ray aborted the transfer of ``obj_id`` (once: the mark is consumed)."""
    with _lock:
        if obj_id in _aborted:
            _aborted.discard(obj_id)
            raise RuntimeError(f"{kind} transfer aborted for object id {obj_id}")


def abort(obj_id: str) -> None:
    """Marks ``obj_id``'s transfer aborted (Ray's `abort_transport`)."""
    with _lock:
        _aborted.add(obj_id)


__all__ = ["CommunicatorMetadata", "TensorTransportManager", "TensorTransportMetadata", "abort", "check_aborted"]
