"""The lab's pages as files (`accel lab pages`, and after every run, submit, bisect and release
given `--pages DIR`), for the node agent to serve read-only under `/lab/` (`accel agent
--lab-pages DIR`): the lab has no HTTP server of its own, and its pages pass through the
agent's limits, Host check, tokens, TLS and sessions (docs/lab.md, docs/security.md).

Static HTML, no script at all, one stylesheet (`lab.css`), plots as inline SVG drawn with
presentation attributes (no inline style, so the agent's policy `style-src 'self'` holds);
every value is HTML-escaped, and stored text (a run's command, a node's name, a log) is shown
as text, never as a command to paste. Files are written beside their final name and renamed
over it, mode 0644 under 0755 directories, so the agent never serves half a page. Pages:

- `index.html`: quarantined nodes and devices with their owners; tickets (open and recently
  closed); how failures divide among hardware, infrastructure and code; failures with their
  class and why; regressions (change points) and bisects; flaky checks; stale hardware; trends
  with each node's noise band; the matrix (family x SKU x suite);
- `cell/<key>.html` a cell's history; `run/<id>.html` a run's results, fingerprints and the
  reproduction commands; `result/<id>.html` one result that did not pass (or passed on a
  re-run) with its evidence and log.

A finished run's pages are written once, a cell's page when the cell has a new run, and a
benchmark series' change points are computed again only when its values changed (`.rendered`,
beside the pages and never served, remembers all three); the index each time."""

from __future__ import annotations

import hashlib
import html
import json
import os
import shlex
import tempfile
import time
from typing import Any, Callable

from ._analysis import Owners, Report, Trend, analyze
from ._store import Store

CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
td.pass { background: #d9f2d9; } td.fail, td.error { background: #f8d0d0; }
td.infra { background: #f8e6c0; } td.skip, td.cancelled, td.none { background: #eee; }
td.hardware { background: #f3d5f7; } td.infrastructure { background: #f8e6c0; } td.code { background: #f8d0d0; }
td.open { background: #f8d0d0; } td.closed { background: #d9f2d9; }
pre { background: #f6f6f6; padding: .6em; overflow-x: auto; max-height: 40em; white-space: pre-wrap; }
.muted { color: #777; } a { color: #0b5cad; }
figure { display: inline-block; margin: .5em 1em .5em 0; } figcaption { font-size: .9em; }
"""
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f")
STATE_FILE = ".rendered"
MAX_TRENDS = 60


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + " UTC" if t else "never"


def _page(title: str, body: str) -> str:
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{_e(title)}</title><link rel=stylesheet href=/lab/lab.css></head>"
        f"<body><p><a href=/lab/>the lab</a></p><h1>{_e(title)}</h1>{body}</body></html>"
    )


def _owners(xs: Any) -> str:
    return _e(", ".join(xs) or "no owner")


def _summary(counts: dict[str, int]) -> tuple[str, str]:
    """(css class, text) of a cell's verdict counts: the worst verdict names the class."""
    for worst in ("fail", "error", "infra", "cancelled", "pass", "skip"):
        if counts.get(worst):
            total = sum(counts.values())
            text = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
            return worst, text if len(counts) > 1 else f"{total} {worst}"
    return "none", "-"


def cell_key(suite: str, family: str, sku: str) -> str:
    """The file name of a matrix cell's page (its names hashed: they are data)."""
    return hashlib.sha256("\0".join((suite, family, sku)).encode()).hexdigest()[:16]


def _write(out: str, rel: str, text: str) -> None:
    """Writes `out/rel` whole: a temporary file beside it, renamed over it; mode 0644."""
    path = os.path.join(out, rel)
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# -- the index --------------------------------------------------------------------------------


def _quarantine(report: Report) -> str:
    out = [f"<h2>Quarantine ({len(report.quarantine)})</h2><table id=quarantine><tr><th>node</th><th>device</th><th>since</th><th>why</th><th>owner</th><th>release</th></tr>"]
    for q in report.quarantine:
        target = q["node"] + (f"/{q['device']}" if q["device"] else "")
        out.append(
            f"<tr><td>{_e(q['node'])}</td><td>{_e(q['device'] or 'the whole node')}</td><td>{_e(_when(q['since']))}</td><td>{_e(q['reason'])}</td>"
            f"<td>{_e(q['owner'] or 'no owner')}</td><td><code>{_e('accel lab release ' + shlex.quote(target))}</code></td></tr>"
        )
    out.append("</table>")
    return "".join(out)


def _tickets(report: Report) -> str:
    shown = [t for t in report.tickets if t.state == "open"] + [t for t in report.tickets if t.state == "closed"][-20:]
    out = [f"<h2>Tickets ({sum(t.state == 'open' for t in report.tickets)} open)</h2><table id=tickets><tr><th>ticket</th><th>state</th><th>suite/check</th><th>SKU</th><th>streak since</th><th>failures</th><th>last success</th><th>flips</th><th>closed</th><th>owners</th></tr>"]
    for t in shown:
        closed = f"{_when(t.closed_at)} at {t.closed_commit}" if t.closed_at else "-"
        out.append(
            f"<tr data-ticket='{_e(t.id)}'><td>{_e(t.id)}</td><td class={_e(t.state)}>{_e(t.state)}</td><td>{_e(t.suite)}/{_e(t.check)}</td><td>{_e(t.sku or '-')}</td>"
            f"<td>{_e(_when(t.streak_start))} at {_e(t.streak_start_commit)}</td><td>{t.failures}</td><td>{_e(_when(t.last_success))}</td><td>{t.flips}</td>"
            f"<td>{_e(closed)}</td><td>{_owners(t.owners)}</td></tr>"
        )
    out.append("</table>")
    return "".join(out)


def _classes(report: Report) -> str:
    c = report.classes or {"total": 0, "counts": {}, "fractions": {}}
    out = [f"<h2>Why checks failed ({c['total']} failed or infra results)</h2><table id=classes><tr><th>class</th><th>results</th><th>share</th></tr>"]
    for name in ("hardware", "infrastructure", "code", "unclassified"):
        n = c["counts"].get(name, 0)
        out.append(f"<tr><td class={name}>{name}</td><td>{n}</td><td>{c['fractions'].get(name, 0.0):.0%}</td></tr>")
    out.append("</table>")
    return "".join(out)


def _failures(report: Report) -> str:
    out = [f"<h2>Failures ({len(report.failures)})</h2><table id=failures><tr><th>suite/check</th><th>SKU</th><th>node</th><th>verdict</th><th>class</th><th>why</th><th>commit</th><th>message</th><th>owners</th></tr>"]
    for f in report.failures:
        name = f"{f.suite}/{f.check}" + (f"/{f.case}" if f.case else "")
        out.append(
            f"<tr><td><a href='/lab/run/{_e(f.run_id)}.html'>{_e(name)}</a></td><td>{_e(f.sku)}</td><td>{_e(f.node)}</td><td class={_e(f.verdict)}>{_e(f.verdict)}</td>"
            f"<td class={_e(f.failure_class or 'none')}>{_e(f.failure_class or '-')}</td><td>{_e(f.why[:300])}</td><td>{_e(f.commit)}</td><td>{_e(f.message[:300])}</td><td>{_owners(f.owners)}</td></tr>"
        )
    out.append("</table>")
    return "".join(out)


def _regressions(report: Report, bisects: list[dict[str, Any]]) -> str:
    regs = [c for c in report.regressions if c.regression]
    out = [f"<h2>Regressions ({len(regs)})</h2><table id=regressions><tr><th>suite/check</th><th>series</th><th>SKU</th><th>before</th><th>after</th><th>change</th><th>commits</th><th>p</th><th>owners</th></tr>"]
    for c in regs:
        out.append(
            f"<tr><td>{_e(c.suite)}/{_e(c.check)}</td><td>{_e(c.series)}</td><td>{_e(c.sku)}</td><td>{c.before:.4g}</td><td>{c.after:.4g}</td>"
            f"<td>{c.relative:+.1%}</td><td class=range>{_e(c.last_good)}..{_e(c.first_bad)}</td><td>{c.p_value:.3f}</td><td>{_owners(c.owners)}</td></tr>"
        )
    out.append("</table>")
    out.append(f"<h2>Bisects ({len(bisects)})</h2><table id=bisects><tr><th>suite/check</th><th>SKU</th><th>node</th><th>good..bad</th><th>first bad commit</th><th>last good</th><th>steps</th><th>peers agree</th></tr>")
    for b in bisects:
        ev = b["evidence"]
        out.append(
            f"<tr><td>{_e(b['suite'])}/{_e(b['check_name'])}</td><td>{_e(b['sku'])}</td><td>{_e(b['node'])}</td><td>{_e(b['good'])}..{_e(b['bad'])}</td>"
            f"<td class=first-bad>{_e(b['first_bad'] or b['state'])}</td><td>{_e(ev.get('last_good', ''))}</td><td>{len(ev.get('steps', []))}</td><td>{_e(ev.get('peers_agree', ''))}</td></tr>"
        )
    out.append("</table>")
    return "".join(out)


def _flaky_and_stale(report: Report) -> str:
    out = [f"<h2>Flaky ({len(report.flaky)})</h2><table id=flaky><tr><th>suite/check</th><th>commit</th><th>passes</th><th>failures</th><th>nodes</th><th>owners</th></tr>"]
    for fl in report.flaky:
        name = f"{fl.suite}/{fl.check}" + (f"/{fl.case}" if fl.case else "")
        out.append(f"<tr><td>{_e(name)}</td><td>{_e(fl.commit)}</td><td>{fl.passes}</td><td>{fl.failures}</td><td>{_e(', '.join(fl.nodes))}</td><td>{_owners(fl.owners)}</td></tr>")
    out.append(f"</table><h2>Stale ({len(report.stale)})</h2><table id=stale><tr><th>what</th><th>name</th><th>last pass</th><th>owners</th></tr>")
    for s in report.stale:
        out.append(f"<tr><td>{_e(s.what)}</td><td>{_e(s.name)}</td><td>{_e(_when(s.last_pass))}</td><td>{_owners(s.owners)}</td></tr>")
    out.append("</table>")
    return "".join(out)


def plot(trends: list[Trend], width: int = 560, height: int = 180) -> str:
    """One series on one SKU, every node's values and noise band, as inline SVG."""
    pad = 36
    values = [v for t in trends for _, v, _ in t.points]
    bands = [x for t in trends if t.median is not None and t.spread is not None for x in (t.median - 3 * t.spread, t.median + 3 * t.spread)]
    lo, hi = min(values + bands), max(values + bands)
    if hi - lo < 1e-12:
        lo, hi = lo - 1, hi + 1
    n = max(len(t.points) for t in trends)

    def x(i: int) -> float:
        return pad + (width - 2 * pad) * (i / max(n - 1, 1))

    def y(v: float) -> float:
        return height - pad / 2 - (height - pad) * (v - lo) / (hi - lo)

    parts = [f"<svg class=trend xmlns='http://www.w3.org/2000/svg' width={width} height={height} viewBox='0 0 {width} {height}' role=img>"]
    parts.append(f"<text x=2 y=12 font-size=10 fill='#555'>{hi:.4g}</text><text x=2 y={height - 4} font-size=10 fill='#555'>{lo:.4g}</text>")
    for k, t in enumerate(trends):
        color = PALETTE[k % len(PALETTE)]
        if t.median is not None and t.spread is not None:
            top, bottom = y(t.median + 3 * t.spread), y(t.median - 3 * t.spread)
            parts.append(f"<rect class=band x={pad} y={top:.1f} width={width - 2 * pad} height={max(bottom - top, 1):.1f} fill='{color}' fill-opacity=0.12><title>{_e(t.node)}: median {t.median:.4g}, spread {t.spread:.3g}</title></rect>")
        pts = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, (_, v, _) in enumerate(t.points))
        parts.append(f"<polyline points='{pts}' fill=none stroke='{color}' stroke-width=1.5><title>{_e(t.node)}</title></polyline>")
        last_i = len(t.points) - 1
        mark = "#d62728" if t.out_of_band else color
        parts.append(f"<circle cx={x(last_i):.1f} cy={y(t.latest):.1f} r=3.5 fill='{mark}'><title>{_e(t.node)} latest {t.latest:.4g} at {_e(t.points[-1][2])}{' (out of band)' if t.out_of_band else ''}</title></circle>")
    parts.append("</svg>")
    return "".join(parts)


def _trends(report: Report) -> str:
    groups: dict[tuple[str, str, str, str], list[Trend]] = {}
    for t in report.trends:
        groups.setdefault((t.suite, t.check, t.series, t.sku), []).append(t)
    out = [f"<h2>Trends ({len(groups)})</h2><div id=trends>"]
    for (suite, check, series, sku), ts in list(sorted(groups.items()))[:MAX_TRENDS]:
        flagged = [t for t in ts if t.out_of_band]
        note = "; ".join(f"{t.node}: {t.latest:.4g} outside {t.median:.4g} +/- {3 * (t.spread or 0):.3g}" + (" (worse)" if t.regression else "") for t in flagged if t.median is not None)
        legend = ", ".join(f"{t.node}" for t in ts)
        out.append(
            f"<figure data-series='{_e(series)}' data-out-of-band='{len(flagged)}'>{plot(ts)}<figcaption>{_e(suite)}/{_e(check)} {_e(series)} on {_e(sku or '-')} "
            f"({_e(ts[0].better)} is better; nodes: {_e(legend)}){'. Out of band: ' + _e(note) if note else ''}</figcaption></figure>"
        )
    out.append("</div>")
    return "".join(out)


def _matrix(store: Store) -> str:
    latest: dict[tuple[str, str, str], tuple[float, str]] = {}
    counts: dict[tuple[str, str, str, str], dict[str, int]] = {}
    for suite, family, sku, run_id, verdict, n, at in store.cells():
        key = (suite, family, sku)
        if key not in latest or at > latest[key][0]:
            latest[key] = (at, run_id)
        counts.setdefault((suite, family, sku, run_id), {})[verdict] = n
    suites = sorted({k[0] for k in latest})
    rows = sorted({(k[1], k[2]) for k in latest})
    parts = ["<h2>Matrix</h2>", "<table id=matrix><tr><th>family</th><th>SKU</th>"]
    parts += [f"<th>{_e(s)}</th>" for s in suites]
    parts.append("</tr>")
    for family, sku in rows:
        parts.append(f"<tr><td>{_e(family or '-')}</td><td>{_e(sku or '-')}</td>")
        for suite in suites:
            key = (suite, family, sku)
            if key not in latest:
                parts.append("<td class=none>-</td>")
                continue
            cls, text = _summary(counts[(suite, family, sku, latest[key][1])])
            parts.append(f"<td class={cls} data-suite='{_e(suite)}' data-sku='{_e(sku)}'><a href='/lab/cell/{cell_key(suite, family, sku)}.html'>{_e(text)}</a></td>")
        parts.append("</tr>")
    parts.append("</table>")
    if not rows:
        parts.append("<p class=muted>No results yet.</p>")
    return "".join(parts)


# -- runs, results, cells ---------------------------------------------------------------------


def run_page(store: Store, run: dict[str, Any], db_label: str) -> tuple[str, list[dict[str, Any]]]:
    """A run's page, and its results (for their own pages)."""
    run_id = run["id"]
    results = store.results(run_id=run_id, with_logs=True)
    parts = ["<table id=run>"]
    for k in ("suite", "suite_version", "commit_sha", "lab", "source", "state"):
        parts.append(f"<tr><th>{_e(k)}</th><td>{_e(run[k])}</td></tr>")
    parts.append(f"<tr><th>created</th><td>{_e(_when(run['created_at']))}</td></tr><tr><th>ended</th><td>{_e(_when(run['ended_at']))}</td></tr>")
    parts.append(f"<tr><th>selectors</th><td>{_e(json.dumps(run['selectors'], sort_keys=True))}</td></tr>")
    if run["command"]:
        parts.append(f"<tr><th>recorded command</th><td><code class=recorded>{_e(run['command'])}</code> <span class=muted>(as recorded with the run: data, not a command to paste)</span></td></tr>")
    parts.append("</table>")
    # Only what this page builds from checked fields (a hex id, a commit of [0-9A-Za-z._/+-]),
    # each part quoted.
    parts.append("<h2>Reproduce</h2><pre id=repro>")
    parts.append(_e(f"git checkout {shlex.quote(run['commit_sha'])}\naccel lab repro {shlex.quote(run_id)} --db {shlex.quote(db_label)}\n"))
    parts.append(_e(f"accel lab repro {shlex.quote(run_id)} --db {shlex.quote(db_label)} --on-node --suite SUITE.toml   # the same checks on the same nodes, through Ray\n"))
    parts.append("</pre>")
    parts.append("<h2>Results</h2><table id=results><tr><th>check</th><th>case</th><th>node</th><th>SKU</th><th>verdict</th><th>class</th><th>attempt</th><th>duration</th><th>series</th><th>message</th><th>log</th></tr>")
    for r in results:
        verdict = r["verdict"] + (" (flaky)" if r.get("flaky") else "")
        series = json.dumps(r["series"], sort_keys=True) if r["series"] else ""
        log = f"<a href='/lab/result/{_e(r['id'])}.html'>log</a>" if has_page(r) else f"<code>accel lab log {_e(r['id'])}</code>"
        parts.append(
            f"<tr><td>{_e(r['check_name'])}</td><td>{_e(r['case_name'])}</td><td>{_e(r['node'])}</td><td>{_e(r['sku'])}</td>"
            f"<td class={_e(r['verdict'])}>{_e(verdict)}</td><td class={_e(r.get('failure_class') or 'none')}>{_e(r.get('failure_class') or '')}</td><td>{r['attempt']}</td><td>{r['duration_s']:.2f} s</td>"
            f"<td>{_e(series)}</td><td>{_e(r['message'][:300])}</td><td>{log}</td></tr>"
        )
    parts.append("</table><h2>Environment fingerprints</h2>")
    for env_hash in sorted({r["env_hash"] for r in results if r["env_hash"]}):
        nodes = sorted({r["node"] for r in results if r["env_hash"] == env_hash})
        doc = store.fingerprint(env_hash)
        parts.append(f"<h3>{_e(', '.join(nodes))}: {_e(env_hash[:16])}</h3><pre class=fingerprint>{_e(json.dumps(doc, indent=1, sort_keys=True) if doc else 'not stored')}</pre>")
    return _page(f"run {run_id[:12]}: {run['suite']} at {run['commit_sha']}", "".join(parts)), results


def has_page(r: dict[str, Any]) -> bool:
    """Whether a result gets a page of its own (its evidence and log): every result that did
    not pass, or passed only on a re-run. A clean pass's log stays in the store (`accel lab
    log RESULT`), so a store of millions of passes is not millions of files."""
    return r["verdict"] != "pass" or bool(r.get("flaky"))


def result_page(r: dict[str, Any]) -> str:
    """One result: its fields, evidence and log."""
    parts = [f"<p><a href='/lab/run/{_e(r['run_id'])}.html'>run</a></p><table id=result>"]
    for k in ("suite", "check_name", "case_name", "node", "sku", "commit_sha", "verdict", "failure_class", "attempt", "message", "env_hash", "machine_hash"):
        parts.append(f"<tr><th>{_e(k)}</th><td>{_e(r.get(k, ''))}</td></tr>")
    parts.append(f"<tr><th>flaky</th><td>{_e(bool(r.get('flaky')))}</td></tr>")
    parts.append(f"<tr><th>started</th><td>{_e(_when(r['started_at']))}</td></tr><tr><th>duration</th><td>{r['duration_s']:.2f} s</td></tr>")
    if r["series"]:
        parts.append(f"<tr><th>series</th><td>{_e(json.dumps(r['series'], sort_keys=True))}</td></tr>")
    parts.append("</table>")
    if r.get("evidence"):
        parts.append(f"<h2>Evidence</h2><pre id=evidence>{_e(json.dumps(r['evidence'], indent=1, sort_keys=True))}</pre>")
    parts.append(f"<h2>Log</h2><pre id=log>{_e(r.get('log', ''))}</pre>")
    return _page(f"{r['check_name']} on {r['node']}: {r['verdict']}", "".join(parts))


def cell_page(store: Store, suite: str, family: str, sku: str) -> str:
    history = store.cell_history(suite, family, sku)
    parts = ["<table id=history><tr><th>run</th><th>commit</th><th>started</th><th>verdicts</th></tr>"]
    for h in history:
        cls, text = _summary(h["counts"])
        parts.append(f"<tr><td><a href='/lab/run/{_e(h['run_id'])}.html'>{_e(h['run_id'][:12])}</a></td><td>{_e(h['commit'])}</td><td>{_e(_when(h['started_at']))}</td><td class={cls}>{_e(text)}</td></tr>")
    parts.append("</table>")
    return _page(f"{suite} on {family or '-'} / {sku or '-'}", "".join(parts))


def render(
    store: Store,
    out: str,
    *,
    db_label: str,
    owners: Owners = Owners(),
    direction: Callable[[str, str, str], str] = lambda s, c, x: "lower",
    window_days: float = 30.0,
    stale_days: float = 7.0,
    now: float | None = None,
) -> Report:
    """Writes the site into `out` (created 0755 if missing) and returns the analysis shown."""
    now = time.time() if now is None else now
    os.makedirs(out, mode=0o755, exist_ok=True)
    since = now - window_days * 86400.0 if window_days else None
    results = store.results(since=since)
    state_path = os.path.join(out, STATE_FILE)
    try:
        with open(state_path, encoding="utf-8") as f:
            state = json.load(f)
        done = set(state.get("runs", []))
        known = dict(state.get("change_points", {}))
        cells_seen = dict(state.get("cells", {}))
    except (OSError, ValueError, RecursionError, AttributeError):
        done, known, cells_seen = set(), {}, {}
    cache: dict[str, list[list[float]]] = {}
    report = analyze(results, owners, now=now, stale_days=stale_days, direction=direction, quarantine=store.quarantined(), cache=_Cache(known, cache))
    _write(out, "lab.css", CSS)
    body = f"<p class=muted id=analysis-at>{_e(db_label)} as of {_e(_when(now))}</p>"
    body += _quarantine(report) + _tickets(report) + _classes(report) + _failures(report)
    body += _regressions(report, store.bisects()) + _flaky_and_stale(report) + _trends(report) + _matrix(store)
    _write(out, "index.html", _page("accel lab", body))
    latest: dict[str, str] = {}
    for suite, family, sku, run_id, _, _, at in store.cells():
        key = cell_key(suite, family, sku)
        mark = f"{at:.6f} {run_id}"
        if mark > latest.get(key, ""):
            latest[key] = mark
        latest.setdefault(f"name:{key}", json.dumps([suite, family, sku]))
    for key, mark in latest.items():
        if key.startswith("name:") or cells_seen.get(key) == mark:
            continue  # a cell whose latest run did not change keeps its page
        suite, family, sku = json.loads(latest[f"name:{key}"])
        _write(out, f"cell/{key}.html", cell_page(store, suite, family, sku))
    for run in store.runs(limit=10_000):
        if run["id"] in done:
            continue
        text, rs = run_page(store, run, db_label)
        _write(out, f"run/{run['id']}.html", text)
        for r in rs:
            if has_page(r):
                _write(out, f"result/{r['id']}.html", result_page(r))
        if run["state"] != "running":
            done.add(run["id"])
    cells_now = {k: v for k, v in latest.items() if not k.startswith("name:")}
    _write(out, STATE_FILE, json.dumps({"runs": sorted(done), "change_points": cache, "cells": cells_now}))
    return report


class _Cache(dict):  # type: ignore[type-arg]
    """The change points of series whose values did not change since the last render (`known`,
    from the state file), read through; what this render used lands in `used`, so the state
    file keeps only live series."""

    def __init__(self, known: dict[str, list[list[float]]], used: dict[str, list[list[float]]]):
        super().__init__()
        self.known, self.used = known, used

    def __contains__(self, key: object) -> bool:
        return key in self.known or key in self.used

    def __getitem__(self, key: str) -> list[list[float]]:
        value = self.used[key] if key in self.used else self.known[key]
        self.used[key] = value
        return value

    def __setitem__(self, key: str, value: list[list[float]]) -> None:
        self.used[key] = value
