"""Leases (`put(x, readers=N)`) and weight-sync channels (`transport.channel`), in this process
and with consumers in other processes (shm and TCP)."""

from __future__ import annotations

import base64
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from accel import transport as T

PEER = Path(__file__).with_name("transport_peer.py")


def live() -> int:
    return int(T.stats()["pool"]["live_buffers"])


def peer_get(ref: T.Ref, path: str) -> tuple:
    blob = base64.b64encode(pickle.dumps(ref)).decode()
    p = subprocess.run([sys.executable, str(PEER), "get", blob, path], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return pickle.loads(base64.b64decode(p.stdout.strip().splitlines()[-1]))


def test_a_lease_frees_the_buffer_after_its_readers_in_this_process():
    before = live()
    ref = T.put(np.arange(1000, dtype=np.int64), readers=2)
    assert ref.readers == 2 and live() == before + 1
    a = T.get(ref)  # read 1 (local path)
    b = T.get(ref, path="shm")  # read 2 frees the buffer...
    assert live() == before
    assert int(a.sum()) == int(b.sum()) == 999 * 1000 // 2  # ...but the views keep their bytes
    with pytest.raises(T.BufferFreed):
        T.get(ref)
    with pytest.raises(ValueError):
        T.put(np.ones(3), readers=-1)


@pytest.mark.parametrize("path", ["shm", "tcp"])
def test_a_lease_counts_reads_in_other_processes(path):
    before = live()
    buf = T.empty((1 << 20,), np.uint8)
    buf[:] = 3
    ref = T.put(buf, readers=2)
    del buf
    assert peer_get(ref, path) == ("ok", 3 << 20, (1 << 20,))
    assert live() == before + 1
    assert peer_get(ref, path) == ("ok", 3 << 20, (1 << 20,))
    assert live() == before  # the second reader freed it, from its own process
    assert peer_get(ref, path)[0] == "BufferFreed"


def test_a_loop_with_leases_never_exhausts_a_small_pool():
    # 200 steps of 1 MiB against a pool of 4 MiB: only the lease frees anything.
    env = {**os.environ, "ACCEL_TRANSPORT_POOL_BYTES": "4M"}
    code = """
import numpy as np
from accel import transport as T
for step in range(200):
    buf = T.empty((1 << 20,), np.uint8)
    buf[0] = step % 251
    ref = T.put(buf, readers=1)
    del buf
    assert int(T.get(ref, path="shm")[0]) == step % 251
assert T.stats()["pool"]["live_buffers"] == 0
print("ok")
"""
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr


def test_channel_versions_views_and_release():
    ch = T.channel("test-policy")
    with pytest.raises(LookupError):
        ch.latest()
    w = ch.empty((256, 256), np.float32)
    w[...] = 1.0
    v1 = ch.publish({"w": w, "b": np.arange(4, dtype=np.int64)})
    del w
    assert v1 == 1 and ch.version == 1
    version, t = ch.latest()
    assert version == 1 and sorted(t) == ["b", "w"]
    assert float(t["w"].sum()) == 256 * 256 and t["b"].tolist() == [0, 1, 2, 3]
    assert not t["w"].flags.writeable  # read-only views of the producer's memory
    held = t["w"]
    base = live()
    for i in range(2, 6):
        w = ch.empty((256, 256), np.float32)
        w[...] = float(i)
        assert ch.publish({"w": w, "b": np.full(4, i, np.int64)}) == i
        del w
        assert live() == base + 2  # keep=2: two versions of two arrays, older ones freed
    assert float(held.sum()) == 256 * 256  # a held view of version 1 never changes
    with ch.read() as (version, t):
        assert version == 5 and float(t["w"][0, 0]) == 5.0
    assert t == {}
    out = {"w": np.zeros((256, 256), np.float32), "b": np.zeros(4, np.int64)}
    version, t = ch.latest(out=out)
    assert t["w"] is out["w"] and float(out["w"][1, 1]) == 5.0
    with pytest.raises(TypeError):
        ch.publish({"x": np.zeros(2, dtype=[("a", "f4")])})
    ch.close()


def test_a_pickled_channel_reads_in_another_process_over_shm_and_tcp():
    ch = T.channel("test-remote")
    w = ch.empty((1 << 16,), np.float32)
    w[...] = 2.0
    ch.publish({"w": w})
    del w
    blob = base64.b64encode(pickle.dumps(ch)).decode()
    assert len(pickle.dumps(ch)) < 400
    code = f"""
import base64, pickle, sys
import numpy as np
from accel import transport as T
ch = pickle.loads(base64.b64decode("{blob}"))
v, t = ch.latest()
assert (v, float(t["w"].sum())) == (1, 2.0 * (1 << 16)), (v, t)
assert t["w"].flags.writeable == (sys.argv[1] == "tcp")  # shm: read-only views of the producer's memory
out = {{"w": np.zeros(1 << 16, np.float32)}}
v, t = ch.latest(out=out)
assert t["w"] is out["w"] and float(out["w"].sum()) == 2.0 * (1 << 16)
try:
    ch.publish({{"w": np.zeros(3)}})
except T.TransportError:
    print("ok")
"""
    for path in ["shm", "tcp"]:
        env = {**os.environ, "ACCEL_TRANSPORT_PATH": path}
        p = subprocess.run([sys.executable, "-c", code, path], env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr
    ch.close()


def test_a_version_of_hundreds_of_arrays_and_a_clear_error_past_the_manifest_limit():
    ch = T.channel("test-many")
    before = live()
    v = ch.publish({f"layer{i}.weight": np.full(4, i, np.float32) for i in range(500)})
    _, t = ch.latest()
    assert v == 1 and len(t) == 500 and float(t["layer499.weight"][0]) == 499.0
    with pytest.raises(ValueError, match="manifest"):
        ch.publish({f"layer{i}.weight": np.zeros(1, np.float32) for i in range(5000)})
    assert live() == before + 500  # the failed version freed what it had published
    assert ch.version == 1
    ch.close()
    assert live() == before


def test_readers_relay_a_leased_buffer_so_the_owner_sends_it_once():
    n, size = 3, 24 << 20  # six 4 MiB pieces: relays forward each as it lands
    held = live()
    x = T.empty((size,), np.uint8)
    x[:] = np.arange(size, dtype=np.int64) % 253
    expect = int(x.astype(np.int64).sum())
    served = lambda: int(T.stats()["served"]["tcp"]["bytes"])  # noqa: E731
    before = served()
    ref = T.put(x, readers=n)
    del x
    blob = base64.b64encode(pickle.dumps(ref)).decode()
    procs = [
        subprocess.Popen(
            [sys.executable, str(PEER), "relay-get", blob],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    try:
        got = [pickle.loads(base64.b64decode(p.stdout.readline())) for p in procs]
        # Every reader has every byte, in a read-only array (other readers stream from it).
        assert [g[:3] for g in got] == [("ok", expect, False)] * n, got
        for p in procs:
            p.stdin.write("done\n")
            p.stdin.flush()
        relayed = [pickle.loads(base64.b64decode(p.stdout.readline())) for p in procs]
    finally:
        for p in procs:
            p.stdin.close()
            p.wait(timeout=30)
    # The owner sent the buffer once; the readers sent it to each other the other n - 1 times.
    assert served() - before == size
    assert sorted(relayed) == [0] + [size] * (n - 1)
    # Its lease is spent: the owner's buffer is freed.
    assert live() == held
    with pytest.raises(T.BufferFreed):
        T.get(ref)


def test_relay_is_refused_with_out_and_ignored_without_a_lease():
    ref = T.put(np.ones(1000, np.uint8), readers=2)
    with pytest.raises(ValueError, match="relay"):
        T.get(ref, path="tcp", relay=True, out=np.empty(1000, np.uint8))
    plain = T.put(np.ones(1000, np.uint8))  # no lease: nobody to relay to, a plain fetch
    got = T.get(plain, path="tcp", relay=True)
    assert got.flags.writeable and int(got.sum()) == 1000
    T.free(ref)
    T.free(plain)
