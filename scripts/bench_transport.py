#!/usr/bin/env python3
"""Benchmark of the accel tensor transport; writes its section of docs/BENCHMARKS.md.

    sudo .venv/bin/python scripts/bench_transport.py            # the whole run (~5-8 min)
    .venv/bin/python scripts/bench_transport.py --no-netns      # same host only, no root needed
    .venv/bin/python scripts/bench_transport.py --quick         # fewer sizes and iterations

Same host: two Ray actors on one node. The producer makes its output array (accel: in place in
shared memory with `accel.transport.empty`, Ray: a numpy array it keeps), stamps it, takes t0 and
returns it (accel: `accel.transport.put(buf)`, a reference; Ray: the array, copied into the object
store). The driver passes the result to the consumer as a task argument. "Delivered" ends when the
consumer holds a usable array (t1, accel: after `get`); "delivered and read" ends after it has read
every byte (t2, a uint64 sum). Cold is the first transfer of fresh actors; warm is the rest. Raw
ceilings, measured in the same run: memcpy (numpy copyto between warm arrays) and loopback TCP
(two processes, plain sockets). Also the ACCEL Ray tensor transport
(`@ray.method(tensor_transport="ACCEL")`) and the latency of a 4 KiB `get`.

Cross host: two network namespaces joined by a veth pair (created and removed here; needs root
and iproute2). The owner publishes in one namespace, the consumer fetches over TCP in the other;
against a raw TCP stream (plain sockets, same sizes, same link, receiving into a preallocated
buffer, as `get(ref, out=buf)` does).
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


# ---------------------------------------------------------------- same host, Ray


def bench_same_host(sizes: list[int], iters: dict[int, int], log) -> dict:
    import ray

    import accel.ray
    from accel import transport as T

    accel.ray.register_transport()

    @ray.remote(num_cpus=0)
    class Producer:
        def __init__(self):
            self.arr = None

        def ready(self):
            return True

        def ray_make(self, size: int, i: int):
            t0 = time.perf_counter()
            if self.arr is None:
                self.arr = np.empty(size, np.uint8)
            self.arr[0] = self.arr[-1] = i % 251
            return self.arr, t0

        def accel_make(self, size: int, i: int):
            t0 = time.perf_counter()
            buf = T.empty((size,), np.uint8)
            buf[0] = buf[-1] = i % 251
            return T.put(buf), t0

        @ray.method(tensor_transport="ACCEL")
        def rdt_make(self, size: int, i: int):
            self.t0 = time.perf_counter()
            buf = T.empty((size,), np.uint8)
            buf[0] = buf[-1] = i % 251
            return buf

        def last_t0(self):
            return self.t0

        def small_ref(self):
            buf = T.empty((4 * KiB,), np.uint8)
            buf[:] = 1
            return T.put(buf)

    @ray.remote(num_cpus=0)
    class Consumer:
        def __init__(self):
            self.src = self.dst = None

        def ready(self):
            return True

        def memcpy(self, size: int) -> float:
            """The memcpy ceiling, measured in the consumer right after a transfer."""
            if self.src is None or self.src.nbytes != size:
                self.src, self.dst = np.ones(size, np.uint8), np.zeros(size, np.uint8)
                np.copyto(self.dst, self.src)
            t = time.perf_counter()
            np.copyto(self.dst, self.src)
            return time.perf_counter() - t

        def ray_take(self, payload):
            t1 = time.perf_counter()
            arr, t0 = payload
            checksum(arr)
            return t1 - t0, time.perf_counter() - t0

        def accel_take(self, payload):
            ref, t0 = payload
            arr = T.get(ref)
            t1 = time.perf_counter()
            checksum(arr)
            t2 = time.perf_counter()
            del arr
            T.free(ref)
            return t1 - t0, t2 - t0

        def rdt_take(self, arr):
            t1 = time.perf_counter()
            checksum(arr)
            return t1, time.perf_counter()

        def get_latency(self, ref, n: int):
            out = []
            for _ in range(n):
                t = time.perf_counter()
                a = T.get(ref)
                out.append(time.perf_counter() - t)
                del a
            return out

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
                deliv, read, copies = [], [], []
                for i in range(iters[size]):
                    if system == "rdt":
                        t1, t2 = ray.get(c.rdt_take.remote(p.rdt_make.remote(size, i)))
                        t0 = ray.get(p.last_t0.remote())
                        d, r = t1 - t0, t2 - t0
                    else:
                        make = p.accel_make if system == "accel" else p.ray_make
                        take = c.accel_take if system == "accel" else c.ray_take
                        d, r = ray.get(take.remote(make.remote(size, i)))
                    deliv.append(d)
                    read.append(r)
                    if system == "accel":
                        copies.append(ray.get(c.memcpy.remote(size)))
                row[system] = {"delivered": deliv, "read": read}
                if copies:
                    row["memcpy"] = size / statistics.median(copies[1:]) / 1e9
                log(f"  {system:5} {human(size):>7}: cold {deliv[0] * 1e3:.2f} ms, warm p50 {statistics.median(deliv[1:]) * 1e3:.3f} ms delivered, {statistics.median(read[1:]) * 1e3:.2f} ms read")
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


def render(same: dict, ceilings: dict, cross: dict | None, cross_note: str, command: str) -> str:
    cpu = "?"
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    lines = [
        f"{platform.machine()} with {os.cpu_count()} CPUs ({cpu}), Linux {platform.release()}, "
        f"Ray 2.60.0, {datetime.date.today().isoformat()}. Times are p50 (p99) over the warm iterations; "
        "GB/s = size / p50; cold is the first transfer of fresh actors.",
        "",
        "**Same host, two Ray actors** (delivered: the consumer holds the array; read: it has also read every byte):",
        "",
        "| size | system | cold delivered | warm delivered | warm delivered+read | read GB/s | memcpy GB/s (consumer) |",
        "|---|---|---|---|---|---|---|",
    ]

    def ms(x: float) -> str:
        return f"{x * 1e3:.3f} ms" if x < 0.01 else f"{x * 1e3:.1f} ms"

    goals = []
    for size, row in same["sizes"].items():
        for system in ["accel", "ray", "rdt"]:
            if system not in row:
                continue
            d, r = row[system]["delivered"], row[system]["read"]
            wd, wr = d[1:], r[1:]
            name = {"accel": "accel `put`/`get`", "ray": "Ray object store", "rdt": "Ray + `tensor_transport=\"ACCEL\"`"}[system]
            lines.append(
                f"| {human(size)} | {name} | {ms(d[0])} / {ms(r[0])} read | {ms(statistics.median(wd))} ({ms(pct(wd, 0.99))}) | "
                f"{ms(statistics.median(wr))} ({ms(pct(wr, 0.99))}) | {size / statistics.median(wr) / 1e9:.3g} | "
                f"{row.get('memcpy', ceilings['memcpy'][size]):.2f} |"
            )
        if "accel" in row and "ray" in row:
            speed = statistics.median(row["ray"]["delivered"][1:]) / statistics.median(row["accel"]["delivered"][1:])
            read_ratio = (size / statistics.median(row["accel"]["read"][1:]) / 1e9) / row.get("memcpy", ceilings["memcpy"][size])
            goals.append((size, speed, read_ratio))
    lines += [
        "",
        "Ratios (warm p50). Below 64 MiB both systems are bound by Ray's task round trip (about 1 ms),",
        "so the read throughput there says nothing about the data path.",
        "",
        "| size | delivered: Ray time / accel time | accel delivered+read: GB/s vs memcpy GB/s |",
        "|---|---|---|",
    ]
    for size, speed, rr in goals:
        lines.append(f"| {human(size)} | **{speed:.1f}x** | " + (f"**{rr:.2f}x**" if size >= 64 * MiB else "n/a") + " |")
    lines += [
        "",
        "Cold accel transfers include creating and pre-faulting the segment (`fallocate` + `MAP_POPULATE`):",
        "first touch of shared memory is slow on this VM (about 1 GB/s), and `transport.reserve()` takes it off",
        "the critical path. Ray's object store is one mapping for the whole run, so its first transfer of a size",
        "may land in memory that earlier sizes touched.",
    ]
    lat = same.get("get_4k")
    if lat:
        lines += ["", f"4 KiB `accel.transport.get` (same host, warm, 2000 calls in an actor): p50 **{statistics.median(lat) * 1e6:.1f} us**, p99 {pct(lat, 0.99) * 1e6:.1f} us."]
    lines += ["", "Loopback TCP ceiling (plain sockets, two processes): " + ", ".join(f"{human(s)} {v:.2f} GB/s" for s, v in ceilings["tcp"].items()) + "."]
    lines += [
        "",
        "**Cross host: two network namespaces joined by veth.** The owner publishes in one namespace (its listener",
        "bound to the veth address) and serves a raw TCP stream (plain Python sockets) beside it; the consumer in the",
        "other namespace alternates raw and accel transfers, p50 over the rounds. `into`: into a preallocated",
        "array (`get(ref, out=buf)` against `recv_into`); `new`: a fresh array per transfer (plain `get(ref)`",
        "against `recv_into(np.empty(n))`), which adds first-touch page faults to both.",
        "",
    ]
    if cross:
        lines += ["| size | accel into | raw TCP into | ratio | accel new | raw TCP new | ratio |", "|---|---|---|---|---|---|---|"]
        for size, r in cross.items():
            g = {k: size / statistics.median(v) / 1e9 for k, v in r.items()}
            lines.append(
                f"| {human(size)} | {g['accel_into']:.2f} GB/s | {g['raw_into']:.2f} GB/s | **{g['accel_into'] / g['raw_into']:.2f}x** | "
                f"{g['accel_fresh']:.2f} GB/s | {g['raw_fresh']:.2f} GB/s | {g['accel_fresh'] / g['raw_fresh']:.2f}x |"
            )
    else:
        lines.append(cross_note)
    checks = []
    big = max(same["sizes"]) if same["sizes"] else None
    if big and "ray" in same["sizes"][big]:
        speed = next(sp for sz, sp, _ in goals if sz == big)
        rr = next(r for sz, _, r in goals if sz == big)
        checks.append(f"{human(big)} delivered at least 10x faster than Ray: {speed:.1f}x, {'met' if speed >= 10 else 'NOT met'}")
        checks.append(f"delivered and read at least 0.8x memcpy ({human(big)}): {rr:.2f}x, {'met' if rr >= 0.8 else 'NOT met'}")
    if lat:
        p50 = statistics.median(lat) * 1e6
        checks.append(f"4 KiB get at most 100 us: {p50:.1f} us, {'met' if p50 <= 100 else 'NOT met'}")
    if cross:
        worst = min(
            (size / statistics.median(r["accel_into"])) / (size / statistics.median(r["raw_into"])) for size, r in cross.items()
        )
        checks.append(f"cross host at least 0.9x raw TCP (worst size, into): {worst:.2f}x, {'met' if worst >= 0.9 else 'NOT met'}")
    if checks:
        lines += ["", "Goals in this run: " + "; ".join(checks) + "."]
    lines += ["", f"Reproduce: `{command}`"]
    return "\n".join(lines)


def write_section(text: str) -> None:
    doc = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    section = f"{BEGIN}\n{text}\n{END}"
    if BEGIN in doc:
        doc = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: section, doc, flags=re.S)
    else:
        doc = doc.rstrip("\n") + "\n\n## Tensor transport\n\n" + section + "\n"
    DOC.write_text(doc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer sizes and iterations")
    ap.add_argument("--no-netns", action="store_true", help="skip the cross-host part")
    ap.add_argument("--no-write", action="store_true", help="print, do not touch docs/BENCHMARKS.md")
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
    if args.role == "fetch":
        return role_fetch(args.refs, {int(k): v for k, v in json.loads(args.iters_json).items()})

    os.environ.setdefault("ACCEL_TRANSPORT_POOL_BYTES", "6G")
    sizes = [4 * KiB, 1 * MiB, 64 * MiB] if args.quick else SIZES
    iters = {s: max(3, ITERS[s] // 4) for s in sizes} if args.quick else ITERS

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    started = time.monotonic()
    log("== raw ceilings")
    ceilings = {"memcpy": {s: bench_memcpy(s, iters[s]) for s in sizes}, "tcp": {}}
    ceilings["tcp"] = bench_loopback_tcp([x for x in sizes if x >= 64 * MiB] or sizes[-1:], iters)
    log(f"  memcpy {json.dumps({human(k): round(v, 2) for k, v in ceilings['memcpy'].items()})}; tcp {json.dumps({human(k): round(v, 2) for k, v in ceilings['tcp'].items()})}")
    log("== same host (Ray actors)")
    same = bench_same_host(sizes, iters, log)
    cross, note = None, ""
    if args.no_netns:
        note = "Not run (`--no-netns`)."
    elif os.geteuid() != 0 or not shutil.which("ip"):
        note = "Not run: needs root and iproute2 (`ip netns`)."
    else:
        log("== cross host (netns + veth)")
        csizes = [s for s in NETNS_SIZES if s in sizes] or [64 * MiB]
        cross = bench_cross_host(csizes, {s: (NETNS_ITERS.get(s, 4) if not args.quick else 3) for s in csizes}, log)
    command = "sudo .venv/bin/python scripts/bench_transport.py" + (" --quick" if args.quick else "") + (" --no-netns" if args.no_netns else "")
    text = render(same, ceilings, cross, note, command)
    text += f"\n\nWhole run: {time.monotonic() - started:.0f} s."
    print(text)
    if not args.no_write:
        write_section(text)
        log(f"wrote {DOC.relative_to(REPO)}")


if __name__ == "__main__":
    main()
