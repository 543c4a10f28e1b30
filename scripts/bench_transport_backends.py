"""Transport backends side by side, on one host, in one run: accel's TCP (plain on loopback, and
with the AEAD record layer forced on, as it runs beyond loopback), NIXL (UCX picking its
transport, and UCX restricted to TCP) and shared memory; then the chaos run at full size.
Writes the "Transport backends" section of docs/BENCHMARKS.md.

    .venv/bin/python scripts/bench_transport_backends.py            # ~6-8 min on 2 cores
    .venv/bin/python scripts/bench_transport_backends.py --quick    # smaller, no chaos run

Every figure is a ratio against accel's plain TCP measured in the same run. Both sides reuse
the same published buffer every round (equal work). "cold" is the first transfer of a fresh
consumer process (connection and handshake, or NIXL agent start and metadata load);
"warm" is the median of the rounds after it. "delivered": get() returned the array;
"read": plus a full pass over it (a sum), which a zero-copy mapping pays on first touch.
With torch installed, one extra row moves a CPU torch tensor (DLPack on both ends).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import pickle
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "BENCHMARKS.md"
SIZES = [64 << 10, 1 << 20, 16 << 20, 64 << 20]
QUICK_SIZES = [1 << 20, 16 << 20]

# name: (path, environment of both ends)
VARIANTS: dict[str, tuple[str, dict[str, str]]] = {
    "tcp": ("tcp", {}),
    "tcp, encrypted": ("tcp", {"ACCEL_TRANSPORT_ENCRYPT": "always"}),
    "nixl (UCX default: cma/shm)": ("nixl", {}),
    "nixl (UCX_TLS=tcp)": ("nixl", {"UCX_TLS": "tcp"}),
    "shm": ("shm", {}),
}


def out(obj: Any) -> None:
    sys.stdout.write(base64.b64encode(pickle.dumps(obj)).decode() + "\n")
    sys.stdout.flush()


def role_owner(sizes: list[int], torch_too: bool) -> None:
    from accel import transport as T

    refs: dict[int, Any] = {}
    for size in sizes:
        buf = T.empty((size,), np.uint8)
        buf[:] = 7
        refs[size] = T.put(buf, path="nixl")
        del buf
    if torch_too:
        import torch

        refs[-1] = T.put(torch.ones(sizes[-1] // 4, dtype=torch.float32), path="nixl")
    out(refs)
    sys.stdin.readline()


def role_consumer(refs_b64: str, path: str, iters: int, read: bool) -> None:
    from accel import transport as T

    refs = pickle.loads(base64.b64decode(refs_b64))
    times: dict[int, list[float]] = {}
    for size, ref in refs.items():
        ts = []
        for _ in range(iters):
            t0 = time.perf_counter()
            a = T.get(ref, path=path)
            if read:
                float(a.sum()) if size >= 0 else float(a.sum().item())
            ts.append(time.perf_counter() - t0)
            del a
        times[size] = ts
    out(times)


def spawn(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, __file__, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True, env={**os.environ, **env},
    )


def measure(sizes: list[int], iters: int, torch_too: bool) -> dict[str, dict[str, dict[int, tuple[float, float]]]]:
    """variant -> mode -> size -> (cold s, warm median s)."""
    results: dict[str, dict[str, dict[int, tuple[float, float]]]] = {}
    for name, (path, env) in VARIANTS.items():
        owner = spawn(["owner", json.dumps(sizes), str(int(torch_too))], env)
        assert owner.stdout is not None and owner.stdin is not None
        refs_b64 = owner.stdout.readline().strip()
        try:
            for mode in ("delivered", "read"):
                c = spawn(["consumer", refs_b64, path, str(iters), str(int(mode == "read"))], env)
                assert c.stdout is not None
                line = c.stdout.readline()
                c.wait(600)
                times: dict[int, list[float]] = pickle.loads(base64.b64decode(line))
                results.setdefault(name, {})[mode] = {
                    size: (ts[0], statistics.median(ts[1:])) for size, ts in times.items()
                }
        finally:
            owner.stdin.write("exit\n")
            owner.stdin.flush()
            owner.wait(30)
        print(f"  {name}: done", file=sys.stderr)
    return results


def fmt_size(n: int) -> str:
    return "torch tensor " + fmt_size(-n) if n < 0 else (f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB")


def table(results: dict[str, dict[str, dict[int, tuple[float, float]]]], sizes: list[int]) -> str:
    base = results["tcp"]
    lines = [
        "| variant | size | mode | cold | warm (median) | warm GB/s | warm vs tcp |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, modes in results.items():
        for mode, per_size in modes.items():
            for size, (cold, warm) in per_size.items():
                nbytes = abs(size) if size > 0 else sizes[-1]
                ref = base[mode].get(size)
                ratio = f"{ref[1] / warm:.2f}x" if ref else "-"
                label = fmt_size(size) if size > 0 else f"torch {sizes[-1] >> 20} MiB"
                lines.append(
                    f"| {name} | {label} | {mode} | {cold * 1e3:.2f} ms | {warm * 1e3:.3f} ms | "
                    f"{nbytes / warm / 1e9:.2f} | {ratio} |"
                )
    return "\n".join(lines)


def write_doc(section: str) -> None:
    text = DOC.read_text()
    head = "## Transport backends"
    start = text.find(head)
    if start >= 0:
        end = text.find("\n## ", start + len(head))
        text = text[:start] + section + (text[end:] if end >= 0 else "\n")
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    DOC.write_text(text)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "owner":
        role_owner(json.loads(sys.argv[2]), sys.argv[3] == "1")
        return
    if len(sys.argv) > 1 and sys.argv[1] == "consumer":
        role_consumer(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "1")
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="two sizes, fewer rounds, no chaos run")
    ap.add_argument("--iters", type=int, default=None, help="rounds per size (default 12, quick 5)")
    ap.add_argument("--chaos", type=int, default=1000, help="chaos-run transfers (default 1000; 0 skips)")
    ap.add_argument("--no-doc", action="store_true", help="print, do not write docs/BENCHMARKS.md")
    args = ap.parse_args()
    sizes = QUICK_SIZES if args.quick else SIZES
    iters = args.iters or (5 if args.quick else 12)
    try:
        import torch  # noqa: F401

        torch_too = True
    except ImportError:
        torch_too = False
    from accel import transport as T

    T.info()  # peers inherit this process's cluster secret
    load = os.getloadavg()[0]
    print("== backends", file=sys.stderr)
    results = measure(sizes, iters, torch_too)
    chaos: dict[str, Any] | None = None
    if args.chaos and not args.quick:
        print(f"== chaos run, {args.chaos} transfers", file=sys.stderr)
        sys.path.insert(0, str(ROOT / "python" / "tests"))
        import transport_chaos

        chaos = transport_chaos.run(args.chaos, seed=1).as_dict()
    cmd = "scripts/bench_transport_backends.py" + (" --quick" if args.quick else "")
    parts = [
        "## Transport backends",
        "",
        f"Command: `.venv/bin/python {cmd}` (load average {load:.2f} at the start; 2 shared vCPUs, "
        "numbers vary by 20-30% between runs). One host, owner and consumer in separate processes; "
        "every ratio is against accel's plain loopback TCP of the same run. NIXL is the `nixl-cu12` "
        "1.5.1 wheel (UCX bundled), DRAM to DRAM, a one-sided READ plus the owner's confirmation that "
        "the buffer is still published (one round trip over accel's connection). `tcp, encrypted` forces "
        "the AES-256-GCM record layer that every connection beyond loopback uses (and drops `sendfile`). "
        + ("A torch CPU tensor row is included (torch installed)." if torch_too else
           "torch is not installed here, so the optional torch (DLPack) row was not run."),
        "",
        table(results, sizes),
    ]
    if chaos is not None:
        parts += [
            "",
            f"Chaos run (`python python/tests/transport_chaos.py --transfers {args.chaos} --seed 1`, run by "
            "this script): owners and consumers in separate processes, 2 consumers x 10 transfers per "
            "round over random paths (shm, tcp, nixl), and per round a SIGKILL of the owner (40%), of a "
            "consumer (40%) or of nobody, at a random moment in the first 1.5 s.",
            "",
            "| transfers | completed | failed (typed errors) | wrong bytes | hangs | leaked segments | owners killed | consumers killed | rounds | seconds |",
            "|---|---|---|---|---|---|---|---|---|---|",
            f"| {chaos['transfers']} | {chaos['ok']} | {sum(chaos['errors'].values())} {chaos['errors']} | "
            f"{chaos['wrong']} | {chaos['hangs']} | {chaos['leaked_segments']} | {chaos['owners_killed']} | "
            f"{chaos['consumers_killed']} | {chaos['rounds']} | {chaos['seconds']} |",
        ]
    section = "\n".join(parts) + "\n"
    print(section)
    if not args.no_doc:
        write_doc(section)


if __name__ == "__main__":
    main()
