"""`accel lab bisect CHECK --good A --bad B`: the first commit at which a check went bad,
found by running it at midpoints through Ray (binary search over `git rev-list --first-parent
A..B` of the repository named), every step an ordinary stored run (source `bisect`).

Each step runs the check on the node where it failed and, when there is one, on a healthy node
of the same SKU (neither quarantined), so a node's own fault is told from the commit's. The
commit reaches the check as `ACCEL_LAB_COMMIT`; the suite's own `setup` command (run first, in
the check's directory) builds it. A test step is bad when the check fails on the failing node,
good when it passes there; a benchmark step is bad when its value is nearer the value measured
at B than at A (both measured first, as runs too); a step whose setup fails, or that gives no
verdict, is skipped, as `git bisect skip` does. The conclusion (the first bad commit, the last
good one, every step) is stored with the bisect."""

from __future__ import annotations

import re
import subprocess
import time
from typing import Any, Callable

from ._store import Store
from ._suite import Suite

_SHA = re.compile(r"[0-9a-f]{7,64}")
STEP_SOURCE = "bisect"


class BisectError(Exception):
    """A bisect that cannot start (no such commits, no node); one line."""


def commits_between(repo: str, good: str, bad: str) -> list[str]:
    """The commits after `good` up to and including `bad` (first parents, oldest first), as
    full hashes; `BisectError` when `good` is not an ancestor of `bad`."""

    def git(*args: str) -> str:
        try:
            out = subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise BisectError(f"git {args[0]} in {repo}: {e}") from None
        if out.returncode != 0:
            raise BisectError(f"git {args[0]} in {repo}: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode}")
        return out.stdout.strip()

    for ref in (good, bad):
        if ref.startswith("-"):
            raise BisectError(f"{ref!r} is not a commit")
    good_sha, bad_sha = git("rev-parse", "--verify", f"{good}^{{commit}}"), git("rev-parse", "--verify", f"{bad}^{{commit}}")
    try:
        git("merge-base", "--is-ancestor", good_sha, bad_sha)
    except BisectError:
        raise BisectError(f"{good} is not an ancestor of {bad}") from None
    commits = git("rev-list", "--first-parent", "--reverse", f"{good_sha}..{bad_sha}").split()
    if not commits or not all(_SHA.fullmatch(c) for c in commits):
        raise BisectError(f"no commits between {good} and {bad}")
    return commits


def _step_verdict(results: list[dict[str, Any]], node: str, series: str | None, refs: tuple[float, float] | None) -> tuple[str, float | None]:
    """("good" | "bad" | "skip", the value measured) of one node's results in a step."""
    mine = [r for r in results if r["node"] == node]
    if any(r["verdict"] == "fail" for r in mine):
        return "bad", None
    if not mine or any(r["verdict"] != "pass" for r in mine):
        return "skip", None  # lost, timed out, or its setup broke: no verdict for this commit
    if series is None:
        return "good", None
    values = [float(r["series"][series]) for r in mine if r.get("series") and series in r["series"]]
    if not values:
        return "skip", None
    value = sorted(values)[len(values) // 2]
    if refs is None:
        return "good", value
    good_ref, bad_ref = refs
    return ("bad" if abs(value - bad_ref) < abs(value - good_ref) else "good"), value


def bisect(
    store: Store,
    suite: Suite,
    check_name: str,
    good: str,
    bad: str,
    *,
    repo: str = ".",
    node: str | None = None,
    series: str | None = None,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Runs the bisect (needs `ray.init`); returns and stores its conclusion."""
    from ._run import lab_nodes, run_suite

    check = suite.check(check_name)
    commits = commits_between(repo, good, bad)
    nodes = lab_nodes()
    held = {q["node"] for q in store.quarantined() if not q["device"]}
    if node is None:
        failing = [r for r in store.results(suite=suite.name) if r["check_name"] == check_name and r["verdict"] in ("fail", "error") and r["node"] in nodes]
        node = failing[-1]["node"] if failing else None
    if node is None and check.kind == "benchmark":
        bench = [r for r in store.results(suite=suite.name) if r["check_name"] == check_name and r["node"] in nodes]
        node = bench[-1]["node"] if bench else None
    if node is None or node not in nodes:
        raise BisectError(f"no alive lab node to bisect {check_name} on (give --node NODE)")
    sku = nodes[node].facts()["sku"]
    peers = sorted(n for n, x in nodes.items() if n != node and n not in held and x.facts()["sku"] == sku)
    targets = [node, *peers[:1]]
    if check.kind == "benchmark" and series is None:
        known = [r for r in store.results(suite=suite.name) if r["check_name"] == check_name and r.get("series")]
        series = sorted(known[-1]["series"])[0] if known else None
        if series is None:
            raise BisectError(f"{check_name}: no stored series to bisect (give --series NAME)")
    one = Suite(name=suite.name, version=suite.version, description=suite.description, checks=(check,), setup=suite.setup)
    steps: list[dict[str, Any]] = []

    def run_at(commit: str, why: str) -> tuple[str, float | None]:
        summary = run_suite(one, store, commit=commit, only_nodes=targets, source=STEP_SOURCE, command=f"accel lab bisect {check_name} --good {good} --bad {bad}")
        results = store.results(run_id=summary.run_id)
        verdicts = {n: _step_verdict(results, n, series, refs) for n in targets}
        verdict, value = verdicts[node]
        steps.append({"commit": commit, "why": why, "run_id": summary.run_id, "verdict": verdict, "value": value, "nodes": {n: v for n, (v, _) in verdicts.items()}})
        shown = f" ({series} = {value:.4g})" if value is not None else ""
        peer = "; " + ", ".join(f"{n}: {v}" for n, (v, _) in verdicts.items() if n != node) if len(targets) > 1 else ""
        say(f"{why:9} {commit[:12]}: {verdict}{shown} on {node}{peer}")
        return verdict, value

    refs: tuple[float, float] | None = None
    started = time.time()
    if series is not None:
        _, good_value = run_at(_rev(repo, good), "good")
        _, bad_value = run_at(commits[-1], "bad")
        if good_value is None or bad_value is None:
            raise BisectError(f"{check_name}: no {series} value at {good} or {bad}")
        refs = (good_value, bad_value)
    lo, hi = -1, len(commits) - 1  # commits[lo] is good (lo = -1: `good` itself), commits[hi] bad
    skipped: set[int] = set()
    while hi - lo > 1:
        order = [(lo + hi) // 2]
        order += [i for d in range(1, hi - lo) for i in ((lo + hi) // 2 + d, (lo + hi) // 2 - d) if lo < i < hi]
        mid = next((i for i in order if i not in skipped), None)
        if mid is None:
            break
        verdict, _ = run_at(commits[mid], "step")
        if verdict == "skip":
            skipped.add(mid)
        elif verdict == "bad":
            hi = mid
        else:
            lo = mid
    first_bad = commits[hi] if hi - lo == 1 else ""
    last_good = _rev(repo, good) if lo < 0 else commits[lo]
    state = "found" if first_bad else "ambiguous"
    agree = all(set(s["nodes"].values()) <= {s["verdict"], "skip"} for s in steps)
    evidence = {"last_good": last_good, "first_bad": first_bad, "series": series, "refs": list(refs) if refs else None, "node": node, "peers": targets[1:], "peers_agree": agree, "steps": steps}
    doc = {"suite": suite.name, "check_name": check_name, "sku": sku, "node": node, "good": good, "bad": bad, "first_bad": first_bad, "state": state, "evidence": evidence, "created_at": started, "ended_at": time.time()}
    doc["id"] = store.record_bisect(doc)
    return doc


def _rev(repo: str, ref: str) -> str:
    out = subprocess.run(["git", "-C", repo, "rev-parse", "--verify", f"{ref}^{{commit}}"], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise BisectError(f"{ref!r} is not a commit in {repo}")
    return out.stdout.strip()
