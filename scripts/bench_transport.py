#!/usr/bin/env python3
"""Benchmark of the accel tensor transport; writes its section of docs/BENCHMARKS.md.

    sudo .venv/bin/python scripts/bench_transport.py            # the whole run (~15-25 min)
    .venv/bin/python scripts/bench_transport.py --no-netns      # no root needed
    .venv/bin/python scripts/bench_transport.py --quick         # a smoke run of every part

Equal work on both sides: every round the producer writes every byte of a fresh array and the
consumer reads every byte of what it receives. Parts, each against a baseline in the same run:

- same host, two Ray actors: accel `put`/`get` and Ray's tensor-transport hook against Ray's
  object store, cold and warm, "delivered", "delivered and read" and end to end;
- the weight-sync channel: 100 publish-and-read rounds of 1 GiB against the best Ray pattern;
- cross node on a `ray.cluster_utils.Cluster` (separate object stores): one to one, broadcast
  to 4 nodes and channel rounds, against Ray's object manager and raw TCP on the same link;
- cross host: two network namespaces joined by a veth pair (created and removed here; needs
  root and iproute2), against a raw TCP stream on the same link.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import os
import pickle
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "BENCHMARKS.md"
BEGIN, END = "<!-- bench:transport:begin -->", "<!-- bench:transport:end -->"
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
SIZES = [4 * KiB, 1 * MiB, 64 * MiB, 256 * MiB, 1 * GiB]
ITERS = {4 * KiB: 200, 1 * MiB: 100, 64 * MiB: 20, 256 * MiB: 12, 1 * GiB: 8}
NETNS_SIZES = [64 * MiB, 256 * MiB, 1 * GiB]
NETNS_ITERS = {64 * MiB: 12, 256 * MiB: 8, 1 * GiB: 6}


def human(n: int) -> str:
    return f"{n // GiB} GiB" if n >= GiB else f"{n // MiB} MiB" if n >= MiB else f"{n // KiB} KiB"


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def checksum(a: np.ndarray) -> int:
    flat = a.reshape(-1)
    n8 = flat.nbytes // 8 * 8
    return int(flat.view(np.uint8)[:n8].view(np.uint64).sum()) + int(flat.view(np.uint8)[n8:].sum())


# ---------------------------------------------------------------- raw ceilings


def bench_memcpy(size: int, iters: int) -> float:
    src = np.ones(size, np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    times = []
    for _ in range(max(3, iters)):
        t = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - t)
    return size / statistics.median(times) / 1e9


def raw_server(host: str, max_size: int, ready) -> None:
    """A plain TCP server: for each 8-byte size a client sends, it sends that many bytes."""
    data = np.ones(max_size, np.uint8)
    lst = socket.socket()
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind((host, 0))
    lst.listen(4)
    ready(lst.getsockname()[1])
    while True:
        conn, _ = lst.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            req = conn.recv(8)
            if len(req) < 8:
                break
            conn.sendall(memoryview(data)[: int.from_bytes(req, "little")])
        conn.close()


def raw_fetch(s: socket.socket, size: int, buf: np.ndarray) -> None:
    """Receives `size` bytes into `buf` the plain way (recv_into, 4 MiB at a time)."""
    mv = memoryview(buf)
    s.sendall(size.to_bytes(8, "little"))
    got = 0
    while got < size:
        n = s.recv_into(mv[got:], min(size - got, 4 * MiB))
        if not n:
            raise RuntimeError("raw TCP peer closed")
        got += n


def bench_loopback_tcp(sizes: list[int], iters: dict[int, int]) -> dict[int, float]:
    srv = subprocess.Popen(
        [sys.executable, __file__, "--role", "raw-server", "--host", "127.0.0.1", "--size", str(max(sizes))],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        port = int(srv.stdout.readline())
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        out = {}
        for size in sizes:
            buf = np.zeros(size, np.uint8)
            times = []
            for _ in range(min(iters[size], 5) + 1):
                t = time.perf_counter()
                raw_fetch(s, size, buf)
                times.append(time.perf_counter() - t)
            out[size] = size / statistics.median(times[1:]) / 1e9
        s.close()
        return out
    finally:
        srv.kill()
        srv.wait()


# ---------------------------------------------------------------- Ray actors (shared by the sections)


def stamp_fill(a: np.ndarray, i: int) -> None:
    """Fresh data every round: the producer writes every byte (both systems, same work)."""
    a.fill(i % 251)


def define_actors():
    """Actor classes for every section; defined after register_transport(), as users must."""
    import ray

    import accel.ray
    from accel import transport as T

    accel.ray.register_transport()

    @ray.remote(num_cpus=0)
    class Producer:
        def __init__(self):
            self.arr = None
            self.ch = None
            self.t = (0.0, 0.0)

        def ready(self):
            return True

        def ray_make(self, size: int, i: int):
            ts = time.perf_counter()
            if self.arr is None or self.arr.nbytes != size:
                self.arr = np.empty(size, np.uint8)
            stamp_fill(self.arr, i)
            return self.arr, ts, time.perf_counter()  # Ray copies it into the object store

        def ray_put(self, size: int, i: int):
            ts = time.perf_counter()
            if self.arr is None or self.arr.nbytes != size:
                self.arr = np.empty(size, np.uint8)
            stamp_fill(self.arr, i)
            return [ray.put(self.arr)], ts, time.perf_counter()

        def accel_make(self, size: int, i: int, readers: int = 1):
            ts = time.perf_counter()
            buf = T.empty((size,), np.uint8)
            stamp_fill(buf, i)
            return T.put(buf, readers=readers), ts, time.perf_counter()

        @ray.method(tensor_transport="ACCEL")
        def rdt_make(self, size: int, i: int):
            ts = time.perf_counter()
            buf = T.empty((size,), np.uint8)
            stamp_fill(buf, i)
            self.t = (ts, time.perf_counter())
            return buf

        def last_t(self):
            return self.t

        def channel(self, name: str):
            self.ch = T.channel(name)
            return self.ch

        def publish(self, size: int, i: int):
            ts = time.perf_counter()
            w = self.ch.empty((size,), np.uint8)
            stamp_fill(w, i)
            v = self.ch.publish({"w": w})
            return v, ts, time.perf_counter()

        def small_ref(self):
            buf = T.empty((4 * KiB,), np.uint8)
            buf[:] = 1
            return T.put(buf)

    @ray.remote(num_cpus=0)
    class Consumer:
        def __init__(self):
            self.out = self.chout = None

        def ready(self):
            return True

        def ray_take(self, payload, i: int):
            arr, ts, t0 = payload
            t1 = time.perf_counter()
            assert int(arr[-1]) == i % 251
            checksum(arr)
            return ts, t0, t1, time.perf_counter()

        def ray_get(self, payload, i: int):
            (ref,), ts, t0 = payload
            arr = ray.get(ref)
            t1 = time.perf_counter()
            assert int(arr[-1]) == i % 251
            checksum(arr)
            return ts, t0, t1, time.perf_counter()

        def accel_take(self, payload, i: int, into: bool = False, relay: bool = False):
            ref, ts, t0 = payload
            if relay:  # readers pass the buffer on to each other (the array is this reader's copy)
                self.out = None  # not used by this system: its memory goes back
                arr = T.get(ref, relay=True)
            elif into:
                if self.out is None or self.out.nbytes != ref.nbytes:
                    self.out = np.empty(ref.nbytes, np.uint8)
                arr = T.get(ref, out=self.out)
            else:
                arr = T.get(ref)
            t1 = time.perf_counter()
            assert int(arr[-1]) == i % 251
            checksum(arr)
            return ts, t0, t1, time.perf_counter()

        def rdt_take(self, arr, i: int):
            t1 = time.perf_counter()
            assert int(arr[-1]) == i % 251
            checksum(arr)
            return t1, time.perf_counter()

        def channel_take(self, ch, stamp, i: int, into: bool = False):
            _, ts, t0 = stamp
            if into and self.chout is None:
                self.chout = {"w": np.empty(ch_size(ch), np.uint8)}
            with ch.read(out=self.chout if into else None) as (version, t):
                t1 = time.perf_counter()
                assert int(t["w"][-1]) == i % 251
                checksum(t["w"])
            return ts, t0, t1, time.perf_counter()

        def trim(self):
            """Between systems: this reader's pooled copies go back to the system."""
            self.out = self.chout = None
            T.trim()
            return True

        def get_latency(self, ref, n: int):
            out = []
            for _ in range(n):
                t = time.perf_counter()
                a = T.get(ref)
                out.append(time.perf_counter() - t)
                del a
            return out

    return Producer, Consumer


def ch_size(ch) -> int:
    from accel import _channel

    got = ch._latest_manifest()
    return dict(_channel._decode(got[1]))["w"].nbytes


def timings(rows: list[tuple[float, float, float, float]]) -> dict[str, list[float]]:
    """Per round: produce (fill), delivered (ready to holding it), read (ready to all read),
    end to end (start of the fill to all read)."""
    return {
        "produce": [t0 - ts for ts, t0, _, _ in rows],
        "delivered": [t1 - t0 for _, t0, t1, _ in rows],
        "read": [t2 - t0 for _, t0, _, t2 in rows],
        "e2e": [t2 - ts for ts, _, _, t2 in rows],
    }


def bench_same_host(sizes: list[int], iters: dict[int, int], log) -> dict:
    import ray

    Producer, Consumer = define_actors()  # registers the transport: before ray.init
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=4 * GiB)
    results: dict = {"sizes": {}}
    try:
        for size in sizes:
            row = {}
            for system in ["accel", "ray", "rdt"]:
                if system == "rdt" and size < 1 * MiB:
                    continue
                p, c = Producer.remote(), Consumer.remote()
                ray.get([p.ready.remote(), c.ready.remote()])
                rows = []
                for i in range(iters[size] + 1):
                    if system == "rdt":
                        t1, t2 = ray.get(c.rdt_take.remote(p.rdt_make.remote(size, i), i))
                        ts, t0 = ray.get(p.last_t.remote())
                        rows.append((ts, t0, t1, t2))
                    elif system == "accel":
                        rows.append(ray.get(c.accel_take.remote(p.accel_make.remote(size, i), i)))
                    else:
                        rows.append(ray.get(c.ray_take.remote(p.ray_make.remote(size, i), i)))
                row[system] = timings(rows)
                t = row[system]
                log(
                    f"  {system:5} {human(size):>7}: cold e2e {t['e2e'][0] * 1e3:.1f} ms; warm p50 delivered "
                    f"{statistics.median(t['delivered'][1:]) * 1e3:.2f} ms, read {statistics.median(t['read'][1:]) * 1e3:.1f} ms, "
                    f"e2e {statistics.median(t['e2e'][1:]) * 1e3:.1f} ms"
                )
                if system == "accel" and size == sizes[0]:
                    ref = ray.get(p.small_ref.remote())
                    lat = ray.get(c.get_latency.remote(ref, 2000))
                    results["get_4k"] = lat
                    log(f"  4 KiB get: p50 {statistics.median(lat) * 1e6:.1f} us, p99 {pct(lat, 0.99) * 1e6:.1f} us")
                ray.kill(p)
                ray.kill(c)
                time.sleep(0.5)
            results["sizes"][size] = row
    finally:
        ray.shutdown()
    return results


def bench_channel_same_host(size: int, rounds: int, log) -> dict:
    """`rounds` publish-and-read rounds of `size` bytes between two actors on one host: the
    channel against Ray's two patterns (return the array / ray.put it and pass the ref)."""
    import ray

    Producer, Consumer = define_actors()  # registers the transport: before ray.init
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=4 * GiB)
    out: dict = {}
    try:
        for system in ["channel", "ray_return", "ray_put"]:
            p, c = Producer.remote(), Consumer.remote()
            ray.get([p.ready.remote(), c.ready.remote()])
            ch = ray.get(p.channel.remote("bench")) if system == "channel" else None
            rows = []
            t = time.perf_counter()
            for i in range(rounds):
                if system == "channel":
                    rows.append(ray.get(c.channel_take.remote(ch, p.publish.remote(size, i), i)))
                elif system == "ray_return":
                    rows.append(ray.get(c.ray_take.remote(p.ray_make.remote(size, i), i)))
                else:
                    rows.append(ray.get(c.ray_get.remote(p.ray_put.remote(size, i), i)))
            wall = time.perf_counter() - t
            out[system] = {"wall": wall, **timings(rows)}
            log(f"  {system:10}: {rounds} rounds of {human(size)} in {wall:.1f} s ({wall / rounds * 1e3:.0f} ms/round)")
            ray.kill(p)
            ray.kill(c)
            time.sleep(0.5)
    finally:
        ray.shutdown()
    return out


# ---------------------------------------------------------------- cross node: a Ray cluster of separate object stores


def bench_cluster(size: int, iters: int, rounds: int, consumers: int, log) -> dict:
    """Nodes of a `ray.cluster_utils.Cluster` on this machine: each has its own raylet and
    object store, so Ray moves objects between them with its object manager (gRPC over
    loopback). accel's consumers are forced onto its TCP path (ACCEL_TRANSPORT_PATH=tcp), the
    path it takes between hosts. One to one (node 1 to node 2), broadcast (node 1 to nodes
    2..1+consumers) and the channel across two nodes."""
    import ray
    from ray.cluster_utils import Cluster

    Producer, Consumer = define_actors()  # registers the transport (and the secret): before any node starts
    cluster = Cluster()
    store = int(size * 1.6) + 256 * MiB
    cluster.add_node(num_cpus=1, resources={"node1": 1}, object_store_memory=store)
    for n in range(consumers):
        cluster.add_node(num_cpus=1, resources={f"node{n + 2}": 1}, object_store_memory=store)
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    tcp = {"env_vars": {"ACCEL_TRANSPORT_PATH": "tcp"}}
    out: dict = {}
    try:
        p = Producer.options(resources={"node1": 0.01}).remote()
        cs = [Consumer.options(resources={f"node{n + 2}": 0.01}, runtime_env=tcp).remote() for n in range(consumers)]
        ray.get([p.ready.remote()] + [c.ready.remote() for c in cs])
        c = cs[0]
        out.update(one_to_one(p, c, size, iters, log, "one to one"))
        for system in ["accel", "accel_relay", "ray"]:  # broadcast: every consumer gets the same object
            rows = []
            for i in range(iters + 1):
                if system.startswith("accel"):
                    made = p.accel_make.remote(size, i, consumers)
                    relay = system == "accel_relay"
                    got = ray.get([k.accel_take.remote(made, i, not relay, relay) for k in cs])
                else:
                    made = p.ray_make.remote(size, i)
                    got = ray.get([k.ray_take.remote(made, i) for k in cs])
                ts, t0 = got[0][0], got[0][1]
                rows.append((ts, t0, max(g[2] for g in got), max(g[3] for g in got)))
            ray.get([k.trim.remote() for k in cs])  # the next system starts from the same memory
            out[f"bcast_{system}"] = timings(rows)
            t = out[f"bcast_{system}"]
            log(f"  broadcast to {consumers} {system:11}: warm p50 delivered {statistics.median(t['delivered'][1:]) * 1e3:.0f} ms, e2e {statistics.median(t['e2e'][1:]) * 1e3:.0f} ms")
        ch = ray.get(p.channel.remote("xnode"))
        for system in ["channel", "ray_return"]:  # channel rounds across two nodes
            rows = []
            t = time.perf_counter()
            for i in range(rounds):
                if system == "channel":
                    rows.append(ray.get(c.channel_take.remote(ch, p.publish.remote(size, i), i, True)))
                else:
                    rows.append(ray.get(c.ray_take.remote(p.ray_make.remote(size, i), i)))
            wall = time.perf_counter() - t
            out[f"chan_{system}"] = {"wall": wall, **timings(rows)}
            log(f"  channel rounds {system:10}: {rounds} x {human(size)} in {wall:.1f} s")
    finally:
        ray.shutdown()
        cluster.shutdown()
    return out

# ---------------------------------------------------------------- cross host, netns

NS = ("accelbenchA", "accelbenchB")
ADDR = ("10.77.0.1", "10.77.0.2")


def sh(*cmd: str, check: bool = True) -> None:
    subprocess.run(cmd, check=check, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def netns_up() -> None:
    netns_down()
    a, b = NS
    sh("ip", "netns", "add", a)
    sh("ip", "netns", "add", b)
    sh("ip", "link", "add", "accelvA", "type", "veth", "peer", "name", "accelvB")
    sh("ip", "link", "set", "accelvA", "netns", a)
    sh("ip", "link", "set", "accelvB", "netns", b)
    for ns, dev, addr in [(a, "accelvA", ADDR[0]), (b, "accelvB", ADDR[1])]:
        sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
        sh("ip", "-n", ns, "link", "set", dev, "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")


def netns_down() -> None:
    for ns in NS:
        sh("ip", "netns", "del", ns, check=False)


def in_ns(ns: str, *args: str) -> list[str]:
    return ["ip", "netns", "exec", ns, sys.executable, __file__, *args]


def role_owner(sizes: list[int]) -> None:
    """In namespace A: publishes one accel buffer per size and serves raw TCP beside it."""
    import threading

    from accel import transport as T

    refs = {}
    for size in sizes:
        buf = T.empty((size,), np.uint8)
        buf[:] = 1
        refs[size] = T.put(buf)
        del buf
    port: list[int] = []
    ready = threading.Event()
    threading.Thread(target=raw_server, args=(ADDR[0], max(sizes), lambda p: (port.append(p), ready.set())), daemon=True).start()
    ready.wait()
    print(base64.b64encode(pickle.dumps((refs, port[0]))).decode(), flush=True)
    sys.stdin.readline()


def role_fetch(owner_b64: str, iters: dict[int, int]) -> None:
    """In namespace B: alternates raw TCP and accel for each size, so drift hits both alike."""
    from accel import transport as T

    refs, port = pickle.loads(base64.b64decode(owner_b64))
    s = socket.create_connection((ADDR[0], port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out = {}
    for size, ref in refs.items():
        buf = np.zeros(size, np.uint8)
        res: dict[str, list[float]] = {"raw_into": [], "accel_into": [], "raw_fresh": [], "accel_fresh": []}
        for _ in range(iters[size] + 1):  # the first round warms connections and pools
            t = time.perf_counter()
            raw_fetch(s, size, buf)
            res["raw_into"].append(time.perf_counter() - t)
            t = time.perf_counter()
            T.get(ref, path="tcp", out=buf)
            res["accel_into"].append(time.perf_counter() - t)
            t = time.perf_counter()
            raw_fetch(s, size, np.empty(size, np.uint8))
            res["raw_fresh"].append(time.perf_counter() - t)
            t = time.perf_counter()
            a = T.get(ref, path="tcp")
            res["accel_fresh"].append(time.perf_counter() - t)
            del a
        assert int(buf.min()) == 1 and int(buf.max()) == 1
        out[size] = {k: v[1:] for k, v in res.items()}
    s.close()
    print(json.dumps(out), flush=True)


RAY_PORT = 6390


def one_to_one(p, c, size: int, iters: int, log, label: str) -> dict:
    """Equal-work rounds node to node: accel streams into the consumer's preallocated array."""
    import ray

    out = {}
    for system in ["accel", "ray"]:
        rows = []
        for i in range(iters + 1):
            if system == "accel":
                rows.append(ray.get(c.accel_take.remote(p.accel_make.remote(size, i), i, True)))
            else:
                rows.append(ray.get(c.ray_take.remote(p.ray_make.remote(size, i), i)))
        out[f"one_{system}"] = t = timings(rows)
        log(f"  {label} {system:5}: cold delivered {t['delivered'][0] * 1e3:.0f} ms; warm p50 delivered {statistics.median(t['delivered'][1:]) * 1e3:.0f} ms, e2e {statistics.median(t['e2e'][1:]) * 1e3:.0f} ms")
    return out


def role_netns_ray(size: int, iters: int) -> None:
    """The driver of the Ray cluster spanning the two namespaces (runs in namespace A)."""
    import ray

    Producer, Consumer = define_actors()
    ray.init(address=f"{ADDR[0]}:{RAY_PORT}", log_to_driver=False)
    p = Producer.options(resources={NS[0]: 0.01}).remote()
    c = Consumer.options(resources={NS[1]: 0.01}, runtime_env={"env_vars": {"ACCEL_TRANSPORT_PATH": "tcp"}}).remote()
    ray.get([p.ready.remote(), c.ready.remote()])
    out = one_to_one(p, c, size, iters, lambda m: print(m, file=sys.stderr, flush=True), "netns one to one")
    ray.shutdown()
    print(json.dumps(out), flush=True)


def bench_netns_ray(size: int, iters: int, log) -> dict:
    """Ray's object manager against accel across the veth link: a Ray head in namespace A and
    a worker node in namespace B (`ray start`, each raylet and object store on its own side),
    the producer on A, the consumer on B. Our Ray processes are found and ended by namespace
    (`ip netns pids`), never by name: other Ray clusters on the machine are left alone."""
    netns_up()
    env = dict(os.environ)
    env.setdefault("ACCEL_TRANSPORT_SECRET", base64.b16encode(os.urandom(16)).decode())
    # Ray's token authentication, with a token of this run shared by both nodes and the driver.
    env.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": base64.b16encode(os.urandom(32)).decode().lower()})
    store = str(int(size * 1.6) + 256 * MiB)
    try:
        for ns, addr, extra in [(NS[0], ADDR[0], ["--head", f"--port={RAY_PORT}", "--include-dashboard=false"]), (NS[1], ADDR[1], [f"--address={ADDR[0]}:{RAY_PORT}"])]:
            started = subprocess.run(
                ["ip", "netns", "exec", ns, sys.executable, "-m", "ray.scripts.scripts", "start", f"--node-ip-address={addr}",
                 "--num-cpus=1", f"--resources={json.dumps({ns: 1})}", f"--object-store-memory={store}", "--disable-usage-stats", *extra],
                env={**env, "ACCEL_TRANSPORT_BIND": f"{addr}:0"}, capture_output=True, text=True, timeout=240,
            )
            if started.returncode != 0:
                raise RuntimeError(f"ray start in {ns} failed:\n{started.stdout}\n{started.stderr}")
        driver = subprocess.run(
            in_ns(NS[0], "--role", "netns-ray", "--size", str(size), "--iters-json", str(iters)),
            env={**env, "ACCEL_TRANSPORT_BIND": f"{ADDR[0]}:0"}, capture_output=True, text=True, timeout=1800,
        )
        for line in driver.stderr.splitlines():
            if line.startswith("  netns"):
                log(line)
        if driver.returncode != 0:
            raise RuntimeError(f"the driver in {NS[0]} failed:\n{driver.stderr[-3000:]}")
        return json.loads(driver.stdout.strip().splitlines()[-1])
    finally:
        for ns in NS:
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except (OSError, ValueError):
                    pass
        time.sleep(1)
        netns_down()
        from accel import transport as T

        T.sweep()


def bench_cross_host(sizes: list[int], iters: dict[int, int], log) -> dict:
    netns_up()
    env = {**os.environ, "ACCEL_TRANSPORT_POOL_BYTES": "4G"}
    env.setdefault("ACCEL_TRANSPORT_SECRET", base64.b16encode(os.urandom(16)).decode())
    owner_env = {**env, "ACCEL_TRANSPORT_BIND": f"{ADDR[0]}:0"}  # listeners bind loopback unless told
    owner = None
    try:
        owner = subprocess.Popen(
            in_ns(NS[0], "--role", "owner", "--sizes", ",".join(map(str, sizes))),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=owner_env,
        )
        handle = owner.stdout.readline().strip()
        fetch = subprocess.run(
            in_ns(NS[1], "--role", "fetch", "--refs", handle, "--iters-json", json.dumps({str(k): v for k, v in iters.items()})),
            capture_output=True,
            text=True,
            env=env,
        )
        if fetch.returncode != 0:
            raise RuntimeError(f"the consumer in {NS[1]} failed:\n{fetch.stderr}")
        results = {int(k): v for k, v in json.loads(fetch.stdout.strip().splitlines()[-1]).items()}
        for size, r in results.items():
            g = {k: size / statistics.median(v) / 1e9 for k, v in r.items()}
            log(
                f"  {human(size):>7}: into: accel {g['accel_into']:.2f} vs raw {g['raw_into']:.2f} GB/s; "
                f"new array: accel {g['accel_fresh']:.2f} vs raw {g['raw_fresh']:.2f} GB/s"
            )
        return results
    finally:
        if owner is not None:
            try:
                owner.stdin.write("\n")
                owner.stdin.flush()
                owner.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                owner.kill()
                owner.wait()
        netns_down()
        from accel import transport as T

        T.sweep()


# ---------------------------------------------------------------- report


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def verdict(value: float, goal: float) -> str:
    return f"**{value:.2f}x** (goal {goal:g}x: {'met' if value >= goal else 'NOT met'})"


def render(res: dict, command: str) -> tuple[str, dict]:
    cpu = "?"
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = res.get("load", [])
    lines = [
        f"{platform.machine()} with {os.cpu_count()} CPUs ({cpu}), Linux {platform.release()}, Ray 2.60.0, "
        f"{datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}; load average "
        + " / ".join(f"{x:.1f}" for x in load)
        + " at the start (the machine is shared: only ratios measured in this run mean anything).",
        "",
        "**Equal work.** Every round, on both sides, the producer writes every byte of a fresh array "
        "(accel: into `transport.empty`, then `put(buf, readers=1)`; Ray: into a numpy array it keeps, "
        "then returns it, which copies it into the object store), and the consumer, given the result "
        "as a task argument, reads every byte (a uint64 sum). *Delivered*: from the end of the write "
        "to the consumer holding the array. *Delivered+read*: to the end of its read. *End to end*: "
        "from the start of the write to the end of the read, the figure a user waits for. Cold: the "
        "first round of fresh actors (fresh pools; Ray's object store has served earlier sizes). "
        "Warm: p50 of the rest.",
        "",
    ]

    def ms(x: float) -> str:
        return f"{x * 1e3:.2f} ms" if x < 0.01 else f"{x * 1e3:.0f} ms"

    summary: dict = {}
    same = res.get("same")
    if same:
        lines += [
            "**Same host, two Ray actors:**",
            "",
            "| size | system | write (warm) | cold end to end | warm delivered | warm delivered+read | warm end to end |",
            "|---|---|---|---|---|---|---|",
        ]
        names = {"accel": "accel `put`/`get`", "ray": "Ray object store", "rdt": 'Ray + `tensor_transport="ACCEL"`'}
        for size, row in same["sizes"].items():
            for system in ["accel", "ray", "rdt"]:
                if system in row:
                    t = row[system]
                    lines.append(
                        f"| {human(size)} | {names[system]} | {ms(med(t['produce'][1:]))} | {ms(t['e2e'][0])} | "
                        f"{ms(med(t['delivered'][1:]))} | {ms(med(t['read'][1:]))} | {ms(med(t['e2e'][1:]))} |"
                    )
        lines += [
            "",
            "Ray time / accel time (above 1x: accel faster):",
            "",
            "| size | warm delivered | warm delivered+read | **warm end to end** | cold end to end |",
            "|---|---|---|---|---|",
        ]
        for size, row in same["sizes"].items():
            if "accel" in row and "ray" in row:
                a, r = row["accel"], row["ray"]
                q = {k: med(r[k][1:]) / med(a[k][1:]) for k in ["delivered", "read", "e2e"]}
                cold = r["e2e"][0] / a["e2e"][0]
                lines.append(f"| {human(size)} | {q['delivered']:.1f}x | {q['read']:.2f}x | **{q['e2e']:.2f}x** | {cold:.2f}x |")
                summary[size] = {**q, "cold": cold}
        big = max((k for k in summary if isinstance(k, int)), default=None)
        if big is not None:
            cold = [f"{human(k)} {1 / v['cold']:.2f}x" for k, v in summary.items() if isinstance(k, int) and k >= 64 * MiB]
            worst = max(1 / v["cold"] for k, v in summary.items() if isinstance(k, int) and k >= 64 * MiB)
            lines += [
                "",
                "Cold, first transfer of a size, end to end, accel time / Ray time (goal: at most 1.5x): "
                + ", ".join(cold)
                + f": {'met' if worst <= 1.5 else 'NOT met'} at every size from 64 MiB. accel's cold round includes "
                "creating and pre-faulting the segment (`fallocate`, then `MADV_POPULATE_WRITE`) and the consumer's "
                "first, populated mapping; Ray's includes its object store's first touch of that memory.",
            ]
        lat = same.get("get_4k")
        if lat:
            lines += ["", f"4 KiB `transport.get` (same host, warm, 2000 calls in an actor): p50 {med(lat) * 1e6:.1f} us, p99 {pct(lat, 0.99) * 1e6:.1f} us."]
        lines.append("")
    ch = res.get("channel")
    if ch:
        rounds, size = res["channel_rounds"], res["channel_size"]
        best_ray = min(ch["ray_return"]["wall"], ch["ray_put"]["wall"])
        q = best_ray / ch["channel"]["wall"]
        summary["channel"] = q
        lines += [
            f"**Weight-sync channel, one host:** {rounds} rounds of {human(size)} between two actors; each round the "
            "producer writes fresh weights and publishes them, the consumer reads the newest version "
            "entirely (`with ch.read()`), driven one round at a time from the driver. Against Ray's two "
            "patterns for the same work: return the array from the producer and pass the ref "
            "(`ray_return`), or `ray.put` it and pass the ref inside a list (`ray_put`).",
            "",
            "| system | total | per round | write | delivered | delivered+read |",
            "|---|---|---|---|---|---|",
        ]
        for s in ["channel", "ray_return", "ray_put"]:
            t = ch[s]
            lines.append(
                f"| {s} | {t['wall']:.1f} s | {ms(t['wall'] / rounds)} | {ms(med(t['produce']))} | "
                f"{ms(med(t['delivered']))} | {ms(med(t['read']))} |"
            )
        lines += ["", f"Channel against the best Ray pattern, end to end: {verdict(q, 2)}.", ""]
    cl = res.get("cluster")
    if cl:
        size, n = res["cluster_size"], res["cluster_consumers"]
        tcp = res["ceilings"]["tcp"].get(size) or max(res["ceilings"]["tcp"].values())
        one = med(cl["one_ray"]["delivered"][1:]) / med(cl["one_accel"]["delivered"][1:])
        one_e2e = med(cl["one_ray"]["e2e"][1:]) / med(cl["one_accel"]["e2e"][1:])
        accel_gbs = size / med(cl["one_accel"]["delivered"][1:]) / 1e9
        bc = med(cl["bcast_ray"]["delivered"][1:]) / med(cl["bcast_accel"]["delivered"][1:])
        bc_e2e = med(cl["bcast_ray"]["e2e"][1:]) / med(cl["bcast_accel"]["e2e"][1:])
        relayed = cl.get("bcast_accel_relay")
        bc_relay = med(cl["bcast_ray"]["delivered"][1:]) / med(relayed["delivered"][1:]) if relayed else None
        chx = cl["chan_ray_return"]["wall"] / cl["chan_channel"]["wall"]
        summary.update({"one": one, "one_tcp": accel_gbs / tcp, "bcast": bc, "chan_x": chx})
        lines += [
            f"**Cross node: a `ray.cluster_utils.Cluster`** of {n + 1} nodes on this machine, each with its own "
            "raylet and object store, so Ray moves objects with its object manager (gRPC over loopback). "
            "accel's consumers take its cross-host path, TCP (`ACCEL_TRANSPORT_PATH=tcp`; on one machine it "
            "would map the segment instead), streaming into a preallocated array (`get(ref, out=buf)`), "
            f"the same link. Size {human(size)}, same equal-work rounds as above.",
            "",
            "| what | accel delivered | Ray delivered | accel end to end | Ray end to end |",
            "|---|---|---|---|---|",
        ]
        for key, label in [("one", "node 1 to node 2"), ("bcast", f"broadcast to {n} nodes (last consumer)")]:
            a, r = cl[f"{key}_accel"], cl[f"{key}_ray"]
            lines.append(
                f"| {label} | {ms(med(a['delivered'][1:]))} | {ms(med(r['delivered'][1:]))} | "
                f"{ms(med(a['e2e'][1:]))} | {ms(med(r['e2e'][1:]))} |"
            )
            if key == "bcast" and relayed:
                lines.append(
                    f"| broadcast, readers relaying (`get(ref, relay=True)`) | {ms(med(relayed['delivered'][1:]))} | "
                    f"{ms(med(r['delivered'][1:]))} | {ms(med(relayed['e2e'][1:]))} | {ms(med(r['e2e'][1:]))} |"
                )
        cr = res["cluster_rounds"]
        lines += [
            f"| channel, {cr} rounds node 1 to node 2 (total) | {cl['chan_channel']['wall']:.1f} s | "
            f"{cl['chan_ray_return']['wall']:.1f} s | | |",
            "",
            f"- One to one, delivered, Ray / accel: {verdict(one, 2.5)}; end to end {one_e2e:.2f}x. Cold (the first "
            f"round of fresh actors: accel creates and faults the segment, the consumer its array), accel time / Ray "
            f"time: {cl['one_accel']['delivered'][0] / cl['one_ray']['delivered'][0]:.2f}x (goal: at most 1.5x).",
            f"- One to one against raw TCP on the same link (loopback, plain sockets into a preallocated "
            f"buffer, {tcp:.2f} GB/s): accel delivers at {accel_gbs:.2f} GB/s, {verdict(accel_gbs / tcp, 0.9)}.",
            f"- Broadcast, delivered to the last of {n} consumers, Ray / accel: {verdict(bc, 3)}; end to end "
            f"{bc_e2e:.2f}x. accel's consumers each stream from the owner (`put(x, readers={n})`, sendfile "
            "from one segment)."
            + (
                f" With the readers relaying to each other (a chain): {bc_relay:.2f}x. On one machine every node "
                "shares the same two cores, so relaying moves the same bytes through the same CPUs as direct "
                "streams do; relaying is for links, where the owner's uplink is the limit (\"Broadcast over "
                "shaped links\" below)."
                if bc_relay
                else ""
            ),
            f"- Channel across two nodes, {cr} rounds end to end, Ray / accel: {verdict(chx, 2.5)}.",
            "",
        ]
    elif res.get("cluster_note"):
        lines += [f"**Cross node (Ray cluster):** {res['cluster_note']}", ""]
    cross = res.get("netns")
    if cross:
        lines += [
            "**Cross host: two network namespaces joined by veth.** The owner publishes in one namespace (its "
            "listener bound to the veth address) and serves a raw TCP stream (plain Python sockets) beside it; "
            "the consumer in the other namespace alternates raw and accel transfers, p50 over the rounds (the "
            "same bytes every round on both sides). `into`: into a preallocated array (`get(ref, out=buf)` "
            "against `recv_into`); `new`: a fresh array per transfer, which adds first-touch page faults to both.",
            "",
            "| size | accel into | raw TCP into | ratio | accel new | raw TCP new | ratio |",
            "|---|---|---|---|---|---|---|",
        ]
        worst = 9e9
        for size, r in cross.items():
            g = {k: size / med(v) / 1e9 for k, v in r.items()}
            worst = min(worst, g["accel_into"] / g["raw_into"])
            lines.append(
                f"| {human(size)} | {g['accel_into']:.2f} GB/s | {g['raw_into']:.2f} GB/s | **{g['accel_into'] / g['raw_into']:.2f}x** | "
                f"{g['accel_fresh']:.2f} GB/s | {g['raw_fresh']:.2f} GB/s | {g['accel_fresh'] / g['raw_fresh']:.2f}x |"
            )
        summary["netns"] = worst
        lines += ["", f"Against raw TCP across veth (worst size, into): {verdict(worst, 0.9)}.", ""]
        nr = res.get("netns_ray")
        if nr:
            size = res["netns_ray_size"]
            q = med(nr["one_ray"]["delivered"][1:]) / med(nr["one_accel"]["delivered"][1:])
            qe = med(nr["one_ray"]["e2e"][1:]) / med(nr["one_accel"]["e2e"][1:])
            summary["netns_ray"] = q
            lines += [
                f"**Ray across the veth link:** a Ray head (`ray start --head`) in one namespace and a worker node in "
                f"the other, the producer actor on the first and the consumer on the second; {human(size)}, the same "
                "equal-work rounds as the cluster above (accel over TCP into a preallocated array).",
                "",
                "| system | cold delivered | warm delivered | warm end to end |",
                "|---|---|---|---|",
            ]
            for sysname, key in [("accel", "one_accel"), ("Ray object manager", "one_ray")]:
                t = nr[key]
                lines.append(f"| {sysname} | {ms(t['delivered'][0])} | {ms(med(t['delivered'][1:]))} | {ms(med(t['e2e'][1:]))} |")
            lines += ["", f"Across veth, delivered, Ray / accel: {verdict(q, 2.5)}; end to end {qe:.2f}x.", ""]
        elif res.get("netns_ray_note"):
            lines += [f"Ray across the veth link: {res['netns_ray_note']}", ""]
    elif res.get("netns_note"):
        lines += [f"**Cross host (netns + veth):** {res['netns_note']}", ""]
    c = res["ceilings"]
    lines += [
        "Raw ceilings in this run: memcpy "
        + ", ".join(f"{human(s)} {v:.2f} GB/s" for s, v in c["memcpy"].items())
        + "; loopback TCP (plain sockets, two processes) "
        + ", ".join(f"{human(s)} {v:.2f} GB/s" for s, v in c["tcp"].items())
        + ".",
        "",
        f"Reproduce: `{command}`",
    ]
    big = max((k for k in summary if isinstance(k, int)), default=None)
    if big is not None:
        a, r = same["sizes"][big]["accel"], same["sizes"][big]["ray"]
        head = (
            f"**Headline (end to end, warm, {human(big)}, same host, equal work): accel {ms(med(a['e2e'][1:]))} against "
            f"Ray's object store {ms(med(r['e2e'][1:]))}, {summary[big]['e2e']:.2f}x.** Delivery alone (the consumer "
            f"holding the array, before it reads it) is {summary[big]['delivered']:.0f}x faster, because accel hands over a "
            "mapping where Ray copies into its store, but the user's own write and read of the bytes dominate a round."
        )
        lines.insert(2, head)
        lines.insert(3, "")
    return "\n".join(lines), summary


def _int_keys(d: dict) -> dict:
    """JSON object keys back to the byte sizes they were."""
    return {int(k) if k.isdigit() else k: v for k, v in d.items()}


def write_section(text: str, begin: str = BEGIN, end: str = END, heading: str = "Tensor transport") -> None:
    """Replaces the text between `begin` and `end` in docs/BENCHMARKS.md (or appends a section)."""
    doc = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    section = f"{begin}\n{text}\n{end}"
    if begin in doc:
        doc = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: section, doc, flags=re.S)
    else:
        doc = doc.rstrip("\n") + f"\n\n## {heading}\n\n" + section + "\n"
    DOC.write_text(doc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer sizes, iterations and rounds (a smoke run)")
    ap.add_argument("--no-netns", action="store_true", help="skip the network-namespace part (needs root)")
    ap.add_argument("--no-cluster", action="store_true", help="skip the multi-node Ray cluster part")
    ap.add_argument("--no-same-host", action="store_true", help="skip the same-host transfers")
    ap.add_argument("--no-channel", action="store_true", help="skip the same-host channel rounds")
    ap.add_argument("--rounds", type=int, default=100, help="channel rounds on one host (default 100)")
    ap.add_argument("--cluster-rounds", type=int, default=100, help="channel rounds across nodes (default 100)")
    ap.add_argument("--cluster-size", type=int, default=GiB, help="bytes per cross-node transfer (default 1 GiB)")
    ap.add_argument("--consumers", type=int, default=4, help="broadcast consumers, one node each (default 4)")
    ap.add_argument("--no-write", action="store_true", help="print, do not touch docs/BENCHMARKS.md")
    ap.add_argument("--json", help="also write the raw timings to this file")
    ap.add_argument("--from-json", help="render a run saved with --json instead of measuring")
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("--host", help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--sizes", help=argparse.SUPPRESS)
    ap.add_argument("--refs", help=argparse.SUPPRESS)
    ap.add_argument("--iters-json", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.role == "raw-server":
        return raw_server(args.host, args.size, lambda p: print(p, flush=True))
    if args.role == "owner":
        return role_owner([int(s) for s in args.sizes.split(",")])
    if args.role == "netns-ray":
        return role_netns_ray(args.size, int(args.iters_json))
    if args.role == "fetch":
        return role_fetch(args.refs, {int(k): v for k, v in json.loads(args.iters_json).items()})

    if args.from_json:
        res = json.loads(Path(args.from_json).read_text(), object_hook=_int_keys)
        text, _ = render(res, res.get("command", "sudo .venv/bin/python scripts/bench_transport.py"))
        if "seconds" in res:
            text += f"\n\nWhole run: {res['seconds']:.0f} s."
        print(text)
        if not args.no_write:
            write_section(text)
        return None

    os.environ.setdefault("ACCEL_TRANSPORT_POOL_BYTES", "6G")
    sizes = [1 * MiB, 64 * MiB] if args.quick else SIZES
    iters = {s: max(2, ITERS[s] // 4) for s in sizes} if args.quick else ITERS
    rounds = min(args.rounds, 5) if args.quick else args.rounds
    crounds = min(args.cluster_rounds, 3) if args.quick else args.cluster_rounds
    csize = min(args.cluster_size, 64 * MiB) if args.quick else args.cluster_size

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    started = time.monotonic()
    res: dict = {"load": os.getloadavg()}
    log("== raw ceilings")
    tcp_sizes = sorted({s for s in sizes if s >= 64 * MiB} | {csize})
    res["ceilings"] = {"memcpy": {s: bench_memcpy(s, iters.get(s, 5)) for s in sizes}, "tcp": bench_loopback_tcp(tcp_sizes, {s: iters.get(s, 5) for s in tcp_sizes})}
    log(f"  memcpy {json.dumps({human(k): round(v, 2) for k, v in res['ceilings']['memcpy'].items()})}; tcp {json.dumps({human(k): round(v, 2) for k, v in res['ceilings']['tcp'].items()})}")
    if not args.no_same_host:
        log("== same host (Ray actors)")
        res["same"] = bench_same_host(sizes, iters, log)
    if not args.no_channel:
        log("== channel, same host")
        res["channel_rounds"], res["channel_size"] = rounds, sizes[-1]
        res["channel"] = bench_channel_same_host(sizes[-1], rounds, log)
    if args.no_cluster:
        res["cluster_note"] = "not run (`--no-cluster`)."
    else:
        log("== cross node (ray.cluster_utils.Cluster)")
        res["cluster_size"], res["cluster_consumers"], res["cluster_rounds"] = csize, args.consumers, crounds
        res["cluster"] = bench_cluster(csize, 3 if args.quick else 5, crounds, args.consumers, log)
    if args.no_netns:
        res["netns_note"] = "not run (`--no-netns`)."
    elif os.geteuid() != 0 or not shutil.which("ip"):
        res["netns_note"] = "not run: needs root and iproute2 (`ip netns`)."
    else:
        log("== cross host (netns + veth)")
        csizes = [s for s in NETNS_SIZES if s in sizes] or [64 * MiB]
        res["netns"] = bench_cross_host(csizes, {s: (NETNS_ITERS.get(s, 4) if not args.quick else 3) for s in csizes}, log)
        if not args.no_cluster:
            log("== cross host with Ray (netns + veth, ray start on each side)")
            res["netns_ray_size"] = csize
            try:
                res["netns_ray"] = bench_netns_ray(csize, 3 if args.quick else 5, log)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                res["netns_ray_note"] = f"failed: {str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__}"
                log(f"  {res['netns_ray_note']}")
    shown = [a for i, a in enumerate(sys.argv[1:]) if a != "--json" and (i == 0 or sys.argv[i] != "--json")]
    command = " ".join(["sudo .venv/bin/python scripts/bench_transport.py", *shown]).strip()
    res["command"], res["seconds"] = command, time.monotonic() - started
    text, summary = render(res, command)
    text += f"\n\nWhole run: {res['seconds']:.0f} s."
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(res, default=str))
    if not args.no_write:
        write_section(text)
        log(f"wrote {DOC.relative_to(REPO)}")


if __name__ == "__main__":
    main()
