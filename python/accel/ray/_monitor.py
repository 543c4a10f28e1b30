"""Health that acts while a job runs: one monitor actor per node (REP enhancements#71's
`NodeMonitor`, Collect -> Decide -> Act), probing the node's devices every `period_s` through the
families' own readers and acting on what changes.

Ray 2.60 has none of REP #71's hooks (no `NodeProbe`, `HealthManager` or `ray.drain_node` in the
installed wheel), so the monitor is a plain Ray actor (`num_cpus=0`, restarted by Ray if it dies,
its own process: it outlives the job's workers), and `check()` is the callback user code calls
(a Ray Train loop, a `ray.train.UserCallback.after_report`).

- **Collect**: `accel._native.probe_json` (`accel_discover::probe`): discovery's verdicts and
  every family's readings, in REP #71's shape `{metrics, devices, events, passed, detail}`. It
  fails closed: a device whose readings cannot be taken is `unknown`, never `passed`.
- **Decide**: `accel._native.monitor_step` (`accel_discover::probe::Tracker`): a device is
  withdrawn at the first probe that does not pass it, and recovered after `recover_after`
  passing probes in a row.
- **Act**: a withdrawn device is written into the node's published machine (Ray's KV) with its
  verdict, so `accel.ray.placement_group` never plans on it; a recovered one is restored, and
  both are logged. With `policy="drain"` the node is also drained through Ray's own drain call
  (the GCS `DrainNode` RPC behind `ray drain-node`, reason `PREEMPTION` with accel's reason as the
  message): Ray schedules nothing new there, Ray Train's preemption watcher sees it
  (`get_draining_nodes`), and the node exits once idle. Ray 2.60 has no call that undoes a drain,
  so recovery after a drain needs the node restarted.

Results and events are stored in Ray's KV (namespace `accel`, key `health:<node>`), so any
process connected to the cluster reads them with `health()` / `check()`, even after a monitor
is gone."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from typing import Any

from .. import _native
from ._placement import KV_NAMESPACE, KV_PREFIX, NODE_LABEL, _ray_nodes

log = logging.getLogger("accel.monitor")

HEALTH_PREFIX = "health:"
SOURCE_PREFIX = "source:"
POLICIES = ("withdraw", "drain")
KEEP = 64  # results and events each monitor keeps in memory and in its KV document


class DeviceUnhealthy(RuntimeError):
    """`check()`: a node's latest probe did not pass. `.nodes` maps node name to its devices that
    did not pass (`{"GPU2": "unhealthy: 3 uncorrectable ECC errors"}`)."""

    def __init__(self, nodes: dict[str, dict[str, str]]):
        self.nodes = nodes
        parts = [f"{n}: " + ", ".join(f"{label} {why}" for label, why in devs.items()) for n, devs in sorted(nodes.items())]
        super().__init__("devices failed their health probe: " + "; ".join(parts))


def _kv_get(key: str) -> Any:
    from ray.experimental import internal_kv

    raw = internal_kv._internal_kv_get(key, namespace=KV_NAMESPACE)
    if raw is None:
        return None
    return json.loads(raw.decode() if isinstance(raw, bytes) else str(raw))


def _kv_put(key: str, value: Any) -> None:
    from ray.experimental import internal_kv

    internal_kv._internal_kv_put(key, json.dumps(value), overwrite=True, namespace=KV_NAMESPACE)


def publish_source(name: str, source: dict[str, str]) -> None:
    """Where the node's monitor probes: `{"root": DIR}` (a capture), `{"sample": NAME}`, or `{}`
    (the live machine). `python -m accel.ray start` publishes it beside the machine."""
    _kv_put(SOURCE_PREFIX + name, source)


class NodeMonitor:
    """The per-node actor (created by `start_monitors`, which pins it to its node)."""

    def __init__(self, node: str, source: dict[str, str], period_s: float, policy: str, recover_after: int, node_id: str):
        self.node, self.source, self.period_s = node, dict(source), float(period_s)
        self.policy, self.recover_after, self.node_id = policy, int(recover_after), node_id
        self.tracker: str | None = None
        self.results: deque[dict[str, Any]] = deque(maxlen=KEEP)
        self.events: deque[dict[str, Any]] = deque(maxlen=KEEP)
        self.drained: dict[str, Any] | None = None
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, name=f"accel-monitor-{node}", daemon=True)
        self.thread.start()

    # --- Collect, Decide, Act -------------------------------------------------------------------

    def _probe(self) -> Any:
        try:
            text = _native.probe_json(root=self.source.get("root"), sample=self.source.get("sample"))
            out: dict[str, Any] = json.loads(text)
            return out
        except Exception as e:  # noqa: BLE001 - fail closed: a probe that cannot run passes nothing
            machine = _kv_get(KV_PREFIX + self.node) or {}
            known = {d["id"]: d["label"] for r in self.results for d in r["devices"]}
            devices = [
                {"id": a["id"], "label": known.get(a["id"], a["id"]), "vendor": a.get("vendor", ""), "state": "unknown", "reasons": [f"probe failed: {e}"], "passed": False}
                for a in machine.get("accelerators", [])
            ]
            return {"metrics": {"protocol": 1, "devices": [], "links": []}, "devices": devices, "events": [], "passed": False, "detail": f"probe failed: {e}"}

    def step(self) -> dict[str, Any]:
        """One probe and what follows from it (also what the loop runs every period)."""
        probed = self._probe()
        machine = _kv_get(KV_PREFIX + self.node)
        step = json.loads(_native.monitor_step(self.tracker, json.dumps(probed), self.recover_after, json.dumps(machine) if machine else None))
        result: dict[str, Any] = step["result"]
        with self.lock:
            self.tracker = json.dumps(step["tracker"])
            self.results.append(result)
            if step["changed"] and step["machine"] is not None:
                _kv_put(KV_PREFIX + self.node, step["machine"])
            for event in result["events"]:
                event = {**event, "node": self.node, "at": time.time()}
                self.events.append(event)
                why = "; ".join(event.get("reasons") or [])
                log.warning("accel monitor: node %s %s %s (%s)%s", self.node, event["label"], event["kind"], event["device"], f": {why}" if why else "")
            if self.policy == "drain" and self.drained is None and any(e["kind"] == "withdrawn" for e in result["events"]):
                self.drained = self._drain(result)
                self.events.append(self.drained)
            self._store()
        return result

    def _drain(self, result: dict[str, Any]) -> dict[str, Any]:
        """Ray's own drain call: the GCS `DrainNode` RPC (`ray drain-node`), reason PREEMPTION."""
        import ray
        from ray.core.generated import autoscaler_pb2

        bad = [f"{d['label']} {d['state']}: {'; '.join(d['reasons'])}" for d in result["devices"] if not d["passed"]]
        message = f"accel: {', '.join(bad)}"[:512]
        worker: Any = ray._private.worker.global_worker
        preemption = getattr(autoscaler_pb2, "DRAIN_NODE_REASON_PREEMPTION")
        accepted, rejection = worker.gcs_client.drain_node(self.node_id, preemption, message, 0)
        log.warning("accel monitor: drain of node %s %s: %s", self.node, "accepted" if accepted else f"rejected ({rejection})", message)
        return {"kind": "drained" if accepted else "drain-rejected", "node": self.node, "node_id": self.node_id, "seq": result["seq"], "reason": message, "rejection": rejection, "at": time.time()}

    def _store(self) -> None:
        last = self.results[-1] if self.results else None
        doc = {"node": self.node, "policy": self.policy, "period_s": self.period_s, "recover_after": self.recover_after, "last": last, "events": list(self.events), "drained": self.drained, "updated_at": time.time()}
        _kv_put(HEALTH_PREFIX + self.node, doc)

    def _loop(self) -> None:
        while not self.stopping.is_set():
            started = time.monotonic()
            try:
                self.step()
            except Exception:  # noqa: BLE001 - the loop must outlive a bad round; it is logged
                log.exception("accel monitor: node %s: a probe round failed", self.node)
            if self.drained is not None and self.drained["kind"] == "drained":
                # A drained node exits once idle, and this actor would keep it busy: leave.
                self._leave()
                return
            self.stopping.wait(max(0.0, self.period_s - (time.monotonic() - started)))

    def _leave(self) -> None:
        import ray

        ray.kill(ray.get_runtime_context().current_actor, no_restart=True)

    # --- what callers ask -----------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """The latest result's sequence number, the events so far, and the latest result."""
        with self.lock:
            last = self.results[-1] if self.results else None
            return {"node": self.node, "seq": last["seq"] if last else 0, "events": list(self.events), "last": last, "drained": self.drained}

    def stop(self) -> None:
        self.stopping.set()


def _nodes() -> dict[str, dict[str, Any]]:
    return _ray_nodes()


def start_monitors(
    nodes: list[str] | None = None,
    period_s: float = 10.0,
    policy: str = "withdraw",
    recover_after: int = 3,
    sources: dict[str, dict[str, str]] | None = None,
) -> dict[str, Any]:
    """Starts (or finds) one monitor actor per accel node (every alive node with `accel.io/node`,
    or `nodes`), each pinned to its node (`label_selector` on `accel.io/node`), `num_cpus=0`,
    named `accel-monitor:<node>` in namespace `accel` and restarted by Ray if it dies. Returns
    their handles by node name. `policy`: `withdraw` (the device leaves placement) or `drain`
    (also drain the node through Ray). `sources` overrides where a node is probed (default: what
    `python -m accel.ray start` published, else the live machine)."""
    import ray

    if policy not in POLICIES:
        raise ValueError(f"policy {policy!r}: expected one of {', '.join(POLICIES)}")
    if not period_s > 0 or recover_after < 1:
        raise ValueError("period_s must be above 0 and recover_after at least 1")
    alive = _nodes()
    names = sorted(alive) if nodes is None else list(nodes)
    unknown = [n for n in names if n not in alive]
    if unknown:
        raise ValueError(f"no alive accel node named {', '.join(unknown)} (known: {', '.join(sorted(alive))})")
    actor = ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)(NodeMonitor)
    out = {}
    for name in names:
        source = (sources or {}).get(name) or _kv_get(SOURCE_PREFIX + name) or {}
        out[name] = actor.options(
            name=f"accel-monitor:{name}", namespace=KV_NAMESPACE, get_if_exists=True, label_selector={NODE_LABEL: name}
        ).remote(name, source, period_s, policy, recover_after, alive[name]["NodeID"])
    return out


def health(node: str) -> dict[str, Any] | None:
    """The node's monitor document from Ray's KV: `last` (the latest REP #71 result), `events`
    (withdrawn, recovered, drained), `policy`; None before its first probe."""
    doc: dict[str, Any] | None = _kv_get(HEALTH_PREFIX + node)
    return doc


def check(nodes: list[str] | None = None) -> None:
    """The callback for user code (a training loop, `ray.train.UserCallback.after_report`):
    raises `DeviceUnhealthy` naming every device whose node's latest probe did not pass it, and
    for a monitored node with no probe yet. Reads Ray's KV only: cheap to call every step."""
    names = sorted(_nodes()) if nodes is None else list(nodes)
    bad: dict[str, dict[str, str]] = {}
    for name in names:
        doc = health(name)
        last = (doc or {}).get("last")
        if last is None:
            if doc is not None or nodes is not None:
                bad[name] = {"node": "no probe yet"}
            continue
        for d in last["devices"]:
            if not d["passed"]:
                bad.setdefault(name, {})[d["label"]] = f"{d['state']}: {'; '.join(d['reasons'])}"
    if bad:
        raise DeviceUnhealthy(bad)
