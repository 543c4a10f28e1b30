#!/usr/bin/env python3
"""Placement's cost in accel's own code, before and after issue 38, in one run (docs/BENCHMARKS.md,
"Placement through one native call").

Two workloads, each run by the accel of this tree ("new") and by the accel of an older tree
("old", a built wheel unpacked into --old-site), alternating, in fresh driver processes:

- ray: a 64-bundle placement group (one GPU each) on a 16-node `ray.cluster_utils.Cluster` of
  DGX H100 samples, then `options(i)` for every bundle. The time in accel's code is the driver's
  wall time for both, less the time inside the Ray calls accel makes (placement group creation
  and wait, removal, `ray.nodes`, the KV reads, the available-resources query), each timed by a
  wrapper. The cluster is the same for both sides.
- rl: 4,096 one-GPU bundles on 512 DGX H100 nodes (`accel.cluster`), planned and turned into
  every bundle's options (no Ray cluster: a placeholder placement group object).

Both sides do the same work on the same inputs and build their inputs afresh each round. The
JSON passes on the Python side are counted (calls to `json.dumps`/`json.loads` from accel's
modules); the Rust side's are fixed by the code (see the report). Usage:

    python scripts/bench_placement_native.py --old-site /tmp/old38site [--rounds 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

DRIVER = r'''
import json, os, sys, time
import accel, accel.ray as aray
from accel.ray import _placement

mode, address = sys.argv[1], sys.argv[2]
new = hasattr(accel.Planner, "plan_for_ray")
passes = [0]
real_dumps, real_loads = json.dumps, json.loads
def counted(fn):
    def wrap(*a, **k):
        if sys._getframe(1).f_globals.get("__name__", "").startswith("accel"):
            passes[0] += 1
        return fn(*a, **k)
    return wrap
json.dumps, json.loads = counted(real_dumps), counted(real_loads)

class Dummy:
    id = None

def options_all(apg, n):
    out = []
    for i in range(n):
        try:
            out.append(apg.options(i))
        except Exception:
            # Ray's strategy object wants a real group: build what accel computes instead.
            out.append((apg.resources(i), apg.env(i)))
    return out

if mode == "rl":
    cluster = accel.cluster({"dgx-h100": 512})
    request = {"bundles": [{"count": 1}] * 4096}
    t0 = time.perf_counter()
    planner = accel.Planner(cluster)
    if new:
        got = planner.plan_for_ray(request)
        apg = _placement.AccelPlacementGroup(Dummy(), got["placement"], got["ray"])
    else:
        placement = planner.plan(request)
        machines = {b["node"]: planner.machine(b["node"]) for b in placement["bundles"]}
        apg = _placement.AccelPlacementGroup(Dummy(), placement, machines)
    opts = options_all(apg, 4096)
    total = time.perf_counter() - t0
    print(json.dumps({"total_s": total, "ray_s": 0.0, "passes": passes[0], "bundles": len(opts)}))
    sys.exit(0)

import importlib
import ray
import ray.util
from ray.experimental import internal_kv
from ray._private import state
pg_mod = importlib.import_module("ray.util.placement_group")
ray.init(address=address, log_to_driver=False)
spent = [0.0]
def timed(owner, name):
    fn = getattr(owner, name)
    def wrap(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            spent[0] += time.perf_counter() - t
    setattr(owner, name, wrap)
for owner, name in [(ray.util, "placement_group"), (ray.util, "remove_placement_group"), (ray, "nodes"),
                    (internal_kv, "_internal_kv_get"), (state, "available_resources_per_node"),
                    (pg_mod.PlacementGroup, "wait")]:
    timed(owner, name)
request = {"bundles": [{"count": 1}] * 64}
t0 = time.perf_counter()
apg = aray.placement_group(request, timeout_s=120)
opts = [apg.options(i) for i in range(apg.bundle_count)]
total = time.perf_counter() - t0
apg.remove()
ray.shutdown()
print(json.dumps({"total_s": total, "ray_s": spent[0], "passes": passes[0], "bundles": len(opts)}))
'''


def run_side(side: str, mode: str, address: str, old_site: str) -> dict:
    env = dict(os.environ)
    if side == "old":
        env["PYTHONPATH"] = old_site
    out = subprocess.run([sys.executable, "-c", DRIVER, mode, address], capture_output=True, text=True, env=env, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"{side} {mode} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def summary(runs: list[dict]) -> dict:
    accel_s = [r["total_s"] - r["ray_s"] for r in runs]
    return {
        "cold_accel_s": accel_s[0],
        "warm_accel_s": statistics.median(accel_s[1:]) if len(accel_s) > 1 else accel_s[0],
        "warm_total_s": statistics.median([r["total_s"] for r in runs[1:]]) if len(runs) > 1 else runs[0]["total_s"],
        "python_json_passes": runs[0]["passes"],
        "bundles": runs[0]["bundles"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old-site", required=True, help="a directory holding the older accel package (an unpacked wheel)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    import accel
    import accel.ray as aray
    import ray
    from ray.cluster_utils import Cluster

    results: dict = {}
    # rl: no cluster needed.
    runs: dict[str, list[dict]] = {"old": [], "new": []}
    for _ in range(args.rounds):
        for side in ("old", "new"):
            runs[side].append(run_side(side, "rl", "", args.old_site))
    results["rl"] = {side: summary(r) for side, r in runs.items()}
    # ray: one 16-node cluster for both sides.
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        machine = accel.sample("dgx-h100")
        for i in range(16):
            spec = aray.node_spec(machine, f"n{i}")
            c.add_node(num_cpus=0, num_gpus=spec["num_gpus"], resources=spec["resources"], labels=spec["labels"])
        c.wait_for_nodes()
        ray.init(address=c.address, log_to_driver=False)
        for i in range(16):
            aray.publish_machine(f"n{i}", machine)
        ray.shutdown()
        runs = {"old": [], "new": []}
        for _ in range(args.rounds):
            for side in ("old", "new"):
                runs[side].append(run_side(side, "ray", c.address, args.old_site))
        results["ray"] = {side: summary(r) for side, r in runs.items()}
    finally:
        c.shutdown()
    for w in results.values():
        w["ratio_warm"] = w["old"]["warm_accel_s"] / max(w["new"]["warm_accel_s"], 1e-9)
        w["ratio_cold"] = w["old"]["cold_accel_s"] / max(w["new"]["cold_accel_s"], 1e-9)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for name, w in results.items():
            for side in ("old", "new"):
                s = w[side]
                print(
                    f"{name:4} {side}: accel's code {s['warm_accel_s'] * 1e3:9.1f} ms warm, {s['cold_accel_s'] * 1e3:9.1f} ms cold; "
                    f"end to end {s['warm_total_s'] * 1e3:9.1f} ms; {s['python_json_passes']} JSON passes in Python; {s['bundles']} bundles"
                )
            print(f"{name:4} old/new in accel's code: {w['ratio_warm']:.1f}x warm, {w['ratio_cold']:.1f}x cold")
    return 0


if __name__ == "__main__":
    sys.exit(main())
