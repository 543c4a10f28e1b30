"""Weight sync on a real multi-node Ray 2.60 cluster (`ray.cluster_utils.Cluster`): 4 trainer
ranks (2 data-parallel replicas of a 2-way row split) on one node feed 8 inference ranks (2
replicas of a 4-way column split, bf16 converted to fp16) on two others, every byte checked;
then a destination and a source die mid-sync and a rank breaks while the others switch, and
every rank keeps serving its old version. Elastic: three steps with a replica joining after the
first (caught up from a replica peer), a rank killed during the second and one stalled past the
deadline in the third, while every other rank lands each version; admission bounds the
receivers per source link."""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

import accel.ray  # noqa: E402
from accel import transport as T  # noqa: E402
from accel import weights as W  # noqa: E402

TENSORS = {"w1": ((512, 384), "bf16"), "w2": ((384, 512), "f32"), "emb": ((64, 8, 32), "f32")}
SRC = W.Layout.sharded(TENSORS, ranks=4, dim=0, replicas=2)
DST = W.Layout.sharded(TENSORS, ranks=8, dim={"w1": 1, "w2": 1, "emb": 2}, replicas=2).with_dtypes({"w1": "f16"})
# Inference ranks by node: each replica pair (d, d + 4) on one node, so the pairs on node c
# (forced onto TCP) read each buffer through the transport's relay.
WORKER_NODE = ["b", "b", "c", "c", "b", "b", "c", "c"]
# The actors subclass accel's mixins and use this module's helpers: ship them by value, since
# the workers cannot import a test module.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def state(version: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(version)
    w1 = (rng.standard_normal((512, 384)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return {"w1": w1, "w2": rng.standard_normal((384, 512)).astype(np.float32), "emb": rng.standard_normal((64, 8, 32)).astype(np.float32)}


def boxed(layout: W.Layout, rank: int, g: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {n: g[n][tuple(slice(lo, hi) for lo, hi in b)] for n, b in layout.ranks[rank].items()}


def expected(d: int, version: int) -> dict[str, np.ndarray]:
    g = state(version)
    g["w1"] = (g["w1"].astype(np.uint32) << 16).view(np.float32).astype(np.float16)
    return boxed(DST, d, g)


@ray.remote(num_cpus=0)
class Trainer(accel.ray.WeightSource):
    def __init__(self, rank: int) -> None:
        self.rank = rank

    def pid(self) -> int:
        return os.getpid()

    def step(self, version: int):
        # Fresh weights each step: this rank's rows of the version's full state.
        return self.publish_weights(version, boxed(SRC, self.rank, state(version)))


@ray.remote(num_cpus=0, max_concurrency=4)
class Worker(accel.ray.WeightTarget):
    fail_commit = False
    stall = 0.0

    def pid(self) -> int:
        return os.getpid()

    def stall_next_receive(self, seconds: float) -> None:
        self.stall = seconds

    def accel_receive(self, shipments):
        if self.stall:  # a rank that hangs before landing (a slow link, a stuck engine)
            seconds, self.stall = self.stall, 0.0
            time.sleep(seconds)
        return super().accel_receive(shipments)

    def accel_commit(self, version: int) -> float:
        if self.fail_commit:  # a rank that breaks after landing, while the others switch
            self.fail_commit = False
            raise RuntimeError(f"this rank broke before switching to version {version}")
        return super().accel_commit(version)

    def break_next_commit(self) -> None:
        self.fail_commit = True

    def serve(self):
        with self.weights() as (version, tensors):
            return version, {n: a.copy() for n, a in tensors.items()}

    def paths(self):
        return {p: int(v["transfers"]) for p, v in T.stats()["paths"].items() if v["transfers"]}


@pytest.fixture(scope="module")
def cluster():
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        ids = {}
        for name in ("a", "b", "c"):
            ids[name] = c.add_node(num_cpus=1, resources={f"node_{name}": 100}).node_id
        c.wait_for_nodes()
        ray.init(address=c.address, log_to_driver=False)
        accel.ray.register_transport()
        yield ids
    finally:
        ray.shutdown()
        c.shutdown()
        T.sweep()


def start(ids, workers=range(8)):
    trainers = [Trainer.options(resources={"node_a": 1}).remote(r) for r in range(4)]
    tcp = {"env_vars": {"ACCEL_TRANSPORT_PATH": "tcp"}}
    ws = [
        Worker.options(resources={f"node_{WORKER_NODE[d]}": 1}, **({"runtime_env": tcp} if WORKER_NODE[d] == "c" else {})).remote()
        for d in workers
    ]
    return trainers, ws


def published(trainers, version: int) -> list:
    """Every trainer's publish of `version`, done: the calls, for sync_weights."""
    shipments = [t.step.remote(version) for t in trainers]
    ray.get(shipments, timeout=120)
    return shipments


def kill(actor) -> None:
    """Kills `actor` and waits until its process is gone (ray.kill returns at once, and Ray may
    call the actor dead while its process still serves its buffers for a moment). The test
    cluster's nodes share this machine, so the pid is checked here."""
    pid = ray.get(actor.pid.remote(), timeout=60) if hasattr(actor, "pid") else None
    ray.kill(actor)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            ray.get(actor.accel_host.remote(), timeout=60)  # may still run before the kill lands
        except ray.exceptions.ActorDiedError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the actor outlived ray.kill by 60 s")
    while pid is not None and time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    if pid is not None:
        raise AssertionError(f"the actor's process {pid} outlived ray.kill by 60 s")


def check_serving(workers, version):
    for d, (seen, tensors) in enumerate(ray.get([w.serve.remote() for w in workers], timeout=120)):
        assert seen == version, (d, seen)
        want = expected(d, version)
        assert set(tensors) == set(want)
        for n in want:
            assert tensors[n].dtype == want[n].dtype, (d, n)
            np.testing.assert_array_equal(tensors[n], want[n], err_msg=f"rank {d}, {n}")


def test_a_sharded_state_lands_resharded_on_every_rank(cluster):
    trainers, workers = start(cluster)
    # Each rank's host is its Ray node (one machine here, so the transport's own host ids are
    # all equal): the plan sees three hosts and relays the pairs on node c.
    hosts_src = ["a"] * 4
    p = W.plan(SRC.on(hosts_src), DST.on(WORKER_NODE))
    ray.get([t.setup_weight_source.remote(p.for_source(r)) for r, t in enumerate(trainers)], timeout=120)
    ray.get([w.setup_weight_target.remote(p.for_destination(d)) for d, w in enumerate(workers)], timeout=120)
    # Every replica pair is two readers away from the trainers' node: each pair's buffer crosses
    # the trainers' link once and is relayed. (On this one machine node b's pair reads shared
    # memory, the path the transport takes between processes of one host; node c's pair is
    # forced onto TCP and relays.)
    relayed = {tuple(b.readers) for s in range(4) for b in p.for_source(s).buffers if b.relay}
    assert relayed == {(0, 4), (1, 5), (2, 6), (3, 7)}, relayed
    assert p.links["in"] == {"b": p.bytes // 4, "c": p.bytes // 4}  # each pair's bytes enter once
    for version in (1, 2):
        report = accel.ray.sync_weights(p, [t.step.remote(version) for t in trainers], workers)
        assert report.version == version and report.nbytes == p.bytes
        assert 0 <= report.pause <= report.total
        check_serving(workers, version)
    paths = ray.get([w.paths.remote() for w in workers], timeout=60)
    assert all(set(paths[d]) == {"tcp"} for d in (2, 3, 6, 7)), paths
    assert all(set(paths[d]) == {"shm"} for d in (0, 1, 4, 5)), paths
    for a in trainers + workers:
        ray.kill(a)


def test_ranks_that_die_mid_sync_leave_the_old_version_serving(cluster):
    trainers, workers = start(cluster)
    p = accel.ray.plan_weight_sync(SRC, trainers, DST, workers)
    accel.ray.sync_weights(p, [t.step.remote(1) for t in trainers], workers)
    check_serving(workers, 1)

    # A destination dies after the trainers published version 2: no rank switches.
    shipments = published(trainers, 2)
    kill(workers[5])
    with pytest.raises(W.WeightSyncError, match=r"version 2 did not land everywhere, so no rank switched: destination rank 5"):
        accel.ray.sync_weights(p, shipments, workers)
    alive = workers[:5] + workers[6:]
    assert ray.get([w.accel_version.remote() for w in alive], timeout=60) == [1] * 7

    # A replacement joins, the sync is planned again, and version 3 lands everywhere.
    workers[5] = start(cluster, workers=[5])[1][0]
    p = accel.ray.plan_weight_sync(SRC, trainers, DST, workers)
    accel.ray.sync_weights(p, [t.step.remote(3) for t in trainers], workers)
    check_serving(workers, 3)

    # Version 4 lands everywhere, but rank 6 breaks before switching: the others switch back.
    ray.get(workers[6].break_next_commit.remote(), timeout=60)
    with pytest.raises(W.WeightSyncError, match=r"every rank switched back: destination rank 6: RuntimeError: this rank broke"):
        accel.ray.sync_weights(p, [t.step.remote(4) for t in trainers], workers)
    check_serving(workers, 3)

    # A source dies after publishing version 5, before its readers have its bytes.
    shipments = published(trainers, 5)
    kill(trainers[1])
    with pytest.raises(W.WeightSyncError) as err:
        accel.ray.sync_weights(p, shipments, workers)
    text = str(err.value)
    assert "version 5 did not land everywhere, so no rank switched" in text
    assert "source rank 1 failed mid-sync (OwnerGone" in text and "keeps serving version 3" in text
    check_serving(workers, 3)
    # The surviving trainers publish on; a dead trainer is a failed publish, never a hang.
    assert ray.get(trainers[0].step.remote(6), timeout=120).version == 6
    with pytest.raises(W.WeightSyncError, match="a trainer rank failed to publish"):
        accel.ray.sync_weights(p, [t.step.remote(6) for t in trainers], workers)
    check_serving(workers, 3)
    for a in trainers + workers:
        ray.kill(a)


def test_an_elastic_fleet_joins_loses_ranks_and_keeps_serving(cluster):
    import threading

    trainers, workers = start(cluster)
    p = accel.ray.plan_weight_sync(SRC, trainers, DST, workers)
    # Step 1, admitted one receiver at a time per source link: every rank lands, one after another.
    report = accel.ray.sync_weights(p, [t.step.remote(1) for t in trainers], workers, admission=accel.ray.Admission(receivers=1))
    assert sorted(report.admission_wait) == list(range(8)) and not report.failed
    waits = sorted(report.admission_wait.values())
    assert waits[1] > waits[0] and sum(w < waits[1] for w in waits) == 1, waits  # the others waited
    check_serving(workers, 1)

    # A replica of rank 2 joins between steps: only its part is planned, and it catches up to
    # version 1 from a replica peer (rank 2 or 6), not from the trainers.
    joiner = start(cluster, workers=[2])[1][0]
    p2, rank, seconds = accel.ray.join_weight_target(p, trainers, joiner, like=2, peers=workers)
    assert rank == 8 and p2.id == p.id and seconds > 0
    assert p2.for_destination(0) == p.for_destination(0)  # the others' parts did not change
    workers.append(joiner)
    seen, tensors = ray.get(joiner.serve.remote(), timeout=60)
    assert seen == 1 and all(np.array_equal(tensors[n], a) for n, a in expected(2, 1).items())

    # Step 2: rank 5 hangs in its receive and is killed meanwhile; its peers (rank 1 among them,
    # its replica) land and switch without waiting for the deadline, and rank 5 is named.
    ray.get(workers[5].stall_next_receive.remote(60), timeout=60)
    killer = threading.Timer(2.0, kill, args=(workers[5],))
    killer.start()
    report = accel.ray.sync_weights(p2, [t.step.remote(2) for t in trainers], workers, deadline=45)
    killer.join()
    assert set(report.failed) == {5} and "ActorDiedError" in report.failed[5], report.failed
    assert report.total < 45
    alive = [w for d, w in enumerate(workers) if d != 5]
    for d, (v, tensors) in zip([d for d in range(9) if d != 5], ray.get([w.serve.remote() for w in alive], timeout=120)):
        assert v == 2, (d, v)
        for n, a in expected(2 if d == 8 else d, 2).items():
            np.testing.assert_array_equal(tensors[n], a, err_msg=f"rank {d}, {n}")
    p3 = accel.ray.leave_weight_target(p2, trainers, 5)
    assert 5 not in p3.members and p3.bytes == p2.bytes - p2.bytes // 9

    # Step 3: rank 0 stalls past the deadline; the others switch to version 3, and rank 0, left
    # one version behind with max_version_lag=0, is told to stop serving.
    ray.get(workers[0].stall_next_receive.remote(12), timeout=60)
    report = accel.ray.sync_weights(p3, [t.step.remote(3) for t in trainers], workers, deadline=5, max_version_lag=0)
    assert set(report.failed) == {0} and "did not land within 5 s" in report.failed[0]
    assert report.stale == [0]
    assert report.nbytes == p3.bytes - p3.bytes // 8
    with pytest.raises(Exception, match="not serving until it catches up"):
        ray.get(workers[0].serve.remote(), timeout=60)
    for d in (1, 2, 3, 4, 6, 7, 8):
        v, tensors = ray.get(workers[d].serve.remote(), timeout=60)
        assert v == 3
        for n, a in expected(2 if d == 8 else d, 3).items():
            np.testing.assert_array_equal(tensors[n], a, err_msg=f"rank {d}, {n}")
    for a in trainers + [w for d, w in enumerate(workers) if d != 5]:
        ray.kill(a)
