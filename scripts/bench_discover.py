#!/usr/bin/env python3
"""Discovery benchmark: `accel discover --json` against `lstopo --of xml` on the same captured tree.

Both run as processes (start-up, reading sysfs, writing the whole description), alternating, so
machine noise hits both alike. The ratio of medians goes into docs/BENCHMARKS.md between the
`bench:discover` markers.

    python3 scripts/bench_discover.py [--runs 40] [--host hwloc-2p8co2t-8ve] [--no-write]
"""

import argparse
import os
import pathlib
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "BENCHMARKS.md"
BEGIN, END = "<!-- bench:discover:begin -->", "<!-- bench:discover:end -->"


def largest_host():
    hosts = sorted((REPO / "test_data" / "hosts").glob("*/capture.tar.*"), key=lambda p: p.stat().st_size)
    return hosts[-1].parent.name


def extract(host):
    dest = REPO / "target" / "accel-bench" / host
    if not dest.exists():
        archive = next((REPO / "test_data" / "hosts" / host).glob("capture.tar.*"))
        tmp = dest.with_name(dest.name + ".tmp")
        tmp.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="fully_trusted")
        tmp.rename(dest)
    return next(p for p in [dest, *dest.iterdir()] if (p / "sys").is_dir())


def timed(cmd, env=None):
    """Wall time of one run, spawned with posix_spawn so the harness adds as little as it can."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    actions = [(os.POSIX_SPAWN_DUP2, devnull, 1), (os.POSIX_SPAWN_DUP2, devnull, 2)]
    path = shutil.which(cmd[0])
    start = time.perf_counter()
    pid = os.posix_spawn(path, cmd, env if env is not None else os.environ, file_actions=actions)
    _, status = os.waitpid(pid, 0)
    elapsed = time.perf_counter() - start
    os.close(devnull)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{cmd[0]} failed")
    return elapsed


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--host", default=None, help="capture under test_data/hosts (default: the largest)")
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/BENCHMARKS.md alone")
    args = ap.parse_args()

    subprocess.run(["cargo", "build", "--release", "-q", "-p", "accel-cli"], cwd=REPO, check=True)
    accel = REPO / "target" / "release" / "accel"
    host = args.host or largest_host()
    root = extract(host)
    files = sum(len(f) for _, _, f in os.walk(root))
    lstopo_env = dict(os.environ, HWLOC_FSROOT=str(root))
    ours_cmd = [str(accel), "discover", "--root", str(root), "--json"]
    theirs_cmd = ["lstopo", "--of", "xml", "--whole-io", "-"]
    for _ in range(3):  # warm the page cache for both
        timed(ours_cmd), timed(theirs_cmd, lstopo_env)
    ours, theirs, ours_start, theirs_start, ours_nopath = [], [], [], [], []
    # accel also searches ACCEL_PLUGIN_DIR and PATH for external plugins (accel-plugin-<name>);
    # timed once more with an empty PATH to show what that search costs on this machine.
    nopath_env = dict(os.environ, PATH="")
    for _ in range(args.runs):
        ours.append(timed(ours_cmd))
        ours_nopath.append(timed(ours_cmd, nopath_env))
        theirs.append(timed(theirs_cmd, lstopo_env))
        # Process start alone, for each binary: `--version` execs, links and exits.
        ours_start.append(timed([str(accel), "--version"]))
        theirs_start.append(timed(["lstopo", "--version"]))
    m_ours, m_theirs = statistics.median(ours), statistics.median(theirs)
    ratio = m_theirs / m_ours
    work_ours = m_ours - statistics.median(ours_start)
    work_theirs = m_theirs - statistics.median(theirs_start)
    version = subprocess.run(["lstopo", "--version"], capture_output=True, text=True).stdout.strip()
    lines = [
        BEGIN,
        f"Capture `{host}` ({files} files), {args.runs} alternating runs each, median wall time per process,",
        f"on {platform.machine()} with {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}:",
        "",
        "| command | median | p90 |",
        "|---|---|---|",
        f"| `accel discover --root <capture> --json` | {m_ours * 1e3:.2f} ms | {statistics.quantiles(ours, n=10)[-1] * 1e3:.2f} ms |",
        f"| `HWLOC_FSROOT=<capture> lstopo --of xml --whole-io -` ({version}) | {m_theirs * 1e3:.2f} ms | {statistics.quantiles(theirs, n=10)[-1] * 1e3:.2f} ms |",
        "",
        f"**accel is {ratio:.1f}x faster than lstopo** (goal: at least 5x: {'met' if ratio >= 5 else 'not met'}).",
        "",
        f"Process start alone (each binary's `--version`, same run): accel {statistics.median(ours_start) * 1e3:.2f} ms,",
        f"lstopo {statistics.median(theirs_start) * 1e3:.2f} ms. Beyond it, accel's discovery work takes {work_ours * 1e3:.2f} ms",
        f"and lstopo's {work_theirs * 1e3:.2f} ms: {work_theirs / work_ours:.1f}x. accel's discovery work is",
        "mostly small sysfs reads (an open, a read and a close each).",
        "",
        f"Of accel's time, the search of `ACCEL_PLUGIN_DIR` and `PATH` for external plugins takes",
        f"{(m_ours - statistics.median(ours_nopath)) * 1e3:.2f} ms here (median with an empty `PATH`: {statistics.median(ours_nopath) * 1e3:.2f} ms;",
        f"PATH holds {len([d for d in dict.fromkeys(os.environ.get('PATH', '').split(':')) if d])} directories).",
        "",
        "Reproduce: `python3 scripts/bench_discover.py` (needs Debian's `hwloc`).",
        END,
    ]
    block = "\n".join(lines)
    print(block)
    if not args.no_write:
        text = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
        if BEGIN in text:
            text = text[: text.index(BEGIN)] + block + text[text.index(END) + len(END):]
        else:
            text = text.rstrip("\n") + "\n\n## Discovery against lstopo\n\n" + block + "\n"
        DOC.write_text(text)
    return 0 if ratio > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
