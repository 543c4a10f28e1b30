#!/usr/bin/env python3
"""Benchmark of `accel agent`'s /metrics (docs/BENCHMARKS.md, "Node agent").

The largest node in the test data, the 63-partition MI300X CPX capture
(test_data/hosts/mi300x-cpx), served by the release `accel agent --root <bundle>` with a replayed
readings document that gives every partition every device field and every GPU 8 xGMI links (the
values are generated here; the device set is the real capture's). The agent samples every second
(its own background work is inside its CPU figure). Load: open-loop GETs at RATE per second for
SECONDS (crates/agent/examples/bench_load.rs, latency from each request's scheduled time).

Baseline in the same run: the same HTTP stack (axum, one tokio thread) serving the same bytes
from memory (crates/agent/examples/static_server.rs), under the same load.

Reported: p50/p99/max latency, the first request after start (cold), peak RSS and its ratio to
the RSS after warm-up (5 s), CPU seconds per 1000 requests for both, and their ratio.

    cargo build --release -p accel-cli && cargo build --release -p accel-agent --examples
    python3 scripts/bench_agent.py [--rate 1000] [--seconds 60]

Attack mode (issue 17's audit, as a measurement, not a test): the release agent serving the
dgx-h100 sample on 127.0.0.1, under an open-file limit of --agent-nofile (1024, the common
default), while a separate attacker process keeps IDLE sockets open that never send a byte and
SLOW sockets that send one header byte every --slow-every seconds, reopening any socket the
agent closes (so the attack is sustained, not a one-off burst). Meanwhile REQUESTS fresh-
connection GETs of /v1/health are timed (connect to last byte; an unanswered one counts as
failed after 5 s). Reported as JSON on stdout: latency p50/p99/max, failures, the agent's VmRSS
(peak of 10 Hz samples) and VmHWM, how many sockets the agent closed and the attacker reopened,
the kernel's listen-queue overflows meanwhile (a dropped SYN costs its client a 1 s
retransmission), and the time from SIGTERM (sent with every attack socket still open) to exit.
Goals: p99 < 100 ms, RSS < 64 MiB, SIGTERM < 2 s.

    cargo build --release -p accel-cli
    python3 scripts/bench_agent.py --attack [--idle 600] [--slow 300] [--requests 200]
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing
import os
import pathlib
import resource
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[1]
REL = REPO / "target" / "release"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait(url: str) -> float:
    deadline = time.monotonic() + 120
    while True:
        t = time.perf_counter()
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                r.read()
            return time.perf_counter() - t
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def readings(machine: dict[str, Any]) -> dict[str, Any]:
    devices, links, seen = [], [], {}
    for a in machine["accelerators"]:
        part = a.get("partition")
        d = {
            "pci": a["pci"],
            "utilization_ratio": 0.5,
            "memory_used_bytes": 10 << 30,
            "memory_total_bytes": a.get("memory_bytes") or (24 << 30),
            "power_watts": 350.0,
            "temperature_celsius": 61.0,
            "clock_hz": {"sm": 2_100_000_000, "memory": 1_300_000_000},
            "errors": {"ecc_corrected_total": 0, "ecc_uncorrected_total": 0},
        }
        if part is not None:
            d["partition"] = part["index"]
        devices.append(d)
        seen.setdefault(a["pci"], True)
    for pci in seen:
        for link in range(8):
            links.append({"pci": pci, "link": link, "tx_bytes_total": 123456789 * (link + 1), "rx_bytes_total": 98765432 * (link + 1), "errors_total": 0})
    return {"protocol": 1, "devices": devices, "links": links}


def proc_stats(pid: int) -> tuple[float, int]:
    """(CPU seconds, RSS bytes) of a process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
    return cpu, rss


def run_load(name: str, proc: subprocess.Popen[bytes], url: str, rate: int, seconds: int, conns: int) -> dict[str, Any]:
    cold = wait(url)
    samples: list[tuple[float, int]] = []
    stop = threading.Event()

    def sampler() -> None:
        t0 = time.monotonic()
        while not stop.is_set():
            samples.append((time.monotonic() - t0, proc_stats(proc.pid)[1]))
            time.sleep(0.5)

    cpu0, rss0 = proc_stats(proc.pid)
    th = threading.Thread(target=sampler)
    th.start()
    out = subprocess.run([str(REL / "examples" / "bench_load"), url, str(rate), str(seconds), str(conns)], capture_output=True, text=True, check=True)
    stop.set()
    th.join()
    cpu1, _ = proc_stats(proc.pid)
    res: dict[str, Any] = json.loads(out.stdout)
    warm = next((r for t, r in samples if t >= 5.0), samples[-1][1])
    peak = max(r for _, r in samples)
    res.update(
        name=name,
        cold_first_request_ms=cold * 1e3,
        rss_start_mib=rss0 / 2**20,
        rss_after_warmup_mib=warm / 2**20,
        rss_peak_mib=peak / 2**20,
        rss_peak_over_warm=peak / warm,
        cpu_s=cpu1 - cpu0,
        cpu_ms_per_request=(cpu1 - cpu0) * 1e3 / max(res["requests"], 1),
    )
    return res


# --- attack mode -----------------------------------------------------------------------------

SLOW_HEAD = b"GET /v1/node HTTP/1.1\r\nHost: localhost\r\nX-Slow: "


def open_socket(port: int, slow: bool) -> socket.socket | None:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(2.0)
    try:
        s.connect(("127.0.0.1", port))
        if slow:
            s.sendall(SLOW_HEAD)
    except OSError:
        s.close()
        return None
    s.setblocking(False)
    return s


def attacker(port: int, idle: int, slow: int, slow_every: float, seconds: float, ready: Any, report: Any, stop: Any, out: Any) -> None:
    """Keeps `idle` silent and `slow` trickling sockets open for at most `seconds`, reopening
    what the agent closes; on `report`, sends its counts to `out` and holds its sockets open
    until `stop`."""
    socks: list[tuple[socket.socket | None, bool]] = [(open_socket(port, False), False) for _ in range(idle)]
    socks += [(open_socket(port, True), True) for _ in range(slow)]
    ready.set()
    reopened = failed_opens = 0
    next_byte = time.monotonic() + slow_every
    end = time.monotonic() + seconds
    while not report.is_set() and time.monotonic() < end:
        # poll, not select: descriptors beyond 1024 are the point.
        poller = select.poll()
        by_fd = {}
        for s, _ in socks:
            if s is not None:
                poller.register(s, select.POLLIN)
                by_fd[s.fileno()] = s
        readable = [by_fd[fd] for fd, _ in poller.poll(200)]
        gone = set()
        for s in readable:
            try:
                if not s.recv(65536):
                    gone.add(s)
            except OSError:
                gone.add(s)
        trickle = time.monotonic() >= next_byte
        if trickle:
            next_byte = time.monotonic() + slow_every
        for i, (s, is_slow) in enumerate(socks):
            if s is not None and is_slow and trickle and s not in gone:
                try:
                    s.send(b"a")
                except OSError:
                    gone.add(s)
            if s is None or s in gone:
                if s is not None:
                    s.close()
                n = open_socket(port, is_slow)
                reopened += 1
                failed_opens += n is None
                socks[i] = (n, is_slow)
    open_now = sum(1 for s, _ in socks if s is not None)
    out.send({"reopened": reopened, "failed_opens": failed_opens, "open_at_stop": open_now})
    # Hold every socket until the parent has timed SIGTERM (it waits at most 30 s), then close.
    stop.wait(90)
    for s, _ in socks:
        if s is not None:
            s.close()


def timed_get(port: int, path: str, timeout: float = 5.0) -> tuple[float, int]:
    """(seconds, status) of one fresh-connection GET; status 0 when unanswered in `timeout`."""
    t = time.perf_counter()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else 0
    except (OSError, ValueError, IndexError):
        status = 0
    return time.perf_counter() - t, status


def status_kib(pid: int) -> dict[str, int]:
    with open(f"/proc/{pid}/status") as f:
        return {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in f) if k in ("VmRSS", "VmHWM", "Threads")}


def listen_overflows() -> int:
    """The kernel's count of connections dropped because a listen queue was full (all sockets)."""
    with open("/proc/net/netstat") as f:
        lines = f.read().splitlines()
    for names, values in zip(lines, lines[1:]):
        if names.startswith("TcpExt:") and values.startswith("TcpExt:"):
            return int(dict(zip(names.split(), values.split())).get("ListenOverflows", 0))
    return 0


def pct(xs: list[float], q: float) -> float | None:
    """The q-quantile of xs, in ms rounded to 0.01; None when xs is empty (JSON has no NaN)."""
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 2) if xs else None


def attack(args: argparse.Namespace) -> int:
    accel = pathlib.Path(args.accel) if args.accel else REL / "accel"
    if not accel.exists():
        sys.exit(f"{accel} missing: cargo build --release -p accel-cli")
    # The attacker's sockets, the requests, and slack: our own limit, not the agent's.
    need = args.idle + args.slow + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
    port = free_port()
    cmd = [str(accel), "agent", "--sample", args.sample, "--listen", f"127.0.0.1:{port}"]

    def agent_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (args.agent_nofile, max(args.agent_nofile, hard)))

    agent = subprocess.Popen(cmd, stderr=subprocess.DEVNULL, preexec_fn=agent_limit)
    try:
        wait(f"http://127.0.0.1:{port}/v1/health")
        time.sleep(0.5)
        baseline = [timed_get(port, "/v1/health") for _ in range(args.requests)]
        rss_start = status_kib(agent.pid)
        ready, report, stop = multiprocessing.Event(), multiprocessing.Event(), multiprocessing.Event()
        recv, send = multiprocessing.Pipe(duplex=False)
        proc = multiprocessing.Process(
            target=attacker, args=(port, args.idle, args.slow, args.slow_every, args.seconds + 60, ready, report, stop, send)
        )
        proc.start()
        ready.wait(60)
        overflows0 = listen_overflows()
        peak = {"VmRSS": 0, "Threads": 0}
        sampling = threading.Event()

        def sample() -> None:
            while not sampling.is_set():
                st = status_kib(agent.pid)
                peak["VmRSS"] = max(peak["VmRSS"], st["VmRSS"])
                peak["Threads"] = max(peak["Threads"], st["Threads"])
                time.sleep(0.1)

        th = threading.Thread(target=sample)
        th.start()
        # Spread the requests over the attack, so they meet the slow sockets' whole lifetime.
        lat: list[float] = []
        failed = 0
        t0 = time.monotonic()
        gap = args.seconds / args.requests
        for i in range(args.requests):
            pause = t0 + i * gap - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            dt, status = timed_get(port, "/v1/health")
            if status == 200:
                lat.append(dt)
            else:
                failed += 1
        attack_s = time.monotonic() - t0
        overflows = listen_overflows() - overflows0
        report.set()
        counts = recv.recv() if recv.poll(30) else {}
        sampling.set()
        th.join()
        end = status_kib(agent.pid)
        # SIGTERM with every attack socket still open.
        t = time.perf_counter()
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(timeout=30)
            sigterm_s: float | None = time.perf_counter() - t
        except subprocess.TimeoutExpired:
            sigterm_s = None
        stop.set()
        proc.join(95)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    ms = [x * 1e3 for x in lat]
    base_ms = [x * 1e3 for x, st in baseline if st == 200]
    result = {
        "command": " ".join(["python3", "scripts/bench_agent.py", *sys.argv[1:]]),
        "agent": " ".join(cmd[:1] + ["agent", "--sample", args.sample, "--listen", "127.0.0.1:PORT"]),
        "agent_nofile": args.agent_nofile,
        "idle_sockets": args.idle,
        "slow_sockets": args.slow,
        "slow_byte_every_s": args.slow_every,
        "attack_s": round(attack_s, 1),
        "requests": args.requests,
        "failed": failed,
        "health_p50_ms": pct(ms, 0.50),
        "health_p99_ms": pct(ms, 0.99),
        "health_max_ms": round(max(ms), 2) if ms else None,
        "no_attack_p50_ms": pct(base_ms, 0.50),
        "no_attack_p99_ms": pct(base_ms, 0.99),
        "rss_start_mib": round(rss_start["VmRSS"] / 1024, 1),
        "rss_peak_mib": round(peak["VmRSS"] / 1024, 1),
        "rss_end_mib": round(end["VmRSS"] / 1024, 1),
        "vm_hwm_mib": round(end["VmHWM"] / 1024, 1),
        "threads_peak": peak["Threads"],
        "listen_queue_overflows": overflows,
        "attacker": counts,
        "sigterm_to_exit_s": round(sigterm_s, 3) if sigterm_s is not None else None,
        "loadavg": os.getloadavg(),
    }
    result["goals_met"] = {
        "p99_under_100ms": failed == 0 and bool(ms) and pct(ms, 0.99) < 100,
        "rss_under_64mib": result["vm_hwm_mib"] < 64,
        "sigterm_under_2s": sigterm_s is not None and sigterm_s < 2,
    }
    print(json.dumps(result, indent=1))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=int, default=None, help="load seconds (60), or attack seconds (20)")
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--attack", action="store_true", help="idle and slow-header sockets, then SIGTERM (see above)")
    ap.add_argument("--idle", type=int, default=600)
    ap.add_argument("--slow", type=int, default=300)
    ap.add_argument("--slow-every", type=float, default=2.0, help="seconds between a slow socket's header bytes")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--sample", default="dgx-h100")
    ap.add_argument("--agent-nofile", type=int, default=1024)
    ap.add_argument("--accel", help="the accel binary (default target/release/accel)")
    args = ap.parse_args()
    if args.attack:
        args.seconds = args.seconds or 20
        return attack(args)
    args.seconds = args.seconds or 60
    accel = REL / "accel"
    for p in (accel, REL / "examples" / "static_server", REL / "examples" / "bench_load"):
        if not p.exists():
            sys.exit(f"{p} missing: cargo build --release -p accel-cli && cargo build --release -p accel-agent --examples")
    with tempfile.TemporaryDirectory(prefix="accel-bench-agent-") as tmp:
        return load(args, accel, pathlib.Path(tmp))


def load(args: argparse.Namespace, accel: pathlib.Path, tmp: pathlib.Path) -> int:
    """The /metrics load benchmark, its files under `tmp`."""
    bundle = tmp / "mi300x-cpx.bundle"
    bundle.write_bytes(gzip.decompress((REPO / "test_data/hosts/mi300x-cpx/capture.bundle.gz").read_bytes()))
    machine = json.loads(subprocess.run([str(accel), "discover", "--root", str(bundle), "--json"], capture_output=True, check=True).stdout)
    replay = tmp / "readings.json"
    replay.write_text(json.dumps(readings(machine)))
    port = free_port()
    agent = subprocess.Popen(
        [str(accel), "agent", "--root", str(bundle), "--replay", str(replay), "--interval", "1", "--listen", f"127.0.0.1:{port}"],
        stderr=subprocess.DEVNULL,
    )
    results = []
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        wait(url)
        with urllib.request.urlopen(url) as r:
            body = r.read()
        (tmp / "metrics.txt").write_bytes(body)
        series = sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))
        results.append(run_load("accel agent /metrics", agent, url, args.rate, args.seconds, args.connections))
    finally:
        agent.terminate()
        agent.wait()
    port = free_port()
    static = subprocess.Popen([str(REL / "examples" / "static_server"), str(tmp / "metrics.txt"), f"127.0.0.1:{port}"], stderr=subprocess.DEVNULL)
    try:
        results.append(run_load("static bytes (baseline)", static, f"http://127.0.0.1:{port}/metrics", args.rate, args.seconds, args.connections))
    finally:
        static.terminate()
        static.wait()
    load = os.getloadavg()
    print(json.dumps({"series": series, "body_bytes": len(body), "loadavg": load, "results": results}, indent=1))
    a, b = results
    print()
    print(f"/metrics of mi300x-cpx: {len(machine['accelerators'])} partitions, {series} series, {len(body)} bytes; "
          f"{args.rate} req/s for {args.seconds} s over {args.connections} connections; load average before: {load[0]:.2f}")
    print()
    print("| server | requests | errors | p50 ms | p99 ms | max ms | cold ms | RSS warm MiB | RSS peak MiB | peak/warm | CPU ms/request |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['name']} | {r['requests']} | {r['errors']} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['max_ms']:.1f} | {r['cold_first_request_ms']:.1f} | "
              f"{r['rss_after_warmup_mib']:.1f} | {r['rss_peak_mib']:.1f} | {r['rss_peak_over_warm']:.3f} | {r['cpu_ms_per_request']:.3f} |")
    print()
    print(f"ratios agent/baseline: p50 {a['p50_ms'] / b['p50_ms']:.2f}x, p99 {a['p99_ms'] / b['p99_ms']:.2f}x, CPU per request {a['cpu_ms_per_request'] / max(b['cpu_ms_per_request'], 1e-9):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
