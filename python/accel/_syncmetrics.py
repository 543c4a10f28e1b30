"""Weight-sync metrics of this process (`accel.weights` records them), in the Prometheus text
that `accel.transport.prometheus()` appends to the transport's own, so `write_metrics(dir)`
brings them to the node agent (`/metrics/transport`, each series labelled with its pid).

Series (`role` is ``send`` or ``receive``):

- ``accel_weight_sync_steps_total{role,outcome}``: syncs, by ``ok`` or ``failed``;
- ``accel_weight_sync_bytes_total{role}``: bytes packed (send) or landed (receive);
- ``accel_weight_sync_last_bytes{role}``, ``accel_weight_sync_last_seconds{role,phase}``: the
  last step (phases: ``pack`` for a sender; ``total``, ``pause`` for a receiver);
- ``accel_weight_sync_link_gbps{peer}``: the last step's rate from each source rank, GB/s.
"""

from __future__ import annotations

import os
import threading

_lock = threading.Lock()
_steps: dict[tuple[str, str], int] = {}
_bytes: dict[str, int] = {}
_last_bytes: dict[str, int] = {}
_last_seconds: dict[tuple[str, str], float] = {}
_links: dict[str, float] = {}


def _reset_after_fork() -> None:
    for d in (_steps, _bytes, _last_bytes, _last_seconds, _links):
        d.clear()


os.register_at_fork(after_in_child=_reset_after_fork)


def record(role: str, ok: bool, nbytes: int, seconds: dict[str, float], links: dict[str, float] | None = None) -> None:
    """One step of `role`: its outcome, bytes, phase times and (receivers) per-source rates."""
    with _lock:
        key = (role, "ok" if ok else "failed")
        _steps[key] = _steps.get(key, 0) + 1
        if not ok:
            return
        _bytes[role] = _bytes.get(role, 0) + nbytes
        _last_bytes[role] = nbytes
        for phase, s in seconds.items():
            _last_seconds[(role, phase)] = s
        if links is not None:
            _links.clear()
            _links.update(links)


def phase(role: str, name: str, seconds: float) -> None:
    """A phase timed apart from its step (a receiver's switch, after the step landed)."""
    with _lock:
        _last_seconds[(role, name)] = seconds


def snapshot() -> dict[str, object]:
    """The recorded values, for tests and `accel.weights.stats()`."""
    with _lock:
        return {
            "steps": {f"{r}/{o}": n for (r, o), n in _steps.items()},
            "bytes": dict(_bytes),
            "last_bytes": dict(_last_bytes),
            "last_seconds": {f"{r}/{p}": s for (r, p), s in _last_seconds.items()},
            "link_gbps": dict(_links),
        }


def prometheus() -> str:
    """The series above as Prometheus text; empty before the first step."""
    with _lock:
        if not _steps:
            return ""
        out = [
            "# HELP accel_weight_sync_steps_total Weight-sync steps of this process, by role and outcome.",
            "# TYPE accel_weight_sync_steps_total counter",
        ]
        out += [f'accel_weight_sync_steps_total{{role="{r}",outcome="{o}"}} {n}' for (r, o), n in sorted(_steps.items())]
        out += [
            "# HELP accel_weight_sync_bytes_total Bytes packed (send) or landed (receive) by weight syncs.",
            "# TYPE accel_weight_sync_bytes_total counter",
        ]
        out += [f'accel_weight_sync_bytes_total{{role="{r}"}} {n}' for r, n in sorted(_bytes.items())]
        out += [
            "# HELP accel_weight_sync_last_bytes Bytes of the last successful step.",
            "# TYPE accel_weight_sync_last_bytes gauge",
        ]
        out += [f'accel_weight_sync_last_bytes{{role="{r}"}} {n}' for r, n in sorted(_last_bytes.items())]
        out += [
            "# HELP accel_weight_sync_last_seconds Phases of the last successful step, seconds.",
            "# TYPE accel_weight_sync_last_seconds gauge",
        ]
        out += [f'accel_weight_sync_last_seconds{{role="{r}",phase="{p}"}} {s:.6f}' for (r, p), s in sorted(_last_seconds.items())]
        if _links:
            out += [
                "# HELP accel_weight_sync_link_gbps Rate from each source rank in the last step, GB/s.",
                "# TYPE accel_weight_sync_link_gbps gauge",
            ]
            out += [f'accel_weight_sync_link_gbps{{peer="{p}"}} {g:.4f}' for p, g in sorted(_links.items())]
        return "\n".join(out) + "\n"
