"""Exact-device placement on Ray 2.60: node resources and labels, `placement_group`, and the
per-actor options that make an actor see exactly its planned devices.

The mechanism (verified in ../shared/research/ray-feasibility.md):

- every node carries one custom resource per physical device (`accel_dev_nvidia_3: 1`) besides its
  usual `GPU`/`TPU`/... count, and the label `accel.io/node=<name>`;
- a planned bundle becomes a Ray placement-group bundle asking for `GPU: k` plus the k
  per-device resources, pinned to the planned node by `bundle_label_selector`;
- an actor in that bundle asks for the same resources, and its `runtime_env` sets the vendor's
  visibility variable (`CUDA_VISIBLE_DEVICES=GPU-<uuid>,...`: NVIDIA GPUs by UUID) with `RAY_EXPERIMENTAL_NOSET_*=1`, so Ray
  does not rewrite it.

Ray's GPU count stays right, and Ray itself refuses to hand one physical device out twice. A GPU
user that bypasses the planner (a plain `num_gpus=1` actor) gets Ray's own slot-based
`CUDA_VISIBLE_DEVICES`, which may name a device the planner gave to someone else: on nodes the
planner manages, request devices through `placement_group(...)` and `pg.options(i)`.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from .. import _native

if TYPE_CHECKING:
    from ray.util.placement_group import PlacementGroup
from .._errors import Infeasible, InvalidRequest
from ._affinity import py_executable
from .._plan import Planner, load_request

NODE_LABEL = _native.NODE_LABEL
KV_NAMESPACE = "accel"
KV_PREFIX = "machine:"


def device_resource(vendor: str, index: int) -> str:
    """The per-device custom resource: `accel_dev_nvidia_3` (`accel_discover::labels`, the
    name `accel labels --format ray` gives)."""
    return _native.device_resource(vendor, index)


def label_value(text: str) -> str:
    """`text` as a Kubernetes/Ray label value (`accel_discover::labels::label_value`): at most
    63 characters of `[A-Za-z0-9._-]`, alphanumeric at both ends; empty when nothing is left."""
    return _native.label_value(str(text))


def node_spec(machine: dict[str, Any], name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """What a Ray node backed by `machine` starts with: `num_gpus`, `resources` and `labels`.

    The labels and per-device resources are discovery's (`accel labels --format ray`): the
    `accel.io/*` labels, Ray's own `ray.io/gpu-domain` (the scale-up domain, for
    `topology_strategy`) and `ray.io/accelerator-type`; plus `accel.io/node=<name>` and the
    planner labels given (`{"rack": "r1"}` -> `accel.io/rack=r1`; a label named after one of the
    machine's domain kinds, `{"nvlink_clique": "c1"}`, names that domain, so `ray.io/gpu-domain`
    follows it). The resources and `num_gpus` hold each plugin's own Ray resource in the units it
    gives (a Neuron device counts its cores). All of it is computed once, in
    `accel_discover::labels::ray_labels_for_node`. A device that is unhealthy, or whose health
    is unknown (unless `allow_unknown_health(machine)` was applied), gets no resource and is
    named in `accel.io/unhealthy-devices`.
    """
    planner = {k: str(v) for k, v in (labels or {}).items()}
    out_labels, resources, num_gpus = _native.ray_node(json.dumps(machine), name, planner)
    return {"num_gpus": int(num_gpus), "resources": dict(resources), "labels": dict(out_labels)}


def allow_unknown_health(machine: dict[str, Any]) -> dict[str, Any]:
    """A copy of `machine` whose devices of unknown health may be placed (the operator's choice,
    `python -m accel.ray start --allow-unknown-health`): the machine attribute `health.unknown`
    is `allow`, which the labels, the planner and the Slurm export all read. Fail closed without."""
    out = dict(machine)
    out["attributes"] = {**(machine.get("attributes") or {}), "health.unknown": "allow"}
    return out


def visibility_env(machine: dict[str, Any], device_ids: list[str]) -> dict[str, str]:
    """The environment that confines a worker to `device_ids` (in that order), with the
    `RAY_EXPERIMENTAL_NOSET_*` switch for every variable Ray could otherwise rewrite for those
    devices' Ray kind (all three GPU variables for `GPU`): from the machine's stored facts
    (`accel_discover::bundle::visibility`), never from a plugin of this process."""
    return dict(_native.visibility_env(json.dumps(machine), list(device_ids)))


# --- the cluster as Ray sees it ---------------------------------------------------------------


def publish_machine(name: str, machine: dict[str, Any]) -> None:
    """Stores a node's machine in Ray's internal KV (needs `ray.init` first), so that
    `placement_group` can plan on it without being handed a cluster."""
    from ray.experimental import internal_kv

    internal_kv._internal_kv_put(KV_PREFIX + name, json.dumps(machine), overwrite=True, namespace=KV_NAMESPACE)


def _ray_nodes() -> dict[str, dict[str, Any]]:
    """Alive Ray nodes that carry `accel.io/node`, by that name."""
    import ray

    out = {}
    for node in ray.nodes():
        labels = node.get("Labels") or {}
        if node.get("Alive") and NODE_LABEL in labels:
            out[labels[NODE_LABEL]] = node
    return out


def _published() -> list[tuple[str, dict[str, str], str]]:
    """(name, Ray labels, machine JSON) of every alive node with a published machine."""
    from ray.experimental import internal_kv

    out = []
    for name, node in sorted(_ray_nodes().items()):
        raw = internal_kv._internal_kv_get(KV_PREFIX + name, namespace=KV_NAMESPACE)
        if raw is not None:
            text = raw.decode() if isinstance(raw, bytes) else str(raw)
            out.append((name, dict(node.get("Labels") or {}), text))
    return out


def cluster_from_ray() -> dict[str, Any]:
    """The planner's cluster: every alive node with a published machine, with its
    `accel.io/*` labels as planner labels (`accel_discover::labels::planner_labels`)."""
    return {
        "nodes": [
            {"name": name, "labels": dict(_native.planner_labels(labels)), "machine": json.loads(text)}
            for name, labels, text in _published()
        ]
    }


def _available() -> dict[str, dict[str, float]]:
    """Ray's available resources of each alive accel node, by the node's name."""
    from ray._private import state

    per_id = state.available_resources_per_node()
    return {name: dict(per_id.get(node["NodeID"], {})) for name, node in _ray_nodes().items()}


def sync_with_ray(planner: Planner) -> None:
    """Makes the planner's free devices exactly those whose per-device resource Ray has free."""
    planner.sync_ray(_available())


# --- placement groups -------------------------------------------------------------------------


class AccelPlacementGroup:
    """A Ray placement group whose bundles hold exactly the planned devices.

    `pg` is the Ray `PlacementGroup`; `placement` the planner's decision. Start an actor in
    bundle `i` with `Actor.options(**apg.options(i)).remote()`. Each bundle's Ray resources and
    environment were computed with the plan, in the same native call, from the target node's
    stored machine (`Planner.plan_for_ray`).
    """

    def __init__(self, pg: PlacementGroup, placement: dict[str, Any], ray_bundles: list[dict[str, Any]]):
        self.pg = pg
        self.placement = placement
        self._ray = ray_bundles

    def __repr__(self) -> str:
        where = ", ".join(
            f"{b['node']}:{','.join(d['label'] for d in b['devices'])}" for b in self.placement["bundles"]
        )
        return f"AccelPlacementGroup({where})"

    @property
    def bundle_count(self) -> int:
        return len(self.placement["bundles"])

    def _index(self, i: int) -> int:
        """`i` if it names a bundle, else InvalidRequest naming the valid range (never a bare
        IndexError, and no counting from the end: -1 is a mistake, not the last bundle)."""
        n = self.bundle_count
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n:
            raise InvalidRequest(f"no bundle {i!r}: this placement group's bundles are 0 to {n - 1}", field="bundle", value=str(i))
        return i

    def _bundle(self, i: int) -> dict[str, Any]:
        bundle: dict[str, Any] = self.placement["bundles"][self._index(i)]
        return bundle

    def node(self, i: int) -> str:
        return str(self._bundle(i)["node"])

    def devices(self, i: int) -> list[dict[str, Any]]:
        devices: list[dict[str, Any]] = self._bundle(i)["devices"]
        return devices

    def env(self, i: int) -> dict[str, str]:
        """The environment of bundle `i`: its devices' visibility variables, its CPUs
        (`ACCEL_CPUS`) and its devices' RDMA NICs (`NCCL_IB_HCA`, `UCX_NET_DEVICES`)."""
        return dict(self._ray[self._index(i)]["env"])

    def resources(self, i: int) -> dict[str, float]:
        """The Ray resources of bundle `i`: the device-kind count plus one per device."""
        return {k: float(v) for k, v in self._ray[self._index(i)]["resources"].items()}

    def options(self, i: int, **extra: Any) -> dict[str, Any]:
        """`.options(...)` for an actor or task that should use bundle `i`'s devices."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        res = self.resources(i)
        opts: dict[str, Any] = {
            "scheduling_strategy": PlacementGroupSchedulingStrategy(placement_group=self.pg, placement_group_bundle_index=i),
            "num_cpus": 0,
            "num_gpus": res.pop("GPU", 0),
            "resources": res,
        }
        runtime_env = dict(extra.pop("runtime_env", None) or {})
        env_vars = dict(runtime_env.get("env_vars") or {})
        env_vars.update(self._ray[i]["env"])
        runtime_env["env_vars"] = env_vars
        # Workers start pinned to the bundle's CPUs (a py_executable of the caller's own wins).
        runtime_env.setdefault("py_executable", py_executable())
        opts["runtime_env"] = runtime_env
        opts.update(extra)
        return opts

    def ready(self, timeout_s: float = 30.0) -> bool:
        return bool(self.pg.wait(timeout_seconds=timeout_s))

    def remove(self) -> None:
        from ray.util import remove_placement_group

        remove_placement_group(self.pg)


def placement_group(
    request: Any,
    *,
    cluster: Any = None,
    name: str = "",
    timeout_s: float = 30.0,
    cpus_per_bundle: float = 0,
) -> AccelPlacementGroup:
    """Plans `request` on the Ray cluster and creates a real Ray placement group holding exactly
    the planned devices on the planned nodes.

    cluster: the planner's cluster (`accel.cluster(...)`, a dict or a file); by default the
    machines that `accel.ray` nodes published (`python -m accel.ray start`).

    Fails fast with `accel.Infeasible` (the failed constraint and the nearest feasible
    alternative) when the request cannot be met with the devices Ray has free, and never leaves
    a pending placement group behind: when another placement takes a planned device between
    planning and reserving, the group is removed and the request planned again (3 rounds); when
    Ray does not reserve the bundles within `timeout_s`, the group is removed and the error raised.
    """
    from ray.util import placement_group as ray_placement_group
    from ray.util import remove_placement_group

    request = load_request(request)
    planner = Planner(cluster) if cluster is not None else Planner.from_ray_nodes(_published())
    if len(planner) == 0:
        raise Infeasible("no Ray node carries accel's machine description (start nodes with `python -m accel.ray start`)")
    deadline = time.monotonic() + timeout_s
    for _attempt in range(_ATTEMPTS):
        sync_with_ray(planner)
        planned = planner.plan_for_ray(request)  # InvalidRequest or Infeasible here: nothing was created
        placement, ray_bundles = planned["placement"], planned["ray"]
        bundles = []
        for rb in ray_bundles:
            res = dict(rb["resources"])
            if cpus_per_bundle:
                res["CPU"] = cpus_per_bundle
            bundles.append(res)
        selectors = [dict(rb["selector"]) for rb in ray_bundles]
        pg = ray_placement_group(bundles, strategy="PACK", name=name, bundle_label_selector=selectors)
        while True:
            if pg.wait(timeout_seconds=max(0.0, min(_POLL_S, deadline - time.monotonic()))):
                return AccelPlacementGroup(pg, placement, ray_bundles)
            if time.monotonic() >= deadline:
                remove_placement_group(pg)
                raise Infeasible(
                    f"Ray did not reserve the planned devices within {timeout_s:g} s "
                    f"({placement['bundles'][0]['node']}...); the placement group was removed"
                )
            if _taken_meanwhile(placement, ray_bundles, pg) and not pg.wait(timeout_seconds=_POLL_S):
                # Another placement took a planned device between planning and reserving: this
                # group would stay pending. Remove it and plan again on Ray's current state.
                remove_placement_group(pg)
                break
    raise Infeasible(
        f"the planned devices were taken by other placements {_ATTEMPTS} times in a row; "
        "the placement group was removed"
    )


# Plan-and-reserve rounds before giving up, and how often a pending group is checked.
_ATTEMPTS = 3
_POLL_S = 1.0


def _taken_meanwhile(placement: dict[str, Any], ray_bundles: list[dict[str, Any]], pg: PlacementGroup) -> bool:
    """True when a planned device's resource is no longer free in Ray and this group does not
    hold it (Ray names a group's reserved resources `<name>_group_..._<group id>`)."""
    available = _available()
    own = pg.id.hex()
    for b, rb in zip(placement["bundles"], ray_bundles):
        avail = available.get(b["node"])
        if avail is None:
            return True
        for name in rb["device_resources"]:
            held = any(k.startswith(name + "_group_") and k.endswith(own) for k in avail)
            if avail.get(name, 0) < 1 and not held:
                return True
    return False
