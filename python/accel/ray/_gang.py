"""Training gangs: `groups` data-parallel replicas of a tensor-parallel sub-group of
`group_size` bundles, each sub-group inside one scale-up domain (an NVLink clique, a TPU slice,
a node), all of them optionally under one switch of a fabric tier. `gang` writes the planner
request (its `groups` and `within` fields, docs/placement.md); `gang_groups` reads the
sub-groups back from the placement.

    req = gang({"count": 1, "sku": ["nvidia-gb200"]}, groups=2, group_size=4, within="nvlink_clique")
    apg = accel.ray.placement_group(req)
    for tp in gang_groups(apg.placement):       # [[0, 1, 2, 3], [4, 5, 6, 7]]
        ...                                     # one engine per sub-group: vllm_env(tp)

The names it passes on (the domain kind, the tier, `replicas`) are checked by the planner,
which knows the cluster: a misspelt one raises `accel.InvalidRequest` with a suggestion when
the request is planned, before anything is reserved.
"""

from __future__ import annotations

import copy
from typing import Any, Literal, Mapping

from .._errors import InvalidRequest

Replicas = Literal["pack", "spread"]


def _positive(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidRequest(f"{name} must be an int of at least 1, got {value!r}", field=name, value=repr(value))
    return value


def _name(name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidRequest(f"{name} must be a non-empty name, got {value!r}", field=name, value=repr(value))
    return value


def gang(
    bundle: Mapping[str, Any] | int,
    *,
    groups: int,
    group_size: int,
    within: str,
    replicas: Replicas = "spread",
    tier: str | None = None,
    hard: bool = True,
    same: str | None = None,
) -> dict[str, Any]:
    """The request for a gang of `groups * group_size` copies of `bundle` (a bundle dict such as
    `{"count": 1, "sku": ["nvidia-gb200"]}`, or a device count), in `groups` consecutive
    sub-groups of `group_size` bundles, each sub-group inside one domain of kind `within`
    (`nvlink_clique`, `tpu_slice`, `rack`, `node`, or any label key of the cluster).

    replicas: `spread` (the default here; the planner's own default is `pack`) puts every
    sub-group in a different domain, so one domain failing takes one replica; `pack` lets
    sub-groups share a domain and prefers the ones earlier sub-groups use.
    tier: a cap on the whole gang, every bundle under one switch of this fabric tier (`leaf`,
    `spine`, `core`, `block`, or a tier's full label key such as
    `network.topology.nvidia.com/spine`); `hard=False` makes it a preference (else the next
    tier up), and the placement's `span` says which tier it got.
    same: every bundle, all sub-groups together, in one domain of this kind (`rack`, `zone`...);
    the planner takes either `same` or a `tier`, not both.

    Raises `accel.InvalidRequest` (`.field` names the argument) for a count below 1, an empty
    name, or `hard=False` without a `tier`.
    """
    n_groups = _positive("groups", groups)
    size = _positive("group_size", group_size)
    if isinstance(bundle, Mapping):
        one: dict[str, Any] = copy.deepcopy(dict(bundle))
    elif isinstance(bundle, int) and not isinstance(bundle, bool):
        one = {"count": _positive("bundle", bundle)}
    else:
        raise InvalidRequest(
            f"a bundle is a dict such as {{'count': 1}} or a device count, got {type(bundle).__name__}",
            field="bundle",
            value=repr(bundle),
        )
    request: dict[str, Any] = {
        "bundles": [copy.deepcopy(one) for _ in range(n_groups * size)],
        "groups": {"size": size, "same": _name("within", within), "replicas": replicas},
    }
    if tier is not None:
        request["within"] = {"tier": _name("tier", tier), "hard": bool(hard)}
    elif not hard:
        raise InvalidRequest("hard=False softens a tier cap: give tier= too", field="hard", value="False")
    if same is not None:
        request["same"] = _name("same", same)
    return request


def gang_groups(placement: Mapping[str, Any]) -> list[list[int]]:
    """Bundle indices of each sub-group of a gang's placement, sub-group 0 first, read from the
    `group` the planner gave every bundle. Inside a sub-group, bundles are ordered by node (the
    node of the sub-group's earliest bundle first) and then by their first device's index, so
    ranks that share a node are neighbours. Raises `accel.InvalidRequest` when the placement has
    no sub-groups (its request had no `groups`)."""
    by_group: dict[int, list[dict[str, Any]]] = {}
    for b in placement["bundles"]:
        if "group" not in b:
            raise InvalidRequest(
                f"bundle {b['bundle']} has no sub-group: plan a request with `groups` (accel.ray.gang)",
                field="groups",
            )
        by_group.setdefault(int(b["group"]), []).append(b)
    out: list[list[int]] = []
    for g in sorted(by_group):
        members = sorted(by_group[g], key=lambda b: int(b["bundle"]))
        first_on: dict[str, int] = {}
        for b in members:
            first_on.setdefault(str(b["node"]), len(first_on))

        def rank(b: dict[str, Any]) -> tuple[int, int, int]:
            first = min((int(d["index"]) for d in b["devices"]), default=-1)
            return first_on[str(b["node"])], first, int(b["bundle"])

        out.append([int(b["bundle"]) for b in sorted(members, key=rank)])
    return out
