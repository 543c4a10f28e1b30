"""Why a check failed: `hardware`, `infrastructure` or `code`, from evidence taken when it ran
(pure functions; the dispatcher gathers the evidence and stores the verdict with it).

The evidence, per failed or infra result:
- the node's device health verdicts before and after the check (discovery's, with reasons),
  leaving out devices already quarantined;
- the node lost, or the check killed at its timeout (an infra verdict says which);
- the fingerprint's fields that differ from the node's last passing run (driver, runtime,
  firmware, kernel, ...);
- the same check at the same commit on the other nodes of the SKU (which passed, which failed),
  and the same node's last pass of the check at another commit.

The rules, first match wins:
1. a device unhealthy before or after the check -> hardware (the devices and their reasons);
2. the node lost, or the check killed at its timeout, or never scheduled -> infrastructure;
3. the environment changed since the node's last pass while no other node of the SKU fails
   -> infrastructure (the fields that changed);
4. other nodes of the SKU fail it at this commit too -> code;
5. other nodes of the SKU pass it at this commit, on a healthy node whose environment did not
   change -> hardware (only this node fails: a node or device fault no verdict caught);
6. otherwise -> code (it passed here before, at the last good commit, or there is no sign of
   the machine or the lab).
A result of a check that passed when run again is still classified; the pass is recorded as
flaky, never as fixed."""

from __future__ import annotations

import dataclasses
from typing import Any

HARDWARE, INFRA, CODE = "hardware", "infrastructure", "code"
CLASSES = (HARDWARE, INFRA, CODE)
NOT_PASSED = ("fail", "error", "infra")


def unhealthy(health: dict[str, Any] | None, exclude: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The devices of a health snapshot (`{"devices": [{"id", "state", "reasons"}]}`) that are
    not healthy, leaving out `exclude` (devices already quarantined)."""
    if not health:
        return []
    return [d for d in health.get("devices", []) if d.get("state") != "healthy" and d.get("id") not in exclude]


def health_snapshot(machine: dict[str, Any]) -> dict[str, Any]:
    """A machine description's per-device verdicts, as evidence."""
    return {
        "devices": [
            {
                "id": str(a.get("id", "")),
                "index": a.get("index"),
                "state": str((a.get("health") or {}).get("state", "unknown")),
                "reasons": [str(r) for r in (a.get("health") or {}).get("reasons", [])][:8],
            }
            for a in machine.get("accelerators", [])
        ]
    }


def env_changes(then: dict[str, Any] | None, now: dict[str, Any] | None) -> dict[str, list[str]]:
    """The fingerprint fields whose values differ between two fingerprints (`accel env --json`
    documents): field -> [then, now]. Values are the fingerprint's own (secrets already
    redacted there)."""
    if not then or not now:
        return {}
    a, b = then.get("fields") or {}, now.get("fields") or {}
    out = {}
    for key in sorted(set(a) | set(b)):
        va = str((a.get(key) or {}).get("value", "")) if key in a else "<absent>"
        vb = str((b.get(key) or {}).get("value", "")) if key in b else "<absent>"
        if va != vb:
            out[key] = [va[:120], vb[:120]]
    return out


@dataclasses.dataclass
class Evidence:
    """What was known about one failed or infra result when it ran."""

    verdict: str
    message: str = ""
    health_before: dict[str, Any] | None = None
    health_after: dict[str, Any] | None = None
    excluded: tuple[str, ...] = ()  # quarantined devices the check did not see
    node_lost: bool = False
    timed_out: bool = False
    env_changes: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    last_pass: dict[str, Any] | None = None  # the node's last pass of the check: {"commit", "run_id"}
    same_sku_pass: tuple[str, ...] = ()  # other nodes of the SKU that passed it at this commit
    same_sku_fail: tuple[str, ...] = ()  # other nodes of the SKU that failed it at this commit
    reran_to_pass: bool = False


def classify(e: Evidence) -> tuple[str, str, dict[str, Any]]:
    """(class, one sentence why, the evidence as JSON data) by the rules above."""
    bad_before = unhealthy(e.health_before, e.excluded)
    bad_after = unhealthy(e.health_after, e.excluded)
    doc: dict[str, Any] = {
        "health_before": [_short(d) for d in bad_before],
        "health_after": [_short(d) for d in bad_after],
        "checked_health": e.health_before is not None or e.health_after is not None,
        "excluded": list(e.excluded),
        "node_lost": e.node_lost,
        "timed_out": e.timed_out,
        "env_changes": e.env_changes,
        "last_pass": e.last_pass,
        "same_sku": {"pass": list(e.same_sku_pass), "fail": list(e.same_sku_fail)},
        "reran_to_pass": e.reran_to_pass,
    }
    healthy = not bad_before and not bad_after
    if bad_after or bad_before:
        bad = bad_after or bad_before
        when = "after" if bad_after and not bad_before else "before and after" if bad_after else "before"
        names = "; ".join(f"{d['id']}: {', '.join(d.get('reasons') or [d.get('state', 'unhealthy')])}" for d in bad)
        why = f"device health {when} the check: {names}"
        doc["devices"] = sorted({d["id"] for d in bad})
        return HARDWARE, why, doc
    if e.node_lost:
        return INFRA, "the node was lost while the check ran", doc
    if e.verdict == "infra":
        if e.timed_out:
            return INFRA, "killed at its timeout" + (f" ({e.message})" if e.message else ""), doc
        return INFRA, e.message or "the lab could not run the check", doc
    if e.env_changes and not e.same_sku_fail:
        fields = ", ".join(f"{k} {v[0]} -> {v[1]}" for k, v in list(e.env_changes.items())[:4])
        return INFRA, f"the environment changed since this node's last pass: {fields}", doc
    if e.same_sku_fail:
        return CODE, f"fails on other nodes of the SKU at this commit too ({', '.join(e.same_sku_fail)})", doc
    if e.same_sku_pass and healthy and not e.env_changes:
        return HARDWARE, f"passes on {', '.join(e.same_sku_pass)} of the same SKU at this commit; fails only on this node", doc
    if e.last_pass:
        return CODE, f"passed on this node at {e.last_pass.get('commit')} in the same environment; fails at this commit", doc
    return CODE, "no sign of the machine or the lab: the check itself fails", doc


def _short(d: dict[str, Any]) -> dict[str, Any]:
    return {"id": d.get("id"), "state": d.get("state"), "reasons": list(d.get("reasons") or [])}


def shares(results: list[dict[str, Any]]) -> dict[str, Any]:
    """How the failed and infra results divide among the classes, as vLLM counted its retried
    failures: counts and fractions, `unclassified` for results stored without a class."""
    counts = {c: 0 for c in (*CLASSES, "unclassified")}
    for r in results:
        if r["verdict"] in NOT_PASSED:
            counts[r.get("failure_class") or "unclassified"] += 1
    total = sum(counts.values())
    return {"total": total, "counts": counts, "fractions": {k: (v / total if total else 0.0) for k, v in counts.items()}}
