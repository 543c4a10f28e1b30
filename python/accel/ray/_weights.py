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
from dataclasses import dataclass, field
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

    def update_weight_source(self, part: _w.SourcePlan) -> None:
        """A new part of the same plan (a destination rank joined or left): the versions already
        published stay; the next publish leases to the new readers."""
        if self._accel_sender is None:
            self._accel_sender = _w.Sender(part)
        else:
            self._accel_sender.plan = part


class WeightTarget:
    """Mixin for an inference rank's actor: serve from `weights()`; `sync_weights` calls the
    ``accel_*`` methods. An engine with its own parameters registers its ``load_weights`` hook
    (`set_weights_hook`): every version it switches to is handed to it."""

    _accel_receiver: _w.Receiver | None = None
    _accel_hook: tuple[Any, bool] | None = None
    _accel_targets: Any = None

    def accel_host(self) -> str:
        return _w.host()

    def set_weights_hook(self, load_weights: Any, *, whole: bool = False) -> None:
        """``load_weights(iterable of (name, tensor))`` is called with each version this rank
        switches to (`Receiver.hand_to`; ``whole`` as there)."""
        self._accel_hook = (load_weights, whole)

    def set_weight_targets(self, targets: Any) -> None:
        """The rank lands into these tensors (one or two sets; device tensors too, see
        `Receiver`) instead of arrays of its own; call before `plan_weight_sync`."""
        self._accel_targets = targets

    def setup_weight_target(self, part: _w.DestinationPlan, double_buffer: bool = True) -> int:
        """Allocates the rank's buffers (or adopts its targets); returns their bytes."""
        if self._accel_receiver is not None:
            self._accel_receiver.close()
        self._accel_receiver = _w.Receiver(part, double_buffer=double_buffer, targets=self._accel_targets)
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
        pause = self._receiver().commit(version)
        if self._accel_hook is not None:
            hook, whole = self._accel_hook
            self._receiver().hand_to(hook, whole=whole)
        return pause

    def accel_abort(self, version: int) -> None:
        self._receiver().abort(version)

    def accel_rollback(self, version: int) -> bool:
        return self._receiver().rollback(version)

    def accel_version(self) -> int | None:
        return self._receiver().version

    def accel_share(self) -> tuple[int | None, dict[str, Any]]:
        return self._receiver().share()

    def accel_catch_up(self, version: int, refs: dict[str, Any]) -> float:
        return self._receiver().catch_up(version, refs)

    def accel_check_lag(self, lag: tuple[int, int]) -> bool:
        """(the fleet's version, max_version_lag): False, and no more serving, if too far behind."""
        return self._receiver().check_lag(*lag)


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


@dataclass(frozen=True)
class Admission:
    """At most ``receivers`` destination ranks, and at most ``bytes`` bytes, in flight over
    each source host's link at once (None: no bound). A rank is admitted when every link it
    reads over has room; a rank that alone needs more than ``bytes`` goes when its links are
    idle. Relayed buffers count against the source for every reader (a bound, not a model)."""

    receivers: int | None = None
    bytes: int | None = None

    def fits(self, need: dict[str, int], load: dict[str, list[int]]) -> bool:
        for host, b in need.items():
            count, used = load.get(host, [0, 0])
            if self.receivers is not None and count >= self.receivers:
                return False
            if self.bytes is not None and used > 0 and used + b > self.bytes:
                return False
        return True


@dataclass
class SyncReport:
    """One step as the driver saw it: the version; ``nbytes``, the bytes landed in all (the
    sum of every rank's `Landed.nbytes`: equal to `Plan.bytes` when every rank lands); seconds
    from the first publish call to the last switch (``total``); the switch phase (``pause``:
    from asking the first rank to switch until the last has, Ray's calls included); the longest
    any one rank held its readers off while switching (``hold``); the slowest rank's landing;
    each rank's `Landed`; ``admission_wait``, how long each rank waited to be admitted;
    ``failed``, each rank that did not switch and why (only with a ``deadline``: without one,
    any failure raises); and ``stale``, the failed ranks told to stop serving because they
    are more than ``max_version_lag`` behind."""

    version: int
    nbytes: int
    total: float
    pause: float
    hold: float
    landing: float
    landed: list[_w.Landed]
    admission_wait: dict[int, float] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)
    stale: list[int] = field(default_factory=list)


def _cause(e: BaseException) -> str:
    """The error a remote call raised, in one line: the exception inside Ray's task error (its
    own text starts with the worker's banner), or Ray's own (an actor that died)."""
    cause = getattr(e, "cause", None)
    inner = cause if isinstance(cause, BaseException) else e
    lines = str(inner).strip().splitlines()
    return f"{type(inner).__name__}: {lines[0] if lines else ''}"


def _each(workers: Sequence[Any], ranks: Sequence[int], method: str, arg: Any, timeout: float) -> tuple[dict[int, Any], dict[int, str]]:
    """Calls ``method(arg)`` on the workers of ``ranks`` at once: the answers of those that
    answered, and why each other failed or died."""
    import ray

    calls = {d: getattr(workers[d], method).remote(arg) for d in ranks}
    answers: dict[int, Any] = {}
    failed: dict[int, str] = {}
    for d, call in calls.items():
        try:
            answers[d] = ray.get(call, timeout=timeout)
        except Exception as e:
            failed[d] = _cause(e)
    return answers, failed


def _lines(failed: dict[int, str]) -> str:
    return "; ".join(f"destination rank {d}: {why}" for d, why in sorted(failed.items()))


def _receive(
    plan: _w.Plan,
    ships: list[_w.Shipment],
    workers: Sequence[Any],
    ranks: list[int],
    admission: Admission | None,
    limit: float,
) -> tuple[dict[int, _w.Landed], dict[int, str], dict[int, float]]:
    """Every rank lands the version, admitted under ``admission``, within ``limit`` seconds."""
    import ray

    t0 = time.perf_counter()
    need = {d: plan.link_bytes(d) for d in ranks} if admission is not None else {}
    load: dict[str, list[int]] = {}
    pending = list(ranks)
    inflight: dict[Any, int] = {}
    landed: dict[int, _w.Landed] = {}
    failed: dict[int, str] = {}
    waits: dict[int, float] = {}
    while pending or inflight:
        for d in list(pending):
            if admission is not None and not admission.fits(need[d], load):
                continue
            pending.remove(d)
            waits[d] = time.perf_counter() - t0
            inflight[workers[d].accel_receive.remote(ships)] = d
            for host, b in need.get(d, {}).items():
                slot = load.setdefault(host, [0, 0])
                slot[0], slot[1] = slot[0] + 1, slot[1] + b
        left = limit - (time.perf_counter() - t0)
        if left <= 0 or not inflight:
            break
        done, _ = ray.wait(list(inflight), num_returns=1, timeout=left)
        for ref in done:
            d = inflight.pop(ref)
            for host, b in need.get(d, {}).items():
                load[host][0] -= 1
                load[host][1] -= b
            try:
                landed[d] = ray.get(ref)
            except Exception as e:
                failed[d] = _cause(e)
    for d in inflight.values():
        failed[d] = f"did not land within {limit:g} s"
    for d in pending:
        failed[d] = f"was not admitted within {limit:g} s"
    return landed, failed, waits


def sync_weights(
    plan: _w.Plan,
    shipments: Sequence[Any],
    workers: Sequence[Any],
    *,
    started: float | None = None,
    timeout: float = 600.0,
    deadline: float | None = None,
    max_version_lag: int | None = None,
    admission: Admission | None = None,
) -> SyncReport:
    """One step: ``shipments`` are the trainers' calls that return `publish_weights(...)` (Ray
    ObjectRefs, in trainer rank order), ``workers`` the inference ranks' actors (by rank;
    ranks that left the plan are skipped). Lands the version everywhere, then switches every
    rank. ``started`` (a ``time.perf_counter()``) is when the step began, for ``total``.

    Without a ``deadline``, all or nothing: on any failure no rank switches and
    WeightSyncError names each rank that failed. With one (seconds), a rank that fails, dies
    or has not landed by then is left on its old version and named in ``report.failed``, and
    the others switch; with ``max_version_lag`` too, each such rank that is more than that many
    versions behind is told to stop serving (``report.stale``; its next commit clears it).
    ``admission`` bounds the receivers and bytes in flight per source link
    (``report.admission_wait`` says how long each rank waited). A trainer that failed to
    publish always raises: nobody has anything to land."""
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
    ranks = [d for d in plan.members if d < len(workers)]
    limit = timeout if deadline is None else deadline
    landed, failed, waits = _receive(plan, ships, workers, ranks, admission, limit)
    if failed and (deadline is None or not landed):
        _each(workers, [d for d in ranks if d not in failed], "accel_abort", version, timeout)
        raise _w.WeightSyncError(f"version {version} did not land everywhere, so no rank switched: " + _lines(failed), version=version)
    landing = time.perf_counter() - t0
    t1 = time.perf_counter()
    holds, commit_failed = _each(workers, sorted(landed), "accel_commit", version, timeout)
    if commit_failed and deadline is None:
        # A rank that could not switch (it broke after landing): the others switch back to the
        # version they served, still whole in their back buffers.
        _each(workers, sorted(holds), "accel_rollback", version, timeout)
        raise _w.WeightSyncError(
            f"version {version} landed but not every rank could switch, so every rank switched back: " + _lines(commit_failed),
            version=version,
        )
    failed.update(commit_failed)
    done = time.perf_counter()
    stale: list[int] = []
    if failed and max_version_lag is not None:
        # Ask each rank left behind whether it may still serve; a dead one cannot answer.
        answers, _ = _each(workers, sorted(failed), "accel_check_lag", (version, max_version_lag), min(timeout, 5.0))
        stale = sorted(d for d, ok in answers.items() if not ok)
    ok = [landed[d] for d in sorted(landed) if d not in failed]
    return SyncReport(
        version,
        sum(x.nbytes for x in ok),
        done - t0,
        done - t1,
        max(holds.values(), default=0.0),
        landing,
        ok,
        admission_wait=waits,
        failed=failed,
        stale=stale,
    )


def join_weight_target(plan: _w.Plan, trainers: Sequence[Any], worker: Any, like: int, *, peers: Sequence[Any], timeout: float = 300.0) -> tuple[_w.Plan, int, float]:
    """Adds ``worker`` as a replica of destination rank ``like``: plans only its part (it reads
    what ``like`` reads), hands each trainer its refreshed part, and catches the joiner up to
    the version ``like``'s class serves from a replica peer (``peers[d]`` is rank d's actor;
    the first live member of the class that has a version), not from the trainers. Returns the
    new plan, the joiner's rank and the catch-up seconds (0 before the first version)."""
    import ray

    host = ray.get(worker.accel_host.remote(), timeout=timeout)
    new, rank = plan.with_replica(like, host)
    ray.get(
        [t.update_weight_source.remote(new.for_source(r)) for r, t in enumerate(trainers)]
        + [worker.setup_weight_target.remote(new.for_destination(rank))],
        timeout=timeout,
    )
    cls = next(c for c in new.classes if rank in c)
    for d in cls:
        if d == rank or d >= len(peers):
            continue
        try:
            version, refs = ray.get(peers[d].accel_share.remote(), timeout=timeout)
        except Exception:
            continue  # a dead or failing peer: try the next one
        if version is None:
            return new, rank, 0.0
        return new, rank, float(ray.get(worker.accel_catch_up.remote(version, refs), timeout=timeout))
    raise _w.WeightSyncError(f"no replica peer of destination rank {like} could share its version with the joiner")


def leave_weight_target(plan: _w.Plan, trainers: Sequence[Any], rank: int, *, timeout: float = 300.0) -> _w.Plan:
    """Takes destination rank ``rank`` out of the plan (it left or died): the trainers lease
    their buffers to one reader fewer from the next step; its replicas read on unchanged."""
    import ray

    new = plan.without_replica(rank)
    ray.get([t.update_weight_source.remote(new.for_source(r)) for r, t in enumerate(trainers)], timeout=timeout)
    return new
