"""`python -m accel.lab` (and `accel lab`, which execs it): the lab's command line.

    run SUITE --db URL [--select LABEL=VALUE]... [--one-per LABEL] [--commit SHA] [--pages DIR]
    cancel RUN --db URL
    validate SUITE...
    analyze --db URL [--owners FILE] [--prices FILE] [--suite FILE]... [--stale-days N] [--json]
    pages --db URL --out DIR [--owners FILE] [--suite FILE]... [--every SECONDS]
    repro RUN --db URL [--all] [--on-node --suite FILE]
    submit RESULTS.json... --db URL [--ca-file CA.pem] [--pages DIR]
    quarantine --db URL [NODE[/DEVICE] --reason TEXT [--owner WHO]]
    release NODE[/DEVICE] --db URL [--by WHO] [--pages DIR]
    bisect CHECK --good A --bad B --suite FILE --db URL [--repo DIR] [--node NODE] [--series S]
    grant-submit ROLE --db URL
    log RESULT --db URL

The pages are files; `accel agent --lab-pages DIR` serves them (docs/lab.md).

Exit status: 0 success (every check passed or was skipped), 1 a check failed or an infra
failure remained, or findings (`analyze`: failures, regressions, flaky or stale entries),
2 bad input (a broken suite, document, owners file or database URL), 130 interrupted."""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import signal
import socket
import sys
import threading
import time
from typing import Any, Callable

from ._analysis import DEFAULT_STALE_DAYS, Owners, OwnersError, analyze, load_owners, load_prices
from ._bisect import BisectError, bisect
from ._pages import render
from ._repro import ReproError, report, rerun_on_nodes
from ._run import RunError, Summary, cancel_run, commit_of, parse_selectors, run_suite
from ._store import DocumentError, Store, StoreError, display_url, load_json, open_store
from ._suite import SuiteError, load_suite

PROG = "accel lab"
CONNECT_TIMEOUT_S = 120.0
EPILOG = """Exit status: 0 success (every check passed or was skipped), 1 a check failed or an infra
failure remained, or findings (`analyze`: failures, regressions, flaky or stale entries),
2 bad input (a broken suite, document, owners file or database URL), 130 interrupted."""


def _error(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def _print_result(row: dict[str, Any]) -> None:
    case = f" [{row['case']}]" if row.get("case") else ""
    extra = f": {row['message']}" if row.get("message") else ""
    series = f" {json.dumps(row['series'], sort_keys=True)}" if row.get("series") else ""
    attempt = f" (attempt {row['attempt']})" if row.get("attempt", 1) > 1 else ""
    print(f"{row['verdict']:9} {row['check']}{case} on {row['node']}{attempt}{series}{extra}", flush=True)


def _connect(address: str) -> None:
    """`ray.init` on the lab's cluster; `RunError` (one line) when there is none. Ray retries
    an unreachable GCS without end, so a HOST:PORT address (given, or in RAY_ADDRESS) is tried
    first, and a watchdog ends the process if connecting still takes `CONNECT_TIMEOUT_S`."""
    import ray

    target = os.environ.get("RAY_ADDRESS", "") if address in ("auto", "") else address
    host, sep, port = target.rpartition(":")
    if sep and port.isdigit() and "://" not in target:
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
        except OSError as e:
            raise RunError(f"cannot connect to the Ray cluster at {target}: {e.strerror or e}") from None

    def give_up() -> None:
        print(f"{PROG}: error: no answer from the Ray cluster at {address} within {CONNECT_TIMEOUT_S:g} s", file=sys.stderr, flush=True)
        os._exit(2)

    watchdog = threading.Timer(CONNECT_TIMEOUT_S, give_up)
    watchdog.daemon = True
    watchdog.start()
    try:
        ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
    except (ConnectionError, RuntimeError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise RunError(f"cannot connect to the Ray cluster at {address}: {first}") from None
    finally:
        watchdog.cancel()


def _cmd_run(args: argparse.Namespace) -> int:
    import ray

    suite = load_suite(args.suite)
    selectors = parse_selectors(args.select)
    commit = args.commit or commit_of(".")
    command = shlex.join(["accel", "lab", "run", args.suite, "--db", "<URL>", *[f"--select={s}" for s in args.select], *(["--one-per", args.one_per] if args.one_per else []), "--commit", commit])
    with open_store(args.db) as store:
        _connect(args.address)
        # Ctrl-C sets an event the dispatch loop reads every poll, installed after Ray's own
        # start-up so that nothing of Ray's can take the signal (a KeyboardInterrupt raised inside
        # one of its calls could be swallowed there).
        interrupted = threading.Event()
        previous = signal.signal(signal.SIGINT, lambda *_: interrupted.set())
        try:
            try:
                summary: Summary = run_suite(suite, store, commit=commit, lab=args.lab, selectors=selectors, one_per=args.one_per, command=command, cancel=interrupted, on_result=_print_result)
            except KeyboardInterrupt as e:
                summary = e.args[0] if e.args and isinstance(e.args[0], Summary) else Summary("?", "cancelled", {})
                interrupted.set()
            if interrupted.is_set():
                print(f"run {summary.run_id}: cancelled (Ctrl-C); {_counts(summary.counts)}", file=sys.stderr)
                return 130
        finally:
            signal.signal(signal.SIGINT, previous)
            ray.shutdown()
    print(f"run {summary.run_id}: {summary.state}; {_counts(summary.counts)}")
    _render_after(args)
    bad = sum(summary.counts.get(v, 0) for v in ("fail", "error", "infra"))
    return 1 if bad or summary.state != "done" else 0


def _render_after(args: argparse.Namespace) -> None:
    """`--pages DIR`: the pages again, after a write (what is there for the agent to serve)."""
    if getattr(args, "pages", None):
        with open_store(args.db) as store:
            render(store, args.pages, db_label=display_url(args.db), owners=load_owners(args.owners) if getattr(args, "owners", None) else Owners(), direction=_direction(getattr(args, "suite_files", [])))


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {v}" for v, n in sorted(counts.items())) or "no results"


def _cmd_cancel(args: argparse.Namespace) -> int:
    with open_store(args.db) as store:
        if store.run(args.run) is None:
            return _error(f"no run {args.run!r} in the store")
        if not cancel_run(store, args.run):
            print(f"run {args.run} is not running (nothing to cancel)")
            return 1
    print(f"run {args.run}: cancel requested (its driver stops within a second)")
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    for path in args.suites:
        suite = load_suite(path)
        print(f"{path}: suite {suite.name} {suite.version}, {len(suite.checks)} checks")
    return 0


def _direction(paths: list[str]) -> Callable[[str, str, str], str]:
    """Which way is good for a benchmark series, from the suite files named (else "lower")."""
    suites = {s.name: s for s in (load_suite(p) for p in paths)}

    def direction(suite: str, check: str, series: str) -> str:
        s = suites.get(suite)
        if s is None:
            return "lower"
        try:
            return s.check(check).direction(series)
        except SuiteError:
            return "lower"

    return direction


def _cmd_analyze(args: argparse.Namespace) -> int:
    owners = load_owners(args.owners) if args.owners else Owners()
    prices = load_prices(args.prices) if args.prices else None
    direction = _direction(args.suite_files)
    with open_store(args.db) as store:
        since = time.time() - args.window_days * 86400.0 if args.window_days else None
        results = store.results(since=since)
        held = store.quarantined()
    report = analyze(results, owners, now=time.time(), stale_days=args.stale_days, prices=prices, direction=direction, quarantine=held)
    doc = report.to_json()
    if args.json:
        print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        _print_report(doc)
    open_tickets = [t for t in doc["tickets"] if t["state"] == "open"]
    findings = doc["failures"] or [r for r in doc["regressions"] if r["regression"]] or doc["flaky"] or doc["stale"] or doc["quarantine"] or open_tickets
    return 1 if findings else 0


def _owners(entry: dict[str, Any]) -> str:
    return ", ".join(entry["owners"]) or "no owner"


def _print_report(doc: dict[str, Any]) -> None:
    c = doc["classes"]
    print(f"failed or infra results ({c['total']}): " + ", ".join(f"{k} {c['counts'][k]} ({c['fractions'][k]:.0%})" for k in ("hardware", "infrastructure", "code", "unclassified")))
    print(f"quarantine ({len(doc['quarantine'])}):")
    for q in doc["quarantine"]:
        print(f"  {q['node']}{'/' + q['device'] if q['device'] else ''}: {q['reason']}; owner: {q['owner'] or 'no owner'}")
    print(f"tickets ({sum(t['state'] == 'open' for t in doc['tickets'])} open):")
    for t in doc["tickets"]:
        closed = f", closed at {t['closed_commit']}" if t["state"] == "closed" else ""
        print(f"  {t['id']} {t['state']}: {t['suite']}/{t['check']} on {t['sku'] or '?'} since {t['streak_start_commit']} ({t['failures']} failing runs, {t['flips']} flips{closed}); owner: {_owners(t)}")
    print(f"failures ({len(doc['failures'])}):")
    for f in doc["failures"]:
        cls = f" [{f['failure_class']}: {f['why']}]" if f["failure_class"] else ""
        print(f"  {f['suite']}/{f['check']}{'/' + f['case'] if f['case'] else ''} on {f['sku'] or '?'} ({f['node']}): {f['verdict']} at {f['commit']}{cls}; owner: {_owners(f)}")
    print(f"regressions ({sum(r['regression'] for r in doc['regressions'])}):")
    for r in doc["regressions"]:
        kind = "regression" if r["regression"] else "improvement"
        print(f"  {kind}: {r['suite']}/{r['check']} {r['series']} on {r['sku'] or '?'}: {r['before']:.4g} -> {r['after']:.4g} ({r['relative']:+.1%}), commits {r['last_good']}..{r['first_bad']} (p={r['p_value']:.3f}); owner: {_owners(r)}")
    print(f"flaky ({len(doc['flaky'])}):")
    for f in doc["flaky"]:
        print(f"  {f['suite']}/{f['check']}{'/' + f['case'] if f['case'] else ''} at {f['commit']}: {f['passes']} pass, {f['failures']} fail on {', '.join(f['nodes'])}; owner: {_owners(f)}")
    print(f"stale ({len(doc['stale'])}):")
    for s in doc["stale"]:
        when = time.strftime("%Y-%m-%d", time.gmtime(s["last_pass"])) if s["last_pass"] else "never"
        print(f"  {s['what']} {s['name']}: last pass {when}; owner: {_owners(s)}")
    print("capacity:")
    for c in doc["capacity"]:
        wait = f", queue wait mean {c['queue_wait_mean_s']:.1f} s" if c["queue_wait_mean_s"] is not None else ""
        cost = f", cost {c['cost']:.2f}" if c["cost"] is not None else ""
        print(f"  {c['sku']}: {c['results']} results, {c['node_hours']:.3f} node-hours{wait}{cost}")


def _cmd_serve(args: argparse.Namespace) -> int:
    return _error(
        "`accel lab serve` is gone: the lab has no HTTP server of its own. Render the pages with "
        "`accel lab pages --db URL --out DIR [--every 60]` and serve them with `accel agent --lab-pages DIR` "
        "(docs/lab.md); submit results over the network with a PostgreSQL role that may only submit "
        "(`accel lab grant-submit ROLE`)"
    )


def _cmd_pages(args: argparse.Namespace) -> int:
    owners = load_owners(args.owners) if args.owners else Owners()
    direction = _direction(args.suite_files)
    if args.every is not None and not 1 <= args.every <= 86400:
        return _error(f"--every {args.every:g} is not between 1 and 86400 seconds")
    with open_store(args.db) as store:
        label = display_url(args.db)
        seen: tuple[int, float] | None = None
        last = 0.0
        while True:
            change = store.latest_change()
            # Again when the store changed, and at least every ten rounds (the window moves).
            if change != seen or time.monotonic() - last > 10 * (args.every or 0):
                report = render(store, args.out, db_label=label, owners=owners, direction=direction, window_days=args.window_days, stale_days=args.stale_days)
                seen, last = change, time.monotonic()
                print(f"pages: {args.out} ({len(report.failures)} failures, {sum(t.state == 'open' for t in report.tickets)} open tickets, {len(report.quarantine)} quarantined)", flush=True)
            if args.every is None:
                return 0
            time.sleep(args.every)


def _cmd_repro(args: argparse.Namespace) -> int:
    source = ["--sample", args.sample] if args.sample else ["--root", args.root] if args.root else []
    with open_store(args.db) as store:
        if args.on_node:
            import ray

            if not args.suite_file:
                return _error("--on-node runs the checks of a suite file you name, never the stored commands: add --suite FILE")
            suite = load_suite(args.suite_file)
            if store.run(args.run) is None:
                return _error(f"no run {args.run!r} in the store")
            _connect(args.address)
            try:
                summaries = rerun_on_nodes(store, args.run, suite, everything=args.all)
            finally:
                ray.shutdown()
            if not summaries:
                print(f"run {args.run}: no check to run again (every check passed or was skipped)")
                return 0
            for s in summaries:
                print(f"repro run {s.run_id}: {s.state}; {_counts(s.counts)}")
            return 1 if any(s.counts.get(v) for s in summaries for v in ("fail", "error", "infra")) else 0
        print(report(store, args.run, accel="", source=source, everything=args.all), end="")
    return 0


def _cmd_submit(args: argparse.Namespace) -> int:
    docs = []
    for path in args.results:
        try:
            with open(path, encoding="utf-8") as f:
                docs.append((path, load_json(f.read())))
        except OSError as e:
            return _error(f"{path}: cannot read results: {e.strerror}")
        except DocumentError as e:
            return _error(f"{path}: cannot read results: {e}")
    with open_store(args.db, ca_file=args.ca_file) as store:
        for path, doc in docs:
            try:
                run_id = store.ingest(doc)
            except DocumentError as e:
                return _error(f"{path}: {e} (nothing of this file was stored)")
            print(f"{path}: stored run {run_id} ({len(doc['results'])} results)")
    _render_after(args)
    return 0


def _cmd_log(args: argparse.Namespace) -> int:
    with open_store(args.db) as store:
        r = store.result(args.result)
    if r is None:
        return _error(f"no result {args.result!r} in the store")
    sys.stdout.write(r["log"] if r["log"].endswith("\n") or not r["log"] else r["log"] + "\n")
    return 0


def _target(text: str) -> tuple[str, str | None]:
    node, sep, device = text.partition("/")
    if not node or (sep and not device):
        raise RunError(f"{text!r}: expected NODE or NODE/DEVICE")
    return node, device if sep else None


def _cmd_quarantine(args: argparse.Namespace) -> int:
    with open_store(args.db) as store:
        if args.target:
            if not args.reason:
                return _error("quarantining by hand needs --reason TEXT")
            node, device = _target(args.target)
            made = store.quarantine(node, device or "", args.reason, args.owner)
            print(f"{args.target}: quarantined" if made else f"{args.target}: quarantined already")
        entries = store.quarantined()
    for q in entries:
        print(f"{q['node']}{'/' + q['device'] if q['device'] else ''}: since {time.strftime('%Y-%m-%d %H:%M', time.gmtime(q['since']))} UTC; {q['reason']}; owner: {q['owner'] or 'no owner'}")
    if not entries:
        print("nothing is quarantined")
    _render_after(args)
    return 0


def _cmd_release(args: argparse.Namespace) -> int:
    node, device = _target(args.target)
    with open_store(args.db) as store:
        n = store.release(node, device, args.by)
    if not n:
        print(f"{args.target}: not quarantined (nothing to release)")
        return 1
    print(f"{args.target}: released ({n} quarantine {'entry' if n == 1 else 'entries'}); its checks are dispatched again")
    _render_after(args)
    return 0


def _cmd_bisect(args: argparse.Namespace) -> int:
    import ray

    suite = load_suite(args.suite_file)
    with open_store(args.db) as store:
        _connect(args.address)
        try:
            doc = bisect(store, suite, args.check, args.good, args.bad, repo=args.repo, node=args.node, series=args.series)
        finally:
            ray.shutdown()
    ev = doc["evidence"]
    if doc["first_bad"]:
        print(f"first bad commit: {doc['first_bad']} (last good {ev['last_good']}) for {args.check} on {doc['node']}" + (f", peers {', '.join(ev['peers'])} {'agree' if ev['peers_agree'] else 'disagree'}" if ev["peers"] else ""))
    else:
        print(f"no single first bad commit between {ev['last_good']} and {args.bad}: steps were skipped")
    _render_after(args)
    return 0 if doc["first_bad"] else 1


def _cmd_grant_submit(args: argparse.Namespace) -> int:
    with open_store(args.db) as store:
        store.grant_submit(args.role)
    print(f"role {args.role} may now submit to {display_url(args.db)} (INSERT on runs, results and fingerprints) and read or change nothing")
    return 0


def parser() -> argparse.ArgumentParser:
    """The command line's parser."""
    p = argparse.ArgumentParser(prog=PROG, description="The lab: suites on contributed hardware through Ray, their results and what they say (docs/lab.md).", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run a suite on the lab's Ray cluster and store the results")
    r.add_argument("suite", help="the suite file (TOML)")
    r.add_argument("--db", required=True, help="the results store: a file path, sqlite:///path or postgresql://...")
    r.add_argument("--select", action="append", default=[], metavar="LABEL=VALUE", help="only nodes with this Ray label (repeatable)")
    r.add_argument("--one-per", metavar="LABEL", help="one node per value of this label (e.g. accel.io/accelerator-type)")
    r.add_argument("--commit", help="the commit under test (default: git rev-parse HEAD here)")
    r.add_argument("--lab", default="", help="the lab's name, recorded with the run")
    r.add_argument("--address", default="auto", help="the Ray cluster (default: auto)")
    r.add_argument("--pages", metavar="DIR", help="render the lab's pages into DIR afterwards (accel agent --lab-pages DIR serves them)")
    r.add_argument("--owners", help="the owners file (TOML), for the pages")
    r.set_defaults(func=_cmd_run, suite_files=[])
    c = sub.add_parser("cancel", help="cancel a running run")
    c.add_argument("run")
    c.add_argument("--db", required=True)
    c.set_defaults(func=_cmd_cancel)
    v = sub.add_parser("validate", help="check suite files")
    v.add_argument("suites", nargs="+")
    v.set_defaults(func=_cmd_validate)
    a = sub.add_parser("analyze", help="failures, regressions, flaky checks, stale hardware, capacity")
    a.add_argument("--db", required=True)
    a.add_argument("--owners", help="the owners file (TOML)")
    a.add_argument("--prices", help="price per node-hour by SKU (TOML)")
    a.add_argument("--suite", dest="suite_files", action="append", default=[], help="suite files, for each benchmark's better direction")
    a.add_argument("--stale-days", type=float, default=DEFAULT_STALE_DAYS)
    a.add_argument("--window-days", type=float, default=0.0, help="only results this recent (0: all)")
    a.add_argument("--json", action="store_true")
    a.set_defaults(func=_cmd_analyze)
    sub.add_parser("serve", help="removed: see `pages` and `accel agent --lab-pages`")
    g = sub.add_parser("pages", help="render the lab's pages (matrix, findings, tickets, trends, runs, logs) into a directory for `accel agent --lab-pages`")
    g.add_argument("--db", required=True)
    g.add_argument("--out", required=True, metavar="DIR", help="the pages directory (created 0755; files 0644)")
    g.add_argument("--owners", help="the owners file (TOML)")
    g.add_argument("--suite", dest="suite_files", action="append", default=[], help="suite files, for each benchmark's better direction")
    g.add_argument("--window-days", type=float, default=30.0, help="the analysis covers this many days (0: all)")
    g.add_argument("--stale-days", type=float, default=DEFAULT_STALE_DAYS)
    g.add_argument("--every", type=float, metavar="SECONDS", help="keep rendering: whenever the store changed, checked every SECONDS")
    g.set_defaults(func=_cmd_pages)
    p_repro = sub.add_parser("repro", help="what differs from a run's environment here, and the commands that run its failing checks again")
    p_repro.add_argument("run")
    p_repro.add_argument("--db", required=True)
    p_repro.add_argument("--all", action="store_true", help="every check of the run, not only those that did not pass")
    p_repro.add_argument("--on-node", action="store_true", help="run them again on the same nodes through Ray (results as new runs), as --suite FILE defines them")
    p_repro.add_argument("--suite", dest="suite_file", metavar="FILE", help="with --on-node: the suite file whose checks run (never the stored commands)")
    p_repro.add_argument("--address", default="auto", help="the Ray cluster, with --on-node")
    p_repro.add_argument("--sample", help="compare against an embedded sample machine instead of this one")
    p_repro.add_argument("--root", help="compare against a captured machine instead of this one")
    p_repro.set_defaults(func=_cmd_repro)
    s = sub.add_parser("submit", help="store results documents made outside Ray (docs/lab.md)")
    s.add_argument("results", nargs="+")
    s.add_argument("--db", required=True, help="the store; a PostgreSQL role that may only submit is enough (grant-submit); no password here: ~/.pgpass, PGPASSFILE or PGPASSWORD")
    s.add_argument("--ca-file", metavar="CA.pem", help="verify the PostgreSQL server's certificate against this CA (sslmode=verify-full)")
    s.add_argument("--pages", metavar="DIR", help="render the lab's pages into DIR afterwards")
    s.add_argument("--owners", help="the owners file (TOML), for the pages")
    s.set_defaults(func=_cmd_submit, suite_files=[])
    q = sub.add_parser("quarantine", help="list quarantined nodes and devices, or quarantine one by hand")
    q.add_argument("target", nargs="?", metavar="NODE[/DEVICE]")
    q.add_argument("--db", required=True)
    q.add_argument("--reason", help="why (with NODE[/DEVICE])")
    q.add_argument("--owner", default="", help="who may release it")
    q.add_argument("--pages", metavar="DIR", help="render the lab's pages into DIR afterwards")
    q.set_defaults(func=_cmd_quarantine, suite_files=[], owners=None)
    rel = sub.add_parser("release", help="end a node's or a device's quarantine: its checks are dispatched again")
    rel.add_argument("target", metavar="NODE[/DEVICE]", help="a node (and every device of it) or one device (its id, as the page names it)")
    rel.add_argument("--db", required=True)
    rel.add_argument("--by", default=os.environ.get("USER", ""), help="who released it (recorded)")
    rel.add_argument("--pages", metavar="DIR", help="render the lab's pages into DIR afterwards")
    rel.set_defaults(func=_cmd_release, suite_files=[], owners=None)
    b = sub.add_parser("bisect", help="the first commit at which a check went bad, through Ray")
    b.add_argument("check")
    b.add_argument("--good", required=True, help="a commit where the check is good")
    b.add_argument("--bad", required=True, help="a later commit where it is bad")
    b.add_argument("--suite", dest="suite_file", required=True, metavar="FILE", help="the suite file (its setup command builds each commit)")
    b.add_argument("--db", required=True)
    b.add_argument("--repo", default=".", help="the git repository the commits are in (default: here)")
    b.add_argument("--node", help="the node to bisect on (default: where the check last failed)")
    b.add_argument("--series", help="a benchmark's series to bisect (default: its first)")
    b.add_argument("--address", default="auto", help="the Ray cluster (default: auto)")
    b.add_argument("--pages", metavar="DIR", help="render the lab's pages into DIR afterwards")
    b.set_defaults(func=_cmd_bisect, suite_files=[], owners=None)
    lg = sub.add_parser("log", help="print a result's stored log")
    lg.add_argument("result", help="the result's id (the pages name it)")
    lg.add_argument("--db", required=True)
    lg.set_defaults(func=_cmd_log)
    gs = sub.add_parser("grant-submit", help="let a PostgreSQL role submit results and nothing else")
    gs.add_argument("role")
    gs.add_argument("--db", required=True, help="the store, as its owner")
    gs.set_defaults(func=_cmd_grant_submit)
    return p


def main(argv: list[str] | None = None) -> int:
    """Runs the command line; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:  # gone: say what replaced it, whatever its old arguments were
        return _cmd_serve(argparse.Namespace())
    args = parser().parse_args(argv)
    try:
        rc: int = args.func(args)
        return rc
    except (SuiteError, DocumentError, StoreError, OwnersError, RunError, ReproError, BisectError) as e:
        return _error(str(e))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
