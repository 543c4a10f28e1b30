"""The transport inside a real local Ray 2.60 cluster (2 CPUs): actors returning accel
references, the ACCEL tensor transport (with a receiver that never set enable_tensor_transport),
tasks, restarted actors, /dev/shm after ray.shutdown, and loops of 200 steps of 256 MiB in every
documented lifetime pattern against a 1 GiB pool."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import accel.ray  # noqa: E402
from accel import transport as T  # noqa: E402

# The one call a user writes, before the actor classes are defined.
accel.ray.register_transport()
accel.ray.register_transport()  # idempotent


@ray.remote(max_restarts=1)
class Producer:
    def pid(self) -> int:
        return os.getpid()

    def make_ref(self, n: int, value: float):
        buf = T.empty((n,), np.float32)
        buf[:] = value
        return T.put(buf)  # the common pattern: the local Ref object dies right here

    @ray.method(tensor_transport="ACCEL")
    def make_rdt(self, n: int):
        return {"w": np.arange(n, dtype=np.float32), "b": np.ones(3, np.int64), "meta": "x"}

    def live_buffers(self) -> int:
        return T.stats()["pool"]["live_buffers"]


@ray.remote  # no enable_tensor_transport: register_transport() made it the default
class Consumer:
    def total(self, ref) -> float:
        return float(T.get(ref).sum())

    def path(self, ref) -> str:
        return ref.chosen_path

    def rdt(self, obj) -> tuple:
        return float(obj["w"].sum()), obj["w"].flags.writeable, obj["meta"], obj["b"].tolist()

    def pid(self) -> int:
        return os.getpid()


@ray.remote
def task_total(ref) -> float:
    return float(T.get(ref).sum())


def foreign_segments() -> list[str]:
    ns = os.readlink("/proc/self/ns/pid").split("[")[1].rstrip("]")
    mine = f"accel-{ns}-{os.getpid()}-"
    here = f"accel-{ns}-"  # owners of this pid namespace: the cluster's workers
    return [n for n in os.listdir(T.shm_dir()) if n.startswith(here) and not n.startswith(mine)]


@pytest.fixture(scope="module")
def cluster():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()
        # Workers are killed at shutdown; no segment of theirs survives them.
        assert foreign_segments() == []


def test_actor_returns_a_reference_that_outlives_its_local_copy(cluster):
    p, c = Producer.remote(), Consumer.remote()
    ref_obj = p.make_ref.remote(1 << 20, 2.0)
    assert ray.get(c.total.remote(ref_obj)) == float(2 << 20)  # as a task argument
    ref = ray.get(ref_obj)
    assert isinstance(ref, T.Ref) and ref.chosen_path == "shm"
    assert ray.get(c.path.remote(ref)) == "shm"
    assert float(T.get(ref).sum()) == float(2 << 20)  # in the driver
    assert ray.get(task_total.remote(ray.put(ref))) == float(2 << 20)  # via ray.put, in a task
    assert T.free(ref)
    with pytest.raises(T.BufferFreed):
        T.get(ref)
    ray.kill(p)
    ray.kill(c)


def test_accel_tensor_transport_for_numpy(cluster):
    p, c = Producer.remote(), Consumer.remote()
    total, writeable, meta, b = ray.get(c.rdt.remote(p.make_rdt.remote(1 << 20)))
    assert total == float(np.arange(1 << 20, dtype=np.float32).sum())
    assert (writeable, meta, b) == (False, "x", [1, 1, 1])
    got = ray.get(p.make_rdt.remote(10))  # the driver receives too
    np.testing.assert_array_equal(got["w"], np.arange(10, dtype=np.float32))
    del got
    # Once Ray's reference counting drops the objects, the source frees its buffers.
    deadline = time.monotonic() + 20
    while ray.get(p.live_buffers.remote()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ray.get(p.live_buffers.remote()) == 0
    ray.kill(p)
    ray.kill(c)


def test_a_failed_accel_transfer_is_aborted_without_killing_the_receiver(cluster, monkeypatch):
    # ACCEL can abort (can_abort_transport() is True): when a transfer outlives Ray's RDT
    # deadline, Ray asks the receiver to abort it instead of killing both actors, as it does for
    # transports that cannot abort. Here the source is frozen (SIGSTOP) after publishing, so the
    # receiver's stream stalls past a 2 s deadline.
    from ray._private import ray_constants

    monkeypatch.setattr(ray_constants, "RDT_FETCH_FAIL_TIMEOUT_SECONDS", 2.0)
    p = Producer.options(max_restarts=0).remote()
    c = Consumer.options(runtime_env={"env_vars": {"ACCEL_TRANSPORT_PATH": "tcp"}}).remote()
    before = ray.get(c.pid.remote(), timeout=60)
    obj = p.make_rdt.remote(1 << 16)
    ray.wait([obj], timeout=60)
    pid = ray.get(p.pid.remote(), timeout=60)
    os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(Exception):
            ray.get(c.rdt.remote(obj), timeout=120)
    finally:
        os.kill(pid, signal.SIGCONT)
    # The receiver lives on, in the same process: it was aborted, not killed (with
    # can_abort_transport() False, this call raises ActorDiedError).
    assert ray.get(c.pid.remote(), timeout=60) == before
    ray.kill(p)


def test_restarted_actor_gets_a_fresh_endpoint_and_stale_refs_fail_cleanly(cluster):
    p = Producer.remote()
    ref = ray.get(p.make_ref.remote(1000, 1.0))
    old_pid = ray.get(p.pid.remote())
    os.kill(old_pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:
        try:
            new_pid = ray.get(p.pid.remote(), timeout=30)
            break
        except ray.exceptions.RayActorError:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    assert new_pid != old_pid
    fresh = ray.get(p.make_ref.remote(1000, 3.0))
    assert fresh.owner != ref.owner and fresh.endpoint != ref.endpoint
    assert float(T.get(fresh).sum()) == 3000.0
    for path in ["shm", "tcp"]:
        start = time.monotonic()
        with pytest.raises(T.OwnerGone):
            T.get(ref, path=path)
        assert time.monotonic() - start < 2.0
    ray.kill(p)


STEP = 256 << 20
SMALL_POOL = {"env_vars": {"ACCEL_TRANSPORT_POOL_BYTES": "1G"}}  # room for 4 steps: frees must happen


@ray.remote(runtime_env=SMALL_POOL)
class Looper:
    """A producer whose pool holds four 256 MiB buffers, in each documented pattern."""

    def __init__(self) -> None:
        self.ch = None

    def put_plain(self, step: int):
        buf = T.empty((STEP,), np.uint8)
        buf[0] = buf[-1] = step % 251
        return T.put(buf)  # the consumer frees it

    def put_leased(self, step: int):
        buf = T.empty((STEP,), np.uint8)
        buf[0] = buf[-1] = step % 251
        return T.put(buf, readers=1)  # the consumer's get frees it

    @ray.method(tensor_transport="ACCEL")
    def put_rdt(self, step: int):
        buf = T.empty((STEP,), np.uint8)
        buf[0] = buf[-1] = step % 251
        return buf  # Ray's reference counting frees it

    def channel(self):
        self.ch = T.channel("loop")
        return self.ch

    def publish(self, step: int) -> int:
        buf = self.ch.empty((STEP,), np.uint8)
        buf[0] = buf[-1] = step % 251
        return self.ch.publish({"w": buf})  # the channel frees versions beyond the newest two

    def close(self) -> None:
        self.ch.close()

    def live_buffers(self) -> int:
        return T.stats()["pool"]["live_buffers"]

    def pool_limit(self) -> int:
        return T.stats()["pool"]["limit_bytes"]

    def segments_after_trim(self) -> list:
        T.trim()  # pooled (idle) buffers are this owner's cache, not a leak: drop them
        pid, start = T.info()["owner"].split("-")[:2]  # segment names carry the owner's pid and start time
        return [n for n in os.listdir(T.shm_dir()) if n.startswith("accel-") and f"-{pid}-{start}-" in n]


@ray.remote
class Reader:
    def plain(self, ref, step: int) -> bool:
        a = T.get(ref)
        ok = int(a[0]) == int(a[-1]) == step % 251
        del a
        T.free(ref)
        return ok

    def leased(self, ref, step: int) -> bool:
        a = T.get(ref)
        return int(a[0]) == int(a[-1]) == step % 251

    def rdt(self, arr, step: int) -> bool:
        return int(arr[0]) == int(arr[-1]) == step % 251

    def channel(self, ch, step: int) -> bool:
        with ch.read() as (version, t):
            return version == step + 1 and int(t["w"][0]) == int(t["w"][-1]) == step % 251


@pytest.mark.parametrize("pattern", ["plain", "leased", "rdt", "channel"])
def test_200_steps_of_256_mib_never_exhaust_the_pool_and_leave_no_segment(cluster, pattern):
    p, r = Looper.remote(), Reader.remote()
    assert ray.get(p.pool_limit.remote()) == 4 * STEP  # a fifth unfreed step would raise PoolExhausted
    ch = ray.get(p.channel.remote()) if pattern == "channel" else None
    for step in range(200):
        if pattern == "plain":
            ok = r.plain.remote(p.put_plain.remote(step), step)
        elif pattern == "leased":
            ok = r.leased.remote(p.put_leased.remote(step), step)
        elif pattern == "rdt":
            ok = r.rdt.remote(p.put_rdt.remote(step), step)
        else:
            ray.get(p.publish.remote(step))
            ok = r.channel.remote(ch, step)
        assert ray.get(ok), f"step {step}"
    if pattern == "channel":
        assert ray.get(p.live_buffers.remote()) == 2  # the two kept versions
        ray.get(p.close.remote())
    deadline = time.monotonic() + 20  # Ray frees tensor-transport objects asynchronously
    while ray.get(p.live_buffers.remote()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ray.get(p.live_buffers.remote()) == 0
    assert ray.get(p.segments_after_trim.remote()) == []
    ray.kill(p)
    ray.kill(r)
