"""Dispatch: a suite's checks as Ray tasks on the lab's nodes, their verdicts into the store.

Each check runs on every alive node whose labels match its `labels` and the run's selectors
(`--select KEY=VALUE`), or on one such node per value of a label (`--one-per KEY`), as a Ray
task pinned there by a label selector (`accel.io/node` plus the check's labels). A node runs
one check at a time (benchmarks must not share a node). On the node, the command runs in its
own temporary working directory, in its own process group, with `ACCEL_LAB_OUT` (where it
writes results), `ACCEL_LAB_RUN`, `ACCEL_LAB_CHECK`, `ACCEL_LAB_NODE` and `ACCEL_LAB_COMMIT`,
without any secret-named variable of the worker's environment (and any such value that reaches
the log anyway is redacted); on its timeout the whole group is killed.

A timeout, a lost node, a task that never started or a crashed worker is an `infra` result,
recorded apart from the check's own verdicts and retried on the same node up to the check's
`retries`; a failed check runs again up to its `reruns`, and a pass then is recorded flaky.
Cancelling (`cancel_run`, `accel lab cancel RUN`, Ctrl-C) interrupts the running commands
(their groups are killed), and every check not finished is recorded `cancelled`.

Evidence for triage (`_triage`) is taken on the node around each check: the devices' health
verdicts before and after (discovery of the node's own source: the live machine, or the capture
or sample it was started with). When the run ends, every failed or infra result is classified
(hardware, infrastructure, code) with it, and a device that turned unhealthy, or a node with
repeated hardware-class failures, is quarantined with its owner named: a quarantined node gets
no checks (each is recorded `skip`, naming the quarantine), a node with a quarantined device
runs them without it (the device's visibility variable leaves it out), until `accel lab
release NODE[/DEVICE]`.

Ray is imported inside the functions that need it. `accel.ray start --lab` publishes each
node's lab, owner and environment fingerprint (`publish_lab`) beside its machine."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from typing import Any, Callable

from . import _triage
from ._store import MAX_LOG_BYTES, Store, bound_log, canonical_json, fingerprint_hash
from ._suite import Check, Outcome, Suite, check_doc, check_from_doc, interpret, suite_json

KV_NAMESPACE = "accel"  # the namespace accel.ray publishes machines in
LAB_KV_PREFIX = "lab:"
MACHINE_KV_PREFIX = "machine:"
NODE_LABEL = "accel.io/node"
TYPE_LABEL = "accel.io/accelerator-type"
# How long a task may take beyond its check's timeout (scheduling, worker start) before it is
# an infra failure; how long an interrupted command gets before its group is killed.
SCHEDULE_SLACK_S = 120.0
KILL_GRACE_S = 5.0
CANCEL_GRACE_S = 15.0
POLL_S = 0.25
# Hardware-class failures on one node, in a row, that take the whole node out of dispatch.
QUARANTINE_AFTER = 2


class RunError(Exception):
    """A run that cannot start (no cluster, a bad selector); one line."""


def is_secret_name(name: str) -> bool:
    """Whether a variable's name says it holds a secret (the project's one rule, in Rust:
    `accel_discover::fingerprint::is_secret_name`)."""
    from .. import _native

    return _native.is_secret_name(name)


# -- on the node ----------------------------------------------------------------------------


def _child_env(check: Check, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not is_secret_name(k) and not k.startswith("ACCEL_LAB_")}
    env.update(dict(check.env))
    env.update(extra)
    return env


def _redact(text: str) -> str:
    for name, value in os.environ.items():
        if is_secret_name(name) and len(value) >= 4:
            text = text.replace(value, "<redacted>")
    return text


def _kill_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM to the command's process group, SIGKILL after `grace_s` if any member is left
    (the leader is reaped meanwhile, so its zombie does not count as one)."""
    pgid = proc.pid
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        proc.poll()
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class _Output:
    """A command's output, kept bounded (its head and a rolling tail) while it streams."""

    def __init__(self, stream: Any, limit: int = MAX_LOG_BYTES):
        self.head = bytearray()
        self.tail: collections.deque[bytes] = collections.deque()
        self.tail_bytes = 0
        self.dropped = 0
        self.limit = limit
        self.thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self.thread.start()

    def _pump(self, stream: Any) -> None:
        head_limit = self.limit // 4
        while True:
            chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
            if not chunk:
                break
            if len(self.head) < head_limit:
                take = chunk[: head_limit - len(self.head)]
                self.head += take
                chunk = chunk[len(take) :]
            if chunk:
                self.tail.append(chunk)
                self.tail_bytes += len(chunk)
                while self.tail_bytes - len(self.tail[0]) >= self.limit - head_limit and len(self.tail) > 1:
                    self.dropped += len(self.tail[0])
                    self.tail_bytes -= len(self.tail.popleft())
        stream.close()

    def text(self) -> str:
        self.thread.join(timeout=KILL_GRACE_S)
        body = bytes(self.head) + (f"\n[... {self.dropped} bytes left out by accel lab ...]\n".encode() if self.dropped else b"") + b"".join(self.tail)
        return bound_log(body.decode("utf-8", "replace"), self.limit)


def node_machine(source: dict[str, Any] | None) -> tuple[dict[str, Any] | None, str]:
    """This node's machine as discovery sees it now (from the source the node was started with:
    a sample, a captured root, else the live machine), or (None, why not)."""
    from accel import _native

    try:
        if source and source.get("sample"):
            text = _native.sample_machine_json(str(source["sample"]))
        else:
            text = _native.discover_json(str(source["root"]) if source and source.get("root") else None)
        doc: dict[str, Any] = json.loads(text)
        return doc, ""
    except Exception as e:  # noqa: BLE001 (evidence: a node whose discovery fails says so)
        return None, f"{type(e).__name__}: {str(e)[:200]}"


def _visibility(machine: dict[str, Any] | None, exclude: list[str]) -> dict[str, str]:
    """The variables that hide `exclude` (quarantined devices) from the check: each family's own
    visibility variable, set to the node's other devices (the plugins' `isolate`)."""
    if not machine or not exclude:
        return {}
    from accel import _native

    keep = [a["id"] for a in machine.get("accelerators", []) if a.get("id") not in exclude]
    return dict(_native.visibility_env(json.dumps(machine), keep))


def _run_bounded(argv: list[str], cwd: str, env: dict[str, str], timeout_s: float) -> tuple[int | None, str]:
    """Runs `argv` in its own process group, killed whole at `timeout_s`: (exit status or None
    when it timed out, bounded output)."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    output = _Output(proc.stdout)
    rc: int | None = None
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        rc = None
    finally:
        # Whatever happened (done, timed out, interrupted by a cancel): nothing of the
        # command outlives it.
        _kill_group(proc, KILL_GRACE_S)
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=KILL_GRACE_S)
    return rc, output.text()


def execute_check(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs one check here (the body of the Ray task): its own temp dir and process group,
    killed at its timeout or when the task is interrupted; the suite's setup command first.
    Returns the outcomes (none when it timed out), the bounded log, the times and the node's
    device health before and after."""
    check = check_from_doc(spec["check"], tuple(spec.get("setup") or ()), "<dispatched check>")
    exclude = [str(d) for d in spec.get("exclude") or []]
    before, why = node_machine(spec.get("source"))
    result: dict[str, Any] = {"timed_out": False, "returncode": None, "outcomes": [], "excluded": exclude}
    result["health_before"] = _triage.health_snapshot(before) if before else None
    result["health_error"] = why
    base = tempfile.mkdtemp(prefix="accel-lab-")
    out_dir, work = os.path.join(base, "out"), os.path.join(base, "work")
    os.mkdir(out_dir)
    os.mkdir(work)
    lab_vars = {"ACCEL_LAB_OUT": out_dir, "ACCEL_LAB_RUN": spec["run_id"], "ACCEL_LAB_CHECK": check.name, "ACCEL_LAB_NODE": spec["node"], "ACCEL_LAB_COMMIT": spec["commit"]}
    env = _child_env(check, {**_visibility(before, exclude), **lab_vars})
    started = time.time()
    result["started_at"] = started
    try:
        log = ""
        if check.setup:
            try:
                rc, setup_log = _run_bounded(list(check.setup), work, env, check.timeout_s)
            except OSError as e:
                rc, setup_log = 127, f"cannot run {check.setup[0]!r}: {e.strerror}"
            log = "[setup] " + _redact(setup_log)
            if rc != 0:
                result.update(ended_at=time.time(), log=log, setup_failed=True)
                what = "timed out" if rc is None else f"exited with status {rc}"
                result["outcomes"] = [dataclasses.asdict(Outcome("error", message=f"the suite's setup command {what}"))]
                return result
        try:
            rc, check_log = _run_bounded(list(check.command), work, env, check.timeout_s)
        except OSError as e:
            result.update(ended_at=time.time(), log=log, outcomes=[dataclasses.asdict(Outcome("error", message=f"cannot run {check.command[0]!r}: {e.strerror}"))])
            return result
        result["ended_at"] = time.time()
        text = _redact(check_log)
        result["log"] = bound_log(log + "\n" + text) if log else text
        if rc is None:
            result["timed_out"] = True
        else:
            result["returncode"] = rc
            result["outcomes"] = [dataclasses.asdict(o) for o in interpret(check, int(rc), out_dir, text)]
        return result
    finally:
        shutil.rmtree(base, ignore_errors=True)
        after, why_after = node_machine(spec.get("source"))
        result["health_after"] = _triage.health_snapshot(after) if after else None
        result["health_error"] = result.get("health_error") or why_after


# -- nodes ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Node:
    """An alive Ray node of the lab, as the driver sees it."""

    name: str
    node_id: str
    labels: dict[str, str]
    machine: dict[str, Any] | None
    lab: dict[str, Any] | None  # {"lab", "owner", "env"} from `publish_lab`

    @property
    def env(self) -> dict[str, Any] | None:
        env = (self.lab or {}).get("env")
        return env if isinstance(env, dict) else None

    @property
    def owner(self) -> str:
        return str((self.lab or {}).get("owner") or "")

    @property
    def source(self) -> dict[str, Any] | None:
        """Where discovery reads this node (`{"sample": name}`, `{"root": path}`; None: live)."""
        src = (self.lab or {}).get("source")
        return src if isinstance(src, dict) else None

    def facts(self) -> dict[str, str]:
        """vendor, family, sku and accelerator type of the node's first accelerator."""
        accs = (self.machine or {}).get("accelerators") or [{}]
        first = accs[0]
        return {
            "vendor": str(first.get("vendor") or ""),
            "family": str(first.get("family") or ""),
            "sku": str(first.get("sku") or ""),
            "accelerator_type": self.labels.get(TYPE_LABEL, ""),
        }

    def machine_hash(self) -> str:
        return hashlib.sha256(canonical_json(self.machine).encode()).hexdigest() if self.machine else ""


def publish_lab(node: str, lab: str, owner: str, env: dict[str, Any] | None, source: dict[str, str] | None = None) -> None:
    """Stores a node's lab, owner, environment fingerprint and discovery source (`{"sample":
    name}` or `{"root": path}`; none for the live machine) in Ray's KV (needs `ray.init`)."""
    from ray.experimental import internal_kv

    doc = {"lab": lab, "owner": owner, "env": env, "env_hash": fingerprint_hash(env) if env is not None else "", "source": source or {}}
    internal_kv._internal_kv_put(LAB_KV_PREFIX + node, json.dumps(doc), overwrite=True, namespace=KV_NAMESPACE)


def _kv_json(key: str) -> dict[str, Any] | None:
    from ray.experimental import internal_kv

    raw = internal_kv._internal_kv_get(key, namespace=KV_NAMESPACE)
    if not raw:
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def lab_nodes() -> dict[str, Node]:
    """Alive Ray nodes that carry `accel.io/node`, by that name, with what they published."""
    import ray

    out = {}
    for n in ray.nodes():
        labels = n.get("Labels") or {}
        if n.get("Alive") and NODE_LABEL in labels:
            name = labels[NODE_LABEL]
            out[name] = Node(name, n["NodeID"], dict(labels), _kv_json(MACHINE_KV_PREFIX + name), _kv_json(LAB_KV_PREFIX + name))
    return out


def parse_selectors(items: list[str]) -> dict[str, str]:
    """`KEY=VALUE` strings -> a dict; `RunError` for one without `=`."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise RunError(f"--select {item!r}: expected LABEL=VALUE")
        out[key] = value
    return out


@dataclasses.dataclass
class Job:
    """One check on one node, one attempt."""

    check: Check
    node: str
    attempt: int
    queued_at: float
    reruns: int = 0  # runs again after a fail so far


def plan_jobs(
    suite: Suite,
    nodes: dict[str, Node],
    selectors: dict[str, str],
    one_per: str | None,
    *,
    held: dict[str, str] | None = None,
    only: list[str] | None = None,
) -> tuple[list[Job], list[tuple[Check, str]]]:
    """The jobs of a run (check order within each node) and the checks no node matches, each
    with why. `held` names quarantined nodes (with why): they get no job, and a check that only
    they match is unmatched, saying so. `only` keeps these nodes alone."""
    now = time.time()
    jobs: list[Job] = []
    unmatched: list[tuple[Check, str]] = []
    held = held or {}
    for check in suite.checks:
        want = {**selectors, **dict(check.labels)}
        matching = sorted(name for name, n in nodes.items() if all(n.labels.get(k) == v for k, v in want.items()) and (only is None or name in only))
        kept = [n for n in matching if n not in held]
        if matching and not kept:
            unmatched.append((check, "; ".join(held[n] for n in matching)))
            continue
        matching = kept
        if one_per:
            chosen: dict[str, str] = {}
            for name in matching:
                value = nodes[name].labels.get(one_per)
                if value is not None and value not in chosen:
                    chosen[value] = name
            matching = sorted(chosen.values())
        if not matching:
            need = ", ".join(f"{k}={v}" for k, v in sorted(want.items())) or "(none)"
            unmatched.append((check, f"no alive lab node matches {need}" + (f" with a {one_per} label" if one_per else "")))
        jobs += [Job(check, name, 1, now) for name in matching]
    return jobs, unmatched


# -- the driver -----------------------------------------------------------------------------


def _remote() -> Any:
    import ray

    return ray.remote(num_cpus=0, max_retries=0, retry_exceptions=False)(execute_check)


def cancel_run(store: Store, run_id: str) -> bool:
    """Asks a running run to stop (its driver sees the state within a second). Returns False
    when the run is not running (done, cancelled already, or unknown)."""
    return store.request_cancel(run_id)


@dataclasses.dataclass
class Summary:
    """What a run came to: its id, final state and verdict counts."""

    run_id: str
    state: str
    counts: dict[str, int]


def run_suite(
    suite: Suite,
    store: Store,
    *,
    commit: str,
    lab: str = "",
    selectors: dict[str, str] | None = None,
    one_per: str | None = None,
    command: str = "",
    cancel: threading.Event | None = None,
    on_result: Callable[[dict[str, Any]], None] | None = None,
    schedule_slack_s: float = SCHEDULE_SLACK_S,
    run_id: str | None = None,
    source: str = "ray",
    only_nodes: list[str] | None = None,
) -> Summary:
    """Runs every check of `suite` on the matching nodes of the connected Ray cluster (call
    `ray.init` first), storing each result as it lands. Returns when every check has a verdict,
    or when the run is cancelled (`cancel` set, the store's run state set to `cancelled`, or
    KeyboardInterrupt, which is re-raised after the run is recorded)."""
    import ray

    selectors = selectors or {}
    nodes = lab_nodes()
    run_id = store.create_run(
        suite=suite.name, suite_version=suite.version, commit=commit, lab=lab, selectors=selectors, command=command, run_id=run_id, suite_doc=suite_json(suite), source=source
    )
    counts: dict[str, int] = collections.Counter()
    remote = _remote()
    held, excluded = _quarantine_state(store, nodes)
    evidence: dict[str, dict[str, Any]] = {}  # result id -> what the task saw

    def record(job: Job | None, check: Check, node_name: str, outcomes: list[dict[str, Any]], **fields: Any) -> list[dict[str, Any]]:
        node = nodes.get(node_name)
        facts = node.facts() if node else {"vendor": "", "family": "", "sku": "", "accelerator_type": ""}
        env = node.env if node else None
        env_hash = fingerprint_hash(env) if env is not None else ""
        now = time.time()
        rows = []
        for o in outcomes:
            series = dict(o.get("series") or ()) or None
            rows.append(
                {
                    "id": uuid.uuid4().hex,
                    "check": check.name,
                    "case": o.get("case", ""),
                    "kind": check.kind,
                    "node": node_name,
                    **facts,
                    "env_hash": env_hash,
                    "machine_hash": node.machine_hash() if node else "",
                    "verdict": o["verdict"],
                    "queued_at": job.queued_at if job else now,
                    "started_at": fields.get("started_at", now),
                    "ended_at": fields.get("ended_at", now),
                    "attempt": job.attempt if job else 1,
                    "message": o.get("message", ""),
                    "log": fields.get("log", ""),
                    "series": series,
                    "flaky": bool(job and job.reruns and o["verdict"] == "pass"),
                }
            )
        store.add_results(run_id, rows, {env_hash: env} if env is not None else None)
        for row in rows:
            counts[row["verdict"]] += 1
            if row["verdict"] in _triage.NOT_PASSED:
                evidence[row["id"]] = {k: fields[k] for k in ("health_before", "health_after", "excluded", "timed_out", "node_lost", "message") if k in fields}
            if on_result:
                on_result(row)
        return rows

    jobs, unmatched = plan_jobs(suite, nodes, selectors, one_per, held=held, only=only_nodes)
    for check, why in unmatched:
        record(None, check, "-", [{"verdict": "skip", "message": why}])
    queues: dict[str, collections.deque[Job]] = collections.defaultdict(collections.deque)
    for job in jobs:
        queues[job.node].append(job)
    inflight: dict[Any, tuple[Job, float]] = {}  # ref -> (job, deadline)
    busy: set[str] = set()
    cancelled = False
    interrupted = False
    last_state_check = 0.0

    def submit(job: Job) -> None:
        node = nodes.get(job.node)
        spec = {
            "check": check_doc(job.check),
            "setup": list(job.check.setup),
            "run_id": run_id,
            "node": job.node,
            "commit": commit,
            "source": node.source if node else None,
            "exclude": excluded.get(job.node, []),
        }
        selector = {NODE_LABEL: job.node, **dict(job.check.labels)}
        ref = remote.options(label_selector=selector, name=f"accel-lab:{suite.name}:{job.check.name}").remote(spec)
        inflight[ref] = (job, time.monotonic() + job.check.timeout_s + KILL_GRACE_S * 2 + schedule_slack_s)
        busy.add(job.node)

    def finish(ref: Any, job: Job) -> None:
        del inflight[ref]
        busy.discard(job.node)
        infra: str | None = None
        try:
            out = ray.get(ref, timeout=30)
        except ray.exceptions.RayTaskError as e:
            record(job, job.check, job.node, [{"verdict": "error", "message": f"the lab's runner failed: {str(e).strip().splitlines()[-1][:500]}"}])
            return
        except (ray.exceptions.RayError, TimeoutError) as e:
            infra = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"
            out = None
        if out is not None and out["timed_out"]:
            infra = f"timed out after {job.check.timeout_s:g} s; its process group was killed"
        seen = {k: out[k] for k in ("health_before", "health_after", "excluded") if k in out} if out else {}
        if infra is not None:
            fields = {k: out[k] for k in ("started_at", "ended_at", "log")} if out else {}
            record(job, job.check, job.node, [{"verdict": "infra", "message": infra}], **fields, **seen, timed_out=bool(out and out["timed_out"]))
            retry(job)
            return
        assert out is not None
        rows = record(job, job.check, job.node, out["outcomes"], started_at=out["started_at"], ended_at=out["ended_at"], log=out["log"], **seen)
        if any(r["verdict"] in ("fail", "error") for r in rows) and job.reruns < job.check.reruns and not out.get("setup_failed"):
            queues[job.node].appendleft(Job(job.check, job.node, job.attempt + 1, time.time(), reruns=job.reruns + 1))

    def retry(job: Job) -> None:
        if job.attempt > job.check.retries:
            return
        alive = lab_nodes()
        if job.node not in alive:
            return  # a lost node is not retried elsewhere: the result is about that node
        nodes[job.node] = alive[job.node]
        queues[job.node].appendleft(Job(job.check, job.node, job.attempt + 1, time.time()))

    try:
        while True:
            if cancel is not None and cancel.is_set():
                cancelled = True
            if time.monotonic() - last_state_check > 1.0:
                last_state_check = time.monotonic()
                run = store.run(run_id)
                if run is not None and run["state"] == "cancelled":
                    cancelled = True
                if inflight:
                    # A node that died takes its checks with it: infra at once, not at the deadline.
                    alive = lab_nodes()
                    for ref, (job, _) in list(inflight.items()):
                        if job.node not in alive:
                            ray.cancel(ref, force=True)
                            del inflight[ref]
                            busy.discard(job.node)
                            record(job, job.check, job.node, [{"verdict": "infra", "message": f"node {job.node} was lost while this check ran"}], node_lost=True)
                    for name in [n for n, q in queues.items() if q and n not in alive]:
                        for job in queues.pop(name):
                            record(job, job.check, job.node, [{"verdict": "infra", "message": f"node {job.node} was lost before this check started"}], node_lost=True)
            if cancelled:
                break
            for node_name, queue in queues.items():
                if queue and node_name not in busy:
                    submit(queue.popleft())
            if not inflight:
                break
            ready, _ = ray.wait(list(inflight), num_returns=1, timeout=POLL_S)
            for ref in ready:
                finish(ref, inflight[ref][0])
            now = time.monotonic()
            for ref, (job, deadline) in list(inflight.items()):
                if now > deadline:
                    ray.cancel(ref, force=True)
                    del inflight[ref]
                    busy.discard(job.node)
                    record(job, job.check, job.node, [{"verdict": "infra", "message": f"the task did not finish within {job.check.timeout_s + schedule_slack_s:g} s (not scheduled, or its node stalled)"}])
                    retry(job)
    except KeyboardInterrupt:
        cancelled = interrupted = True
    if cancelled:
        _cancel_inflight(inflight)
        for job, _ in inflight.values():
            record(job, job.check, job.node, [{"verdict": "cancelled", "message": "the run was cancelled while this check ran"}])
        for queue in queues.values():
            for job in queue:
                record(job, job.check, job.node, [{"verdict": "cancelled", "message": "the run was cancelled before this check started"}])
        triage_run(store, run_id, nodes, evidence)
        store.finish_run(run_id, "cancelled")
    else:
        # Classified before the run is marked finished: a page renderer that sees it finished
        # sees its classes.
        triage_run(store, run_id, nodes, evidence)
        store.finish_run(run_id, "done")
    summary = Summary(run_id, "cancelled" if cancelled else "done", dict(counts))
    if interrupted:
        raise KeyboardInterrupt(summary)
    return summary


def _cancel_inflight(inflight: dict[Any, tuple[Job, float]]) -> None:
    """Interrupts running checks (their runner kills the group), then forces what is left."""
    import ray

    refs = list(inflight)
    for ref in refs:
        ray.cancel(ref, force=False)
    deadline = time.monotonic() + CANCEL_GRACE_S
    pending = refs
    while pending and time.monotonic() < deadline:
        _, pending = ray.wait(pending, num_returns=len(pending), timeout=0.5)
    for ref in pending:
        ray.cancel(ref, force=True)


def _quarantine_state(store: Store, nodes: dict[str, Node]) -> tuple[dict[str, str], dict[str, list[str]]]:
    """(quarantined nodes -> why, in words; node -> its quarantined devices). A node whose every
    device is quarantined is held whole."""
    held: dict[str, str] = {}
    devices: dict[str, list[str]] = collections.defaultdict(list)
    for q in store.quarantined():
        if q["device"]:
            devices[q["node"]].append(q["device"])
        else:
            held[q["node"]] = _held_words(q)
    for name, ids in devices.items():
        node = nodes.get(name)
        all_ids = {a.get("id") for a in ((node.machine or {}).get("accelerators") or [])} if node else set()
        if name not in held and all_ids and all_ids <= set(ids):
            held[name] = f"every device of node {name} is quarantined (owner {store.quarantined(name)[0]['owner'] or 'unknown'}); release with `accel lab release {name}/DEVICE`"
    return held, dict(devices)


def _held_words(q: dict[str, Any]) -> str:
    return f"node {q['node']} is quarantined ({q['reason']}; owner {q['owner'] or 'unknown'}); release it with `accel lab release {q['node']}`"


def triage_run(store: Store, run_id: str, nodes: dict[str, Node], seen: dict[str, dict[str, Any]]) -> None:
    """Classifies every failed or infra result of a finished run with its evidence (`_triage`),
    stores the class, and quarantines what the evidence convicts: a device unhealthy after its
    check, or a node with `QUARANTINE_AFTER` hardware-class failures in a row."""
    results = store.results(run_id=run_id)
    if not results:
        return
    commit = results[0]["commit_sha"]
    history = [r for r in store.results(suite=results[0]["suite"]) if r["run_id"] != run_id]
    same_commit = [r for r in store.results(suite=results[0]["suite"]) if r["commit_sha"] == commit]
    reran = {(r["check_name"], r["case_name"], r["node"]) for r in results if r.get("flaky")}
    for r in results:
        if r["verdict"] not in _triage.NOT_PASSED:
            continue
        node = nodes.get(r["node"])
        got = seen.get(r["id"], {})
        key = (r["check_name"], r["case_name"])
        last_pass = next((h for h in reversed(history) if h["node"] == r["node"] and (h["check_name"], h["case_name"]) == key and h["verdict"] == "pass"), None)
        now_env = node.env if node else None
        then_env = store.fingerprint(last_pass["env_hash"]) if last_pass and last_pass["env_hash"] and last_pass["env_hash"] != r["env_hash"] else None
        others = [o for o in same_commit if o["sku"] == r["sku"] and o["node"] != r["node"] and (o["check_name"], o["case_name"]) == key and o["verdict"] in ("pass", "fail", "error")]
        latest: dict[str, str] = {}
        for o in others:
            latest[o["node"]] = o["verdict"]
        e = _triage.Evidence(
            verdict=r["verdict"],
            message=r["message"],
            health_before=got.get("health_before"),
            health_after=got.get("health_after"),
            excluded=tuple(got.get("excluded") or ()),
            node_lost=bool(got.get("node_lost")),
            timed_out=bool(got.get("timed_out")),
            env_changes=_triage.env_changes(then_env, now_env) if then_env else {},
            last_pass={"commit": last_pass["commit_sha"], "run_id": last_pass["run_id"]} if last_pass else None,
            same_sku_pass=tuple(sorted(n for n, v in latest.items() if v == "pass")),
            same_sku_fail=tuple(sorted(n for n, v in latest.items() if v != "pass")),
            reran_to_pass=(r["check_name"], r["case_name"], r["node"]) in reran,
        )
        cls, why, doc = _triage.classify(e)
        doc["why"] = why
        store.set_class(r["id"], cls, doc)
        owner = node.owner if node else ""
        for device in doc.get("devices", []):
            store.quarantine(r["node"], device, f"{why} (result {r['id'][:12]})", owner, {"result": r["id"], "run": run_id})
        if cls == _triage.HARDWARE and not doc.get("devices"):
            recent = [h for h in store.results() if h["node"] == r["node"] and h["verdict"] in _triage.NOT_PASSED + ("pass",)][-QUARANTINE_AFTER:]
            if len(recent) == QUARANTINE_AFTER and all(h.get("failure_class") == _triage.HARDWARE for h in recent):
                store.quarantine(r["node"], "", f"{QUARANTINE_AFTER} hardware-class failures in a row (last: {why})", owner, {"result": r["id"], "run": run_id})


def commit_of(directory: str = ".") -> str:
    """The git commit of `directory` (`git rev-parse HEAD`), or "unknown"."""
    try:
        out = subprocess.run(["git", "-C", directory, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    sha = out.stdout.strip()
    return sha if out.returncode == 0 and re.fullmatch(r"[0-9a-f]{7,64}", sha) else "unknown"
