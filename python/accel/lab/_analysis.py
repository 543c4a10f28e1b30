"""What the lab's results say: flaky checks, regressions, stale hardware, who owns each, and
what the lab costs. Pure functions of stored results (dicts of `_store.RESULT_COLUMNS`), an
owners table and a clock; no IO but reading the owners and price files.

- **Flaky**: one check (and case) at one commit in one environment (the fingerprint's hash)
  that both passed and failed. `infra`, `skip` and `cancelled` are not the check's verdicts
  and never make it flaky.
- **Regressions**: each benchmark series (suite, check, series, SKU) as one value per commit
  (the median of that commit's passing results, in order of first run), split by E-divisive
  means (Matteson and James, 2014; as in MongoDB's and Hunter's change-point detection):
  the split that maximises the energy statistic, kept only if a permutation test finds it
  significant (`p <= alpha`) and the medians on either side differ by at least
  `min_change`, then each side split again. A change in the worse direction (the check's
  `better`) is a regression, named by its commit range: the last good commit and the first
  bad one. Only the latest `MAX_POINTS` commits of a series are searched.
- **Stale**: a family or SKU (seen in results or named in the owners file) with no passing
  result in the last `stale_days` days.
- **Owners** (`load_owners`, TOML): maintainers by SKU, then family, then plugin (vendor),
  then `default`; every failure and stale entry names its owner.
- **Capacity**: node-hours per SKU, queue wait (start minus queue time), and cost from an
  optional price table (per node-hour, by SKU).
- **Tickets**: one per (suite, check, SKU) failure streak, with its start, the last success,
  the pass/fail flips in the window and the owner; open while the streak lasts, closed by the
  first run in which every node of the SKU that ran the check passed it cleanly (a pass after a
  re-run is flaky and closes nothing).
- **Trends**: each benchmark series per node with its noise band (the median and the spread of
  the last `TREND_K` values before the latest: 1.4826 x the median absolute deviation, at least
  1% of the median); the latest value outside median +/- 3 spreads is out of band, in the
  check's worse direction a regression by the band, reported beside the change-point test.
- **Classes**: how failed and infra results divide among hardware, infrastructure and code
  (`_triage.shares`)."""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import math
import os
import tomllib
from collections import defaultdict
from typing import Any, Callable, Iterable

import numpy as np

from . import _triage

DEFAULT_ALPHA = 0.01
DEFAULT_PERMUTATIONS = 199
DEFAULT_MIN_SIZE = 3
DEFAULT_MIN_CHANGE = 0.05
DEFAULT_STALE_DAYS = 7.0
MAX_DEPTH = 8  # splits of splits: at most 2**8 segments per series
MAX_POINTS = 300  # the latest commits of a series that are searched (the statistic is O(n^2))
CHECK_VERDICTS = ("pass", "fail", "error")  # the check's own verdicts (not infra, skip, cancelled)
TREND_K = 10
BAND_SPREADS = 3.0


class OwnersError(ValueError):
    """An owners or price file that cannot be used; the message names the file and the key."""


# -- owners -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Owners:
    """Maintainers by SKU, family and plugin (vendor), and a default."""

    skus: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    families: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    plugins: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    default: tuple[str, ...] = ()

    def of(self, *, sku: str = "", family: str = "", vendor: str = "") -> tuple[str, ...]:
        """Who owns a result of this SKU, family and plugin (most specific first); () if nobody."""
        for table, key in ((self.skus, sku), (self.families, family), (self.plugins, vendor)):
            if key and key in table:
                return table[key]
        return self.default


_OWNER_TABLES = ("skus", "families", "plugins", "default")


def _people(value: Any, where: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(p, str) and p.strip() for p in items):
        raise OwnersError(f"{where}: expected a maintainer or a non-empty list of maintainers")
    return tuple(p.strip() for p in items)


def parse_owners(text: str, source: str = "<owners>") -> Owners:
    """An owners table from TOML:

        default = "lab-admins@example.org"
        [plugins]
        nvidia = ["alice@example.org"]
        [families]
        nvidia-hopper = "bob@example.org"
        [skus]
        "H100-SXM5-80GB" = ["carol@example.org", "dave@example.org"]
    """
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise OwnersError(f"{source}: not valid TOML: {e}") from None
    for key in doc:
        if key not in _OWNER_TABLES:
            near = difflib.get_close_matches(key, _OWNER_TABLES, n=1, cutoff=0.5)
            hint = f"; did you mean {near[0]!r}?" if near else f" (known: {', '.join(_OWNER_TABLES)})"
            raise OwnersError(f"{source}: unknown key {key!r}{hint}")
    tables: dict[str, dict[str, tuple[str, ...]]] = {}
    for name in ("skus", "families", "plugins"):
        raw = doc.get(name, {})
        if not isinstance(raw, dict):
            raise OwnersError(f"{source}: [{name}] must be a table")
        tables[name] = {k: _people(v, f"{source}: {name}.{k}") for k, v in raw.items()}
    default = _people(doc["default"], f"{source}: default") if "default" in doc else ()
    return Owners(skus=tables["skus"], families=tables["families"], plugins=tables["plugins"], default=default)


def _read_toml_text(path: str | os.PathLike[str], error: type[ValueError]) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read((1 << 20) + 1)
    except OSError as e:
        raise error(f"{os.fspath(path)}: cannot read: {e.strerror}") from None
    if len(data) > 1 << 20:
        raise error(f"{os.fspath(path)}: larger than 1 MiB")
    return data.decode("utf-8", "replace")


def load_owners(path: str | os.PathLike[str]) -> Owners:
    """`parse_owners` of a file."""
    return parse_owners(_read_toml_text(path, OwnersError), os.fspath(path))


def parse_prices(text: str, source: str = "<prices>") -> dict[str, float]:
    """A price table from TOML: `[per_node_hour]` mapping SKU -> price (any currency)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise OwnersError(f"{source}: not valid TOML: {e}") from None
    for key in doc:
        if key != "per_node_hour":
            raise OwnersError(f"{source}: unknown key {key!r}; did you mean 'per_node_hour'?")
    raw = doc.get("per_node_hour", {})
    if not isinstance(raw, dict):
        raise OwnersError(f"{source}: [per_node_hour] must be a table")
    out = {}
    for sku, price in raw.items():
        if isinstance(price, bool) or not isinstance(price, (int, float)) or not math.isfinite(price) or price < 0:
            raise OwnersError(f"{source}: per_node_hour.{sku} must be a number, 0 or more")
        out[sku] = float(price)
    return out


def load_prices(path: str | os.PathLike[str]) -> dict[str, float]:
    """`parse_prices` of a file."""
    return parse_prices(_read_toml_text(path, OwnersError), os.fspath(path))


# -- flaky --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Flaky:
    """A check that passed and failed at one commit in one environment."""

    suite: str
    check: str
    case: str
    commit: str
    env_hash: str
    passes: int
    failures: int
    nodes: tuple[str, ...]
    sku: str
    owners: tuple[str, ...]


def flaky(results: Iterable[dict[str, Any]], owners: Owners = Owners()) -> list[Flaky]:
    """Checks with different verdicts at the same commit and environment fingerprint."""
    groups: dict[tuple[str, str, str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in results:
        if r["verdict"] in CHECK_VERDICTS and r.get("env_hash"):
            groups[(r["suite"], r["check_name"], r["case_name"], r["commit_sha"], r["env_hash"])].append(r)
    out = []
    for (suite, check, case, commit, env), rs in sorted(groups.items()):
        passes = sum(r["verdict"] == "pass" for r in rs)
        if 0 < passes < len(rs) or any(r.get("flaky") for r in rs):
            last = rs[-1]
            out.append(
                Flaky(
                    suite=suite,
                    check=check,
                    case=case,
                    commit=commit,
                    env_hash=env,
                    passes=passes,
                    failures=len(rs) - passes,
                    nodes=tuple(sorted({r["node"] for r in rs})),
                    sku=last.get("sku", ""),
                    owners=owners.of(sku=last.get("sku", ""), family=last.get("family", ""), vendor=last.get("vendor", "")),
                )
            )
    return out


# -- change points ------------------------------------------------------------------------


def _energy(d: np.ndarray, min_size: int) -> tuple[int, float]:
    """The best split of a series with pairwise distances `d` (n x n): (tau, Q). As in
    Matteson and James, the left part is [0, tau) and the right part [tau, kappa) for the
    kappa that maximises Q too, so a change that later reverts is found; Q is the scaled
    energy distance (alpha = 1)."""
    n = d.shape[0]
    # 2-D prefix sums: the sum of d[a:b, c:e] is p[b, e] - p[a, e] - p[b, c] + p[a, c].
    p = np.zeros((n + 1, n + 1))
    p[1:, 1:] = d.cumsum(0).cumsum(1)
    tau, kappa = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    valid = (tau >= min_size) & (kappa - tau >= min_size)
    if not valid.any():
        return -1, 0.0
    t, k = tau[valid], kappa[valid]
    within_left = p[t, t] / 2.0  # pairs i < j < tau
    within_right = (p[k, k] - p[t, k] - p[k, t] + p[t, t]) / 2.0
    between = p[t, k] - p[t, t]
    m, r = t.astype(float), (k - t).astype(float)
    e = 2.0 * between / (m * r) - within_left / (m * (m - 1) / 2.0) - within_right / (r * (r - 1) / 2.0)
    q = (m * r / (m + r)) * e
    best = int(np.argmax(q))
    return int(t[best]), float(q[best])


def change_point(values: np.ndarray, *, alpha: float, permutations: int, min_size: int, rng: np.random.Generator) -> tuple[int, float] | None:
    """The most likely change point of `values` and its permutation p-value, or None when the
    series is too short or the split is not significant at `alpha`."""
    n = len(values)
    if n < 2 * min_size:
        return None
    d = np.abs(values[:, None] - values[None, :])
    tau, q = _energy(d, min_size)
    if tau < 0 or q <= 0:
        return None
    exceed = 0
    for _ in range(permutations):
        perm = rng.permutation(n)
        _, qp = _energy(d[np.ix_(perm, perm)], min_size)
        if qp >= q:
            exceed += 1
    p_value = (exceed + 1) / (permutations + 1)
    return (tau, p_value) if p_value <= alpha else None


@dataclasses.dataclass(frozen=True)
class Change:
    """A significant shift in a benchmark series between two commits."""

    suite: str
    check: str
    series: str
    sku: str
    last_good: str
    first_bad: str
    before: float  # median before the change
    after: float  # median after it
    relative: float  # (after - before) / |before|
    p_value: float
    regression: bool  # the shift is in the worse direction
    owners: tuple[str, ...]


def _segments(values: np.ndarray, lo: int, hi: int, depth: int, found: list[tuple[int, float]], **kw: Any) -> None:
    if depth > MAX_DEPTH:
        return
    cp = change_point(values[lo:hi], **kw)
    if cp is None:
        return
    tau, p = cp
    found.append((lo + tau, p))
    _segments(values, lo, lo + tau, depth + 1, found, **kw)
    _segments(values, lo + tau, hi, depth + 1, found, **kw)


def regressions(
    results: Iterable[dict[str, Any]],
    owners: Owners = Owners(),
    *,
    direction: Callable[[str, str, str], str] = lambda suite, check, series: "lower",
    alpha: float = DEFAULT_ALPHA,
    permutations: int = DEFAULT_PERMUTATIONS,
    min_size: int = DEFAULT_MIN_SIZE,
    min_change: float = DEFAULT_MIN_CHANGE,
    cache: dict[str, list[list[float]]] | None = None,
) -> list[Change]:
    """Significant changes in every benchmark series, regressions and improvements alike
    (`Change.regression` tells them apart); `direction(suite, check, series)` says which way
    is good ("higher" or "lower"). Deterministic: each series seeds its own permutations, so
    the change points of a series whose values did not change can come from `cache` (keyed by
    a digest of the series and the test's settings; filled as they are found)."""
    per_commit: dict[tuple[str, str, str, str], dict[str, list[float]]] = defaultdict(dict)
    meta: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for r in sorted(results, key=lambda r: (r["started_at"], r["id"])):
        if r["kind"] != "benchmark" or r["verdict"] != "pass" or not r.get("series"):
            continue
        for name, value in r["series"].items():
            key = (r["suite"], r["check_name"], name, r.get("sku", ""))
            per_commit[key].setdefault(r["commit_sha"], []).append(float(value))
            meta[key] = r
    out = []
    for key, commits_values in sorted(per_commit.items()):
        suite, check, series, sku = key
        commits = list(commits_values)[-MAX_POINTS:]  # dicts keep insertion order: first run of each commit
        values = np.array([float(np.median(commits_values[c])) for c in commits])
        seed = int.from_bytes(hashlib.sha256("\0".join(key).encode()).digest()[:8], "little")
        digest = hashlib.sha256(json.dumps([key, values.tolist(), alpha, permutations, min_size]).encode()).hexdigest()
        found: list[tuple[int, float]]
        if cache is not None and digest in cache:
            found = [(int(c), float(p)) for c, p in cache[digest]]
        else:
            found = []
            _segments(values, 0, len(values), 0, found, alpha=alpha, permutations=permutations, min_size=min_size, rng=np.random.default_rng(seed))
            if cache is not None:
                cache[digest] = [[c, p] for c, p in found]
        cuts = sorted(found)
        bounds = [0] + [c for c, _ in cuts] + [len(values)]
        last = meta[key]
        better = direction(suite, check, series)
        for i, (cut, p) in enumerate(cuts):
            before = float(np.median(values[bounds[i] : cut]))
            after = float(np.median(values[cut : bounds[i + 2]]))
            scale = abs(before) if before else 1.0
            relative = (after - before) / scale
            if abs(relative) < min_change:
                continue
            worse = relative < 0 if better == "higher" else relative > 0
            out.append(
                Change(
                    suite=suite,
                    check=check,
                    series=series,
                    sku=sku,
                    last_good=commits[cut - 1],
                    first_bad=commits[cut],
                    before=before,
                    after=after,
                    relative=relative,
                    p_value=p,
                    regression=worse,
                    owners=owners.of(sku=sku, family=last.get("family", ""), vendor=last.get("vendor", "")),
                )
            )
    return out


# -- failures, staleness, capacity ---------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Failure:
    """A check (and case) whose latest verdict on a SKU is fail or error."""

    suite: str
    check: str
    case: str
    sku: str
    verdict: str
    commit: str
    node: str
    run_id: str
    result_id: str
    message: str
    owners: tuple[str, ...]
    failure_class: str = ""
    why: str = ""


def failures(results: Iterable[dict[str, Any]], owners: Owners = Owners()) -> list[Failure]:
    """The latest check verdict per (suite, check, case, SKU) that is fail or error."""
    latest: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for r in sorted(results, key=lambda r: (r["started_at"], r["id"])):
        if r["verdict"] in CHECK_VERDICTS:
            latest[(r["suite"], r["check_name"], r["case_name"], r.get("sku", ""))] = r
    return [
        Failure(
            suite=k[0],
            check=k[1],
            case=k[2],
            sku=k[3],
            verdict=r["verdict"],
            commit=r["commit_sha"],
            node=r["node"],
            run_id=r["run_id"],
            result_id=r["id"],
            message=r.get("message", ""),
            owners=owners.of(sku=k[3], family=r.get("family", ""), vendor=r.get("vendor", "")),
            failure_class=r.get("failure_class", "") or "",
            why=str((r.get("evidence") or {}).get("why", "")),
        )
        for k, r in sorted(latest.items())
        if r["verdict"] != "pass"
    ]


@dataclasses.dataclass(frozen=True)
class Stale:
    """A family or SKU without a passing result in the window."""

    what: str  # "family" or "sku"
    name: str
    last_pass: float | None  # seconds since the epoch; None: never
    owners: tuple[str, ...]


def stale(results: Iterable[dict[str, Any]], owners: Owners = Owners(), *, now: float, days: float = DEFAULT_STALE_DAYS) -> list[Stale]:
    """Families and SKUs (from the results and the owners file) with no pass since
    `now - days`; the owners file's entries never run are stale too."""
    last: dict[tuple[str, str], float | None] = {}
    context: dict[tuple[str, str], dict[str, str]] = {}
    for r in results:
        for what, name in (("family", r.get("family", "")), ("sku", r.get("sku", ""))):
            if not name:
                continue
            key = (what, name)
            last.setdefault(key, None)
            context[key] = {"sku": r.get("sku", "") if what == "sku" else "", "family": r.get("family", ""), "vendor": r.get("vendor", "")}
            if r["verdict"] == "pass":
                prev = last[key]
                last[key] = r["ended_at"] if prev is None else max(prev, r["ended_at"])
    for name in owners.families:
        last.setdefault(("family", name), None)
        context.setdefault(("family", name), {"family": name})
    for name in owners.skus:
        last.setdefault(("sku", name), None)
        context.setdefault(("sku", name), {"sku": name})
    cutoff = now - days * 86400.0
    out = []
    for (what, name), when in sorted(last.items()):
        if when is None or when < cutoff:
            out.append(Stale(what=what, name=name, last_pass=when, owners=owners.of(**context[(what, name)])))
    return out


@dataclasses.dataclass(frozen=True)
class Capacity:
    """What one SKU's checks used: node-hours, queue waits, cost (None without a price)."""

    sku: str
    results: int
    node_hours: float
    queue_wait_mean_s: float | None
    queue_wait_max_s: float | None
    cost: float | None


def capacity(results: Iterable[dict[str, Any]], prices: dict[str, float] | None = None) -> list[Capacity]:
    """Node-hours (the sum of check durations) and queue waits per SKU, with cost where the
    price table names the SKU."""
    durations: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    waits: dict[str, list[float]] = defaultdict(list)
    for r in results:
        sku = r.get("sku", "") or "(unknown)"
        durations[sku] += float(r["duration_s"])
        counts[sku] += 1
        if r.get("queued_at") is not None:
            waits[sku].append(max(0.0, float(r["started_at"]) - float(r["queued_at"])))
    out = []
    for sku in sorted(durations):
        hours = durations[sku] / 3600.0
        w = waits.get(sku) or []
        price = (prices or {}).get(sku)
        out.append(
            Capacity(
                sku=sku,
                results=counts[sku],
                node_hours=hours,
                queue_wait_mean_s=sum(w) / len(w) if w else None,
                queue_wait_max_s=max(w) if w else None,
                cost=hours * price if price is not None else None,
            )
        )
    return out


@dataclasses.dataclass(frozen=True)
class Ticket:
    """A failure streak of one check on one SKU: open while it lasts, closed by a clean pass."""

    id: str
    suite: str
    check: str
    sku: str
    state: str  # "open" or "closed"
    streak_start: float
    streak_start_commit: str
    last_success: float | None
    closed_at: float | None
    closed_commit: str
    flips: int  # pass <-> fail changes over the window
    failures: int
    latest_run: str
    owners: tuple[str, ...]


def tickets(results: Iterable[dict[str, Any]], owners: Owners = Owners()) -> list[Ticket]:
    """Every failure streak per (suite, check, SKU) in the results, open or closed. A run counts
    as failing when any node of the SKU failed the check (fail or error), as green when every
    node that ran it passed without a re-run; a run with only flaky passes or infra counts as
    neither."""
    runs: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = defaultdict(dict)
    for r in sorted(results, key=lambda r: (r["started_at"], r["id"])):
        if r["verdict"] not in CHECK_VERDICTS:
            continue
        key = (r["suite"], r["check_name"], r.get("sku", ""))
        run = runs[key].setdefault(r["run_id"], {"at": r["started_at"], "commit": r["commit_sha"], "fail": False, "clean": True, "meta": r})
        if r["verdict"] in ("fail", "error"):
            run["fail"] = True
        if r["verdict"] != "pass" or r.get("flaky"):
            run["clean"] = False
    out = []
    for (suite, check, sku), by_run in sorted(runs.items()):
        ordered = sorted(by_run.items(), key=lambda kv: kv[1]["at"])
        flips, previous = 0, None
        last_success: float | None = None
        streak: dict[str, Any] | None = None
        meta = ordered[-1][1]["meta"]
        people = owners.of(sku=sku, family=meta.get("family", ""), vendor=meta.get("vendor", ""))
        for run_id, run in ordered:
            state = "fail" if run["fail"] else "pass" if run["clean"] else None
            if state is None:
                continue
            if previous is not None and state != previous:
                flips += 1
            previous = state
            if state == "fail":
                if streak is None:
                    streak = {"start": run["at"], "commit": run["commit"], "run": run_id, "failures": 0, "last_success": last_success}
                streak["failures"] += 1
                streak["latest"] = run_id
            else:
                if streak is not None:
                    out.append(_ticket(suite, check, sku, streak, closed=(run["at"], run["commit"]), flips=flips, owners=people))
                    streak = None
                last_success = run["at"]
        if streak is not None:
            out.append(_ticket(suite, check, sku, streak, closed=None, flips=flips, owners=people))
    return out


def _ticket(suite: str, check: str, sku: str, streak: dict[str, Any], *, closed: tuple[float, str] | None, flips: int, owners: tuple[str, ...]) -> Ticket:
    tid = hashlib.sha256("\0".join((suite, check, sku, streak["run"])).encode()).hexdigest()[:12]
    return Ticket(
        id=tid,
        suite=suite,
        check=check,
        sku=sku,
        state="open" if closed is None else "closed",
        streak_start=streak["start"],
        streak_start_commit=streak["commit"],
        last_success=streak["last_success"],
        closed_at=closed[0] if closed else None,
        closed_commit=closed[1] if closed else "",
        flips=flips,
        failures=streak["failures"],
        latest_run=streak["latest"],
        owners=owners,
    )


@dataclasses.dataclass(frozen=True)
class Trend:
    """A benchmark series on one node, with its noise band."""

    suite: str
    check: str
    series: str
    sku: str
    node: str
    points: tuple[tuple[float, float, str], ...]  # (time, value, commit), oldest first
    median: float | None  # of the last TREND_K values before the latest
    spread: float | None
    latest: float
    out_of_band: bool
    regression: bool  # out of band in the worse direction
    better: str


def trends(results: Iterable[dict[str, Any]], *, direction: Callable[[str, str, str], str] = lambda s, c, x: "lower", k: int = TREND_K) -> list[Trend]:
    """Every benchmark series per node with its noise band (see the module's documentation)."""
    series: dict[tuple[str, str, str, str, str], list[tuple[float, float, str]]] = defaultdict(list)
    for r in sorted(results, key=lambda r: (r["started_at"], r["id"])):
        if r["kind"] != "benchmark" or r["verdict"] != "pass" or not r.get("series"):
            continue
        for name, value in r["series"].items():
            series[(r["suite"], r["check_name"], name, r.get("sku", ""), r["node"])].append((float(r["started_at"]), float(value), r["commit_sha"]))
    out = []
    for (suite, check, name, sku, node), points in sorted(series.items()):
        window = np.array([v for _, v, _ in points[-k - 1 : -1]])
        latest = points[-1][1]
        better = direction(suite, check, name)
        median = spread = None
        out_of_band = regression = False
        if len(window) >= 3:
            median = float(np.median(window))
            spread = max(1.4826 * float(np.median(np.abs(window - median))), 0.01 * abs(median))
            out_of_band = abs(latest - median) > BAND_SPREADS * spread
            regression = out_of_band and ((latest < median) if better == "higher" else (latest > median))
        out.append(Trend(suite, check, name, sku, node, tuple(points), median, spread, latest, out_of_band, regression, better))
    return out


@dataclasses.dataclass(frozen=True)
class Report:
    """Everything `analyze` finds."""

    flaky: list[Flaky]
    regressions: list[Change]
    failures: list[Failure]
    stale: list[Stale]
    capacity: list[Capacity]
    tickets: list[Ticket] = dataclasses.field(default_factory=list)
    trends: list[Trend] = dataclasses.field(default_factory=list)
    classes: dict[str, Any] = dataclasses.field(default_factory=dict)
    quarantine: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON data (lists of objects)."""
        doc: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            doc[f.name] = [dataclasses.asdict(x) if dataclasses.is_dataclass(x) and not isinstance(x, type) else x for x in value] if isinstance(value, list) else value
        out: dict[str, Any] = json.loads(json.dumps(doc))  # tuples become lists
        return out


def analyze(
    results: list[dict[str, Any]],
    owners: Owners = Owners(),
    *,
    now: float,
    stale_days: float = DEFAULT_STALE_DAYS,
    prices: dict[str, float] | None = None,
    direction: Callable[[str, str, str], str] = lambda suite, check, series: "lower",
    alpha: float = DEFAULT_ALPHA,
    permutations: int = DEFAULT_PERMUTATIONS,
    quarantine: list[dict[str, Any]] | None = None,
    cache: dict[str, list[list[float]]] | None = None,
) -> Report:
    """Every detector over one list of results (and the quarantine entries in force). A
    bisect's steps are runs of past commits: they are its evidence, not the checks' state."""
    results = [r for r in results if r.get("run_source") != "bisect"]
    return Report(
        flaky=flaky(results, owners),
        regressions=regressions(results, owners, direction=direction, alpha=alpha, permutations=permutations, cache=cache),
        failures=failures(results, owners),
        stale=stale(results, owners, now=now, days=stale_days),
        capacity=capacity(results, prices),
        tickets=tickets(results, owners),
        trends=trends(results, direction=direction),
        classes=_triage.shares(results),
        quarantine=list(quarantine or []),
    )
