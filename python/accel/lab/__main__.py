"""`python -m accel.lab` (and `accel lab`, which execs it): the lab's command line.

    run SUITE --db URL [--select LABEL=VALUE]... [--one-per LABEL] [--commit SHA] [--address A]
    cancel RUN --db URL
    validate SUITE...
    analyze --db URL [--owners FILE] [--prices FILE] [--suite FILE]... [--stale-days N] [--json]
    serve --db URL [--listen HOST:PORT] [--token-file F] [--allow-host NAME]... [--owners FILE]
    repro RUN --db URL [--on-node] [--all]
    submit RESULTS.json... --db URL

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
from ._run import RunError, Summary, cancel_run, commit_of, parse_selectors, run_suite
from ._repro import ReproError, report, rerun_on_nodes
from ._serve import ServeError, make_server, serve
from ._store import DocumentError, StoreError, open_store, redact_url
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
    bad = sum(summary.counts.get(v, 0) for v in ("fail", "error", "infra"))
    return 1 if bad or summary.state != "done" else 0


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
    direction = _direction(args.suite)
    with open_store(args.db) as store:
        since = time.time() - args.window_days * 86400.0 if args.window_days else None
        results = store.results(since=since)
    report = analyze(results, owners, now=time.time(), stale_days=args.stale_days, prices=prices, direction=direction)
    doc = report.to_json()
    if args.json:
        print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        _print_report(doc)
    findings = doc["failures"] or [r for r in doc["regressions"] if r["regression"]] or doc["flaky"] or doc["stale"]
    return 1 if findings else 0


def _owners(entry: dict[str, Any]) -> str:
    return ", ".join(entry["owners"]) or "no owner"


def _print_report(doc: dict[str, Any]) -> None:
    print(f"failures ({len(doc['failures'])}):")
    for f in doc["failures"]:
        print(f"  {f['suite']}/{f['check']}{'/' + f['case'] if f['case'] else ''} on {f['sku'] or '?'} ({f['node']}): {f['verdict']} at {f['commit']}; owner: {_owners(f)}")
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
    owners = load_owners(args.owners) if args.owners else Owners()
    direction = _direction(args.suite)
    if not 1 <= args.refresh <= 86400:
        return _error(f"--refresh {args.refresh:g} is not between 1 and 86400 seconds")
    with open_store(args.db) as store:
        srv, analysis = make_server(
            store,
            redact_url(args.db),
            listen=args.listen,
            token_file=args.token_file,
            allow_hosts=tuple(args.allow_host),
            owners=owners,
            direction=direction,
            window_days=args.window_days,
            stale_days=args.stale_days,
        )

        def stop(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, stop)
        try:
            serve(srv, analysis, args.refresh)
        except KeyboardInterrupt:
            pass
    return 0


def _cmd_repro(args: argparse.Namespace) -> int:
    source = ["--sample", args.sample] if args.sample else ["--root", args.root] if args.root else []
    with open_store(args.db) as store:
        if args.on_node:
            import ray

            if store.run(args.run) is None:
                return _error(f"no run {args.run!r} in the store")
            _connect(args.address)
            try:
                summaries = rerun_on_nodes(store, args.run, everything=args.all)
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
                docs.append((path, json.load(f)))
        except (OSError, ValueError) as e:
            return _error(f"{path}: cannot read results: {e}")
    with open_store(args.db) as store:
        for path, doc in docs:
            try:
                run_id = store.ingest(doc)
            except DocumentError as e:
                return _error(f"{path}: {e} (nothing of this file was stored)")
            print(f"{path}: stored run {run_id} ({len(doc['results'])} results)")
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
    r.set_defaults(func=_cmd_run)
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
    a.add_argument("--suite", action="append", default=[], help="suite files, for each benchmark's better direction")
    a.add_argument("--stale-days", type=float, default=DEFAULT_STALE_DAYS)
    a.add_argument("--window-days", type=float, default=0.0, help="only results this recent (0: all)")
    a.add_argument("--json", action="store_true")
    a.set_defaults(func=_cmd_analyze)
    w = sub.add_parser("serve", help="the lab's page (matrix, history, findings, logs) and POST /v1/submit")
    w.add_argument("--db", required=True)
    w.add_argument("--listen", default="127.0.0.1:9478", help="HOST:PORT (another address than loopback needs --token-file)")
    w.add_argument("--token-file", help="bearer token file (mode 600): needed for pages off loopback and for submitting")
    w.add_argument("--allow-host", action="append", default=[], help="also answer requests for this Host name (repeatable)")
    w.add_argument("--owners", help="the owners file (TOML)")
    w.add_argument("--suite", action="append", default=[], help="suite files, for each benchmark's better direction")
    w.add_argument("--window-days", type=float, default=30.0, help="the analysis covers this many days (0: all)")
    w.add_argument("--stale-days", type=float, default=DEFAULT_STALE_DAYS)
    w.add_argument("--refresh", type=float, default=60.0, help="seconds between analyses")
    w.set_defaults(func=_cmd_serve)
    p_repro = sub.add_parser("repro", help="what differs from a run's environment here, and the commands that run its failing checks again")
    p_repro.add_argument("run")
    p_repro.add_argument("--db", required=True)
    p_repro.add_argument("--all", action="store_true", help="every check of the run, not only those that did not pass")
    p_repro.add_argument("--on-node", action="store_true", help="run them again on the same nodes through Ray (results as new runs)")
    p_repro.add_argument("--address", default="auto", help="the Ray cluster, with --on-node")
    p_repro.add_argument("--sample", help="compare against an embedded sample machine instead of this one")
    p_repro.add_argument("--root", help="compare against a captured machine instead of this one")
    p_repro.set_defaults(func=_cmd_repro)
    s = sub.add_parser("submit", help="store results documents made outside Ray (docs/lab.md)")
    s.add_argument("results", nargs="+")
    s.add_argument("--db", required=True)
    s.set_defaults(func=_cmd_submit)
    return p


def main(argv: list[str] | None = None) -> int:
    """Runs the command line; returns the exit status."""
    args = parser().parse_args(argv)
    try:
        rc: int = args.func(args)
        return rc
    except (SuiteError, DocumentError, StoreError, OwnersError, RunError, ServeError, ReproError) as e:
        return _error(str(e))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
