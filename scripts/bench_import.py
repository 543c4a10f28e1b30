#!/usr/bin/env python3
"""Import benchmark and evidence count.

1. `accel import hwloc FILE -o BUNDLE` against `lstopo --input FILE --of xml -` on the largest real
   hwloc XMLs of test_data/hwloc-xml, in the same run, alternating, as processes (start-up, read
   and parse the XML, write the whole result: accel the capture bundle after one discovery of it,
   lstopo its normalised XML). Cold is the first run of each after a fresh build; warm the median
   of the rest. `accel import nccl` is timed the same way on the largest NCCL/RCCL files
   (lstopo cannot read those: no baseline exists, and the table says so).
2. The real public captures the tests read, by format and by family, at a base commit ("before")
   and in the working tree ("after"); a capture counts for a family when discovery of it reports
   that family's devices (both sets discovered with the binary under test).

Results go into docs/BENCHMARKS.md between the `bench:import` markers.

    python3 scripts/bench_import.py [--runs 20] [--before 9bf77bf] [--profile release] [--no-write]
"""

import argparse
import json
import os
import pathlib
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "BENCHMARKS.md"
BEGIN, END = "<!-- bench:import:begin -->", "<!-- bench:import:end -->"


def timed(cmd, out=None):
    """Wall time of one run (posix_spawn, output to /dev/null unless `out`)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    actions = [(os.POSIX_SPAWN_DUP2, devnull, 1), (os.POSIX_SPAWN_DUP2, devnull, 2)]
    start = time.perf_counter()
    pid = os.posix_spawn(shutil.which(cmd[0]) or cmd[0], cmd, os.environ, file_actions=actions)
    _, status = os.waitpid(pid, 0)
    elapsed = time.perf_counter() - start
    os.close(devnull)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(cmd)} failed")
    return elapsed


def largest(directory, n):
    files = sorted(directory.glob("*.xml"), key=lambda p: p.stat().st_size)
    return files[-n:][::-1]


def time_pair(accel, kind, path, runs, tmp):
    bundle = tmp / "out.bundle"
    ours = [str(accel), "import", kind, str(path), "-o", str(bundle)]
    theirs = ["lstopo", "--input", str(path), "--of", "xml", "-"] if kind == "hwloc" else None
    cold_ours = timed(ours)
    cold_theirs = timed(theirs) if theirs else None
    # What the one discovery inside the import costs on its own: `accel discover` of the bundle.
    again = [str(accel), "discover", "--root", str(bundle), "--json"]
    a, b, c = [], [], []
    for _ in range(runs):
        a.append(timed(ours))
        if theirs:
            b.append(timed(theirs))
        c.append(timed(again))
    return {
        "file": path.name,
        "bytes": path.stat().st_size,
        "ours_cold": cold_ours,
        "ours": statistics.median(a),
        "theirs_cold": cold_theirs,
        "theirs": statistics.median(b) if b else None,
        "discover": statistics.median(c),
    }


# ---------------------------------------------------------------------------------------------
# The evidence count.


def git_files(rev, prefix):
    out = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, prefix], cwd=REPO, capture_output=True, text=True)
    return [l for l in out.stdout.splitlines() if l]


def captures(rev):
    """(format, name, how to discover it) for every real public capture the tests read at `rev`."""
    out = []
    for f in git_files(rev, "test_data/hosts"):
        parts = f.split("/")
        if len(parts) == 4 and parts[3] in ("capture.tar.bz2", "capture.tar.gz"):
            out.append(("sysfs tarball", parts[2], ("tar", f)))
        if len(parts) == 4 and parts[3] == "provenance.toml":
            text = subprocess.run(["git", "show", f"{rev}:{f}"], cwd=REPO, capture_output=True, text=True).stdout
            if 'kind = "real"' in text and "KFD" in text:
                bundles = [b for b in git_files(rev, f"test_data/hosts/{parts[2]}") if "capture.bundle" in b]
                out.append(("KFD tree", parts[2], ("bundle", bundles[0])))
    for f in git_files(rev, "test_data/hwloc-linux"):
        if f.endswith(".tar.bz2"):
            out.append(("sysfs tarball", pathlib.Path(f).name[: -len(".tar.bz2")], ("tar", f)))
    for f in git_files(rev, "test_data/hwloc-xml"):
        if f.endswith(".xml"):
            out.append(("hwloc XML", pathlib.Path(f).stem, ("hwloc", f)))
    for f in git_files(rev, "test_data/nccl-topo"):
        if f.endswith(".xml"):
            out.append(("NCCL/RCCL topology file", pathlib.Path(f).stem, ("nccl", f)))
    return out


def families(accel, rev, how, tmp):
    """The plugins whose devices discovery reports on one capture."""
    kind, what = how
    if kind == "bundle":
        data = subprocess.run(["git", "show", f"{rev}:{what}"], cwd=REPO, capture_output=True).stdout
        if what.endswith(".gz"):
            data = subprocess.run(["gzip", "-dc"], input=data, capture_output=True).stdout
        bundle = tmp / "capture.bundle"
        bundle.write_bytes(data)
        cmd = [str(accel), "discover", "--root", str(bundle), "--json"]
    else:
        data = subprocess.run(["git", "show", f"{rev}:{what}"], cwd=REPO, capture_output=True).stdout
        src = tmp / pathlib.Path(what).name
        src.write_bytes(data)
        if kind == "tar":
            dest = tmp / ("x-" + src.name)
            dest.mkdir()
            with tarfile.open(src) as tar:
                tar.extractall(dest, filter="fully_trusted")
            root = next(p for p in [dest, *dest.iterdir()] if (p / "sys").is_dir())
            cmd = [str(accel), "discover", "--root", str(root), "--json"]
        else:
            bundle = tmp / (src.name + ".bundle")
            subprocess.run([str(accel), "import", kind, str(src), "-o", str(bundle)], capture_output=True, check=True)
            cmd = [str(accel), "discover", "--root", str(bundle), "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        return {"(unreadable)"}
    m = json.loads(out.stdout)
    return {a["plugin"] for a in m["accelerators"]} or {"(no accelerators)"}


def count(accel, rev):
    by_format, by_family = {}, {}
    with tempfile.TemporaryDirectory(prefix="accel-bench-import-") as t:
        for i, (fmt, _name, how) in enumerate(captures(rev)):
            sub = pathlib.Path(t) / str(i)
            sub.mkdir()
            by_format[fmt] = by_format.get(fmt, 0) + 1
            for fam in families(accel, rev, how, sub):
                by_family[fam] = by_family.get(fam, 0) + 1
    return by_format, by_family


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--before", default="9bf77bf", help="the commit the evidence count starts from")
    ap.add_argument("--profile", default="release", help="cargo profile of the accel binary")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    subprocess.run(["cargo", "build", "--profile", args.profile, "-q", "-p", "accel-cli"], cwd=REPO, check=True)
    accel = REPO / "target" / ("debug" if args.profile == "dev" else args.profile) / "accel"
    lstopo_version = subprocess.run(["lstopo", "--version"], capture_output=True, text=True).stdout.strip()

    rows = []
    with tempfile.TemporaryDirectory(prefix="accel-bench-import-") as t:
        tmp = pathlib.Path(t)
        for path in largest(REPO / "test_data" / "hwloc-xml", 3):
            rows.append(("hwloc", time_pair(accel, "hwloc", path, args.runs, tmp)))
        for path in largest(REPO / "test_data" / "nccl-topo", 2):
            rows.append(("nccl", time_pair(accel, "nccl", path, args.runs, tmp)))
    before = count(accel, args.before)
    after = count(accel, "HEAD")

    ms = lambda s: "-" if s is None else f"{s * 1000:.1f}"
    lines = [
        BEGIN,
        "",
        f"Measured by `python3 scripts/bench_import.py --runs {args.runs} --profile {args.profile}` on "
        f"{platform.machine()}, {os.cpu_count()} CPUs (shared with other work), against {lstopo_version}. "
        "Each command is a process: start-up, reading and parsing the file, writing the whole result "
        "(accel: the capture bundle, after discovering it once to name unidentified devices; lstopo: "
        "its normalised XML to /dev/null). Cold is the first run; warm the median of the runs after it.",
        "",
        "| command | file | bytes | accel cold ms | accel warm ms | lstopo cold ms | lstopo warm ms | accel / lstopo (warm) | `accel discover` of the bundle, warm ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for kind, r in rows:
        ratio = f"{r['ours'] / r['theirs']:.2f}" if r["theirs"] else "no baseline (lstopo cannot read it)"
        lines.append(
            f"| `accel import {kind}` | `{r['file']}` | {r['bytes']} | {ms(r['ours_cold'])} | {ms(r['ours'])} | "
            f"{ms(r['theirs_cold'])} | {ms(r['theirs'])} | {ratio} | {ms(r['discover'])} |"
        )
    lines += [
        "",
        "The import runs one discovery of its result (to name devices no plugin identifies); the "
        "last column is that discovery alone, as `accel discover --root BUNDLE --json`: most of the "
        "import's time is discovery, not reading the file.",
        "",
        f"Real public captures the tests read, by format and by family (a capture counts for each "
        f"family whose devices discovery reports in it), at {args.before} (before issue 34) and now:",
        "",
        "| format | before | after |",
        "|---|---|---|",
    ]
    for fmt in sorted(set(before[0]) | set(after[0])):
        lines.append(f"| {fmt} | {before[0].get(fmt, 0)} | {after[0].get(fmt, 0)} |")
    lines += ["", "| family | before | after |", "|---|---|---|"]
    for fam in sorted(set(before[1]) | set(after[1])):
        lines.append(f"| {fam} | {before[1].get(fam, 0)} | {after[1].get(fam, 0)} |")
    lines += ["", END]
    block = "\n".join(lines)
    print(block)
    if args.no_write:
        return
    doc = DOC.read_text()
    if BEGIN in doc:
        head, rest = doc.split(BEGIN, 1)
        doc = head + block + rest.split(END, 1)[1]
    else:
        doc = doc.rstrip("\n") + "\n\n## Importing hwloc XML and NCCL topology files\n\n" + block + "\n"
    DOC.write_text(doc)


if __name__ == "__main__":
    main()
