"""Placement: plan bundles of exact devices on a cluster of machines (the accel-plan crate).

    >>> import accel
    >>> cluster = accel.cluster({"dgx-h100": 2})          # embedded sample machines
    >>> accel.plan(cluster, {"bundles": [{"count": 4, "connectivity": "scale-up"}]})

A request is a dict, JSON or YAML text, or a path to a .json/.yaml file (docs/placement.md).
When it cannot be met, `PlacementError` says which constraint failed and what the nearest
feasible alternative is (`err.constraint`, `err.nearest`).
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any, Callable, Mapping, ParamSpec, TypeVar

from . import _native
from ._native import PlacementError

__all__ = ["Planner", "PlacementError", "plan", "cluster", "sample", "samples", "load_request"]


def _convert(e: PlacementError) -> PlacementError:
    """The native error carries (message, explanation JSON); give it attributes instead."""
    if len(e.args) != 2:
        return e
    message, explanation = e.args
    err = PlacementError(message)
    info = json.loads(explanation) if explanation else {}
    err.explanation = info
    err.constraint = info.get("constraint")
    err.nearest = info.get("nearest")
    err.bundle = info.get("bundle")
    return err


_P = ParamSpec("_P")
_T = TypeVar("_T")


def _call(fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
    try:
        return fn(*args, **kwargs)
    except PlacementError as e:
        raise _convert(e) from None


def _object(text: str) -> dict[str, Any]:
    """A JSON object from the native layer (which only ever returns objects)."""
    value = json.loads(text)
    if not isinstance(value, dict):
        raise TypeError(f"expected a JSON object, got {type(value).__name__}")
    return value


def _is_file(text: str) -> bool:
    if "\n" in text or text.lstrip().startswith(("{", "[")):
        return False
    try:
        return pathlib.Path(text).is_file()
    except OSError:  # a name too long to be a path
        return False


def _load(obj: Any) -> Any:
    """A dict as is; JSON or YAML text; or a path to a file holding either."""
    if isinstance(obj, Mapping):
        return dict(obj)
    if isinstance(obj, os.PathLike) or (isinstance(obj, str) and _is_file(obj)):
        obj = pathlib.Path(obj).read_text()
    if isinstance(obj, str):
        try:
            return json.loads(obj)
        except json.JSONDecodeError:
            import yaml  # type: ignore[import-untyped, unused-ignore]  # Ray depends on PyYAML

            return yaml.safe_load(obj)
    raise TypeError(f"expected a dict, JSON/YAML text or a file path, got {type(obj).__name__}")


def load_request(request: Any) -> dict[str, Any]:
    """Normalises a request (dict, JSON/YAML text or file path) to a dict."""
    loaded: dict[str, Any] = _load(request)
    return loaded


class Planner:
    """Allocation state over one cluster: plan, allocate, release. Deterministic."""

    def __init__(self, cluster: Any):
        self.cluster = _load(cluster)
        self._native = _call(_native.Planner, json.dumps(self.cluster))

    def plan(self, request: Any) -> dict[str, Any]:
        """The placement (without taking the devices), or `PlacementError`."""
        return _object(_call(self._native.plan, json.dumps(load_request(request))))

    def allocate(self, request: Any) -> dict[str, Any]:
        """Plans and takes the devices until `release(placement["id"])`."""
        return _object(_call(self._native.allocate, json.dumps(load_request(request))))

    def release(self, allocation_id: int) -> None:
        _call(self._native.release, allocation_id)

    def mark_used(self, node: str, devices: list[str]) -> None:
        """Marks devices (ids or labels such as "GPU3") as used outside the planner."""
        _call(self._native.mark_used, node, list(devices))

    def sync_free(self, node: str, devices: list[str]) -> None:
        """Sets exactly which devices of a node are free."""
        _call(self._native.sync_free, node, list(devices))

    def last_search_steps(self) -> int:
        """Search steps the last `plan` or `allocate` took; each search is bounded (docs/isolation.md)."""
        return self._native.last_search_steps()

    def free_devices(self, node: str) -> list[str]:
        return _call(self._native.free_devices, node)

    def machine(self, node: str) -> dict[str, Any]:
        """The machine description of a node."""
        for n in self.cluster["nodes"]:
            if n["name"] == node:
                m = n["machine"]
                found: dict[str, Any] = self.cluster["machines"][m] if isinstance(m, str) else m
                return found
        raise PlacementError(f"unknown node {node!r}")


def plan(cluster: Any, request: Any) -> dict[str, Any]:
    """One decision on a fresh cluster state: `Planner(cluster).plan(request)`."""
    return Planner(cluster).plan(request)


def samples() -> list[str]:
    """Names of the embedded sample machines."""
    return list(_native.sample_names())


def sample(name: str) -> dict[str, Any]:
    """An embedded sample machine (the JSON model), as `accel topo --sample NAME` sees it."""
    text = _native.sample_machine_json(name)
    if text is None:
        raise PlacementError(f"no sample named {name!r}; known: {', '.join(samples())}")
    return _object(text)


def cluster(
    spec: Mapping[str, int] | str,
    *,
    rack_size: int | None = None,
    clique_trays: int = 18,
) -> dict[str, Any]:
    """A cluster of sample machines, like `accel cluster --sample dgx-h100:4,mi300x:2`.

    Nodes are named `<sample>-<k>`. Samples with an NVLink clique get a `nvlink_clique` label
    per `clique_trays` nodes; `rack_size` puts consecutive nodes into racks `r0`, `r1`...
    """
    if isinstance(spec, str):
        parts = [p.strip() for p in spec.split(",") if p.strip()]
        spec = {p.split(":")[0]: int(p.split(":")[1]) if ":" in p else 1 for p in parts}
    return _object(_native.sample_cluster_json(list(spec.items()), rack_size, clique_trays))
