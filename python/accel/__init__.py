"""accel: vendor-neutral accelerator discovery, placement and tensor transport for Ray.

    >>> import accel
    >>> machine = accel.discover()             # this machine, as a dict (docs/schema.md)
    >>> machine = accel.discover(root="capture/")  # a captured machine
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterable

from . import _native
from ._native import AccelError, DiscoveryError

from ._errors import Infeasible, InvalidArgument, InvalidRequest
from ._plan import PlacementError, Planner, cluster, load_request, plan, sample, samples
from . import transport
from ._native import AuthError, BufferFreed, OwnerGone, PoolExhausted, StaleReference, TransportError

__all__ = ["AccelError", "DiscoveryError", "discover", "__version__"]
__all__ += ["PlacementError", "InvalidRequest", "Infeasible", "InvalidArgument", "Planner", "cluster", "load_request", "plan", "sample", "samples"]
__all__ += ["transport", "TransportError", "PoolExhausted", "OwnerGone", "StaleReference", "BufferFreed", "AuthError"]
__version__ = _native.__version__


def discover(
    root: str | os.PathLike[str] | None = None,
    *,
    sku_files: Iterable[str | os.PathLike[str]] = (),
    sku_dir: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Discover a machine and return its description (the JSON model of docs/schema.md).

    root: `None` for this machine, or a captured tree holding `sys/` and `proc/`.
    sku_files, sku_dir: extra SKU registry files merged over the built-in registry; `sku_dir`
    defaults to `$ACCEL_SKU_DIR` (read by the native layer, as the `accel` binary reads it).
    """
    text = _native.discover_json(
        None if root is None else os.fspath(root),
        [os.fspath(f) for f in sku_files],
        None if sku_dir is None else os.fspath(sku_dir),
    )
    machine: dict[str, Any] = json.loads(text)
    return machine
