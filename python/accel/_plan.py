"""Placement: plan bundles of exact devices on a cluster of machines (the accel-plan crate).

    >>> import accel
    >>> cluster = accel.cluster({"dgx-h100": 2})          # embedded sample machines
    >>> accel.plan(cluster, {"bundles": [{"count": 4, "connectivity": "scale-up"}]})

A request is a dict, JSON or YAML text, or a path to a .json/.yaml file (docs/placement.md).
A malformed request, or one that names something nothing knows (a misspelt vendor, family,
domain or field), raises `accel.InvalidRequest` (`err.field`, `err.suggestion`). A valid
request the cluster cannot meet raises `accel.Infeasible`: which constraint failed and the
nearest feasible alternative (`err.constraint`, `err.nearest`). Both are `PlacementError`s.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import TYPE_CHECKING, Any, Callable, Mapping, TypeVar

from . import _native
from ._errors import Infeasible, InvalidRequest, from_native
from ._native import PlacementError

__all__ = ["Planner", "PlacementError", "InvalidRequest", "Infeasible", "plan", "cluster", "sample", "samples", "load_request"]


if TYPE_CHECKING:  # typing.ParamSpec is Python 3.10+; only annotations use _P
    from typing import ParamSpec

    _P = ParamSpec("_P")
_T = TypeVar("_T")


def _call(fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
    try:
        return fn(*args, **kwargs)
    except PlacementError as e:
        raise from_native(e) from None


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


def _looks_like_path(text: str) -> bool:
    """One line that names a file rather than holding a document: a `.json`/`.yaml` name or
    a path with a separator."""
    one = text.strip()
    if not one or "\n" in one or one.startswith(("{", "[")) or ": " in one:
        return False
    return one.endswith((".json", ".yaml", ".yml")) or os.sep in one


def _load(obj: Any, what: str = "request") -> Any:
    """A dict as is; JSON or YAML text; or a path to a file holding either."""
    if isinstance(obj, Mapping):
        return dict(obj)
    if isinstance(obj, str) and not _is_file(obj) and _looks_like_path(obj):
        raise InvalidRequest(f"no {what} file {obj!r}", field=what, value=obj)
    if isinstance(obj, os.PathLike) or (isinstance(obj, str) and _is_file(obj)):
        try:
            obj = pathlib.Path(obj).read_text()
        except OSError as e:
            raise InvalidRequest(f"cannot read {what} file {os.fspath(obj)!r}: {e.strerror}", field=what) from None
    if isinstance(obj, str):
        try:
            return json.loads(obj)
        except json.JSONDecodeError:
            import yaml  # type: ignore[import-untyped, unused-ignore]  # Ray depends on PyYAML

            try:
                return yaml.safe_load(obj)
            except yaml.YAMLError as e:
                raise InvalidRequest(f"{what} is neither JSON nor YAML: {e}", field=what) from None
    raise InvalidRequest(f"expected a dict, JSON/YAML text or a file path, got {type(obj).__name__}", field=what)


def load_request(request: Any) -> dict[str, Any]:
    """Normalises a request (dict, JSON/YAML text or file path) to a dict."""
    loaded = _load(request)
    if not isinstance(loaded, dict):
        raise InvalidRequest(f"a request is a mapping with `bundles`, got {type(loaded).__name__}", field="request")
    return loaded


class Planner:
    """Allocation state over one cluster: plan, allocate, release. Deterministic."""

    def __init__(self, cluster: Any):
        self.cluster: dict[str, Any] | None = _load(cluster, "cluster")
        if not isinstance(self.cluster, dict) or not isinstance(self.cluster.get("nodes"), list):
            raise InvalidRequest("a cluster is a mapping with a `nodes` list (`accel cluster` writes one)", field="cluster")
        self._native = _call(_native.Planner, json.dumps(self.cluster))

    @classmethod
    def from_ray_nodes(cls, nodes: list[tuple[str, dict[str, str], str]]) -> Planner:
        """A planner over Ray nodes as they published themselves: (name, Ray labels, machine
        JSON text) each. The machines stay in the native planner (`cluster` is None)."""
        planner = cls.__new__(cls)
        planner.cluster = None
        planner._native = _call(_native.Planner.from_ray_nodes, nodes)
        return planner

    def __len__(self) -> int:
        return len(self._native)

    def plan_for_ray(self, request: Any) -> dict[str, Any]:
        """The placement and, per bundle, what Ray needs (`ray`: the node's label selector, the
        Ray resources, the per-device resources and the environment, from the target node's
        stored machine), in one native call, without committing."""
        return _object(_call(self._native.plan_for_ray, json.dumps(load_request(request))))

    def sync_ray(self, available: dict[str, dict[str, float]]) -> None:
        """Makes every node's free devices exactly those whose per-device Ray resource is
        free in `available` (node name -> Ray's available resources of that node)."""
        _call(self._native.sync_ray, available)

    def plan(self, request: Any) -> dict[str, Any]:
        """The placement (without taking the devices), or `PlacementError`."""
        return _object(_call(self._native.plan, json.dumps(load_request(request))))

    def allocate(self, request: Any) -> dict[str, Any]:
        """Plans and takes the devices until `release(placement["id"])`."""
        return _object(_call(self._native.allocate, json.dumps(load_request(request))))

    def release(self, allocation_id: int) -> None:
        _call(self._native.release, allocation_id)

    def repair(self, allocation_id: int, lost_bundles: list[int]) -> dict[str, Any]:
        """Places the lost bundles of an allocation again inside the same domain (sub-group,
        `same` or scale-up domain) and returns the whole placement; raises `Infeasible` with
        the reason when the domain has no room. Their old devices stay taken, as failed hardware
        should, and their nodes are avoided; `sync_free(node, devices)` returns them when they
        are back."""
        return _object(_call(self._native.repair, allocation_id, [int(b) for b in lost_bundles]))

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
        """The machine description of a node (of a planner built from a cluster)."""
        if self.cluster is None:
            raise InvalidRequest("this planner holds its machines natively (built from Ray's nodes)", field="node", value=node)
        for n in self.cluster["nodes"]:
            if n["name"] == node:
                m = n["machine"]
                found: dict[str, Any] = self.cluster["machines"][m] if isinstance(m, str) else m
                return found
        raise InvalidRequest(f"unknown node {node!r}", field="node", value=node)


def plan(cluster: Any, request: Any) -> dict[str, Any]:
    """One decision on a fresh cluster state: `Planner(cluster).plan(request)`."""
    return Planner(cluster).plan(request)


def samples() -> list[str]:
    """Names of the embedded sample machines."""
    return list(_native.sample_names())


def sample(name: str) -> dict[str, Any]:
    """An embedded sample machine (the JSON model), as `accel topo --sample NAME` sees it."""
    return _object(_call(_native.sample_machine_json, name))


def cluster(
    spec: Mapping[str, int] | str,
    *,
    rack_size: int | None = None,
    clique_trays: int = 18,
) -> dict[str, Any]:
    """A cluster of sample machines, like `accel cluster --sample dgx-h100:4,mi300x:2`.

    Nodes are named `<sample>-<k>`. Samples with an NVLink clique get a `nvlink_clique` label
    per `clique_trays` nodes; a node-local domain (an xGMI hive, a one-host TPU slice) is each
    node's own; `rack_size` puts consecutive nodes into racks `r0`, `r1`...
    """
    if isinstance(spec, str):
        text = spec
        parts = [p.strip() for p in text.split(",") if p.strip()]
        try:
            spec = {p.split(":")[0]: int(p.split(":")[1]) if ":" in p else 1 for p in parts}
        except ValueError:
            raise InvalidRequest(f"expected `name:count,...`, got {text!r}", field="cluster", value=text) from None
    for name, count in spec.items():
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise InvalidRequest(f"the count of {name!r} must be a non-negative int, got {count!r}", field="cluster", value=name)
    return _object(_call(_native.sample_cluster_json, list(spec.items()), rack_size, clique_trays))
