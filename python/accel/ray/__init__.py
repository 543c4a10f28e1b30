"""accel's Ray integration.

Placement (`placement_group`, `ray_start`) and the ACCEL tensor transport
(`register_transport`) live in their own modules; this package re-exports them.
"""

from __future__ import annotations

from ._transport import register_transport

__all__: list[str] = ["register_transport"]
