#!/usr/bin/env python3
"""Benchmark of the lab (docs/BENCHMARKS.md, "Lab"): ingest, the pages, dispatch overhead.

1. Ingest: RUNS runs of RESULTS results each (one results document per run, as `submit` and
   `accel lab run` store them: one transaction each), into SQLite (a file, WAL) and into
   PostgreSQL (a server this script starts with initdb + pg_ctl in target/bench-lab/, loopback,
   fsync on, removed after; or --pg URL). Reported: seconds in all, results per second.
2. The pages: `accel lab pages`'s render of each store after that ingest, cold (every run's
   page, the index with its analysis, every cell) and again after one more run (what a render
   after each ingest costs); then the index (`GET /lab/`) served by the node agent
   (`accel agent --lab-pages`, the binary of `ACCEL_BIN`, default target/release/accel):
   REQUESTS sequential requests on new connections after one warm-up; p50/p95/max in ms. The
   goal is < 200 ms.
3. Dispatch overhead: CHECKS checks of `true` through `accel lab run`'s dispatcher on a local
   `ray.cluster_utils.Cluster` with one lab node, against the same commands run directly with
   subprocess, in the same run; per check in ms, and the ratio.

    .venv/bin/python scripts/bench_lab.py [--runs 1000] [--results 50] [--checks 50] [--json]
"""

from __future__ import annotations

import argparse
import glob
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Postgres:
    """A throwaway PostgreSQL server under target/bench-lab (as the postgres user when root)."""

    def __init__(self) -> None:
        bindirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
        if not bindirs:
            raise SystemExit("bench_lab: PostgreSQL is not installed (scripts/setup.sh installs it), or pass --pg URL")
        self.bindir = bindirs[-1]
        os.makedirs(os.path.join(REPO, "target"), exist_ok=True)
        self.base = tempfile.mkdtemp(prefix="bench-lab-pg-", dir=os.path.join(REPO, "target"))
        os.chmod(self.base, 0o755)
        self.prefix: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.base, "postgres", "postgres")
            self.prefix = ["runuser", "-u", "postgres", "--"]
        self.data = os.path.join(self.base, "data")
        self.port = _free_port()
        subprocess.run([*self.prefix, f"{self.bindir}/initdb", "-D", self.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-locale"], check=True, capture_output=True, timeout=120)
        opts = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.base}"
        subprocess.run([*self.prefix, f"{self.bindir}/pg_ctl", "-D", self.data, "-l", os.path.join(self.base, "log"), "-o", opts, "-w", "start"], check=True, capture_output=True, timeout=120)
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def close(self) -> None:
        subprocess.run([*self.prefix, f"{self.bindir}/pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(self.base, ignore_errors=True)


def documents(runs: int, per_run: int) -> list[dict[str, Any]]:
    """Runs of one suite over 5 SKUs and 10 suites' worth of checks; a tenth are benchmarks."""
    from accel.lab import RESULTS_SCHEMA, fingerprint_hash

    env = {"fingerprint_version": 1, "fields": {"driver": {"value": "1.0", "source": "bench"}}}
    h = fingerprint_hash(env)
    out = []
    t0 = time.time() - runs * 60
    for i in range(runs):
        sku = f"sku-{i % 5}"
        results = []
        for j in range(per_run):
            t = t0 + i * 60 + j
            r: dict[str, Any] = {
                "check": f"check-{j}",
                "kind": "benchmark" if j % 10 == 0 else "test",
                "node": f"node-{i % 20}",
                "vendor": "v",
                "family": f"fam-{i % 5 // 2}",
                "sku": sku,
                "env_hash": h,
                "verdict": "fail" if (i * per_run + j) % 97 == 0 else "pass",
                "queued_at": t - 1,
                "started_at": t,
                "ended_at": t + 0.5,
                "log": "ok\n" * 20,
            }
            if j % 10 == 0:
                r["series"] = {"lat_us": 100.0 + (i % 7)}
            results.append(r)
        out.append({"schema": RESULTS_SCHEMA, "run": {"suite": f"suite-{i % 10}", "suite_version": "1", "commit": f"c{i:05d}", "created_at": t0 + i * 60}, "fingerprints": {h: env}, "results": results})
    return out


def bench_ingest(url: str, docs: list[dict[str, Any]]) -> dict[str, Any]:
    from accel.lab import open_store

    with open_store(url) as store:
        start = time.perf_counter()
        for d in docs:
            store.ingest(d)
        secs = time.perf_counter() - start
        n = store.count("results")
    return {"seconds": round(secs, 2), "results": n, "results_per_s": round(n / secs)}


def bench_pages(url: str, requests: int, extra: dict[str, Any]) -> dict[str, Any]:
    from accel.lab import open_store
    from accel.lab._pages import render

    out_dir = tempfile.mkdtemp(prefix="bench-lab-pages-", dir=os.path.join(REPO, "target"))
    try:
        with open_store(url) as store:
            start = time.perf_counter()
            render(store, out_dir, db_label="bench", window_days=0)
            cold_s = time.perf_counter() - start
            store.ingest(extra)
            start = time.perf_counter()
            render(store, out_dir, db_label="bench", window_days=0)
            warm_s = time.perf_counter() - start
        files = sum(len(f) for _, _, f in os.walk(out_dir))
        binary = os.environ.get("ACCEL_BIN") or os.path.join(REPO, "target", "release", "accel")
        agent = subprocess.Popen([binary, "agent", "--sample", "mi300x", "--listen", "127.0.0.1:0", "--interval", "60", "--lab-pages", out_dir], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert agent.stderr is not None
        port = int(agent.stderr.readline().strip().rstrip("/").rsplit(":", 1)[1])
        times = []
        size = 0
        try:
            for i in range(requests + 1):
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                start = time.perf_counter()
                conn.request("GET", "/lab/", headers={"Host": "127.0.0.1"})
                r = conn.getresponse()
                body = r.read()
                elapsed = time.perf_counter() - start
                conn.close()
                assert r.status == 200, r.status
                size = len(body)
                if i:
                    times.append(elapsed * 1000)
        finally:
            agent.terminate()
            agent.wait(timeout=10)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    times.sort()
    return {
        "render_cold_s": round(cold_s, 2),
        "render_after_one_run_s": round(warm_s, 2),
        "files": files,
        "p50_ms": round(statistics.median(times), 2),
        "p95_ms": round(times[int(len(times) * 0.95) - 1], 2),
        "max_ms": round(times[-1], 2),
        "bytes": size,
    }


def bench_dispatch(checks: int) -> dict[str, Any]:
    import ray
    from ray.cluster_utils import Cluster

    import accel
    import accel.ray as aray
    from accel.lab import open_store, parse_suite
    from accel.lab._run import run_suite

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    tmp = tempfile.mkdtemp(prefix="bl-", dir=os.path.join(REPO, "target"))
    # Ray's session files (and the workers' temp dirs) go here, not to /tmp; removed after.
    os.environ["RAY_TMPDIR"] = os.environ["TMPDIR"] = tmp
    tempfile.tempdir = None
    body = "".join(f'[[check]]\nname = "c{i}"\nkind = "test"\ncommand = ["true"]\ntimeout_s = 60\n\n' for i in range(checks))
    suite = parse_suite(f'[suite]\nname = "bench"\nversion = "1"\n\n{body}')
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        spec = aray.node_spec(accel.sample("dgx-h100"), "lab-node")
        c.add_node(num_cpus=1, num_gpus=spec["num_gpus"], resources=spec["resources"], labels=spec["labels"])
        c.wait_for_nodes()
        ray.init(address=c.address, log_to_driver=False)
        aray.publish_machine("lab-node", accel.sample("dgx-h100"))
        with open_store(os.path.join(tmp, "lab.db")) as store:
            run_suite(suite, store, commit="warm")  # a worker started, once
            start = time.perf_counter()
            summary = run_suite(suite, store, commit="bench")
            ray_s = time.perf_counter() - start
        assert summary.counts == {"pass": checks}, summary.counts
        start = time.perf_counter()
        for _ in range(checks):
            subprocess.run(["true"], check=True)
        direct_s = time.perf_counter() - start
    finally:
        ray.shutdown()
        c.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "checks": checks,
        "ray_ms_per_check": round(ray_s / checks * 1000, 1),
        "direct_ms_per_check": round(direct_s / checks * 1000, 2),
        "ratio": round(ray_s / direct_s, 1),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--results", type=int, default=50)
    p.add_argument("--requests", type=int, default=20)
    p.add_argument("--checks", type=int, default=50)
    p.add_argument("--pg", help="an existing, empty PostgreSQL database (default: start one)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    sys.path.insert(0, os.path.join(REPO, "python"))
    docs = documents(args.runs, args.results)
    out: dict[str, Any] = {"runs": args.runs, "results_per_run": args.results}
    tmp = tempfile.mkdtemp(prefix="bench-lab-", dir=os.path.join(REPO, "target"))
    pg = None if args.pg else Postgres()
    try:
        sqlite_url = os.path.join(tmp, "lab.db")
        pg_url = args.pg or (pg.url if pg else "")
        out["ingest_sqlite"] = bench_ingest(sqlite_url, docs)
        out["ingest_postgresql"] = bench_ingest(pg_url, docs)
        more = documents(args.runs + 1, args.results)[-1]
        out["pages_sqlite"] = bench_pages(sqlite_url, args.requests, more)
        more = documents(args.runs + 2, args.results)[-1]
        out["pages_postgresql"] = bench_pages(pg_url, args.requests, more)
    finally:
        if pg:
            pg.close()
        shutil.rmtree(tmp, ignore_errors=True)
    out["dispatch"] = bench_dispatch(args.checks)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for k, v in out.items():
            print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
