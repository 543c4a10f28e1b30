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
`retries`. Cancelling (`cancel_run`, `accel lab cancel RUN`, Ctrl-C) interrupts the running
commands (their groups are killed), and every check not finished is recorded `cancelled`.

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
from typing import Any, Callable

from ._store import MAX_LOG_BYTES, Store, bound_log, canonical_json, fingerprint_hash
from ._suite import Check, Outcome, Suite, check_from_dict, interpret, suite_json

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


def execute_check(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs one check here (the body of the Ray task): its own temp dir and process group,
    killed at its timeout or when the task is interrupted. Returns the outcomes (none when it
    timed out), the bounded log and the times."""
    check = check_from_dict(spec["check"])
    base = tempfile.mkdtemp(prefix="accel-lab-")
    out_dir, work = os.path.join(base, "out"), os.path.join(base, "work")
    os.mkdir(out_dir)
    os.mkdir(work)
    env = _child_env(
        check,
        {
            "ACCEL_LAB_OUT": out_dir,
            "ACCEL_LAB_RUN": spec["run_id"],
            "ACCEL_LAB_CHECK": check.name,
            "ACCEL_LAB_NODE": spec["node"],
            "ACCEL_LAB_COMMIT": spec["commit"],
        },
    )
    started = time.time()
    result: dict[str, Any] = {"started_at": started, "timed_out": False, "returncode": None, "outcomes": []}
    try:
        try:
            proc = subprocess.Popen(
                list(check.command),
                cwd=work,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as e:
            result.update(ended_at=time.time(), log="", outcomes=[dataclasses.asdict(Outcome("error", message=f"cannot run {check.command[0]!r}: {e.strerror}"))])
            return result
        output = _Output(proc.stdout)
        try:
            rc = proc.wait(timeout=check.timeout_s)
            result["returncode"] = rc
        except subprocess.TimeoutExpired:
            result["timed_out"] = True
        finally:
            # Whatever happened (done, timed out, interrupted by a cancel): nothing of the
            # check outlives it.
            _kill_group(proc, KILL_GRACE_S)
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=KILL_GRACE_S)
        result["ended_at"] = time.time()
        log = _redact(output.text())
        result["log"] = log
        if not result["timed_out"]:
            result["outcomes"] = [dataclasses.asdict(o) for o in interpret(check, int(result["returncode"]), out_dir, log)]
        return result
    finally:
        shutil.rmtree(base, ignore_errors=True)


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


def publish_lab(node: str, lab: str, owner: str, env: dict[str, Any] | None) -> None:
    """Stores a node's lab, owner and environment fingerprint in Ray's KV (needs `ray.init`)."""
    from ray.experimental import internal_kv

    doc = {"lab": lab, "owner": owner, "env": env, "env_hash": fingerprint_hash(env) if env is not None else ""}
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


def plan_jobs(suite: Suite, nodes: dict[str, Node], selectors: dict[str, str], one_per: str | None) -> tuple[list[Job], list[tuple[Check, str]]]:
    """The jobs of a run (check order within each node) and the checks no node matches, each
    with why."""
    now = time.time()
    jobs: list[Job] = []
    unmatched: list[tuple[Check, str]] = []
    for check in suite.checks:
        want = {**selectors, **dict(check.labels)}
        matching = sorted(name for name, n in nodes.items() if all(n.labels.get(k) == v for k, v in want.items()))
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

    def record(job: Job | None, check: Check, node_name: str, outcomes: list[dict[str, Any]], **fields: Any) -> None:
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
                }
            )
        store.add_results(run_id, rows, {env_hash: env} if env is not None else None)
        for row in rows:
            counts[row["verdict"]] += 1
            if on_result:
                on_result(row)

    jobs, unmatched = plan_jobs(suite, nodes, selectors, one_per)
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
        spec = {"check": dataclasses.asdict(job.check), "run_id": run_id, "node": job.node, "commit": commit}
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
        if infra is not None:
            fields = {k: out[k] for k in ("started_at", "ended_at", "log")} if out else {}
            record(job, job.check, job.node, [{"verdict": "infra", "message": infra}], **fields)
            retry(job)
            return
        assert out is not None
        record(job, job.check, job.node, out["outcomes"], started_at=out["started_at"], ended_at=out["ended_at"], log=out["log"])

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
                            record(job, job.check, job.node, [{"verdict": "infra", "message": f"node {job.node} was lost while this check ran"}])
                    for name in [n for n, q in queues.items() if q and n not in alive]:
                        for job in queues.pop(name):
                            record(job, job.check, job.node, [{"verdict": "infra", "message": f"node {job.node} was lost before this check started"}])
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
        store.finish_run(run_id, "cancelled")
    else:
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


def commit_of(directory: str = ".") -> str:
    """The git commit of `directory` (`git rev-parse HEAD`), or "unknown"."""
    try:
        out = subprocess.run(["git", "-C", directory, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    sha = out.stdout.strip()
    return sha if out.returncode == 0 and re.fullmatch(r"[0-9a-f]{7,64}", sha) else "unknown"
