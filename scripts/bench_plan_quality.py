#!/usr/bin/env python3
"""Planner quality benchmarks (issue 22): the planner's gang placements against an exact ILP
optimum of the same objective, and the fragmentation a day of jobs leaves on NVL72 domains under
the planner with and without domain bin-packing and under first fit. Builds
`accel-plan-quality` in release, runs `ilp` and `frag`, and writes the section between the
`bench:plan-quality` markers of docs/BENCHMARKS.md.

    python3 scripts/bench_plan_quality.py [--instances 200] [--streams 4] [--no-groups] [--no-write]
"""

import argparse
import datetime
import json
import os
import pathlib
import platform
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "BENCHMARKS.md"
BEGIN, END = "<!-- bench:plan-quality:begin -->", "<!-- bench:plan-quality:end -->"
# The section goes after this marker and the paragraph that follows it.
AFTER = "<!-- bench:plan:end -->"


def run(cmd):
    return subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, text=True)


def pct(x):
    return f"{100 * x:.1f}%"


def summary_rows(s):
    return f"""| instances | {s['instances']} |
| decided (not skipped, solver within its limit) | {s['decided']} |
| skipped: a node's enumeration past the search budget / over the option limit | {s['skipped_budget']} / {s['skipped_options']} |
| solver past its time limit | {s['time_limit']} |
| planner equal to the optimum | {s['equal']} |
| both infeasible | {s['both_infeasible']} |
| **equal or both infeasible, share of decided** | **{pct(s['equal_rate'])}** |
| equal, share of those both placed | {pct(s['equal_rate_feasible'])} |
| planner below the optimum | {s['gap']} (mean gap {pct(s['mean_gap'])}, worst {pct(s['worst_gap'])}) |
| of those, trades its own score prefers / search misses | {s['gap_trades']} / {s['gap_misses']} |
| planner infeasible, ILP places (the planner's search is bounded) | {s['planner_only_infeasible']} |
| ILP infeasible, planner places (a bug on one side) | {s['ilp_only_infeasible']} |
| planner placement invalid or above the optimum (a bug on one side) | {s['planner_invalid']} |
| planner did not return within its limit | {s['planner_timeout']} |
| median time: planner / option enumeration / ILP (model + solve) | {s['median_planner_ms']:.3f} ms / {s['median_options_ms']:.1f} ms / {s['median_solver_ms']:.1f} ms |
| median ILP time over planner time, per instance | {s['median_solver_over_planner']:.0f}x |"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--instances", type=int, default=200)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument(
        "--no-groups", dest="groups", action="store_false", help="leave out requests with sub-groups and tier caps"
    )
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()

    run(["cargo", "build", "--release", "-q", "-p", "accel-plan-quality"])
    exe = str(REPO / "target" / "release" / "accel-plan-quality")
    started = time.time()
    ilp_cmd = [exe, "ilp", "--instances", str(args.instances), "--json"] + (["--groups"] if args.groups else [])
    ilp = json.loads(run(ilp_cmd).stdout)
    frag_cmd = [exe, "frag", "--streams", str(args.streams), "--json"]
    frag = json.loads(run(frag_cmd).stdout)
    wall = time.time() - started
    p = ilp["plain"]
    print(f"ilp: equal {pct(p['equal_rate'])} of {p['decided']} decided; frag: {frag['jobs']} jobs", file=sys.stderr)

    extended = ""
    if ilp.get("extended"):
        extended = f"""
Requests with sub-groups (`groups`: consecutive bundles in one rack, node or NVLink clique,
replicas spread or packed) or a hard tier cap (`within` leaf or spine), from the same run
(the default; `--no-groups` leaves them out); the ILP encodes them with an indicator per (sub-group, domain) and per tier
switch. "Planner placement invalid" counts placements that break them:

| | |
|---|---|
{summary_rows(ilp['extended'])}
"""

    ff = next(r for r in frag["runs"] if r["placer"] == "first_fit")
    names = {"binpack": "planner, bin-packing on (default)", "no_binpack": "planner, `binpack.weight = 0`", "first_fit": "first fit (baseline)"}

    def ratio(a, b):
        return f"{a / b:.2f}x" if b else "n/a"

    frag_rows = "\n".join(
        f"| {names[r['placer']]} | {r['mean_whole_free']:.3f} ({ratio(r['mean_whole_free'], ff['mean_whole_free'])}) "
        f"| {r['end_whole_free']:.3f} | {r['rejected']['whole']}/{r['offered']['whole']} "
        f"| {r['rejected']['gang']}/{r['offered']['gang']} | {r['rejected']['small']}/{r['offered']['small']} "
        f"| {r['utilisation']:.3f} ({ratio(r['utilisation'], ff['utilisation'])}) | {r['nvl72_utilisation']:.3f} | {r['place_ms']:.0f} ms |"
        for r in frag["runs"]
    )
    verdict = "met" if p["goal_met"] else "not met"
    section = f"""{BEGIN}
### Planner quality: exact optimum and fragmentation

On {platform.machine()} with {os.cpu_count()} CPUs, {datetime.date.today()}, release build; both parts
together took {wall:.0f} s. Reproduce: `python3 scripts/bench_plan_quality.py`
(or `accel-plan-quality ilp --json` and `accel-plan-quality frag --json`).

**Against an exact optimum.** {ilp['nodes']}-node clusters of mixed embedded samples (racks of 8
nodes, NVL72 trays of a rack in one clique, 40% of nodes with about half their devices taken),
one random gang each: 2 to 32 bundles of 1 to 8 devices, any, scale-up or island connectivity,
sometimes one NUMA node or a NIC at PXB, `same` rack or node or none, sometimes `spread`. The
ILP (good_lp over microlp, pure Rust) has a binary per bundle class and valid device set (every
set `Planner::options` lists on the starting state), each device at most once, an indicator per
domain for `same`, and a node-used binary for the pack bonus; it stops at {ilp['time_limit_s']:.0f} s and
instances with more than {ilp['max_options']:,} sets are skipped. Both sides are scored by one
function: the sum over bundles of `min_pair_gbps + W_MEAN_GBPS*mean_pair_gbps + W_SAME_NUMA*same_numa
+ (W_NIC_PIX*nic_pix + W_NIC_PXB*nic_pxb)/k`, plus `W_PACK*(bundles - nodes used)`. The planner's
state-dependent terms (`leftover`, `broken`, domain bin-packing) are left out, since they depend
on the order bundles are placed in; so a gap is either a trade that the planner's own score
(those terms included, bundles in its order) prefers, or a search miss where its own score rates
the optimum higher. The ILP is checked against brute force on tiny instances, and the tests show
that a dropped constraint or objective term is caught (`cargo test -p accel-plan-quality`).

| | |
|---|---|
{summary_rows(p)}

**Goal (equal to the optimum on at least 95% of medium instances): {verdict}** ({pct(p['equal_rate'])}).
{extended}
**Fragmentation over a day.** {frag['domains']} NVL72 domains (18 `gb200-nvl72-tray` nodes of 4 GPUs
each, one `nvlink_clique` each) and {frag['others']} 8-GPU boxes (dgx-h100, hgx-b200), {frag['devices']:,} GPUs.
{frag['streams']} seeded streams of {frag['hours']:.0f} hours ({frag['jobs']:,} jobs in all), Poisson arrivals offering {frag['load']:.0%}
of the cluster: 80% small jobs (1-4 GPUs, one scale-up bundle, mean 1 h), 17% gangs (2-8
bundles of 4 in one NVLink clique, mean 3 h), 3% whole-domain jobs (18 bundles of 4, mean 6 h);
exponential durations. The nodes are in a seeded random order, as Ray lists nodes by their
random node ids (not by rack). Each placer gets the identical streams; a job that does not fit when it
arrives is dropped (no queue). Shares are time-weighted over hours {frag['warmup_hours']:.0f}-{frag['hours']:.0f} (the first
hours fill the cluster from empty) and averaged over the streams; counts are summed. First fit
takes the first node in index order with enough free devices and its lowest free devices, and
for a gang the first clique where every bundle fits that way (any devices of a tray or a box are
all joined by NVLink, so its choices are valid). Ratios are against first fit in the same run.

| placer | whole free domains, mean | at the end | whole-domain jobs rejected | gangs rejected | small rejected | utilisation | NVL72 utilisation | placing time |
|---|---|---|---|---|---|---|---|---|
{frag_rows}
{END}"""
    print(section)
    if args.no_write:
        return
    doc = DOC.read_text()
    if BEGIN in doc:
        doc = doc[: doc.index(BEGIN)] + section + doc[doc.index(END) + len(END) :]
    else:
        # After the bench:plan section and the paragraph that follows it.
        at = doc.index(AFTER) + len(AFTER)
        para = doc.index("\n\n", at)
        end = doc.find("\n\n", para + 2)
        end = len(doc) if end < 0 else end
        doc = doc[:end] + "\n\n" + section + doc[end:]
    DOC.write_text(doc)


if __name__ == "__main__":
    main()
