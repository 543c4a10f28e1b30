#!/usr/bin/env python3
"""The health monitor's cost per period (issue 33): one probe of a node (`_native.probe_json`,
what `accel.ray.start_monitors`' actor runs every `period_s`) and one monitor step (the
withdraw/recover decision), beside a whole discovery of the same node
(`_native.sample_machine_json`: what a node does once when it joins) measured in the same run,
alternating, on embedded samples. The probe of a sample includes reading the sample from the binary, as discovery does. The table
goes into docs/BENCHMARKS.md between the `bench:probe` markers.

    .venv/bin/python scripts/bench_probe.py [--rounds 30] [--period 10] [--no-write] [SAMPLE ...]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import statistics
import time

from accel import _native

REPO = pathlib.Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "BENCHMARKS.md"
BEGIN, END = "<!-- bench:probe:begin -->", "<!-- bench:probe:end -->"
SAMPLES = ["gb200-nvl72-tray", "dgx-h100", "mi300x", "llnl-ex255a-4xmi300a-cpx", "aws-p5en-48xlarge"]


def measure(sample: str, rounds: int) -> dict:
    """Cold (the first call of each), then warm medians of `rounds` alternating rounds."""
    t = time.perf_counter()
    result = _native.probe_json(sample=sample)
    cold_probe = time.perf_counter() - t
    t = time.perf_counter()
    _native.sample_machine_json(sample)
    cold_discover = time.perf_counter() - t
    probe, step, discover = [], [], []
    tracker = None
    for _ in range(rounds):
        t = time.perf_counter()
        result = _native.probe_json(sample=sample)
        probe.append(time.perf_counter() - t)
        t = time.perf_counter()
        out = json.loads(_native.monitor_step(tracker, result, 3, None))
        step.append(time.perf_counter() - t)
        tracker = json.dumps(out["tracker"])  # as the monitor keeps it between steps
        t = time.perf_counter()
        _native.sample_machine_json(sample)
        discover.append(time.perf_counter() - t)
    doc = json.loads(result)
    return {
        "sample": sample,
        "devices": len(doc["devices"]),
        "passed": doc["passed"],
        "cold_probe": cold_probe,
        "cold_discover": cold_discover,
        "probe": statistics.median(probe),
        "step": statistics.median(step),
        "discover": statistics.median(discover),
    }


def render(rows: list[dict], rounds: int, period: float) -> str:
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [
        f"{platform.machine()} with {os.cpu_count()} CPUs, Linux {platform.release()}, {when}; load average {load} at the end.",
        "",
        f"Medians of {rounds} warm rounds (probe, step and discovery alternating); cold: each call's first in this process. "
        f"Share of one core: (probe + step) / a period of {period:g} s, `start_monitors`' default.",
        "",
        "| sample | devices | passed | probe warm | probe cold | monitor step | discovery warm (baseline) | discovery cold | probe / discovery | share of a core |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['sample']} | {r['devices']} | {r['passed']} | {r['probe'] * 1e3:.2f} ms | {r['cold_probe'] * 1e3:.2f} ms | "
            f"{r['step'] * 1e3:.3f} ms | {r['discover'] * 1e3:.2f} ms | {r['cold_discover'] * 1e3:.2f} ms | "
            f"{r['probe'] / r['discover']:.2f}x | {(r['probe'] + r['step']) / period * 100:.2f}% |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("samples", nargs="*", default=SAMPLES, help="embedded samples (`accel samples`)")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--period", type=float, default=10.0, help="the monitor's period in seconds (for the share of a core)")
    ap.add_argument("--no-write", action="store_true", help="print the table only")
    args = ap.parse_args()
    rows = [measure(s, args.rounds) for s in args.samples]
    text = render(rows, args.rounds, args.period)
    print(text)
    if args.no_write:
        return
    doc = DOC.read_text()
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"{DOC} has no {BEGIN} ... {END} section to write into")
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


if __name__ == "__main__":
    main()
