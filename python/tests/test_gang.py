"""Training gangs (`accel.ray.gang`, `accel.ray.gang_groups`) without Ray: the request they
write, their argument errors, and what the planner does with `groups` and `within` on clusters
of GB200 NVL72 trays in NVLink cliques of different sizes."""

from __future__ import annotations

import pytest

import accel
import accel.ray as aray

GB200 = {"count": 1, "sku": ["nvidia-gb200"]}
LEAF = "network.topology.nvidia.com/leaf"
SPINE = "network.topology.nvidia.com/spine"


def _trays(cliques: list[int], **labels: list[str]) -> dict:
    """GB200 trays in NVLink cliques `clique-0`, `clique-1`... of the given tray counts, plus one
    DGX H100 that a GB200 bundle must never use. `labels` gives each tray, in order, a value of
    a further label (`leaf=["l0", "l0", "l1"]`)."""
    cluster = accel.cluster({"gb200-nvl72-tray": sum(cliques), "dgx-h100": 1})
    trays = [n for n in cluster["nodes"] if n["name"].startswith("gb200")]
    cliques_of = [f"clique-{k}" for k, count in enumerate(cliques) for _ in range(count)]
    for i, (node, clique) in enumerate(zip(trays, cliques_of)):
        node.setdefault("labels", {})["nvlink_clique"] = clique
        for key, values in labels.items():
            node["labels"][{"leaf": LEAF, "spine": SPINE}.get(key, key)] = values[i]
    return cluster


def _label(cluster: dict, node: str, key: str) -> str:
    (found,) = [n for n in cluster["nodes"] if n["name"] == node]
    return str(found["labels"][key])


def _group_cliques(cluster: dict, placement: dict) -> list[set[str]]:
    """For each sub-group of the placement, the NVLink cliques its bundles' nodes are labelled with."""
    return [
        {_label(cluster, placement["bundles"][i]["node"], "nvlink_clique") for i in group}
        for group in aray.gang_groups(placement)
    ]


# --- the request ------------------------------------------------------------------------------


def test_request_shape():
    req = aray.gang(GB200, groups=3, group_size=4, within="nvlink_clique")
    assert req == {
        "bundles": [GB200] * 12,
        "groups": {"size": 4, "same": "nvlink_clique", "replicas": "spread"},
    }
    # Every bundle is its own copy: changing one changes neither the others nor the argument.
    req["bundles"][0]["sku"].append("x")
    assert req["bundles"][1] == GB200 and GB200 == {"count": 1, "sku": ["nvidia-gb200"]}

    capped = aray.gang(2, groups=2, group_size=2, within="node", replicas="pack", tier="spine", hard=False)
    assert capped == {
        "bundles": [{"count": 2}] * 4,
        "groups": {"size": 2, "same": "node", "replicas": "pack"},
        "within": {"tier": "spine", "hard": False},
    }
    assert aray.gang(1, groups=1, group_size=1, within="node", tier=SPINE)["within"] == {"tier": SPINE, "hard": True}
    assert aray.gang(1, groups=1, group_size=1, within="node", same="rack")["same"] == "rack"


@pytest.mark.parametrize(
    "args, field",
    [
        ({"groups": 0}, "groups"),
        ({"groups": True}, "groups"),
        ({"groups": 2.0}, "groups"),
        ({"group_size": 0}, "group_size"),
        ({"group_size": -4}, "group_size"),
        ({"within": ""}, "within"),
        ({"within": None}, "within"),
        ({"tier": " "}, "tier"),
        ({"same": ""}, "same"),
        ({"hard": False}, "hard"),  # softens a tier cap that is not there
        ({"bundle": 0}, "bundle"),
        ({"bundle": "count: 1"}, "bundle"),
    ],
)
def test_argument_errors(args, field):
    kwargs = {"groups": 2, "group_size": 4, "within": "nvlink_clique"} | args
    bundle = kwargs.pop("bundle", GB200)
    with pytest.raises(accel.InvalidRequest) as err:
        aray.gang(bundle, **kwargs)
    assert err.value.field == field
    assert isinstance(err.value, ValueError) and isinstance(err.value, accel.PlacementError)


def test_names_are_checked_by_the_planner():
    cluster = _trays([2, 1])
    with pytest.raises(accel.InvalidRequest):
        accel.plan(cluster, aray.gang(GB200, groups=2, group_size=2, within="nvlink_clique", replicas="sprad"))
    with pytest.raises(accel.InvalidRequest) as err:
        accel.plan(cluster, aray.gang(GB200, groups=2, group_size=2, within="nvlink_cliqe"))
    assert err.value.suggestion == "nvlink_clique"


def test_gang_groups_needs_sub_groups():
    placement = accel.plan(_trays([1]), {"bundles": [GB200] * 2})
    with pytest.raises(accel.InvalidRequest, match="no sub-group") as err:
        aray.gang_groups(placement)
    assert err.value.field == "groups"


def test_gang_groups_orders_a_sub_group_by_node_then_device():
    def bundle(i, group, node, index):
        return {"bundle": i, "group": group, "node": node, "devices": [{"index": index}]}

    placement = {
        "bundles": [
            bundle(0, 0, "b", 3),
            bundle(1, 0, "a", 0),
            bundle(2, 0, "b", 1),
            bundle(3, 0, "a", 2),
            bundle(4, 1, "c", 0),
        ]
    }
    assert aray.gang_groups(placement) == [[2, 0, 1, 3], [4]]


# --- what the planner does with it --------------------------------------------------------------


def test_each_sub_group_lands_in_one_nvlink_clique():
    cluster = _trays([2, 2, 1])  # cliques of 8, 8 and 4 GPUs
    p = accel.plan(cluster, aray.gang(GB200, groups=3, group_size=4, within="nvlink_clique"))
    groups = aray.gang_groups(p)
    assert sorted(sorted(g) for g in groups) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    cliques = _group_cliques(cluster, p)
    assert all(len(c) == 1 for c in cliques), cliques
    assert len(set.union(*cliques)) == 3  # replicas spread: one clique each
    for b in p["bundles"]:
        assert b["node"].startswith("gb200")
        assert b["group"] == b["bundle"] // 4
        assert b["domain"] == _label(cluster, b["node"], "nvlink_clique")


def test_a_sub_group_spans_the_trays_of_its_clique():
    cluster = _trays([2, 2, 1])
    p = accel.plan(cluster, aray.gang(GB200, groups=2, group_size=8, within="nvlink_clique"))
    cliques = _group_cliques(cluster, p)
    assert sorted(c.pop() for c in cliques) == ["clique-0", "clique-1"]  # clique-2 is too small
    for group in aray.gang_groups(p):
        assert len({p["bundles"][i]["node"] for i in group}) == 2  # eight GPUs: two trays


def test_sub_groups_that_fit_no_domain_are_infeasible():
    cluster = _trays([2, 1])  # cliques of 8 and 4 GPUs: 12 in all
    gang = aray.gang(GB200, groups=2, group_size=6, within="nvlink_clique", replicas="pack")
    loose = accel.plan(cluster, {"bundles": gang["bundles"]})  # the same twelve bundles fit...
    assert {_label(cluster, b["node"], "nvlink_clique") for b in loose["bundles"]} == {"clique-0", "clique-1"}
    with pytest.raises(accel.Infeasible) as err:  # ...but no second clique holds six
        accel.plan(cluster, gang)
    assert err.value.constraint == "groups"
    assert "1 of 2 sub-groups placed" in str(err.value)


def test_replicas_spread_needs_a_domain_per_sub_group():
    cluster = _trays([2, 1])
    packed = accel.plan(cluster, aray.gang(GB200, groups=3, group_size=4, within="nvlink_clique", replicas="pack"))
    cliques = [c.pop() for c in _group_cliques(cluster, packed)]
    assert sorted(cliques) == ["clique-0", "clique-0", "clique-1"]
    with pytest.raises(accel.Infeasible) as err:  # three replicas, two cliques
        accel.plan(cluster, aray.gang(GB200, groups=3, group_size=4, within="nvlink_clique"))
    assert err.value.constraint == "groups"


def test_within_caps_the_gang_under_one_switch():
    # Four one-tray cliques; trays 0-1 under leaf l0, trays 2-3 under leaf l1, one spine.
    cluster = _trays([1, 1, 1, 1], leaf=["l0", "l0", "l1", "l1"], spine=["s0"] * 4)
    two = aray.gang(GB200, groups=2, group_size=4, within="nvlink_clique", tier="leaf")
    p = accel.plan(cluster, two)
    assert len({_label(cluster, b["node"], LEAF) for b in p["bundles"]}) == 1
    assert p["span"] == LEAF  # the tier's label key, whichever name the request used
    three = aray.gang(GB200, groups=3, group_size=4, within="nvlink_clique", tier="leaf")
    with pytest.raises(accel.Infeasible):  # a leaf holds two cliques
        accel.plan(cluster, three)
    soft = accel.plan(cluster, aray.gang(GB200, groups=3, group_size=4, within="nvlink_clique", tier="leaf", hard=False))
    assert soft["span"] == SPINE
    assert len({_label(cluster, b["node"], LEAF) for b in soft["bundles"]}) == 2
