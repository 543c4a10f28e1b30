"""Weight sync on Ray: mixins for a trainer's and an inference engine's actors, and the
driver's `sync_weights`, which runs one step as a consistent cut.

    @ray.remote
    class Trainer(accel.ray.WeightSource):
        def step(self, version):
            ...                                            # train
            return self.publish_weights(version, self.local_shards())   # a Shipment

    @ray.remote
    class Worker(accel.ray.WeightTarget):
        def generate(self, prompt):
            with self.weights() as (version, tensors): ...

    trainers, workers = [...], [...]
    p = accel.ray.plan_weight_sync(src_layout, trainers, dst_layout, workers)  # once: hosts, plan, parts
    report = accel.ray.sync_weights(p, [t.step.remote(v) for t in trainers], workers)

A step: every trainer rank publishes (packs its buffers, leases them to their readers) and
returns a small `Shipment`; every inference rank lands all its pieces into its back buffer while
it keeps serving the old version; only when every rank has landed does each switch (the pause).
If a trainer or worker fails or dies on the way, no rank switches: each drops what it landed
and keeps serving the old version, and `sync_weights` raises `WeightSyncError` naming who
failed and why. A worker that dies after landing, while the others switch, makes them switch
back (the old version is still whole in their back buffers).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .. import weights as _w


class WeightSource:
    """Mixin for a trainer rank's actor: `publish_weights(version, tensors)` from its own
    methods; `setup_weight_source(part)` is called by `plan_weight_sync`."""

    _accel_sender: _w.Sender | None = None

    def accel_host(self) -> str:
        return _w.host()

    def setup_weight_source(self, part: _w.SourcePlan, keep: int = 2) -> None:
        if self._accel_sender is not None:
            self._accel_sender.close()
        self._accel_sender = _w.Sender(part, keep=keep)

    def publish_weights(self, version: int, tensors: Any) -> _w.Shipment:
        if self._accel_sender is None:
            raise _w.WeightSyncError("this trainer rank has no plan: call accel.ray.plan_weight_sync first")
        return self._accel_sender.publish(version, tensors)


class WeightTarget:
    """Mixin for an inference rank's actor: serve from `weights()`; `sync_weights` calls the
    ``accel_*`` methods."""

    _accel_receiver: _w.Receiver | None = None

    def accel_host(self) -> str:
        return _w.host()

    def setup_weight_target(self, part: _w.DestinationPlan, double_buffer: bool = True) -> int:
        """Allocates the rank's buffers; returns their bytes."""
        if self._accel_receiver is not None:
            self._accel_receiver.close()
        self._accel_receiver = _w.Receiver(part, double_buffer=double_buffer)
        return self._accel_receiver.nbytes

    def _receiver(self) -> _w.Receiver:
        if self._accel_receiver is None:
            raise _w.WeightSyncError("this inference rank has no plan: call accel.ray.plan_weight_sync first")
        return self._accel_receiver

    @contextlib.contextmanager
    def weights(self) -> Iterator[tuple[int | None, dict[str, Any]]]:
        """The version in service and its arrays, for the length of the block."""
        with self._receiver().read() as held:
            yield held

    def accel_receive(self, shipments: Sequence[_w.Shipment]) -> _w.Landed:
        return self._receiver().receive(shipments)

    def accel_commit(self, version: int) -> float:
        return self._receiver().commit(version)

    def accel_abort(self, version: int) -> None:
        self._receiver().abort(version)

    def accel_rollback(self, version: int) -> bool:
        return self._receiver().rollback(version)

    def accel_version(self) -> int | None:
        return self._receiver().version


def plan_weight_sync(
    src: _w.Layout,
    trainers: Sequence[Any],
    dst: _w.Layout,
    workers: Sequence[Any],
    *,
    double_buffer: bool = True,
    timeout: float = 300.0,
) -> _w.Plan:
    """Plans the sync once: asks every rank's actor for its host, plans with the layouts on
    those hosts, and hands each rank its own part (trainer rank r is ``trainers[r]``). Returns
    the plan (its ``links``, ``bytes`` and ``seconds`` say what a step moves)."""
    if len(trainers) != len(src.ranks) or len(workers) != len(dst.ranks):
        raise _w.LayoutError(
            f"{len(trainers)} trainers and {len(workers)} workers for layouts of "
            f"{len(src.ranks)} and {len(dst.ranks)} ranks"
        )
    import ray  # here, not at import: `python -m accel.ray` runs without Ray installed

    hosts = ray.get([a.accel_host.remote() for a in [*trainers, *workers]], timeout=timeout)
    p = _w.plan(src.on(hosts[: len(trainers)]), dst.on(hosts[len(trainers) :]))
    ray.get(
        [t.setup_weight_source.remote(p.for_source(r)) for r, t in enumerate(trainers)]
        + [w.setup_weight_target.remote(p.for_destination(d), double_buffer) for d, w in enumerate(workers)],
        timeout=timeout,
    )
    return p


@dataclass
class SyncReport:
    """One step as the driver saw it: the version, bytes landed in all, seconds from the first
    publish call to the last switch (``total``), the switch phase (``pause``: from asking the
    first rank to switch until the last has, Ray's calls included), the longest any one rank
    held its readers off while switching (``hold``), the slowest rank's landing, and each rank's
    `Landed`."""

    version: int
    nbytes: int
    total: float
    pause: float
    hold: float
    landing: float
    landed: list[_w.Landed]


def _cause(e: BaseException) -> str:
    """The error a remote call raised, in one line: the exception inside Ray's task error (its
    own text starts with the worker's banner), or Ray's own (an actor that died)."""
    cause = getattr(e, "cause", None)
    inner = cause if isinstance(cause, BaseException) else e
    lines = str(inner).strip().splitlines()
    return f"{type(inner).__name__}: {lines[0] if lines else ''}"


def _each(workers: Sequence[Any], method: str, arg: Any, timeout: float) -> tuple[list[Any], list[str]]:
    """Calls ``method(arg)`` on every worker at once: the answers of those that answered, and a
    line for each that failed or died (its rank and why)."""
    import ray

    calls = [getattr(w, method).remote(arg) for w in workers]
    answers: list[Any] = []
    failed: list[str] = []
    for d, call in enumerate(calls):
        try:
            answers.append(ray.get(call, timeout=timeout))
        except Exception as e:
            failed.append(f"destination rank {d}: {_cause(e)}")
    return answers, failed


def sync_weights(
    plan: _w.Plan,
    shipments: Sequence[Any],
    workers: Sequence[Any],
    *,
    started: float | None = None,
    timeout: float = 600.0,
) -> SyncReport:
    """One step: ``shipments`` are the trainers' calls that return `publish_weights(...)` (Ray
    ObjectRefs, in trainer rank order), ``workers`` the inference ranks' actors. Lands the
    version everywhere, then switches every rank; on any failure, switches none and raises
    WeightSyncError. ``started`` (a ``time.perf_counter()``) is when the step began, for
    ``total``; by default, the call."""
    import ray

    t0 = time.perf_counter() if started is None else started
    try:
        ships = ray.get(list(shipments), timeout=timeout)
    except Exception as e:  # a trainer died or failed: nothing was received anywhere
        raise _w.WeightSyncError(f"a trainer rank failed to publish ({_cause(e)}); every worker keeps its version") from e
    versions = {s.version for s in ships}
    if len(versions) != 1:
        raise _w.WeightSyncError(f"trainers published versions {sorted(versions)}: a step is one version")
    version = versions.pop()
    if any(s.plan_id != plan.id for s in ships):
        raise _w.WeightSyncError("a trainer published for another plan: run plan_weight_sync again on both sides")
    landed, failed = _each(workers, "accel_receive", ships, timeout)
    if failed:
        _each(workers, "accel_abort", version, timeout)  # a dead worker has nothing to abort
        raise _w.WeightSyncError(
            f"version {version} did not land everywhere, so no rank switched: " + "; ".join(failed), version=version
        )
    landing = time.perf_counter() - t0
    t1 = time.perf_counter()
    holds, failed = _each(workers, "accel_commit", version, timeout)
    if failed:
        # A rank that could not switch (it broke after landing): the others switch back to the
        # version they served, still whole in their back buffers.
        _each(workers, "accel_rollback", version, timeout)
        raise _w.WeightSyncError(
            f"version {version} landed but not every rank could switch, so every rank switched back: " + "; ".join(failed),
            version=version,
        )
    done = time.perf_counter()
    return SyncReport(version, sum(x.nbytes for x in landed), done - t0, done - t1, max(holds, default=0.0), landing, landed)
