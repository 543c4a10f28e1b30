#!/usr/bin/env python3
"""Weight sync between shardings over links of a fixed rate (issue 21); writes its section of
docs/BENCHMARKS.md.

    sudo .venv/bin/python scripts/bench_weight_sync.py                     # 1 GiB and 1.5 GiB (~14 min)
    sudo .venv/bin/python scripts/bench_weight_sync.py --sizes 256M --iters 1 --no-write   # a smoke run

The cluster is the broadcast benchmark's (`bench_broadcast.py`): one network namespace per node
on a bridge, a Ray node in each (`ray start`), here with both directions of every node's link
shaped to `--rate` (`tc tbf` on the node's eth0, its uplink, and on its bridge port, its
downlink): a NIC is full duplex, and weight sync is bound by what each node receives. Four
trainer nodes hold one trainer rank each; four inference nodes hold two inference ranks each.

The model: `--tensors` bf16 tensors of shape (4096, K) summing to the size. Trainers shard every
tensor by rows over 4 ranks (FSDP-like); inference shards half of them by columns and half by
rows over 8 ranks (tensor parallel). A fresh cluster for each system at each size (its rounds
in a block, so every block starts from the same memory). Every round of every system: every
trainer writes every byte of its shards with values of the step, every inference rank ends
with its own box of every tensor in its own arrays, then reads every byte (a checksum, compared across systems for each rank and step) and checks
sampled elements against the step's values at their global coordinates. Systems:

- accel weight sync: `accel.weights.plan` once (hosts: the node names), each trainer
  `publish_weights`, the driver `accel.ray.sync_weights` (every rank lands the version in its
  back buffer while serving, then all switch); then each rank reads `with self.weights()`;
- Ray object store: each trainer `ray.put`s each of its shards; each inference rank `ray.get`s
  every whole shard it overlaps (Ray cannot fetch part of an object; the two ranks of a node
  share its store) and copies its box out of them;
- gather then broadcast: trainer rank 0 gathers every shard (`accel.transport.put`/`get` over
  TCP) into the full model, then `put(tensor, readers=8)` per tensor; each inference rank
  `get(ref, relay=True)` (the transport's relayed broadcast), four tensors at a time, and copies
  its box out (one tensor at a time, as parameter-by-parameter broadcasts do; the whole model
  at once would put a full copy in every rank).

The link floor: for every node, the bytes it must receive (the union of its ranks' boxes, less
what a rank on the node already holds) and, for a trainer node, the bytes it must send at
least once (the part of its boxes that ranks on other nodes hold); the floor is the largest of
these at the shaped rate. Times: delivered (fresh weights written to every box landed; for accel
to every rank landed, not yet switched), sync (fresh weights to every rank switched, accel),
end to end (the start of the trainers' writes to every rank having read every byte).
"""

from __future__ import annotations

import argparse
import base64
import datetime
import importlib.metadata
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_broadcast as bb  # noqa: E402  (namespaces, shaping, sizes and rates)
import bench_transport as bt  # noqa: E402  (checksum, human, write_section)

BEGIN, END = "<!-- bench:weightsync:begin -->", "<!-- bench:weightsync:end -->"
MiB, GiB = 1 << 20, 1 << 30
TRAINERS, INFER_NODES, PER_NODE = 4, 4, 2
WORKERS = INFER_NODES * PER_NODE
NODES = TRAINERS + INFER_NODES
ROWS = 4096
SYSTEMS = ["accel", "gather", "ray"]  # Ray last: its object stores keep the pages they touched
NAMES = {"accel": "accel weight sync", "ray": "Ray object store", "gather": "gather, then relayed broadcast"}
# Ray's sessions and temp files, kept out of /tmp (and removed after each cluster); short, since
# Ray's Unix sockets live under it. ACCEL_BENCH_TMPDIR overrides it.
SCRATCH = Path(os.environ.get("ACCEL_BENCH_TMPDIR") or "/var/tmp/accel-bench-weight-sync")
# Memory a block needs, measured on this machine: the idle cluster (8 Ray nodes, before the
# actors) about 2 GiB, then about 10.7 GiB per GiB of model at worst. Ray's block is the worst:
# the model's own copies (the trainers' shards, their ray.put copies, the inference nodes'
# pulled copies, 2.5 here, the boxes) and, beyond the object stores, 1.3 to 1.7 GB more in every
# raylet while it moves objects; its 2 GiB block peaked at 23.4 GiB of 24 (accel's 2 GiB block
# at about 15.5). Ray's OOM killer acts at 95% of the machine's memory: a size runs if its
# worst block stays under 90%. One cluster per block: a cluster that kept Ray's stores and the
# pools from block to block ran out of memory sooner.
IDLE, COPIES, HEADROOM = 2 * GiB, 10.7, 0.9
GATHER_STREAMS = 4  # tensors each inference rank takes at once in the broadcast (a relay chain each)
ITEM = {"f64": 8, "i64": 8, "f32": 4, "i32": 4, "f16": 2, "bf16": 2, "i16": 2, "i8": 1, "u8": 1, "bool": 1}


# ---------------------------------------------------------------- the model and its layouts


def model(size: int, count: int) -> dict[str, tuple[tuple[int, int], str]]:
    cols = size // (count * ROWS * 2)
    if cols < 2 * WORKERS or cols % WORKERS:
        raise SystemExit(f"{text(size)} in {count} tensors of {ROWS} rows: {cols} columns, not a multiple of {WORKERS}")
    return {f"w{k:02d}": ((ROWS, cols), "bf16") for k in range(count)}


def layouts(size: int, count: int):
    """Trainer ranks on nodes 0-3 (rows); inference ranks on nodes 4-7, two each (columns for
    the even tensors, rows for the odd), with the node names as hosts."""
    from accel import weights as W

    tensors = model(size, count)
    src = W.Layout.sharded(tensors, ranks=TRAINERS, dim=0)
    dst = W.Layout.sharded(tensors, ranks=WORKERS, dim={n: 1 - k % 2 for k, n in enumerate(tensors)})
    return src.on([bb.node(r) for r in range(TRAINERS)]), dst.on([bb.node(TRAINERS + d // PER_NODE) for d in range(WORKERS)])


A, B, C, D = 40503, 7, 977, 13  # a value per (row, column, tensor, step): odd row factor, distinct columns


def fill(arr: np.ndarray, k: int, box, step: int) -> None:
    """Writes every element of a 2-D box of tensor `k` with the step's values (uint16 wraps)."""
    (r0, r1), (c0, c1) = box
    rows = ((A * np.arange(r0, r1, dtype=np.int64) + C * k + D * step) % 65536).astype(np.uint16)
    cols = ((B * np.arange(c0, c1, dtype=np.int64)) % 65536).astype(np.uint16)
    np.add(rows[:, None], cols[None, :], out=arr)


def check(arrays: dict, boxes: dict, step: int, where: str) -> int:
    """Reads every byte (the checksum returned) and checks sampled elements against the step."""
    rng = np.random.default_rng(step)
    total = 0
    for name, arr in arrays.items():
        total += bt.checksum(arr)
        k, ((r0, r1), (c0, c1)) = int(name[1:]), boxes[name]
        i = np.concatenate([[0, r1 - r0 - 1], rng.integers(0, r1 - r0, 14)])
        j = np.concatenate([[0, c1 - c0 - 1], rng.integers(0, c1 - c0, 14)])
        want = ((A * (i + r0) + C * k + D * step + B * (j + c0)) % 65536).astype(np.uint16)
        if not np.array_equal(arr[i, j], want):
            raise AssertionError(f"{where}, step {step}, {name}: sampled elements are not the step's values")
    return total


def _cut(a, b):
    box = tuple((max(x0, y0), min(x1, y1)) for (x0, x1), (y0, y1) in zip(a, b))
    return box if all(lo < hi for lo, hi in box) else None


def _volume(boxes: list) -> int:
    """Elements in the union of boxes (coordinate compression)."""
    boxes = [b for b in boxes if b]
    if not boxes:
        return 0
    edges = [sorted({x for b in boxes for x in b[d]}) for d in range(len(boxes[0]))]
    grid = np.zeros([len(e) - 1 for e in edges], bool)
    for b in boxes:
        grid[tuple(slice(e.index(lo), e.index(hi)) for e, (lo, hi) in zip(edges, b))] = True
    widths = np.ix_(*[np.diff(e) for e in edges])
    return int((grid * np.prod(np.broadcast_arrays(*widths), axis=0)).sum())


def links(src, dst, whole: bool = False) -> dict[str, dict[str, int]]:
    """Bytes each node must receive and send at least once per sync. `whole`: sources ship
    whole shards (Ray: a destination node pulls every shard it overlaps, once per node)."""
    recv: dict[str, int] = {}
    send: dict[str, int] = {}
    for name, (_, dtype) in dst.tensors.items():
        item = ITEM[dtype]
        for node in sorted(set(dst.hosts)):
            mine = [dst.ranks[d][name] for d in range(len(dst.ranks)) if dst.hosts[d] == node]
            if whole:
                need = [src.ranks[s][name] for s in range(len(src.ranks)) if src.hosts[s] != node and any(_cut(src.ranks[s][name], m) for m in mine)]
                recv[node] = recv.get(node, 0) + _volume(need) * item
            else:
                here = [_cut(m, src.ranks[s][name]) for m in mine for s in range(len(src.ranks)) if src.hosts[s] == node]
                recv[node] = recv.get(node, 0) + (_volume(mine) - _volume(here)) * item
        for node in sorted(set(src.hosts)):
            held = [src.ranks[s][name] for s in range(len(src.ranks)) if src.hosts[s] == node]
            away = [dst.ranks[d][name] for d in range(len(dst.ranks)) if dst.hosts[d] != node]
            out = [h if whole else _cut(h, a) for h in held for a in away if _cut(h, a)]
            send[node] = send.get(node, 0) + _volume(out) * item
    return {"in": recv, "out": send}


def floor_of(moves: dict[str, dict[str, int]], rate: float) -> tuple[float, str]:
    """The busiest link's seconds at `rate`, and which links those are (ties: all of them)."""
    top = max(v for d in moves.values() for v in d.values())
    which = []
    for d, label in (("in", "downlink"), ("out", "uplink")):
        nodes = [n for n, v in moves[d].items() if v == top]
        if nodes:
            which.append(f"the {label}{'s' if len(nodes) > 1 else ''} of {', '.join(nodes)}")
    return top / rate, f"{text(top)} on {' and '.join(which)}"


def cpu_busy() -> float:
    """Seconds of CPU the whole machine has spent busy since boot (every core; /proc/stat: all
    but idle and iowait). Every node of the cluster is a namespace on this machine, so the
    difference over a window is the cluster's CPU work in it, and any other load's."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def text(n: float) -> str:
    return f"{n / GiB:.3g} GiB" if n >= GiB else f"{n / MiB:.0f} MiB"


# ---------------------------------------------------------------- the network: both directions shaped


def net_up(n: int, rate: str) -> None:
    """The broadcast benchmark's namespaces (each node's uplink shaped), and each node's
    downlink shaped too: its bridge port's egress in the switch namespace."""
    bb.net_up(n, rate)
    for i in range(n):
        bb.sh("tc", "-n", bb.SW, "qdisc", "add", "dev", f"p{i}", "root", "tbf", "rate", rate, "burst", "1mb", "latency", "200ms")


# ---------------------------------------------------------------- the driver (in the head's namespace)


def define_actors():
    import ray

    import accel.ray
    from accel import transport as T

    @ray.remote(num_cpus=0)
    class Trainer(accel.ray.WeightSource):
        def __init__(self, src, rank: int):
            self.src, self.rank = src, rank
            self.boxes = src.ranks[rank]
            self.arrays = {n: np.zeros(src.shape_of(rank, n), np.uint16) for n in self.boxes}
            self.filled = 0.0

        def ready(self):
            return True

        def _fill(self, step: int) -> None:
            for n, a in self.arrays.items():
                fill(a, int(n[1:]), self.boxes[n], step)
            self.filled = time.perf_counter()
            self.filled_cpu = cpu_busy()

        def filled_at(self) -> float:
            return self.filled

        def filled_cpu_at(self) -> tuple[float, float]:
            """When the fresh weights were written, and the machine's busy CPU seconds then."""
            return self.filled, self.filled_cpu

        def accel_step(self, step: int):
            self._fill(step)
            shipment = self.publish_weights(step, self.arrays)
            self.packed = time.perf_counter() - self.filled
            return shipment

        def packed_s(self) -> float:
            """How long the last `publish_weights` took: packing (and converting) every buffer."""
            return self.packed

        def ray_step(self, step: int):
            self._fill(step)
            return [ray.put(a) for a in self.arrays.values()]

        def gather_send(self, step: int):
            self._fill(step)
            return [T.put(a, readers=1) for a in self.arrays.values()]

        def gather_root(self, step: int, others: list):
            """Rank 0: every shard into the full model, then each tensor leased to the readers."""
            from concurrent.futures import ThreadPoolExecutor

            self._fill(step)
            full = {n: T.empty(s, np.uint16) for n, (s, _) in self.src.tensors.items()}
            for n, a in self.arrays.items():
                full[n][tuple(slice(*r) for r in self.boxes[n])] = a
            jobs = []
            for s, refs in enumerate(ray.get(others), start=1):
                for n, ref in zip(self.arrays, refs):
                    jobs.append((full[n][tuple(slice(*r) for r in self.src.ranks[s][n])], ref))
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda job: T.get(job[1], out=job[0]), jobs))  # rows: contiguous
            gathered = time.perf_counter()
            return [T.put(a, readers=WORKERS) for a in full.values()], gathered

        def reset(self):
            if self._accel_sender is not None:
                self._accel_sender.close()
                self._accel_sender = None
            T.trim()
            return True

    @ray.remote(num_cpus=0)
    class Worker(accel.ray.WeightTarget):
        def __init__(self, src, dst, rank: int):
            self.src, self.dst, self.rank = src, dst, rank
            self.boxes = {n: b for n, b in dst.ranks[rank].items()}
            self.out: dict = {}
            self.serving: threading.Thread | None = None
            self.longest = 0.0
            self.reads = 0
            self.waits: list[float] = []

        def ready(self):
            return True

        def prepare(self) -> bool:
            self.out = {n: np.zeros(self.dst.shape_of(self.rank, n), np.uint16) for n in self.boxes}
            return True

        def _serve(self) -> None:
            """A reader that keeps serving while syncs run: the longest it waited for weights."""
            while self.serving is not None:
                t = time.perf_counter()
                try:
                    with self.weights() as (_, tensors):
                        waited = time.perf_counter() - t
                        int(next(iter(tensors.values())).flat[0])
                except Exception:  # noqa: BLE001  (no receiver yet, or one being replaced: reset() stops serving)
                    time.sleep(0.005)
                    continue
                self.longest, self.reads = max(self.longest, waited), self.reads + 1
                self.waits.append(waited)
                time.sleep(0.005)

        def serve(self) -> bool:
            self.serving = threading.Thread(target=self._serve, daemon=True)
            self.serving.start()
            return True

        def staging(self) -> int:
            return self._receiver().staging_bytes

        def longest_wait(self) -> tuple[float, int, float]:
            """The longest wait since the last call, the reads so far, and the 99th percentile
            of the waits since the last call."""
            p99 = float(np.percentile(self.waits, 99)) if self.waits else 0.0
            got, self.longest, self.waits = (self.longest, self.reads, p99), 0.0, []
            return got

        def fp8_read(self, step: int):
            """Reads every byte (a checksum) and checks sampled elements: each FP8 value times
            its block's scale is within FP8's rounding of the step's bf16 value."""
            import ml_dtypes

            with self.weights() as (version, tensors):
                if version != step:
                    raise AssertionError(f"rank {self.rank} serves version {version} after the sync of {step}")
                total = sum(bt.checksum(a) for a in tensors.values())
                rng = np.random.default_rng(step)
                for name, ((r0, r1), (c0, c1)) in self.boxes.items():
                    if name not in tensors:  # a plan of some of the tensors
                        continue
                    q, sc = tensors[name], tensors[name + "_scale_inv"]
                    i, j = rng.integers(0, r1 - r0, 16), rng.integers(0, c1 - c0, 16)
                    bits = ((A * (i + r0) + C * int(name[1:]) + D * step + B * (j + c0)) % 65536).astype(np.uint16)
                    want = (bits.astype(np.uint32) << 16).view(np.float32)
                    s = sc[(i + r0) // 128 - r0 // 128, (j + c0) // 128 - c0 // 128]
                    got = q[i, j].view(ml_dtypes.float8_e4m3fn).astype(np.float32) * s
                    ok = np.isnan(want) | (np.abs(got - want) <= np.abs(want) / 16 + s * 2.0**-9 + 1e-30) | (np.abs(want) > 448 * s)
                    if not ok.all():
                        raise AssertionError(f"fp8, rank {self.rank}, {name}: sampled elements are not the step's values")
            return time.perf_counter(), total

        def accel_read(self, step: int):
            with self.weights() as (version, tensors):
                if version != step:
                    raise AssertionError(f"rank {self.rank} serves version {version} after the sync of {step}")
                cs = check(tensors, self.boxes, step, f"accel, rank {self.rank}")
            return time.perf_counter(), cs

        def ray_take(self, step: int, steps: list):
            shards = ray.get(steps)  # per trainer, an ObjectRef per tensor
            want, where = [], []
            for s in range(len(self.src.ranks)):
                for k, n in enumerate(self.boxes):
                    cut = _cut(self.src.ranks[s][n], self.boxes[n])
                    if cut:
                        want.append(shards[s][k])
                        where.append((s, n, cut))
            for (s, n, cut), arr in zip(where, ray.get(want)):
                np.copyto(self.out[n][_local(cut, self.boxes[n])], arr[_local(cut, self.src.ranks[s][n])])
            landed = time.perf_counter()
            del arr
            cs = check(self.out, self.boxes, step, f"ray, rank {self.rank}")
            return landed, time.perf_counter(), cs

        def gather_take(self, step: int, root):
            from concurrent.futures import ThreadPoolExecutor

            refs, gathered = root

            def take(job) -> None:
                n, ref = job
                full = T.get(ref, relay=True)  # this rank's copy; the next reader streams from it
                if n in self.boxes:
                    np.copyto(self.out[n], full[_local(self.boxes[n], ((0, 0), (0, 0)))])

            with ThreadPoolExecutor(GATHER_STREAMS) as pool:  # several tensors' chains at once
                list(pool.map(take, zip(self.src.tensors, refs)))
            landed = time.perf_counter()
            cs = check(self.out, self.boxes, step, f"gather, rank {self.rank}")
            return landed, time.perf_counter(), cs, gathered

        def reset(self):
            self.serving = None
            if self._accel_receiver is not None:
                self._accel_receiver.close()
                self._accel_receiver = None
            self.out = {}
            T.trim()
            return True

    return Trainer, Worker


def _local(box, origin) -> tuple[slice, ...]:
    return tuple(slice(lo - o, hi - o) for (lo, hi), (o, _) in zip(box, origin))


def plasma_mib(address: str) -> float | None:
    """Ray's object store use across the cluster now (MiB), if Ray says."""
    try:
        from ray._private.internal_api import memory_summary

        m = re.search(r"Plasma memory usage (\d+) MiB", memory_summary(address=address, stats_only=True))
        return float(m.group(1)) if m else None
    except Exception:  # noqa: BLE001  (a private API: report nothing rather than fail the run)
        return None


def role_driver(size: int, system: str, count: int, iters: int) -> None:
    """One system's rounds at one size, printed as JSON."""
    import ray

    import accel.ray
    from accel import weights as W

    address = f"{bb.addr(0)}:{bb.RAY_PORT}"
    ray.init(address=address, log_to_driver=False)
    Trainer, Worker = define_actors()
    tcp = {"env_vars": {"ACCEL_TRANSPORT_PATH": "tcp"}}  # one kernel: force the cross-host path
    src, dst = layouts(size, count)
    trainers = [Trainer.options(resources={bb.node(r): 0.01}, runtime_env=tcp).remote(src, r) for r in range(TRAINERS)]
    workers = [
        Worker.options(resources={bb.node(TRAINERS + d // PER_NODE): 0.01}, runtime_env=tcp).remote(src, dst, d)
        for d in range(WORKERS)
    ]
    ray.get([a.ready.remote() for a in trainers + workers])
    res: dict = {"sums": {}}
    if system == "accel":
        t = time.perf_counter()
        p = W.plan(src, dst)  # what accel.ray.plan_weight_sync does, with node names as hosts
        res["plan"] = {"seconds": p.seconds, "wall": time.perf_counter() - t, "bytes": p.bytes, "links": p.links}
        got = ray.get(
            [a.setup_weight_source.remote(p.for_source(r)) for r, a in enumerate(trainers)]
            + [w.setup_weight_target.remote(p.for_destination(d)) for d, w in enumerate(workers)]
        )
        res["receiver_bytes"] = got[TRAINERS:]
        res["sender_bytes"] = [sum(b.nbytes for b in p.for_source(r).buffers) for r in range(TRAINERS)]
        ray.get([w.serve.remote() for w in workers])
    else:
        ray.get([w.prepare.remote() for w in workers])
        res["plasma_mib"] = []
    rows = []
    for i in range(iters + 1):
        step = i + 1
        t0 = time.perf_counter()
        row: dict = {}
        if system == "accel":
            rep = accel.ray.sync_weights(p, [a.accel_step.remote(step) for a in trainers], workers, started=t0)
            reads = ray.get([w.accel_read.remote(step) for w in workers], timeout=600)
            row.update(landed=t0 + rep.landing, switched=t0 + rep.total, pause=rep.pause, nbytes=rep.nbytes)
            row["done"], cs = max(r[0] for r in reads), [r[1] for r in reads]
            waits = ray.get([w.longest_wait.remote() for w in workers])
            row["serving_wait"], row["serving_reads"] = max(w[0] for w in waits), sum(w[1] for w in waits)
        elif system == "ray":
            steps = [a.ray_step.remote(step) for a in trainers]
            takes = ray.get([w.ray_take.remote(step, steps) for w in workers], timeout=1800)
            res["plasma_mib"].append(plasma_mib(address))  # the shards and their pulled copies, still held
            del steps
            row["landed"], row["done"], cs = max(r[0] for r in takes), max(r[1] for r in takes), [r[2] for r in takes]
        else:
            sends = [a.gather_send.remote(step) for a in trainers[1:]]
            root = trainers[0].gather_root.remote(step, sends)
            takes = ray.get([w.gather_take.remote(step, root) for w in workers], timeout=1800)
            del sends, root
            row["landed"], row["done"], cs = max(r[0] for r in takes), max(r[1] for r in takes), [r[2] for r in takes]
            row["gathered"] = takes[0][3]
        row["t0"], row["fresh"] = t0, max(ray.get([a.filled_at.remote() for a in trainers]))
        res["sums"].update({f"{d},{step}": c for d, c in enumerate(cs)})
        rows.append(row)
        extra = f", sync {(row['switched'] - row['fresh']) * 1e3:.0f} ms, pause {row['pause'] * 1e3:.1f} ms" if system == "accel" else ""
        print(
            f"  {text(size)} round {i} {system:6}: delivered {(row['landed'] - row['fresh']) * 1e3:.0f} ms"
            f"{extra}, end to end {(row['done'] - t0) * 1e3:.0f} ms",
            file=sys.stderr,
            flush=True,
        )
    res["rows"] = rows
    if system == "accel":
        res["staging_bytes"] = ray.get([w.staging.remote() for w in workers])
    ray.get([a.reset.remote() for a in trainers] + [w.reset.remote() for w in workers])
    ray.shutdown()
    print(json.dumps(res), flush=True)


# ---------------------------------------------------------------- the run


def synthetic_plans() -> list[dict]:
    """Planning cost at scale, here in this process (the planner is Rust): the layouts' JSON,
    the plan, and Python's plan objects (`Plan.seconds` counts the middle part)."""
    from accel import weights as W

    out = []
    for count, mixed in ((1000, False), (64, True)):
        tensors = {f"t{k}": ((4096, 4096), "bf16") for k in range(count)}
        src = W.Layout.sharded(tensors, ranks=256, dim=0).on([f"train{r // 8}" for r in range(256)])
        dims = {n: (1 - k % 2 if mixed else 0) for k, n in enumerate(tensors)}
        dst = W.Layout.sharded(tensors, ranks=128, dim=dims).on([f"infer{r // 8}" for r in range(128)])
        t = time.perf_counter()
        p = W.plan(src, dst)
        wall = time.perf_counter() - t
        pieces = sum(len(b.pieces) for r in range(256) for b in p.for_source(r).buffers)
        out.append({"tensors": count, "mixed": mixed, "seconds": p.seconds, "wall": wall, "pieces": pieces, "bytes": p.bytes, "busiest": p.busiest_link})
        print(f"  planned {count} tensors 256 -> 128 ranks ({'half by columns' if mixed else 'rows to rows'}): {p.seconds:.2f} s in the planner, {wall:.2f} s in all, {pieces} pieces", file=sys.stderr, flush=True)
    return out


def run(sizes: list[int], count: int, rate: str, iters: int) -> dict:
    """A fresh cluster for each size and system: every block starts from the same memory (Ray's
    object stores keep the pages they touched, and every node shares this machine's)."""
    res: dict = {"checked": 0}
    for size in sizes:
        sums: dict[str, dict[str, int]] = {}
        got: dict = {}
        for system in SYSTEMS:
            one = cluster(size, system, count, rate, iters)
            for key, c in one.pop("sums").items():
                sums.setdefault(key, {})[system] = c
            got[system] = one.pop("rows")
            got.update(one)
        bad = {k: c for k, c in sums.items() if len(set(c.values())) != 1 or len(c) != len(SYSTEMS)}
        if bad:
            raise AssertionError(f"{text(size)}: checksums differ between systems (rank,step: per system): {dict(list(bad.items())[:4])}")
        res["checked"] += len(sums)
        res[str(size)] = got
    return res


def memory_used() -> int | None:
    """This process's memory cgroup's use now (the cluster runs in it), in bytes, where known."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrl, path = line.split(":", 2)
        f = f"/sys/fs/cgroup/memory{path}/memory.usage_in_bytes" if ctrl == "memory" else f"/sys/fs/cgroup{path}/memory.current"
        if ctrl in ("memory", "") and os.path.exists(f):
            return int(Path(f).read_text())
    return None


def cluster(size: int, system: str, count: int, rate: str, iters: int, script: str = __file__, calibrate=None) -> dict:
    """One cluster (namespaces, shaping, a Ray node in each) for one system at one size; its
    driver is ``script --role driver``. ``calibrate(env)``, if given, runs once the namespaces
    are up and before Ray starts; what it returns is in the result as ``calibration``."""
    net_up(NODES, rate)
    SCRATCH.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("ACCEL_TRANSPORT_SECRET", base64.b16encode(os.urandom(16)).decode())
    env.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": base64.b16encode(os.urandom(32)).decode().lower()})
    env.update({"RAY_TMPDIR": str(SCRATCH), "TMPDIR": str(SCRATCH)})  # Ray's sessions and temp files: not in /tmp
    store = int(size * 0.8) + 512 * MiB
    peak = [memory_used()]
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(0.25):
            peak[0] = max(peak[0] or 0, memory_used() or 0)

    ok = False
    try:
        calibration = calibrate() if calibrate is not None else None
        for i in range(NODES):  # one at a time: at once, two cores time Ray's node startup out
            role = ["--head", f"--port={bb.RAY_PORT}", "--include-dashboard=false"] if i == 0 else [f"--address={bb.addr(0)}:{bb.RAY_PORT}"]
            cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", f"--node-ip-address={bb.addr(i)}", "--num-cpus=1"]
            cmd += [f"--resources={json.dumps({bb.node(i): 1})}", f"--object-store-memory={store}", "--disable-usage-stats", *role]
            done = subprocess.run(["ip", "netns", "exec", bb.node(i), *cmd], env={**env, "ACCEL_TRANSPORT_BIND": f"{bb.addr(i)}:0"}, capture_output=True, text=True, timeout=300)
            if done.returncode != 0:
                raise RuntimeError(f"ray start in {bb.node(i)} failed:\n{done.stdout}\n{done.stderr}")
        idle = memory_used()
        watcher = threading.Thread(target=sample, daemon=True)
        watcher.start()
        args = ["--role", "driver", "--sizes", str(size), "--system", system, "--tensors", str(count), "--iters", str(iters)]
        driver = subprocess.Popen(
            ["ip", "netns", "exec", bb.node(0), sys.executable, script, *args],
            env={**env, "ACCEL_TRANSPORT_BIND": f"{bb.addr(0)}:0"}, stdout=subprocess.PIPE, text=True,
        )
        out, _ = driver.communicate(timeout=3600)
        if driver.returncode != 0:
            raise RuntimeError(f"the driver failed (exit {driver.returncode}; its error is above; Ray's logs: {SCRATCH})")
        ok = True
        got = json.loads(out.strip().splitlines()[-1])
        got[f"memory_{system}"] = {"idle": idle, "peak": peak[0]}
        if calibration is not None:
            got["calibration"] = calibration
        return got
    finally:
        sampling.set()
        bb.net_down(NODES)
        from accel import transport as T

        T.sweep()
        if ok:
            shutil.rmtree(SCRATCH, ignore_errors=True)


def render(res: dict, synth: list[dict], sizes: list[int], skipped: list[str], count: int, rate: str, iters: int, command: str, load: tuple, seconds: float) -> str:
    r8 = bb.rate_bytes(rate)
    ms = lambda x: f"{x * 1e3:.0f} ms"  # noqa: E731
    med = lambda rows, f: statistics.median([f(r) for r in rows[1:]]) if len(rows) > 1 else f(rows[0])  # noqa: E731
    delivered = lambda r: r["landed"] - r["fresh"]  # noqa: E731
    e2e = lambda r: r["done"] - r["t0"]  # noqa: E731
    sync = lambda r: r["switched"] - r["fresh"]  # noqa: E731
    lines = [
        f"{platform.machine()} with {os.cpu_count()} CPUs, Linux {platform.release()}, Ray {importlib.metadata.version('ray')}, "
        f"{datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}; load average "
        + " / ".join(f"{x:.1f}" for x in load) + " at the start.",
        "",
        f"{count} bf16 tensors of {ROWS} rows summing to the size; {TRAINERS} trainer ranks (one a node, rows) to {WORKERS} "
        f"inference ranks ({PER_NODE} a node on {INFER_NODES} nodes; half the tensors by columns, half by rows); both "
        f"directions of every node's link shaped to {rate} (`tc tbf`). Sizes run: {', '.join(text(s) for s in sizes)}. "
        + " ".join(skipped)
        + f" {iters} warm rounds (medians) after a cold one, per system; times to the last rank. Delivered: from the fresh "
        "weights written to every rank holding its box (accel: landed in the back buffer); end to end: from the start of "
        "the trainers' writes to every rank having read every byte.",
        "",
        "| size | system | link floor | cold delivered | warm delivered | cold end to end | warm end to end | warm delivered / floor | end to end / accel |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    notes, verdicts = [], []
    for size in sizes:
        r = res[str(size)]
        src, dst = layouts(size, count)
        floor, which = floor_of(links(src, dst), r8)
        ray_floor, _ = floor_of(links(src, dst, whole=True), r8)
        gathered = sum(src.nbytes(s) for s in range(1, TRAINERS))
        gather_floor = (gathered + sum(src.nbytes(s) for s in range(TRAINERS))) / r8
        base = med(r["accel"], e2e)
        for s in SYSTEMS:
            rows = r[s]
            lines.append(
                f"| {text(size)} | {NAMES[s]} | {ms(floor)} | {ms(delivered(rows[0]))} | {ms(med(rows, delivered))} | "
                f"{ms(e2e(rows[0]))} | {ms(med(rows, e2e))} | {med(rows, delivered) / floor:.2f}x | {med(rows, e2e) / base:.2f}x |"
            )
        a = r["accel"]
        pause, total = med(a, lambda x: x["pause"]), med(a, lambda x: x["switched"] - x["t0"])
        worst = max(x["pause"] / (x["switched"] - x["t0"]) for x in a)
        ray_ratio = med(r["ray"], e2e) / base
        notes.append(
            f"- {text(size)}: link floor {ms(floor)} ({which}); "
            f"Ray's own floor (whole shards, once per node) {ms(ray_floor)}, gather-then-broadcast's ({text(gathered)} into rank 0's node, "
            f"then {text(size)} out of it) {ms(gather_floor)}. accel warm: sync (fresh weights to every rank switched) "
            f"{ms(med(a, sync))} = {med(a, sync) / floor:.2f}x the floor, from the start of the trainers' writes {ms(total)}; "
            f"pause {pause * 1e3:.1f} ms ({pause / total * 100:.2f}% of that; worst round {worst * 100:.2f}%); the longest any "
            f"serving read waited during a round, {max(x['serving_wait'] for x in a) * 1e3:.1f} ms "
            f"({sum(x['serving_reads'] for x in a)} reads from a thread on every rank, CPU scheduling on {os.cpu_count()} cores included). "
            f"Ray / accel {ray_ratio:.2f}x end to end, {med(r['ray'], delivered) / med(a, delivered):.2f}x delivered; gather-then-broadcast "
            f"/ accel {med(r['gather'], e2e) / base:.2f}x end to end (its gather alone: {ms(med(r['gather'], lambda x: x['gathered'] - x['fresh']))})."
        )
        plasma = [x for x in r["plasma_mib"] if x is not None]
        mem = {x: r.get(f"memory_{x}", {}) for x in SYSTEMS}
        peaks = ", ".join(f"{NAMES[x]} {text(mem[x]['peak'])}" for x in SYSTEMS if mem[x].get("peak"))
        idle = max((m["idle"] for m in mem.values() if m.get("idle")), default=None)
        notes.append(
            f"  Memory: each inference rank's double buffer {text(max(r['receiver_bytes']))} (twice its box, `setup_weight_target`'s "
            f"bytes) and its staging for the TCP streams {text(max(r['staging_bytes']))} (kept from step to step); each trainer packs "
            f"{text(max(r['sender_bytes']))} a version (freed once read); Ray's object store held "
            + (f"{max(plasma):.0f} MiB across the cluster at the end of a round (the shards and every node's pulled copies)" if plasma else "an amount Ray did not report")
            + f"; gather-then-broadcast holds the full model ({text(size)}) on trainer rank 0. Plan: {r['plan']['seconds'] * 1e3:.1f} ms in the "
            f"planner ({r['plan']['wall'] * 1e3:.1f} ms with the layouts' JSON and the plan's objects), {text(r['plan']['bytes'])} to move; "
            f"the planner's busiest link {text(max(max(v.values()) for v in r['plan']['links'].values()))}."
            + (f" Peak memory of the whole cluster (its cgroup, every node's processes; {text(idle)} idle with the actors not yet "
               f"started): {peaks}." if peaks and idle else "")
        )
        if size == max(sizes):
            verdicts = [
                f"- Total time within 1.3x the link floor ({text(size)}, warm sync {ms(med(a, sync))} / floor {ms(floor)} = "
                f"{med(a, sync) / floor:.2f}x): **{'met' if med(a, sync) <= 1.3 * floor else 'NOT met'}**; from the start of the "
                f"trainers' writes {total / floor:.2f}x, end to end {base / floor:.2f}x.",
                f"- At least 5x Ray (end to end, warm, {text(size)}): **{ray_ratio:.2f}x, {'met' if ray_ratio >= 5 else 'NOT met'}** "
                f"({med(r['ray'], delivered) / med(a, delivered):.2f}x delivered). Ray must carry {ray_floor / floor:.2f}x accel's bytes "
                f"over the busiest link (whole shards), so the rest of the gap is how close each runs to its own floor: Ray's warm "
                f"delivered is {med(r['ray'], delivered) / ray_floor:.2f}x its floor, accel's {med(a, delivered) / floor:.2f}x its.",
                f"- Pause at most 5% of total, with double buffering: **{'met' if worst <= 0.05 else 'NOT met'}** (median "
                f"{pause / total * 100:.2f}%, worst round {worst * 100:.2f}%).",
            ]
    synth_lines = [
        f"- {s['tensors']} tensors of 4096 x 4096 bf16, 256 ranks on 32 hosts (rows) to 128 ranks on 16 hosts "
        f"({'half by columns, half by rows' if s['mixed'] else 'rows'}): {s['pieces']:,} pieces, {text(s['bytes'])} to move; "
        f"{s['seconds']:.2f} s in `Plan.seconds` (the Rust planner and its JSON read back), {s['wall']:.2f} s for the whole `plan()` call."
        for s in synth
    ]
    lines += ["", *notes, "", "Goals (issue 21):", "", *verdicts]
    if synth_lines:
        lines += ["", "Planning at scale, in the same run:", "", *synth_lines]
    lines += ["", f"Correctness: {res['checked']} (rank, step) checksums equal across the three systems; sampled elements of every tensor of every rank checked against the step's values.", ""]
    lines.append(f"Reproduce: `{command}` (whole run {seconds:.0f} s).")
    return "\n".join(lines)


def mem_total() -> int:
    return int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0]) * 1024


def fit_bytes() -> float:
    """The largest model whose worst block stays within HEADROOM of this machine's memory."""
    total = mem_total()
    return (HEADROOM * total - IDLE) / COPIES


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1G,1536M", help="model sizes, comma-separated, like 1G,1536M (default 1G,1536M)")
    ap.add_argument("--rate", default="1gbit", help="each direction of every node's link, as tc writes it (default 1gbit)")
    ap.add_argument("--tensors", type=int, default=32, help="tensors in the model (default 32)")
    ap.add_argument("--iters", type=int, default=3, help="warm rounds per system (default 3)")
    ap.add_argument("--no-plan-scale", action="store_true", help="skip planning the two large synthetic layouts (~1 min)")
    ap.add_argument("--no-write", action="store_true", help="print, do not touch docs/BENCHMARKS.md")
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("--system", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role == "driver":
        return role_driver(int(args.sizes), args.system, args.tensors, args.iters)
    if os.geteuid() != 0:
        raise SystemExit("needs root (network namespaces and tc): run it with sudo")
    bb.rate_bytes(args.rate)
    asked = [bb.parse_size(s) for s in args.sizes.split(",")]
    for s in asked:
        model(s, args.tensors)
    sizes = [s for s in asked if s <= fit_bytes()]
    skipped = [s for s in sorted(set(asked + [2 * GiB, 4 * GiB, 8 * GiB])) if s not in sizes]
    mem = mem_total()
    why = (
        f"Not run: {', '.join(text(s) for s in skipped)} (issue 21 asks 1 to 8 GiB): every node shares this one machine's "
        f"{mem / GiB:.0f} GiB, and the worst block (Ray's: the trainers' shards, their `ray.put` copies, the inference nodes' "
        f"pulled copies, the boxes, and every raylet's transfer buffers beyond its object store) needs about {IDLE / GiB:.0f} GiB "
        f"+ {COPIES} x the model ({(IDLE + COPIES * skipped[0]) / GiB:.0f} GiB for {text(skipped[0])}); a size runs if that "
        f"stays under {HEADROOM:.0%} of the machine (Ray's OOM killer acts at 95%), up to about {fit_bytes() / GiB:.1f} GiB here."
        if skipped else ""
    )
    if not sizes:
        raise SystemExit(why)
    started, load = time.monotonic(), os.getloadavg()
    synth = [] if args.no_plan_scale else synthetic_plans()
    res = run(sizes, args.tensors, args.rate, args.iters)
    shown = " ".join(a for a in sys.argv[1:] if a != "--no-write")
    command = f"sudo .venv/bin/python scripts/bench_weight_sync.py {shown}".strip()
    doc = render(res, synth, sizes, [why] if why else [], args.tensors, args.rate, args.iters, command, load, time.monotonic() - started)
    print(doc)
    if not args.no_write:
        bt.write_section(doc, BEGIN, END, "Weight sync between shardings over shaped links")


if __name__ == "__main__":
    main()
