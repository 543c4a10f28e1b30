"""`accel lab repro RUN`: what differs between a run's environment and this machine's, and the
exact commands that run its failing checks again, here or (`--on-node`) on the same nodes
through Ray.

The fingerprints are taken and compared by the Rust rules `accel env --json` and `accel env diff`
use, called in process (`accel._native.env_json`, `env_diff`): the lab keeps no second copy of
those rules and never runs the `accel` binary (which runs the lab: no loop).

Stored data is data. The commands printed come from the suite stored with the run, read back
through the suite file's own rules, and every part of every shell line (each `NAME=value`, each
argument) is quoted, so pasting them runs the check and nothing else. `--on-node` never runs
what the store says: it runs the checks of a suite file the operator names (`--suite FILE`),
by the names of the run's failing checks, and says where the stored commands differ."""

from __future__ import annotations

import json
import shlex
from typing import Any

from ._store import Store
from ._suite import Check, Suite, SuiteError, suite_from_json

ENV_TIMEOUT_S = 60
NOT_PASSED = ("fail", "error", "infra", "cancelled")


class ReproError(Exception):
    """A run that cannot be reproduced (unknown, no stored suite, a fingerprint that fails); one line."""


def this_environment(accel: str, source: list[str]) -> dict[str, Any]:
    """The fingerprint `accel env --json` gives of this machine (or of `--sample`/`--root`, as
    `source` says), computed in process; `accel` is not run."""
    from .. import _native

    where = dict(zip(source[::2], source[1::2]))
    try:
        text = _native.env_json(where.get("--root"), where.get("--sample"))
    except _native.AccelError as e:
        raise ReproError(f"the environment fingerprint failed: {e}") from None
    doc: dict[str, Any] = json.loads(text)
    return doc


def env_diff(accel: str, stored: dict[str, Any], here: dict[str, Any]) -> tuple[bool, str]:
    """(same, text) as `accel env diff STORED HERE` gives them, computed in process."""
    from .. import _native

    try:
        return _native.env_diff(json.dumps(stored), json.dumps(here))
    except _native.AccelError as e:
        raise ReproError(f"comparing the fingerprints failed: {e}") from None


def check_command(check: Check, commit: str) -> str:
    """The shell lines that run `check` by hand as the lab does: a fresh directory, the
    lab's variables, its timeout."""
    env = [shlex.quote(f"{k}={v}") for k, v in check.env]
    lab_env = ["ACCEL_LAB_OUT=\"$d/out\"", shlex.quote(f"ACCEL_LAB_CHECK={check.name}"), shlex.quote(f"ACCEL_LAB_COMMIT={commit}"), "ACCEL_LAB_NODE=\"$(hostname)\"", "ACCEL_LAB_RUN=repro"]
    run = " ".join(["env", *lab_env, *env, "timeout", "-k", "5", f"{check.timeout_s:g}", shlex.join(check.command)])
    if check.setup:
        setup = " ".join(["env", *lab_env, *env, "timeout", "-k", "5", f"{check.timeout_s:g}", shlex.join(check.setup)])
        run = f"{setup} && {run}"
    return f'd=$(mktemp -d) && mkdir "$d/out" "$d/work" && (cd "$d/work" && {run}); echo "exit status $?; results in $d/out"'


def stored_suite(run: dict[str, Any]) -> Suite:
    """The suite a run ran, as stored with it, through the suite file's rules (a stored suite
    that breaks them is an error, never a command)."""
    if not run.get("suite_doc"):
        raise ReproError(f"run {run['id']} has no stored suite (submitted from outside the lab?): no commands to give")
    try:
        return suite_from_json(run["suite_doc"], f"run {run['id']}: the stored suite")
    except SuiteError as e:
        raise ReproError(str(e)) from None


def failing(store: Store, run_id: str, everything: bool = False) -> list[tuple[str, str, str, str]]:
    """(check, node, verdict, env hash) of the run's results that did not pass (or all),
    one per check and node, latest attempt last."""
    out: dict[tuple[str, str], tuple[str, str, str, str]] = {}
    for r in store.results(run_id=run_id):
        if everything or r["verdict"] in NOT_PASSED:
            out[(r["check_name"], r["node"])] = (r["check_name"], r["node"], r["verdict"], r["env_hash"])
    return list(out.values())


def report(store: Store, run_id: str, *, accel: str, source: list[str], everything: bool = False) -> str:
    """The text `accel lab repro` prints (without `--on-node`)."""
    run = store.run(run_id)
    if run is None:
        raise ReproError(f"no run {run_id!r} in the store")
    lines = [f"run {run_id}: suite {run['suite']} {run['suite_version']} at commit {run['commit_sha']} ({run['state']})", ""]
    here = this_environment(accel, source)
    results = store.results(run_id=run_id)
    by_env: dict[str, set[str]] = {}
    for r in results:
        if r["env_hash"]:
            by_env.setdefault(r["env_hash"], set()).add(r["node"])
    if not by_env:
        lines.append("no environment fingerprint was recorded with this run")
    for env_hash, nodes in sorted(by_env.items()):
        stored = store.fingerprint(env_hash)
        if stored is None:
            lines.append(f"environment of {', '.join(sorted(nodes))} ({env_hash[:16]}): not stored")
            continue
        same, text = env_diff(accel, stored, here)
        lines.append(f"environment of {', '.join(sorted(nodes))} ({env_hash[:16]}) -> this machine: {'the same' if same else 'differs'}")
        lines += ["  " + line for line in text.strip().splitlines() if not same]
    lines.append("")
    todo = failing(store, run_id, everything)
    if not todo:
        lines.append("every check passed or was skipped: nothing to reproduce (--all gives every check's command)")
        return "\n".join(lines) + "\n"
    suite = stored_suite(run)
    lines.append(f"git checkout {shlex.quote(run['commit_sha'])}  # {'lab-dispatched' if run['source'] in ('ray', 'repro', 'bisect') else 'submitted'} run: read every line before pasting it")
    seen: set[str] = set()
    for check_name, node, verdict, _ in todo:
        try:
            check = suite.check(check_name)
        except SuiteError:
            lines.append(f"# {check_name}: not in the stored suite")
            continue
        lines.append(f"# {check_name} ({verdict} on {node!r})")
        if check_name not in seen:
            lines.append(check_command(check, run["commit_sha"]))
            seen.add(check_name)
    lines.append("")
    lines.append(f"# on the same nodes, through Ray: accel lab repro {run_id} --db <URL> --on-node --suite SUITE.toml")
    return "\n".join(lines) + "\n"


def rerun_on_nodes(store: Store, run_id: str, suite: Suite, *, everything: bool = False, say: Any = print) -> list[Any]:
    """Runs the run's failing checks again on the nodes they failed on, through the connected
    Ray cluster; one new run per node (source `repro`). The commands are `suite`'s (a file the
    operator named), never the stored ones: a failing check the file lacks is skipped, and one
    whose stored command differs from the file's is said so. Returns the new runs' summaries."""
    from ._run import NODE_LABEL, lab_nodes, run_suite

    run = store.run(run_id)
    if run is None:
        raise ReproError(f"no run {run_id!r} in the store")
    if suite.name != run["suite"]:
        raise ReproError(f"run {run_id} ran suite {run['suite']!r}; --suite names {suite.name!r}")
    try:
        stored: Suite | None = stored_suite(run)
    except ReproError:
        stored = None
    per_node: dict[str, list[str]] = {}
    for check_name, node, _, _ in failing(store, run_id, everything):
        if node != "-" and check_name not in per_node.setdefault(node, []):
            per_node[node].append(check_name)
    known = {c.name: c for c in suite.checks}
    for name in sorted({n for names in per_node.values() for n in names}):
        if name not in known:
            say(f"# {name}: not in the suite file; not run")
            continue
        try:
            then = stored.check(name) if stored else None
        except SuiteError:
            then = None
        if then is not None and (then.command, then.env, then.setup) != (known[name].command, known[name].env, known[name].setup):
            say(f"# {name}: the stored command differs from the suite file's; running the file's: {shlex.join(known[name].command)}")
    alive = lab_nodes()
    summaries = []
    for node, names in sorted(per_node.items()):
        if node not in alive:
            # A stored name is data: it is only ever compared with the live nodes' own names.
            say(f"# {node!r}: no such lab node is alive; not run there")
            continue
        subset = Suite(name=suite.name, version=suite.version, description=suite.description, checks=tuple(c for c in suite.checks if c.name in names), setup=suite.setup)
        if subset.checks:
            summaries.append(run_suite(subset, store, commit=run["commit_sha"], lab=run["lab"], selectors={NODE_LABEL: node}, only_nodes=[node], command=f"accel lab repro {run_id} --on-node", source="repro"))
    return summaries
