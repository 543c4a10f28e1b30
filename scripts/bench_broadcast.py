#!/usr/bin/env python3
"""Broadcast over links of a fixed rate; writes its section of docs/BENCHMARKS.md.

    sudo .venv/bin/python scripts/bench_broadcast.py                # 1 GiB, 2 Gbit/s, 4 readers (~5 min)
    sudo .venv/bin/python scripts/bench_broadcast.py --size 256M --iters 2   # ~1 min

On one machine every "node" shares the same two cores and memory, so a broadcast is bound by
CPU, not by any link, and sending from one owner costs what relaying costs. On a real cluster
each node has one NIC, and the owner's uplink is what a broadcast saturates. This benchmark
builds that: one network namespace per node (created and removed here; needs root and
iproute2), all plugged into a bridge, each node's uplink shaped to `--rate` with a token
bucket (`tc qdisc ... tbf`). A Ray node runs in each namespace (`ray start`, its own raylet and
object store); the producer actor is on the head's node and one consumer on each other node.

Every round of every system (each system's rounds in a block, the readers' pooled memory
returned between blocks, so all start alike): the producer writes every byte of a fresh array, every consumer receives it (given the result
as a task argument) and reads every byte. Systems:

- Ray: the producer returns the array; each consumer takes it as an argument (Ray's object
  manager pulls it into the consumer node's store, in chunks, from any node that has a copy);
- accel direct: `put(buf, readers=N)`; each consumer streams it from the owner into a
  preallocated array (`get(ref, out=buf)`);
- accel relay: the same, with `get(ref, relay=True)`: the readers pass it on to each other, on
  the owner's schedule (a chain by default), every piece forwarded as it lands.

Reported: the time until the last consumer holds the array (delivered) and has read it (end
to end), cold (first round) and warm (p50 of the rest), and the floor: the time one link takes
to carry the bytes once at the shaped rate.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_transport as bt  # noqa: E402  (the actor classes and timing helpers)

BEGIN, END = "<!-- bench:broadcast:begin -->", "<!-- bench:broadcast:end -->"
MiB = 1 << 20
SW, BR = "accelbcSW", "accelbcbr"
RAY_PORT = 6391
SYSTEMS = ["ray", "accel", "accel_relay"]


def node(i: int) -> str:
    return f"accelbc{i}"


def addr(i: int) -> str:
    return f"10.79.0.{i + 1}"


def sh(*cmd: str, check: bool = True) -> None:
    subprocess.run(cmd, check=check, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def net_up(n: int, rate: str) -> None:
    """`n` node namespaces on a bridge in a switch namespace, each node's uplink shaped."""
    net_down(n)
    sh("ip", "netns", "add", SW)
    sh("ip", "-n", SW, "link", "add", BR, "type", "bridge")
    sh("ip", "-n", SW, "link", "set", BR, "up")
    for i in range(n):
        ns = node(i)
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", f"p{i}", "netns", SW)
        sh("ip", "-n", SW, "link", "set", f"p{i}", "master", BR, "up")
        sh("ip", "-n", ns, "addr", "add", f"{addr(i)}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        # The node's NIC: everything it sends leaves at `rate` (a burst of a few TSO segments).
        sh("tc", "-n", ns, "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", rate, "burst", "1mb", "latency", "200ms")


def net_down(n: int) -> None:
    for i in range(n):
        ns = node(i)
        for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split():
            try:
                os.kill(int(pid), 9)
            except (OSError, ValueError):
                pass
    time.sleep(0.5)
    for ns in [node(i) for i in range(n)] + [SW]:
        sh("ip", "netns", "del", ns, check=False)


def role_driver(size: int, iters: int, readers: int) -> None:
    """Runs in the head's namespace: the rounds, printed as JSON."""
    import ray

    Producer, Consumer = bt.define_actors()
    ray.init(address=f"{addr(0)}:{RAY_PORT}", log_to_driver=False)
    tcp = {"env_vars": {"ACCEL_TRANSPORT_PATH": "tcp"}}  # one kernel: force the cross-host path
    p = Producer.options(resources={node(0): 0.01}).remote()
    cs = [Consumer.options(resources={node(i + 1): 0.01}, runtime_env=tcp).remote() for i in range(readers)]
    ray.get([p.ready.remote()] + [c.ready.remote() for c in cs])
    rows: dict[str, list] = {s: [] for s in SYSTEMS}
    for system in SYSTEMS:
        ray.get([c.trim.remote() for c in cs])  # every system starts from the same memory
        for i in range(iters + 1):
            if system == "ray":
                made = p.ray_make.remote(size, i)
                got = ray.get([c.ray_take.remote(made, i) for c in cs])
            else:
                made = p.accel_make.remote(size, i, readers)
                relay = system == "accel_relay"
                got = ray.get([c.accel_take.remote(made, i, not relay, relay) for c in cs])
            row = (got[0][0], got[0][1], max(g[2] for g in got), max(g[3] for g in got))
            rows[system].append(row)
            print(f"  round {i} {system:11}: delivered {(row[2] - row[1]) * 1e3:.0f} ms, e2e {(row[3] - row[0]) * 1e3:.0f} ms", file=sys.stderr, flush=True)
    ray.shutdown()
    print(json.dumps({s: bt.timings(r) for s, r in rows.items()}), flush=True)


def rate_bytes(rate: str) -> float:
    """`2gbit` -> bytes per second."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", rate.lower())
    if not m:
        raise SystemExit(f"--rate {rate}: expected like 2gbit, 500mbit")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] / 8


def run(size: int, rate: str, readers: int, iters: int) -> dict:
    n = readers + 1
    net_up(n, rate)
    env = dict(os.environ)
    env.setdefault("ACCEL_TRANSPORT_SECRET", base64.b16encode(os.urandom(16)).decode())
    env.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": base64.b16encode(os.urandom(32)).decode().lower()})
    store = str(int(size * 2.5) + 256 * MiB)
    try:
        for i in range(n):
            extra = ["--head", f"--port={RAY_PORT}", "--include-dashboard=false"] if i == 0 else [f"--address={addr(0)}:{RAY_PORT}"]
            started = subprocess.run(
                ["ip", "netns", "exec", node(i), sys.executable, "-m", "ray.scripts.scripts", "start", f"--node-ip-address={addr(i)}",
                 "--num-cpus=1", f"--resources={json.dumps({node(i): 1})}", f"--object-store-memory={store}", "--disable-usage-stats", *extra],
                env={**env, "ACCEL_TRANSPORT_BIND": f"{addr(i)}:0"}, capture_output=True, text=True, timeout=300,
            )
            if started.returncode != 0:
                raise RuntimeError(f"ray start in {node(i)} failed:\n{started.stdout}\n{started.stderr}")
        driver = subprocess.Popen(
            ["ip", "netns", "exec", node(0), sys.executable, __file__, "--role", "driver", "--size", str(size), "--iters", str(iters), "--readers", str(readers)],
            env={**env, "ACCEL_TRANSPORT_BIND": f"{addr(0)}:0"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        out, err = driver.communicate(timeout=3600)
        for line in err.splitlines():
            if line.startswith("  round"):
                print(line, file=sys.stderr)
        if driver.returncode != 0:
            raise RuntimeError(f"the driver failed:\n{err[-3000:]}")
        return json.loads(out.strip().splitlines()[-1])
    finally:
        net_down(n)
        from accel import transport as T

        T.sweep()


def render(res: dict, size: int, rate: str, readers: int, iters: int, command: str, load: tuple, seconds: float) -> str:
    floor = size / rate_bytes(rate)
    warm = {s: {k: statistics.median(v[1:]) for k, v in res[s].items()} for s in SYSTEMS}
    cold = {s: {k: v[0] for k, v in res[s].items()} for s in SYSTEMS}
    names = {"ray": "Ray object manager", "accel": "accel direct (`get(ref, out=buf)`)", "accel_relay": "accel relay (`get(ref, relay=True)`)"}
    ms = lambda x: f"{x * 1e3:.0f} ms"  # noqa: E731
    lines = [
        f"{platform.machine()} with {os.cpu_count()} CPUs, Linux {platform.release()}, Ray 2.60.0, "
        f"{datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}; load average "
        + " / ".join(f"{x:.1f}" for x in load) + " at the start.",
        "",
        f"{bt.human(size)} from the producer's node to consumers on {readers} other nodes; every node's uplink shaped to "
        f"{rate} (`tc tbf`), so one link carries the bytes once in {ms(floor)} (the floor). {iters} warm rounds after a cold one "
        "for each system; times to the last consumer.",
        "",
        "| system | cold delivered | warm delivered | warm end to end | warm delivered / floor |",
        "|---|---|---|---|---|",
    ]
    for s in SYSTEMS:
        lines.append(f"| {names[s]} | {ms(cold[s]['delivered'])} | {ms(warm[s]['delivered'])} | {ms(warm[s]['e2e'])} | {warm[s]['delivered'] / floor:.2f}x |")
    r = warm["ray"]
    lines += [
        "",
        f"- Broadcast, delivered to the last of {readers} consumers, Ray / accel relay: "
        f"**{r['delivered'] / warm['accel_relay']['delivered']:.2f}x** (issue 12's goal 3x: "
        f"{'met' if r['delivered'] / warm['accel_relay']['delivered'] >= 3 else 'NOT met'}); end to end "
        f"{r['e2e'] / warm['accel_relay']['e2e']:.2f}x.",
        f"- Ray / accel direct: {r['delivered'] / warm['accel']['delivered']:.2f}x delivered; relaying against streaming every "
        f"reader from the owner: {warm['accel']['delivered'] / warm['accel_relay']['delivered']:.2f}x.",
        "",
        f"Reproduce: `{command}` (whole run {seconds:.0f} s).",
    ]
    return "\n".join(lines)


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+)([KMG]?)", text.upper())
    if not m:
        raise SystemExit(f"--size {text}: expected like 256M or 1G")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="1G", help="bytes per broadcast, like 256M or 1G (default 1G)")
    ap.add_argument("--rate", default="2gbit", help="every node's uplink, as tc writes it (default 2gbit)")
    ap.add_argument("--readers", type=int, default=4, help="consumers, one node each (default 4)")
    ap.add_argument("--iters", type=int, default=3, help="warm rounds per system (default 3)")
    ap.add_argument("--no-write", action="store_true", help="print, do not touch docs/BENCHMARKS.md")
    ap.add_argument("--role", help=argparse.SUPPRESS)
    args = ap.parse_args()
    size = parse_size(args.size) if isinstance(args.size, str) else args.size
    if args.role == "driver":
        return role_driver(int(args.size), args.iters, args.readers)
    if os.geteuid() != 0:
        raise SystemExit("needs root (network namespaces and tc): run it with sudo")
    rate_bytes(args.rate)
    started, load = time.monotonic(), os.getloadavg()
    res = run(size, args.rate, args.readers, args.iters)
    shown = " ".join(a for a in sys.argv[1:] if a != "--no-write")
    text = render(res, size, args.rate, args.readers, args.iters, f"sudo .venv/bin/python scripts/bench_broadcast.py {shown}".strip(), load, time.monotonic() - started)
    print(text)
    if not args.no_write:
        bt.write_section(text, BEGIN, END, "Broadcast over shaped links")


if __name__ == "__main__":
    main()
