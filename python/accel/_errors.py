"""accel's exceptions below the native roots (`accel.AccelError` and its families, defined in
`accel._native`): a mistake in a request is `InvalidRequest`, a valid request that the cluster
cannot meet is `Infeasible`, and every transport failure is a `TransportError`.

    AccelError
    ├── DiscoveryError
    ├── PlacementError
    │   ├── InvalidRequest (also ValueError): .field, .value, .suggestion
    │   └── Infeasible: .constraint, .nearest, .bundle, .explanation
    └── TransportError: PoolExhausted, OwnerGone (StaleReference), BufferFreed, AuthError,
        InvalidArgument (also TypeError and ValueError)
"""

from __future__ import annotations

import json
from typing import Any

from ._native import PlacementError, TransportError, suggest


# How to install accel and Ray, for every hint that names it: this project is not on PyPI (the
# PyPI package named `accel` is an unrelated one), and the `[ray]` extra pins Ray 2.60.0
# (pyproject.toml; python/tests/test_hints.py checks both).
INSTALL_ACCEL = (
    "pip install dist/accel-*.whl (the wheel `bash scripts/wheel.sh` builds from a checkout; "
    "not `pip install accel`, which is an unrelated PyPI package)"
)
INSTALL_RAY = "pip install 'ray[default]==2.60.0'"


def did_you_mean(word: object, known: Any) -> str:
    """`; did you mean 'x'?` for the known name nearest to `word` (the one suggestion rule,
    `accel_model::suggest`), or an empty string when none is close."""
    near = suggest(str(word), [str(k) for k in known])
    return f"; did you mean {near!r}?" if near else ""


class InvalidRequest(PlacementError, ValueError):
    """The request (or the sample, cluster or node it names) is malformed or names something
    nothing knows. `field` says where, `value` what, `suggestion` the nearest known name."""

    def __init__(self, message: str, *, field: str | None = None, value: str | None = None, suggestion: str | None = None):
        super().__init__(message)
        self.field = field
        self.value = value
        self.suggestion = suggestion


class Infeasible(PlacementError):
    """A valid request the cluster cannot meet: `constraint` is the one that failed
    (`capability`, `health`, `free`, `nic`, `connectivity`, `same`...), `nearest` the nearest
    feasible alternative, `bundle` the bundle at fault (or None)."""

    def __init__(self, message: str, explanation: dict[str, Any] | None = None):
        super().__init__(message)
        self.explanation = explanation or {}
        self.constraint: str | None = self.explanation.get("constraint")
        self.nearest: str | None = self.explanation.get("nearest")
        self.bundle: int | None = self.explanation.get("bundle")


class InvalidArgument(TransportError, TypeError, ValueError):
    """A transport call was given something it cannot take (a list to `put`, an unknown path)."""


def from_native(e: PlacementError) -> PlacementError:
    """The native error carries (message, details as JSON): `{"invalid": ...}` for a mistake,
    the planner's explanation for an infeasible request."""
    if len(e.args) != 2 or isinstance(e, (InvalidRequest, Infeasible)):
        return e
    message, details = e.args
    info = json.loads(details) if details else {}
    invalid = info.get("invalid")
    if isinstance(invalid, dict):
        return InvalidRequest(message, field=invalid.get("field"), value=invalid.get("value"), suggestion=invalid.get("suggestion"))
    return Infeasible(message, info)
