"""The tensor transport without Ray: every path, other processes, /dev/shm lifecycle
(including SIGKILL of the owner), owner death, the cluster secret and the pool bound."""

from __future__ import annotations

import base64
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from accel import transport as T

PEER = Path(__file__).with_name("transport_peer.py")
SHM = Path(T.shm_dir())


PIDNS = os.readlink("/proc/self/ns/pid").split("[")[1].rstrip("]")


def segments(pid: int | None = None) -> list[str]:
    """Segments of this pid namespace (of one owner pid): `accel-<pid ns>-<pid>-<start>-<id>`."""
    prefix = f"accel-{PIDNS}-" if pid is None else f"accel-{PIDNS}-{pid}-"
    return sorted(n for n in os.listdir(SHM) if n.startswith(prefix))


def read(proc: subprocess.Popen):
    line = proc.stdout.readline()
    assert line, f"peer exited: {proc.stderr.read() if proc.stderr else ''}"
    return pickle.loads(base64.b64decode(line))


class Owner:
    """An owner process publishing `count` buffers of `size` bytes (buffer i filled with i)."""

    def __init__(self, count: int = 2, size: int = 1 << 20, env: dict | None = None):
        self.proc = subprocess.Popen(
            [sys.executable, str(PEER), "owner", str(count), str(size)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.refs = read(self.proc)
        self.pid = self.proc.pid

    def send(self, cmd: str):
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return read(self.proc)

    def exit(self) -> None:
        self.proc.stdin.write("exit\n")
        self.proc.stdin.flush()
        assert self.proc.wait(10) == 0

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        self.proc.wait(10)


def get_in_peer(ref: T.Ref, path: str, env: dict | None = None):
    arg = base64.b64encode(pickle.dumps(ref)).decode()
    res = subprocess.run(
        [sys.executable, str(PEER), "get", arg, path],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    return pickle.loads(base64.b64decode(res.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "value",
    [
        np.arange(1000, dtype=np.float32).reshape(10, 100),
        np.arange(24, dtype=np.int16).reshape(2, 3, 4)[:, ::2, 1:],  # not contiguous
        np.array(3.5),
        np.zeros((0, 7), dtype=np.complex128),
        np.array([True, False, True]),
        np.array([(1, (2.0, 3.0)), (4, (5.0, 6.0))], dtype=[("a", "<i4"), ("b", "<f8", (2,))]),  # structured
        np.ones(1 << 20, dtype=np.uint8),
    ],
)
@pytest.mark.parametrize("path", ["local", "shm", "tcp"])
def test_round_trip_in_process_on_every_path(value, path):
    ref = T.put(value)
    got = T.get(ref, path=path)
    assert got.shape == value.shape and got.dtype == value.dtype
    np.testing.assert_array_equal(got, value)
    if path != "tcp":
        assert not got.flags.writeable, "views are read-only by default"
    assert T.free(ref)
    assert not T.free(ref), "a second free reports the buffer already gone"
    with pytest.raises(T.BufferFreed):
        T.get(ref, path=path)


def test_automatic_path_and_small_picklable_reference():
    big = T.empty((16 << 20,), np.uint8)
    ref = T.put(big)
    assert ref.chosen_path == "local" and ref.path == "auto"
    assert len(pickle.dumps(ref)) < 512, "a reference costs bytes, not the data"
    forced = T.put(np.ones(3), path="tcp")
    assert forced.chosen_path == "tcp"
    np.testing.assert_array_equal(T.get(forced), np.ones(3))
    T.free(ref)
    T.free(forced)


def test_buffer_protocol_objects():
    for obj in [b"hello", bytearray(b"\x00\x01\x02"), memoryview(b"abcdef")[1:4]]:
        ref = T.put(obj)
        assert ref.kind == "bytes"
        assert bytes(T.get(ref, path="shm")) == bytes(obj)
        T.free(ref)


def test_empty_is_published_in_place_and_writable_get_is_private():
    buf = T.empty((4, 1024), np.float64)
    buf[:] = 2.0
    ref = T.put(buf)
    assert T.get(ref, path="local").__array_interface__["data"][0] == buf.__array_interface__["data"][0]
    view = T.get(ref, path="shm")
    with pytest.raises(ValueError):
        view[0, 0] = 1
    mine = T.get(ref, path="shm", writable=True)
    mine[0, 0] = -1
    assert T.get(ref, path="shm")[0, 0] == 2.0, "a writable get never writes into the owner's buffer"
    copy = T.get(ref, copy=True)
    assert copy.flags.writeable and copy.base is None
    T.free(ref)
    # The views taken before free stay readable: the segment is unlinked, never recycled under them.
    assert view[3, 1023] == 2.0


def test_other_process_owner_shm_and_tcp():
    owner = Owner(count=2, size=1 << 20)
    try:
        for i, ref in enumerate(owner.refs):
            for path in ["shm", "tcp"]:
                got = T.get(ref, path=path)
                assert got.shape == (1 << 20,) and int(got[0]) == i and int(got[-1]) == i
        assert owner.refs[0].chosen_path == "shm"
        # Another process frees it through the owner.
        assert T.free(owner.refs[0])
        with pytest.raises(T.BufferFreed):
            T.get(owner.refs[0], path="tcp")
        stats = owner.send("stats")
        assert stats["pool"]["live_buffers"] == 1
    finally:
        owner.exit()


def test_this_process_owner_other_process_consumer():
    ref = T.put(np.full(1000, 7, np.int32))
    assert get_in_peer(ref, "shm") == ("ok", 7000, (1000,))
    assert get_in_peer(ref, "tcp") == ("ok", 7000, (1000,))
    T.free(ref)
    assert get_in_peer(ref, "shm")[0] == "BufferFreed"


def test_segments_go_away_when_the_owner_exits():
    owner = Owner(count=3, size=100_000)
    assert len(segments(owner.pid)) == 3
    owner.exit()
    assert segments(owner.pid) == []


def test_sigkill_owner_get_fails_fast_and_a_restart_sweeps_the_orphans():
    owner = Owner(count=2, size=1 << 20)
    ref = owner.refs[0]
    published = [n for n in segments(owner.pid) if "-idle" not in n]
    assert len(published) == 2
    owner.kill()
    for path in ["shm", "tcp"]:
        start = time.monotonic()
        with pytest.raises(T.OwnerGone):
            T.get(ref, path=path)
        assert time.monotonic() - start < 2.0
    assert set(published) <= set(segments(owner.pid)), "SIGKILL leaves the segments behind..."
    Owner(count=0, size=0).exit()  # ...until the next transport start sweeps them
    assert segments(owner.pid) == []


def test_sweep_removes_orphans():
    owner = Owner(count=1, size=4096)
    owner.kill()
    assert segments(owner.pid)
    assert T.sweep() >= 1
    assert segments(owner.pid) == []


def test_a_client_without_the_secret_reads_nothing():
    ref = T.put(np.arange(100))
    res = get_in_peer(ref, "tcp", env={"ACCEL_TRANSPORT_SECRET": "someone-else-entirely-0000"})
    assert res[0] == "AuthError", res
    T.free(ref)


def test_pool_bound_raises_instead_of_exhausting_memory():
    owner = Owner(count=1, size=700_000, env={"ACCEL_TRANSPORT_POOL_BYTES": "1M"})
    try:
        res = owner.send("put")
        assert res[0] == "PoolExhausted" and "ACCEL_TRANSPORT_POOL_BYTES" in res[1]
        T.free(owner.refs[0])
        assert isinstance(owner.send("put"), T.Ref)
    finally:
        owner.exit()


def test_stats_and_prometheus():
    ref = T.put(np.ones(4096, np.uint8))
    before = T.stats()["paths"]["shm"]["transfers"]
    T.get(ref, path="shm")
    s = T.stats()
    assert s["paths"]["shm"]["transfers"] == before + 1
    assert s["paths"]["shm"]["latency_buckets"][-1][1] == before + 1
    assert s["pool"]["live_buffers"] >= 1
    text = T.prometheus()
    assert 'accel_transport_transfers_total{path="shm",role="fetch"}' in text
    assert 'accel_transport_latency_seconds_bucket{path="tcp",role="serve",le="+Inf"}' in text
    families = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
    assert len(families) == len(set(families)) == text.count("# HELP "), "one HELP/TYPE per family"
    assert "accel_transport_pool_limit_bytes" in text
    T.free(ref)


def test_the_owner_counts_what_it_serves_over_tcp():
    owner = Owner(count=2, size=1 << 20)

    def served(done):
        deadline = time.monotonic() + 10
        while True:  # the owner records after its last write, maybe after the consumer returned
            s = owner.send("stats")["served"]["tcp"]
            if done(s) or time.monotonic() > deadline:
                return s
            time.sleep(0.02)

    try:
        assert get_in_peer(owner.refs[1], "tcp") == ("ok", 1 << 20, (1 << 20,))  # another process fetched
        s = served(lambda s: s["transfers"] == 1)
        assert (s["transfers"], s["bytes"]) == (1, 1 << 20), s
        assert s["latency_buckets"][-1] == (float("inf"), 1) and s["latency_sum_s"] > 0
        time.sleep(0.2)
        assert served(lambda s: True)["errors"] == 0, "a consumer that exits between requests is no error"
        stats = owner.send("stats")
        assert stats["paths"]["tcp"]["transfers"] == 0, "the owner fetched nothing itself"
        assert stats["served"]["shm"]["transfers"] == 0, "shm reads never reach the owner"
        # Failures: an unknown buffer, and a client without the secret (a failed handshake).
        T.free(owner.refs[0])
        assert get_in_peer(owner.refs[0], "tcp")[0] == "BufferFreed"
        assert served(lambda s: s["errors"] == 1)["errors"] == 1
        res = get_in_peer(owner.refs[1], "tcp", env={"ACCEL_TRANSPORT_SECRET": "someone-else-entirely-0000"})
        assert res[0] == "AuthError", res
        s = served(lambda s: s["errors"] == 2)
        assert (s["transfers"], s["bytes"], s["errors"]) == (1, 1 << 20, 2), s
        text = owner.send("prometheus")
        assert f'accel_transport_bytes_total{{path="tcp",role="serve"}} {1 << 20}' in text
        assert 'accel_transport_errors_total{path="tcp",role="serve"} 2' in text
        assert 'accel_transport_latency_seconds_count{path="tcp",role="serve"} 1' in text
    finally:
        owner.exit()


@pytest.mark.parametrize("path", ["local", "shm", "tcp"])
def test_get_into_a_callers_buffer(path):
    value = np.arange(50_000, dtype=np.float64).reshape(100, 500)
    ref = T.put(value)
    out = np.zeros_like(value)
    assert T.get(ref, path=path, out=out) is out
    np.testing.assert_array_equal(out, value)
    with pytest.raises(ValueError):
        T.get(ref, path=path, out=np.zeros(3))
    T.free(ref)


def test_reserve_makes_the_first_buffer_of_a_size_warm():
    T.trim()  # start from an empty pool: no idle buffers, none held by views
    T.reserve(3 << 20, count=2)
    # Both, and the spare that the pool grew ahead of demand when two were live at once
    # (ACCEL_TRANSPORT_SPARES=1).
    assert T.stats()["pool"]["idle_bytes"] == 3 * (3 << 20)
    ref = T.put(np.ones(3 << 20, np.uint8))
    assert T.stats()["pool"]["idle_bytes"] == 2 * (3 << 20), "put took a pooled buffer"
    T.free(ref)
    T.trim()
    assert T.stats()["pool"]["idle_bytes"] == 0


def test_top_level_names():
    import accel

    assert accel.transport is T
    assert issubclass(accel.PoolExhausted, accel.TransportError)
    assert issubclass(accel.StaleReference, accel.OwnerGone)
    assert issubclass(accel.TransportError, accel.AccelError)
