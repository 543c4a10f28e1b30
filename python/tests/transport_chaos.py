"""Chaos run of the transport: owners and consumers in separate processes, transfers over shared
memory, TCP and NIXL, and random SIGKILLs of owners and consumers mid-run. It counts what must
stay zero: wrong bytes (a transfer that returned bytes other than the owner's), hangs (a
consumer past its deadline), and leaked segments (segments of dead owners left after the next
sweep). Failed transfers are expected (their owner was killed) and must fail with a transport
error, never otherwise.

    python python/tests/transport_chaos.py --transfers 1000 --seed 1   # the benchmark's run
    (python/tests/test_transport_chaos.py runs a small count in the test command)
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import pickle
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

PATHS = ("shm", "tcp", "nixl")
CONSUMER_DEADLINE_S = 90.0  # a consumer not done by then is a hang


def _out(obj: Any) -> None:
    sys.stdout.write(base64.b64encode(pickle.dumps(obj)).decode() + "\n")
    sys.stdout.flush()


def _in(line: str) -> Any:
    return pickle.loads(base64.b64decode(line))


def _content(seed: int, size: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


def role_owner(count: int, seed: int) -> None:
    """Publishes `count` buffers of random sizes and contents (with NIXL tickets), prints
    (refs, digests), then waits for "exit" on stdin."""
    from accel import transport as T

    rng = random.Random(seed)
    refs, digests = [], []
    for i in range(count):
        size = rng.choice([4096, 65536, 1 << 20, 3 << 20])
        data = _content(seed * 1000 + i, size)
        buf = T.empty((size,), np.uint8)
        buf[:] = data
        refs.append(T.put(buf, path="nixl"))
        digests.append(hashlib.blake2b(data.tobytes(), digest_size=16).hexdigest())
        del buf
    _out((refs, digests))
    for line in sys.stdin:
        if line.strip() == "exit":
            break


def role_consumer(tasks_b64: str) -> None:
    """Runs each (ref, path, digest) task and prints one result per task as it finishes."""
    from accel import transport as T

    for ref, path, digest in _in(tasks_b64):
        try:
            got = T.get(ref, path=path)
            ok = hashlib.blake2b(np.ascontiguousarray(got).tobytes(), digest_size=16).hexdigest() == digest
            _out(("ok" if ok else "wrong", path))
        except T.TransportError as e:
            _out((type(e).__name__, path))


@dataclass
class Report:
    transfers: int = 0  # attempted (a result came back)
    ok: int = 0
    wrong: int = 0
    hangs: int = 0
    leaked: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    per_path: Counter[str] = field(default_factory=Counter)
    owners_killed: int = 0
    consumers_killed: int = 0
    rounds: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "transfers": self.transfers, "ok": self.ok, "wrong": self.wrong, "hangs": self.hangs,
            "leaked_segments": self.leaked, "errors": dict(self.errors), "per_path": dict(self.per_path),
            "owners_killed": self.owners_killed, "consumers_killed": self.consumers_killed,
            "rounds": self.rounds, "seconds": round(self.seconds, 1),
        }


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, __file__, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True,
    )


def run(transfers: int, seed: int = 1, consumers: int = 2, per_consumer: int = 10) -> Report:
    """Runs rounds until `transfers` transfers were attempted. The calling process must share
    the peers' cluster secret (accel.transport started, or ACCEL_TRANSPORT_SECRET set)."""
    from accel import transport as T

    rng = random.Random(seed)
    rep = Report()
    owner_pids: list[int] = []
    started = time.monotonic()
    while rep.transfers < transfers:
        rep.rounds += 1
        owner = _spawn("owner", "4", str(seed * 100_000 + rep.rounds))
        assert owner.stdout is not None and owner.stdin is not None
        line = owner.stdout.readline()
        if not line:
            raise RuntimeError("a chaos owner failed to start")
        refs, digests = _in(line)
        owner_pids.append(owner.pid)
        procs = []
        for _ in range(consumers):
            tasks = []
            for _ in range(per_consumer):
                i = rng.randrange(len(refs))
                tasks.append((refs[i], rng.choice(PATHS), digests[i]))
            procs.append(_spawn("consumer", base64.b64encode(pickle.dumps(tasks)).decode()))
        # The chaos: kill the owner, a consumer, or nobody, at a random moment.
        fate = rng.random()
        time.sleep(rng.uniform(0.0, 1.5))
        if fate < 0.4:
            owner.send_signal(signal.SIGKILL)
            rep.owners_killed += 1
        elif fate < 0.8:
            procs[rng.randrange(len(procs))].send_signal(signal.SIGKILL)
            rep.consumers_killed += 1
        deadline = time.monotonic() + CONSUMER_DEADLINE_S
        for p in procs:
            assert p.stdout is not None
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                rep.hangs += 1
                p.kill()
                p.wait()
            for out in p.stdout.read().splitlines():
                try:
                    status, path = _in(out)
                except Exception:  # the last line of a killed consumer, cut short
                    continue
                rep.transfers += 1
                rep.per_path[path] += 1
                if status == "ok":
                    rep.ok += 1
                elif status == "wrong":
                    rep.wrong += 1
                else:
                    rep.errors[status] += 1
        if owner.poll() is None:
            owner.stdin.write("exit\n")
            owner.stdin.flush()
            try:
                owner.wait(30)
            except subprocess.TimeoutExpired:
                rep.hangs += 1
                owner.kill()
        owner.wait()
    # Every owner is gone now; the next sweep must leave none of their segments behind.
    T.sweep()
    ns = os.readlink("/proc/self/ns/pid").split("[")[1].rstrip("]")
    prefixes = tuple(f"accel-{ns}-{pid}-" for pid in owner_pids)
    rep.leaked = sum(1 for n in os.listdir(T.shm_dir()) if n.startswith(prefixes))
    rep.seconds = time.monotonic() - started
    return rep


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "owner":
        role_owner(int(sys.argv[2]), int(sys.argv[3]))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "consumer":
        role_consumer(sys.argv[2])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transfers", type=int, default=1000, help="transfers to attempt (default 1000)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    from accel import transport as T

    T.info()  # the peers inherit this process's secret
    print(json.dumps(run(args.transfers, args.seed).as_dict(), indent=1))


if __name__ == "__main__":
    main()
