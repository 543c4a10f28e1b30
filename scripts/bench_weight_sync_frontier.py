#!/usr/bin/env python3
"""Issue 36's measures of the weight sync; writes its section of docs/BENCHMARKS.md.

    sudo .venv/bin/python scripts/bench_weight_sync_frontier.py                 # 1 GiB and 1.5 GiB (~15 min)
    sudo .venv/bin/python scripts/bench_weight_sync_frontier.py --sizes 256M --iters 1 --no-write
    sudo .venv/bin/python scripts/bench_weight_sync_frontier.py --systems fp8,admit --others /tmp/bench36_run1.json

On the shaped-link cluster of `bench_weight_sync.py` (a namespace and a Ray node per node, both
directions of every link shaped by `tc tbf`; 4 trainer nodes of one rank to 4 inference nodes of
two), with the same model and layouts, fresh weights every round and every byte read:

- `bf16`: the weight sync as there; serving reads on every rank meanwhile (their p99 wait);
- `fp8`: the same trainers, inference in FP8 E4M3 with 128x128 block scales, quantised at the
  source (half the bytes on every link; its floor is its own);
- `admit`: bf16 with admission (`accel.ray.Admission(receivers=1)`: one receiver at a time per
  source link), for the serving reads' p99 with and without;
- elastic, after the bf16 rounds: a replica of rank 0 joins (`join_weight_target`: caught up from
  rank 0, not from the trainers) and the next step runs with it; in the step after, the joiner is
  killed 0.5 s in and the step has a deadline of three median syncs: the others' time against
  their median;
- the fabric model (`Plan.predict`) for each run, with the links' goodput measured in the same
  cluster before Ray starts (one TCP stream over a shaped link, 512 MiB), admission's limits,
  the sources' packing before sending (FP8's conversion at one CPU thread's rates measured in
  the same run, `cargo run --release -p accel-reshard --example fp8_speed`; bf16's copies) and
  the CPU every byte over a NIC costs on this machine's cores (every node is a namespace of
  it): both calibrated by syncs of the first 1 and 16 tensors in the same cluster
  (`CALIBRATION`): their packing time, and their busy CPU (/proc/stat) less the machine's load
  without a sync. Within 15% of the measured warm sync is the goal;
- the planner at frontier scale: `cargo run --release -p accel-reshard --example plan_scale` (the
  Kimi-K2-shaped pair of `crates/reshard/tests/kimi.rs`, and the model's prediction for it on an
  H100 fleet), and the plan cache from Python (in process and from bytes) on the 1000-tensor layout.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_broadcast as bb  # noqa: E402
import bench_transport as bt  # noqa: E402
import bench_weight_sync as bws  # noqa: E402

BEGIN, END = "<!-- bench:weightsync36:begin -->", "<!-- bench:weightsync36:end -->"
SYSTEMS = ["bf16", "fp8", "admit"]
ROOT = Path(__file__).resolve().parent.parent
GOODPUT_BYTES = 512 << 20


def layouts(size: int, count: int, system: str):
    src, dst = bws.layouts(size, count)
    if system == "fp8":
        dst = dst.with_dtypes("f8e4m3", scale="block")
    return src, dst


def subset(layout, names: list[str]):
    """The layout of some of its tensors."""
    from accel import weights as W

    ranks = [{n: r[n] for n in names if n in r} for r in layout.ranks]
    return W.Layout({n: layout.tensors[n] for n in names}, ranks, layout.hosts, {n: v for n, v in layout.scales.items() if n in names})


CALIBRATION = {"small": 1, "mid": 16}  # the fabric model's calibration syncs: how many of the tensors


def part(size: int, count: int, system: str, key: str):
    """The plan of a calibration sync (the first tensors of the model)."""
    from accel import weights as W

    src, dst = layouts(size, count, system)
    names = list(src.tensors)[: CALIBRATION[key]]
    return W.plan(subset(src, names), subset(dst, names))


def goodput() -> float:
    """Bytes per second one TCP stream moves from node 0 to node TRAINERS over the shaped links."""
    server = (
        "import socket,time,sys\n"
        "s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);s.bind(('',5999));s.listen(1)\n"
        "c,_=s.accept();n=0;buf=bytearray(1<<20);t=None\n"
        f"while n<{GOODPUT_BYTES}:\n"
        "    k=c.recv_into(buf)\n"
        "    if t is None: t=time.perf_counter()\n"
        "    if not k: break\n"
        "    n+=k\n"
        "print(n/(time.perf_counter()-t))\n"
    )
    client = (
        "import socket,time\n"
        f"s=socket.create_connection(('{bb.addr(bws.TRAINERS)}',5999));b=bytes(1<<20)\n"
        f"for _ in range({GOODPUT_BYTES >> 20}): s.sendall(b)\n"
        "s.close()\n"
    )
    srv = subprocess.Popen(["ip", "netns", "exec", bb.node(bws.TRAINERS), sys.executable, "-c", server], stdout=subprocess.PIPE, text=True)
    time.sleep(1.0)
    subprocess.run(["ip", "netns", "exec", bb.node(0), sys.executable, "-c", client], check=True, timeout=600)
    out, _ = srv.communicate(timeout=600)
    return float(out.strip())


def role_driver(size: int, system: str, count: int, iters: int) -> None:
    import ray

    import accel.ray
    from accel import weights as W

    ray.init(address=f"{bb.addr(0)}:{bb.RAY_PORT}", log_to_driver=False)
    Trainer, Worker = bws.define_actors()
    tcp = {"env_vars": {"ACCEL_TRANSPORT_PATH": "tcp"}}
    src, dst = layouts(size, count, system)
    trainers = [Trainer.options(resources={bb.node(r): 0.01}, runtime_env=tcp).remote(src, r) for r in range(bws.TRAINERS)]
    node_of = lambda d: bb.node(bws.TRAINERS + d // bws.PER_NODE)  # noqa: E731
    workers = [Worker.options(resources={node_of(d): 0.01}, runtime_env=tcp).remote(src, dst, d) for d in range(bws.WORKERS)]
    ray.get([a.ready.remote() for a in trainers + workers])

    def setup(plan):
        ray.get(
            [a.setup_weight_source.remote(plan.for_source(r)) for r, a in enumerate(trainers)]
            + [w.setup_weight_target.remote(plan.for_destination(d)) for d, w in enumerate(workers)]
        )

    admission = accel.ray.Admission(receivers=1) if system == "admit" else None
    p = None
    res: dict = {"rows": []}

    def step(n: int, ranks: list, **kw) -> dict:
        t0 = time.perf_counter()
        rep = accel.ray.sync_weights(p, [a.accel_step.remote(n) for a in trainers], ranks, started=t0, admission=admission, **kw)
        cpu_end = bws.cpu_busy()
        fresh, cpu_fresh = max(ray.get([a.filled_cpu_at.remote() for a in trainers]))
        live = [w for d, w in enumerate(ranks) if d not in rep.failed]
        reader = "fp8_read" if system == "fp8" else "accel_read"
        reads = ray.get([getattr(w, reader).remote(n) for w in live], timeout=600)
        waits = ray.get([w.longest_wait.remote() for w in live])
        row = {
            "sync": t0 + rep.total - fresh, "landing": t0 + rep.landing - fresh, "pause": rep.pause, "total": rep.total,
            "nbytes": rep.nbytes, "serving_p99": max(w[2] for w in waits), "serving_max": max(w[0] for w in waits),
            "admission_wait": max(rep.admission_wait.values(), default=0.0), "failed": rep.failed, "done": max(r[0] for r in reads) - t0,
            "cpu_s": cpu_end - cpu_fresh, "pack_s": max(ray.get([a.packed_s.remote() for a in trainers])),
            "landed_s": [x.seconds for x in rep.landed],  # each rank that switched, in rank order
        }
        print(f"  {bws.text(size)} {system} step {n}: sync {row['sync'] * 1e3:.0f} ms, pause {row['pause'] * 1e3:.1f} ms, "
              f"serving p99 {row['serving_p99'] * 1e3:.1f} ms, CPU {row['cpu_s']:.2f} s busy ({row['cpu_s'] / row['sync'] / (os.cpu_count() or 1) * 100:.0f}% of the machine), packing {row['pack_s'] * 1e3:.0f} ms", file=sys.stderr, flush=True)
        return row

    # The fabric model's calibration: syncs of the first tensors of the 32 (the same actors,
    # calls and checks), `COLD` cold rounds and `CALIBRATION_WARM` warm ones each, after the load
    # the machine carries without a sync (the whole machine's busy CPU, /proc/stat); once before
    # the measured rounds and once after them, so that a load that other tenants of the machine
    # add or take away during the run weighs on both sides (medians over the two). The serving
    # reads run from the first calibration on, as in the measured syncs: they take a share of
    # the cores the sources pack on (FP8's warm packing at 512 MiB, in one pair of runs,
    # was 864 ms without them and 1003 ms with them).
    calibrated: dict = {key: [] for key in CALIBRATION}
    quiet: list = []

    def calibrate(phase: int) -> None:
        nonlocal p
        for j, key in enumerate(CALIBRATION):
            p = part(size, count, system, key)
            setup(p)
            if j == 0:
                if phase == 0:
                    ray.get([w.serve.remote() for w in workers])
                c0, t0 = bws.cpu_busy(), time.perf_counter()
                time.sleep(QUIET_S)
                quiet.append((bws.cpu_busy() - c0) / (time.perf_counter() - t0))
            rows = [step(1000 * CALIBRATION[key] + 100 * phase + i, workers) for i in range(CALIBRATION_WARM + COLD)]
            calibrated[key].append(rows[COLD:])

    calibrate(0)
    p = W.plan(src, dst)
    setup(p)
    res["plan"] = {"bytes": p.bytes, "links": p.links, "seconds": p.seconds}
    res["cold"], res["calibration_tensors"] = COLD, CALIBRATION
    for i in range(iters + COLD):
        res["rows"].append(step(i + 1, workers))
    if system == "bf16":
        # Elastic: a replica of rank 0 joins between steps, then is killed during a step.
        median = statistics.median(r["sync"] for r in warm(res))
        joiner = Worker.options(resources={node_of(0): 0.01}, runtime_env=tcp).remote(src, dst, 0)
        ray.get(joiner.ready.remote())
        t = time.perf_counter()
        p, rank, catch_up = accel.ray.join_weight_target(p, trainers, joiner, like=0, peers=workers)
        join_s = time.perf_counter() - t
        ray.get(joiner.serve.remote())
        fleet = workers + [joiner]
        with_joiner = step(iters + COLD + 1, fleet)
        threading.Timer(0.5, ray.kill, args=(joiner,)).start()
        killed = step(iters + COLD + 2, fleet, deadline=3 * median)
        res["elastic"] = {"median": median, "join_s": join_s, "catch_up": catch_up, "with_joiner": with_joiner["sync"], "rank": rank,
                          "landed_before": res["rows"][-1]["landed_s"], "landed_with": with_joiner["landed_s"],
                          "killed": killed["sync"], "failed": killed["failed"], "deadline": 3 * median}
    calibrate(1)
    res["quiet_cores"], res["quiet_phases"] = statistics.mean(quiet), quiet
    for key, phases in calibrated.items():
        res[key] = {k: statistics.median(r[k] for rows in phases for r in rows) for k in ("sync", "cpu_s", "pack_s")}
        res[key]["phases"] = [{k: statistics.median(r[k] for r in rows) for k in ("sync", "cpu_s", "pack_s")} for rows in phases]
    ray.get([a.reset.remote() for a in trainers] + [w.reset.remote() for w in workers])
    ray.shutdown()
    print(json.dumps(res), flush=True)


QUIET_S = 2.0  # seconds of the machine's load without a sync, before the calibration
CALIBRATION_WARM = 5
# Rounds before the warm ones. Every target rank double-buffers; until `Receiver` touched both
# sets when made, the second round was the first touch of the second set (1.3x to 2.5x the
# warm median), so it stays out of the medians (and is shown beside the first).
COLD = 2


def warm(got: dict) -> list:
    """A run's warm rounds (a run saved before `COLD` was 2 had one cold round)."""
    rows: list = got["rows"][got.get("cold", 1) :]
    return rows or got["rows"][-1:]


def convert_rates() -> dict:
    """One CPU thread's FP8 rates (GB/s of bf16 input: the scales pass and the encoding), from
    `fp8_speed`'s last line, measured now on this machine."""
    subprocess.run(["cargo", "build", "-q", "--release", "-p", "accel-reshard", "--example", "fp8_speed"], cwd=ROOT, check=True)
    out = subprocess.run([str(ROOT / "target/release/examples/fp8_speed")], capture_output=True, text=True, check=True)
    got: dict = json.loads(out.stdout.strip().splitlines()[-1])
    return got


def prediction(size: int, count: int, system: str, rate: str, got: dict, rates: dict) -> dict:
    """The model's time for the full sync, from what the same cluster measured (`got`): the
    links at the measured goodput (wave after wave under admission); the sources' packing
    before sending (as `Sender.publish` packs), from the calibration syncs: the larger
    sync's packing less the smaller one's against the model's packing of the difference at
    one thread's rates, which gives the share of a thread each trainer packs on (FP8, at
    `fp8_speed`'s rates) or the rate a trainer copies at (bf16); the CPU every byte moved
    costs, from the same syncs: the larger sync's busy CPU less the smaller one's and
    less the quiet load over the difference in time, over the difference in bytes over NICs,
    on the cores the quiet load leaves; plus the fixed cost the smaller sync shows beyond
    the model's time for it."""
    from accel import weights as W

    src, dst = layouts(size, count, system)
    nominal = bb.rate_bytes(rate)
    fleet: dict = {"nics": 1, "nic_gbit": nominal * 8 / 1e9, "efficiency": got["calibration"] / nominal, "chunk_bytes": 4 << 20}
    if system == "admit":
        fleet["admission"] = {"receivers": 1}
    s, m = got["small"], got["mid"]
    # Packing: the model's at one thread's rates (copies at 1 GB/s) against the calibration's.
    unit = {**rates, "copy_gbyte": 1.0, "threads": 1.0}
    one = [part(size, count, system, k).predict({**fleet, "convert": unit})["convert_s"] for k in ("small", "mid")]
    share = (one[1] - one[0]) / max(m["pack_s"] - s["pack_s"], 1e-6)
    if system == "fp8":
        fleet["convert"] = {**rates, "threads": share}
    else:
        fleet["convert"] = {"copy_gbyte": share, "threads": 1.0}
    small, mid = (part(size, count, system, k).predict(fleet) for k in ("small", "mid"))
    # Every node of the cluster is a namespace on this machine: they share its cores, less what
    # the machine is busy with without a sync.
    free = (os.cpu_count() or 1) - got["quiet_cores"]
    work = m["cpu_s"] - s["cpu_s"] - got["quiet_cores"] * (m["sync"] - s["sync"])
    per_byte = max(work, 1e-9) / (mid["nic_bytes"] - small["nic_bytes"])
    fleet["cpu"] = {"transfer_gbyte": 1 / per_byte / 1e9, "cores": free, "shared": [sorted(set(src.hosts) | set(dst.hosts))]}
    fleet["setup_s"] = max(0.0, s["sync"] - small["seconds"])
    out = W.plan(src, dst).predict(fleet)
    out["setup_s"], out["efficiency"] = fleet["setup_s"], fleet["efficiency"]
    out["convert"], out["cpu"] = fleet.get("convert"), fleet["cpu"]
    return out


def plan_scale(rates: dict) -> dict:
    subprocess.run(["cargo", "build", "-q", "--release", "-p", "accel-reshard", "--example", "plan_scale"], cwd=ROOT, check=True)
    argv = [str(ROOT / "target/release/examples/plan_scale"), "5", str(rates["scales_gbyte"]), str(rates["quantize_gbyte"])]
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    got: dict = json.loads(out.stdout.strip().splitlines()[-1])
    from accel import weights as W

    tensors = {f"t{k}": ((4096, 4096), "bf16") for k in range(1000)}
    src = W.Layout.sharded(tensors, ranks=256, dim=0).on([f"train{r // 8}" for r in range(256)])
    dst = W.Layout.sharded(tensors, ranks=128, dim=0).on([f"infer{r // 8}" for r in range(128)])
    t = time.perf_counter()
    p = W.plan(src, dst)
    cold = time.perf_counter() - t
    t = time.perf_counter()
    again = W.plan(src, dst)
    warm = time.perf_counter() - t
    assert again is p
    data = p.to_bytes()
    loads = []
    for _ in range(5):
        t = time.perf_counter()
        W.Plan.from_bytes(src, dst, data)
        loads.append(time.perf_counter() - t)
    got["python"] = {"cold": cold, "planner": p.seconds, "cached": warm, "from_bytes": statistics.median(loads), "bytes": len(data),
                     "memory": p.memory, "pieces": p.pieces, "templates": p.templates}
    return got


def pack_text(convert: dict | None) -> str:
    """A run's calibrated packing: FP8's share of a thread, or bf16's copy rate."""
    if not convert:
        return ""
    if "copy_gbyte" in convert:
        return f", packing copies at {convert['copy_gbyte']:.2f} GB/s"
    return f", packing on {convert['threads']:.2f} of a thread"


def landing_text(e: dict) -> str:
    """Where the step with the joiner spent its time: each rank's landing (`Landed.seconds`)
    then and in the warm step before it (runs saved before these were recorded have none)."""
    if "landed_with" not in e:
        return ""
    w, b, j = e["landed_with"], e["landed_before"], e["rank"]
    ms = lambda x: f"{x * 1e3:.0f} ms"  # noqa: E731
    others = lambda xs: ms(statistics.median(xs[1:j] + xs[j + 1 :]))  # noqa: E731
    return (f"; each rank's landing in that step: the joiner {ms(w[j])}, rank 0 {ms(w[0])}, the other ranks' median {others(w)}; "
            f"in the warm step before it: rank 0 {ms(b[0])}, the others' median {others(b)}")


def cpu_text(res: dict, sizes: list) -> str:
    """The calibrated CPU and packing of each run: quiet cores, GB/s of NIC bytes a core
    carries, and the packing's rate."""
    def drift(r: dict) -> str:
        phases = r["mid"].get("phases", [])
        packed = " then ".join(f"{x['pack_s'] * 1e3:.0f}" for x in phases)
        return f" (the larger sync packed in {packed} ms, before then after)" if len(phases) > 1 else ""

    got = [f"{bws.text(size)} {s} {r['prediction']['cpu']['transfer_gbyte']:.3f} GB/s a core, {r['quiet_cores']:.2f} cores quiet"
           + pack_text(r["prediction"].get("convert")) + drift(r)
           for size in sizes for s, r in res[str(size)].items() if "cpu" in r.get("prediction", {})]
    return f" Calibrated per run: {'; '.join(got)}." if got else ""


def render(res: dict, scale: dict, sizes: list, rate: str, iters: int, count: int, load: tuple, seconds: float, command: str, when: str,
           rates: dict | None = None, others: str = "") -> str:
    ms = lambda x: f"{x * 1e3:.0f} ms"  # noqa: E731
    med = lambda rows, k: statistics.median([r[k] for r in rows])  # noqa: E731
    r8 = bb.rate_bytes(rate)
    first = next(iter(next(iter(res.values())).values()))
    cal = first.get("calibration_tensors", {"small": 1, "mid": 8})  # runs saved before it was recorded used 1 and 8
    lines = [
        f"{platform.machine()} with {os.cpu_count()} CPUs, Linux {platform.release()}, Ray {importlib.metadata.version('ray')}, "
        f"{when}; load average "
        + " / ".join(f"{x:.1f}" for x in load) + " at the start (the machine is shared with other sessions).",
        "",
        f"{count} bf16 tensors of {bws.ROWS} rows; 4 trainer nodes to 4 inference nodes of 2 ranks; both directions of every "
        f"link shaped to {rate}; {iters} warm rounds (medians) after two cold ones (the first round with the full plan makes the sources' buffers and first touches them and the receivers' staging; the second is kept out of the medians too, as it was the first touch of every target rank's second buffer set until the receivers touched both sets when made). Sync: from the fresh weights written to every "
        "rank switched. Floor: the busiest link's bytes at the shaped rate (FP8's own: its bytes are half). Model: "
        "`Plan.predict` with the goodput one TCP stream reached over a shaped link in the same cluster (efficiency); "
        f"calibrated in the same cluster by syncs of the first {cal['small']} and {cal['mid']} of the {count} tensors (two cold and five warm rounds "
        + ("each, before the measured rounds and again after them, medians over both, so that load other tenants add "
           "during the run weighs on both sides; " if "phases" in first.get("mid", {}) else "each, medians; ")
        + "the serving reads run on every rank from the first, as in the measured syncs) after 2 s of the "
        "machine's load without a sync, serving reads included (the quiet cores): a fixed cost per step, the "
        "smaller sync less the model's time for it (the setup column), and the CPU every byte over a NIC costs, the "
        "larger sync's busy CPU less the smaller one's and less the quiet load over the difference in time, over "
        "the difference in NIC bytes (FP8's includes its conversion), on the cores the quiet load leaves, all nodes one "
        "machine (the CPU column: that work at those cores); and the sources' packing before sending (`Sender.publish` "
        "packs every buffer before the first byte leaves), the larger sync's packing less the smaller one's "
        "against the model's packing of the difference at one thread's rates: FP8's conversion at the rates `fp8_speed` "
        "measured in the same run, on the share of a thread this gives each trainer; bf16's copies at the rate it gives "
        "(the packing column); under admission, the ranks admitted in waves, each wave's links replayed alone (the waves "
        "column). The prediction is the longer of the packing then the links, and the CPU, plus the setup. Busy CPU is "
        "the whole machine's (/proc/stat) from the fresh weights written to the sync's end, so it holds other sessions' "
        "load too."
        + (f" Rates: scales {rates['scales_gbyte']:.2f} GB/s, quantise {rates['quantize_gbyte']:.2f} GB/s per thread." if rates else "")
        + cpu_text(res, sizes)
        + (f" (*): from an earlier run ({others}); its model had no conversion or admission term, which its system "
           "does not need." if others else ""),
        "",
        "| size | system | floor | model (efficiency, setup, packing, CPU, waves) | cold syncs (first / second round) | warm sync | sync / floor | model / sync | machine's CPU busy in the sync | sources packing | pause (% of total) | serving p99 | worst admission wait |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    ncpu = os.cpu_count() or 1
    busy = lambda rows: f"{med(rows, 'cpu_s') / med(rows, 'sync') / ncpu * 100:.0f}%" if "cpu_s" in rows[0] else "-"  # noqa: E731
    packing = lambda rows: ms(med(rows, "pack_s")) if "pack_s" in rows[0] else "-"  # noqa: E731
    verdicts, model = [], {sys_: [] for sys_ in SYSTEMS}
    for size in sizes:
        r = res[str(size)]
        for s in [x for x in SYSTEMS if x in r]:
            rows, pred = warm(r[s]), r[s]["prediction"]
            cold = " / ".join(ms(x["sync"]) for x in r[s]["rows"][: r[s].get("cold", 1)])
            src, dst = layouts(size, count, s)
            floor = max(max(v.values()) for v in r[s]["plan"]["links"].values()) / r8
            sync = med(rows, "sync")
            pause = med(rows, "pause") / med(rows, "total")
            ratio = pred["seconds"] / sync
            model[s].append(f"{ratio:.2f}x")
            lines.append(
                f"| {bws.text(size)} | {s} | {ms(floor)} | {ms(pred['seconds'])} ({pred['efficiency']:.2f}, {ms(pred['setup_s'])}, {ms(pred.get('convert_s', 0.0))}, {ms(pred.get('cpu_s', 0.0))}, {pred.get('waves', 1)}){' (*)' if 'from' in r[s] else ''} | {cold} | {ms(sync)} | {sync / floor:.2f}x | {ratio:.2f}x | "
                f"{busy(rows)} | {packing(rows)} | "
                f"{pause * 100:.2f}% | {med(rows, 'serving_p99') * 1e3:.1f} ms | {max(x['admission_wait'] for x in rows) * 1e3:.0f} ms |"
            )
            r[s]["floor"], r[s]["sync"], r[s]["pause_frac"] = floor, sync, max(x["pause"] / x["total"] for x in r[s]["rows"])
    top = res[str(max(sizes))]
    if not all(x in top for x in SYSTEMS):
        verdicts.append(f"- Only {', '.join(top)} ran: the goals are judged on a run of every system.")
    else:
        for s, label in (("bf16", "bf16"), ("fp8", "FP8 (its own floor, half the bytes)")):
            q = top[s]
            verdicts.append(f"- Sync within 1.15x the link floor at {bws.text(max(sizes))}, {label}: {q['sync'] / q['floor']:.2f}x: "
                            f"**{'met' if q['sync'] <= 1.15 * q['floor'] else 'NOT met'}**.")
        worst_pause = max(top[s]["pause_frac"] for s in SYSTEMS)
        verdicts.append(f"- Pause at most 1% of the total: worst round {worst_pause * 100:.2f}%: **{'met' if worst_pause <= 0.01 else 'NOT met'}**.")
        b, a = warm(top["bf16"]), warm(top["admit"])
        verdicts.append(f"- Serving reads' p99 during a sync: {med(b, 'serving_p99') * 1e3:.1f} ms without admission, "
                        f"{med(a, 'serving_p99') * 1e3:.1f} ms with one receiver per source link (its sync {ms(top['admit']['sync'])} "
                        f"against {ms(top['bf16']['sync'])}). (No goal value: reported.)")
        e = top["bf16"].get("elastic")
        if e:
            slowest = max(r["sync"] for r in warm(top["bf16"]))
            verdicts.append(
                f"- Elastic: a replica joined in {ms(e['join_s'])} (caught up from its peer in {ms(e['catch_up'])}; goal: at most one "
                f"step, {ms(e['median'])}: **{'met' if e['join_s'] <= e['median'] else 'NOT met'}**); the next step with it took "
                f"{ms(e['with_joiner'])} against a median of {ms(e['median'])} and a slowest warm round of {ms(slowest)} (goal: nothing "
                f"for the others, read as no slower than the slowest warm round: **{'met' if e['with_joiner'] <= slowest else 'NOT met'}**; "
                "the joiner reads on rank 0's node, whose downlink the plan relays it through, so the links carry no more bytes"
                f"{landing_text(e)}). Killed 0.5 s into a step with a deadline of "
                f"{ms(e['deadline'])}: "
                f"the others switched after {ms(e['killed'])} (goal: at most the deadline: "
                f"**{'met' if e['killed'] <= e['deadline'] else 'NOT met'}**), failed {e['failed']}.")
        within = lambda xs: all(abs(float(x[:-1]) - 1) <= 0.15 for x in xs)  # noqa: E731
        allx = model["bf16"] + model["fp8"] + model["admit"]
        verdicts.append(
            f"- Fabric model within 15% of every shaped-link measurement: bf16 {', '.join(model['bf16'])}, FP8 "
            f"{', '.join(model['fp8'])} (with the conversion at the source), admission {', '.join(model['admit'])} (in waves): "
            f"**{'met' if within(allx) else 'NOT met'}**.")
    pred, cpu = scale["prediction"], scale.get("prediction_cpu")
    py = scale["python"]
    lines += [
        "",
        *verdicts,
        "",
        f"Plans at frontier scale (`cargo run --release -p accel-reshard --example plan_scale`, median of 5): the Kimi-K2-shaped pair "
        f"({scale['tensors']:,} tensors, {scale['parameters']:.3g} parameters, bf16 on {scale['src_ranks']} ranks to FP8 on "
        f"{scale['dst_ranks']}): **{scale['plan_cold_s']:.2f} s cold** (goal under 1 s: **{'met' if scale['plan_cold_s'] < 1 else 'NOT met'}**; "
        f"every round {', '.join(f'{x:.2f}' for x in scale['plan_cold_all'])} s), {scale['templates']} templates, {scale['pieces']:,} "
        f"pieces placed, {scale['memory_bytes'] / 2**20:.1f} MiB in memory, {scale['encoded_bytes'] / 2**20:.1f} MiB as bytes "
        f"(encoded in {scale['encode_s'] * 1e3:.1f} ms); **from the cache: {scale['decode_s'] * 1e3:.1f} ms** to decode from its bytes, as "
        f"another process does (goal under 10 ms: **{'met' if scale['decode_s'] < 0.01 else 'NOT met'}**), one rank's part expanded in "
        f"{scale['one_rank_part_s'] * 1e3:.1f} ms, every source rank's in {scale['expand_all_sources_s']:.2f} s on {scale['threads']} threads.",
        f"From Python, 1000 tensors of 4096 x 4096, 256 to 128 ranks: cold {py['cold']:.2f} s ({py['planner']:.2f} s planning), "
        f"cached in process {py['cached'] * 1e6:.0f} us, from bytes ({py['bytes'] / 2**20:.1f} MiB) {py['from_bytes'] * 1e3:.1f} ms.",
        f"Kimi-K2 on a described fleet (32 trainer and 16 inference H100 nodes, 8 x 400 Gbit/s NICs each, non-blocking, 85% of line "
        f"rate): the model's floor **{pred['floor_s']:.3f} s** (the {pred['bottleneck']}, {pred['bottleneck_bytes'] / 1e9:.1f} GB), "
        f"predicted **{pred['seconds']:.3f} s** with the FP8 conversion on the GPUs before sending ({pred['convert_s'] * 1e3:.1f} ms of "
        "it, at an assumed 1500 GB/s of bf16 input per GPU: no GPU kernel is built, so this rate is not measured), against "
        f"Perplexity's published 1.3 s for that move: {1.3 / pred['seconds']:.1f}x under it."
        + (f" Quantised on the host CPU as accel does today (one thread per rank, 8 a node, at this machine's rates above, before "
           f"sending): **{cpu['seconds']:.2f} s**, {cpu['convert_s']:.2f} s of it converting {cpu['convert_bytes'] / 1e12:.2f} TB of bf16, "
           f"{cpu['seconds'] / 1.3:.1f}x Perplexity's 1.3 s." if cpu else "")
        + " Not in the model: the device-to-host copies, the engines' loading and the framework's calls.",
        "",
        f"Reproduce: `{command}` (whole run {seconds:.0f} s).",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1G,1536M")
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--tensors", type=int, default=32)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--from-json", help="render a run saved in this file (every run saves /tmp/bench36.json) instead of measuring")
    ap.add_argument("--others", help="a saved run whose systems this run does not measure are shown beside it, marked (*)")
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("--system", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role == "driver":
        return role_driver(int(args.sizes), args.system, args.tensors, args.iters)
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        doc = render(saved["res"], saved["scale"], saved["sizes"], saved["rate"], saved["iters"], saved["tensors"], tuple(saved["load"]),
                     saved["seconds"], saved["command"], saved["date"], saved.get("rates"), saved.get("others", ""))
        print(doc)
        if not args.no_write:
            bt.write_section(doc, BEGIN, END, "Weight sync at frontier scale (issue 36)")
        return
    if os.geteuid() != 0:
        raise SystemExit("needs root (network namespaces and tc): run it with sudo")
    started, load = time.monotonic(), os.getloadavg()
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    rates = convert_rates()
    scale = plan_scale(rates)
    sizes = [bb.parse_size(s) for s in args.sizes.split(",")]
    res: dict = {}
    for size in sizes:
        res[str(size)] = {}
        for system in args.systems.split(","):
            got = bws.cluster(size, system, args.tensors, args.rate, args.iters, script=__file__, calibrate=goodput)
            got["prediction"] = prediction(size, args.tensors, system, args.rate, got, rates)
            res[str(size)][system] = got
    others = ""
    if args.others:
        saved = json.loads(Path(args.others).read_text())
        others = f"{saved['date']}, `{saved['command']}`"
        for size in sizes:
            for system, got in saved["res"].get(str(size), {}).items():
                res[str(size)].setdefault(system, {**got, "from": saved["date"]})
    shown = " ".join(a for a in sys.argv[1:] if a != "--no-write")
    command = f"sudo .venv/bin/python scripts/bench_weight_sync_frontier.py {shown}".strip()
    seconds = time.monotonic() - started
    Path("/tmp/bench36.json").write_text(json.dumps({"res": res, "scale": scale, "sizes": sizes, "rate": args.rate, "iters": args.iters,
                                                     "tensors": args.tensors, "load": load, "seconds": seconds, "command": command, "date": when,
                                                     "rates": rates, "others": others}))
    doc = render(res, scale, sizes, args.rate, args.iters, args.tensors, load, seconds, command, when, rates, others)
    print(doc)
    if not args.no_write:
        bt.write_section(doc, BEGIN, END, "Weight sync at frontier scale (issue 36)")


if __name__ == "__main__":
    main()
