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
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import pathlib
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--connections", type=int, default=8)
    args = ap.parse_args()
    accel = REL / "accel"
    for p in (accel, REL / "examples" / "static_server", REL / "examples" / "bench_load"):
        if not p.exists():
            sys.exit(f"{p} missing: cargo build --release -p accel-cli && cargo build --release -p accel-agent --examples")
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="accel-bench-agent-"))
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
