"""accel's Ray integration.

Placement (`placement_group`, `ray_start`) and the ACCEL tensor transport
(`register_transport`) live in their own modules; this package re-exports them.
"""

from __future__ import annotations

from ._placement import (
    AccelPlacementGroup,
    allow_unknown_health,
    cluster_from_ray,
    device_resource,
    label_value,
    node_spec,
    placement_group,
    publish_machine,
    visibility_env,
)
from ._gang import gang, gang_groups
from ._monitor import DeviceUnhealthy, check, health, publish_source, start_monitors
from ._recipes import engine_groups, sglang_env, vllm_env
from ._start import ray_start_command
from ._transport import register_transport
from ._weights import (
    Admission,
    SyncReport,
    WeightSource,
    WeightTarget,
    join_weight_target,
    leave_weight_target,
    plan_weight_sync,
    sync_weights,
)

__all__: list[str] = ["register_transport"]
__all__ += ["AccelPlacementGroup", "allow_unknown_health", "cluster_from_ray", "device_resource", "node_spec", "placement_group"]
__all__ += ["label_value", "publish_machine", "ray_start_command", "visibility_env"]
__all__ += ["engine_groups", "sglang_env", "vllm_env"]
__all__ += ["gang", "gang_groups"]
__all__ += [
    "Admission",
    "SyncReport",
    "WeightSource",
    "WeightTarget",
    "join_weight_target",
    "leave_weight_target",
    "plan_weight_sync",
    "sync_weights",
]
__all__ += ["DeviceUnhealthy", "check", "health", "publish_source", "start_monitors"]
