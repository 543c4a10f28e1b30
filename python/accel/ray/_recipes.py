"""Recipes for inference engines that take placement-group bundle indices: vLLM
(`VLLM_RAY_BUNDLE_INDICES`) and SGLang (`SGLANG_RAY_BUNDLE_INDICES`) run each worker in one
bundle of one device, and read which bundles an engine's tensor-parallel group uses from these
variables. `engine_groups` turns an accel plan of one-device bundles into those groups, each on
one node and in the order of the node's devices, so a group's workers meet over the node's
best links instead of wherever Ray's bundle order would put them.

    apg = accel.ray.placement_group({"bundles": [{"count": 1}] * 8, "same": "node"})
    for group in engine_groups(apg.placement, 4):
        engine = LLM(..., tensor_parallel_size=4)  # started with vllm_env(group) in its env
"""

from __future__ import annotations

from typing import Any

from .._errors import InvalidRequest


def engine_groups(placement: dict[str, Any], size: int) -> list[list[int]]:
    """Bundle indices of engines of `size` devices each: every group on one node, its bundles
    in the order of their devices' indices, groups by node in plan order. Every bundle must hold
    one device, and every node's share must divide into groups (`InvalidRequest` otherwise)."""
    if not isinstance(size, int) or size < 1:
        raise InvalidRequest(f"an engine group holds at least one device, got {size!r}", field="size", value=str(size))
    by_node: dict[str, list[tuple[int, int]]] = {}
    for b in placement["bundles"]:
        devices = b["devices"]
        if len(devices) != 1:
            raise InvalidRequest(
                f"bundle {b['bundle']} holds {len(devices)} devices; engines take one device per bundle "
                '(request {"count": 1} bundles)',
                field="bundles",
            )
        by_node.setdefault(b["node"], []).append((devices[0]["index"], b["bundle"]))
    groups: list[list[int]] = []
    for node, bundles in by_node.items():
        if len(bundles) % size:
            raise InvalidRequest(
                f"node {node} holds {len(bundles)} of the bundles, not a multiple of {size}: "
                "a tensor-parallel group must not cross nodes",
                field="size",
                value=str(size),
            )
        ordered = [bundle for _, bundle in sorted(bundles)]
        groups += [ordered[i : i + size] for i in range(0, len(ordered), size)]
    return groups


def vllm_env(group: list[int]) -> dict[str, str]:
    """The variable that gives a vLLM engine its group's bundles."""
    return {"VLLM_RAY_BUNDLE_INDICES": ",".join(str(i) for i in group)}


def sglang_env(group: list[int]) -> dict[str, str]:
    """The variable that gives an SGLang engine its group's bundles."""
    return {"SGLANG_RAY_BUNDLE_INDICES": ",".join(str(i) for i in group)}
