"""The lab's results store: SQLite (the default: a file path or `sqlite:///path`, WAL) or
PostgreSQL (`postgresql://...`, through psycopg 3), one schema for both, built by one numbered
list of migrations (`MIGRATIONS`, recorded in `schema_version`).

A run groups results. Every result records its commit, suite name and version, check (and
case, for a test that reports cases), node, vendor (plugin), family, SKU, the hash of its environment fingerprint
(`accel env --json`, stored once per hash), the machine capture's hash, its verdict (`pass`,
`fail`, `error`, `infra`, `skip`, `cancelled`), queue, start and end times, duration, attempt,
a message, its log (bounded: the head and the tail of at most `MAX_LOG_BYTES`) and, for a
benchmark, its series. The results document (`RESULTS_SCHEMA`, docs/lab.md) is how results
arrive from outside Ray; `validate_document` checks all of it before anything is written, and
one document is one transaction, so bad input is refused whole and loses no stored data.
Ingest writes in bulk: `executemany` on SQLite, `COPY` on PostgreSQL."""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import os
import re
import sqlite3
import threading
import time
import urllib.parse
import uuid
from typing import Any, Sequence

from ._suite import KINDS, NAME_RE, VERDICTS

RESULTS_SCHEMA = "accel-lab-results/1"
MAX_LOG_BYTES = 64 * 1024
MAX_MESSAGE_CHARS = 2000
MAX_RESULTS_PER_DOCUMENT = 1_000_000
MAX_SERIES = 256
CONNECT_TIMEOUT_S = 10
BUSY_TIMEOUT_MS = 15_000
STATEMENT_TIMEOUT_MS = 120_000
RUN_STATES = ("running", "done", "cancelled", "failed")
_HEX_RE = re.compile(r"^[0-9a-f]{8,128}$")
_COMMIT_RE = re.compile(r"^[0-9A-Za-z._/+-]{1,128}$")
_TEXT_RE = re.compile(r"^[^\x00-\x1f\x7f]{0,256}$")


class StoreError(Exception):
    """The store cannot be opened or used (its message never holds a password)."""


class DocumentError(ValueError):
    """A results document that cannot be stored: `where` names the place (`results[3].verdict`)."""

    def __init__(self, message: str, where: str = ""):
        super().__init__(f"{where}: {message}" if where else message)
        self.where = where


# Each migration is a list of statements; `{float}` and `{bigint}` are the one dialect gap.
MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            suite TEXT NOT NULL,
            suite_version TEXT NOT NULL,
            commit_sha TEXT NOT NULL,
            lab TEXT NOT NULL DEFAULT '',
            source TEXT NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('running', 'done', 'cancelled', 'failed')),
            created_at {float} NOT NULL,
            ended_at {float},
            selectors TEXT NOT NULL DEFAULT '{{}}',
            command TEXT NOT NULL DEFAULT '',
            suite_doc TEXT NOT NULL DEFAULT ''
        )""",
        """CREATE TABLE fingerprints (
            hash TEXT PRIMARY KEY,
            doc TEXT NOT NULL
        )""",
        """CREATE TABLE results (
            id TEXT PRIMARY KEY,
            run_id TEXT NOT NULL REFERENCES runs(id),
            suite TEXT NOT NULL,
            suite_version TEXT NOT NULL,
            check_name TEXT NOT NULL,
            case_name TEXT NOT NULL DEFAULT '',
            kind TEXT NOT NULL CHECK (kind IN ('test', 'benchmark')),
            node TEXT NOT NULL,
            vendor TEXT NOT NULL DEFAULT '',
            family TEXT NOT NULL DEFAULT '',
            sku TEXT NOT NULL DEFAULT '',
            accelerator_type TEXT NOT NULL DEFAULT '',
            commit_sha TEXT NOT NULL,
            env_hash TEXT NOT NULL DEFAULT '',
            machine_hash TEXT NOT NULL DEFAULT '',
            verdict TEXT NOT NULL CHECK (verdict IN ('pass', 'fail', 'error', 'infra', 'skip', 'cancelled')),
            queued_at {float},
            started_at {float} NOT NULL,
            ended_at {float} NOT NULL,
            duration_s {float} NOT NULL,
            attempt INTEGER NOT NULL DEFAULT 1,
            message TEXT NOT NULL DEFAULT '',
            log TEXT NOT NULL DEFAULT '',
            series TEXT
        )""",
        "CREATE INDEX results_by_check ON results (suite, check_name, case_name, started_at)",
        "CREATE INDEX results_by_run ON results (run_id)",
        "CREATE INDEX results_by_commit ON results (commit_sha)",
        "CREATE INDEX runs_by_time ON runs (created_at)",
    ],
]

RESULT_COLUMNS = (
    "id",
    "run_id",
    "suite",
    "suite_version",
    "check_name",
    "case_name",
    "kind",
    "node",
    "vendor",
    "family",
    "sku",
    "accelerator_type",
    "commit_sha",
    "env_hash",
    "machine_hash",
    "verdict",
    "queued_at",
    "started_at",
    "ended_at",
    "duration_s",
    "attempt",
    "message",
    "log",
    "series",
)
RUN_COLUMNS = ("id", "suite", "suite_version", "commit_sha", "lab", "source", "state", "created_at", "ended_at", "selectors", "command", "suite_doc")
MAX_SUITE_DOC_CHARS = 1 << 20


def redact_url(url: str) -> str:
    """`url` with any password replaced by `***` (for messages)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<unparseable database URL>"
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = (parts.username or "") + ":***"
    return urllib.parse.urlunsplit((parts.scheme, f"{user}@{netloc[-1]}", parts.path, parts.query, parts.fragment))


def canonical_json(doc: Any) -> str:
    """One text per document: sorted keys, no spaces (what fingerprint hashes cover)."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def fingerprint_hash(doc: Any) -> str:
    """The SHA-256 of an environment fingerprint's canonical JSON."""
    return hashlib.sha256(canonical_json(doc).encode()).hexdigest()


def bound_log(text: str, limit: int = MAX_LOG_BYTES) -> str:
    """`text` within `limit` bytes of UTF-8: its head and tail around a line saying how much
    was left out."""
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    head = limit // 4
    tail = limit - head - 100
    cut = len(data) - head - tail
    return (
        data[:head].decode("utf-8", "ignore")
        + f"\n[... {cut} bytes left out by accel lab ...]\n"
        + data[-tail:].decode("utf-8", "ignore")
    )


def _text(value: Any, where: str, *, default: str | None = None, pattern: re.Pattern[str] = _TEXT_RE) -> str:
    if value is None and default is not None:
        return default
    if not isinstance(value, str) or not pattern.match(value):
        raise DocumentError(f"expected a short string without control characters, got {value!r:.80}", where)
    return value


def _time(value: Any, where: str, *, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 <= value < 1e11:
        raise DocumentError(f"expected seconds since the epoch, got {value!r:.80}", where)
    return float(value)


def validate_document(doc: Any) -> tuple[tuple[Any, ...], list[tuple[Any, ...]], dict[str, str]]:
    """A results document -> (run row, result rows, fingerprints by hash), every field checked
    (`DocumentError` names the first that is wrong). Nothing is written here."""
    if not isinstance(doc, dict):
        raise DocumentError("a results document is a JSON object")
    known = ("schema", "run", "fingerprints", "results")
    for key in doc:
        if key not in known:
            near = difflib.get_close_matches(key, known, n=1)
            raise DocumentError(f"unknown key {key!r}" + (f"; did you mean {near[0]!r}?" if near else ""))
    if doc.get("schema") != RESULTS_SCHEMA:
        raise DocumentError(f"schema must be {RESULTS_SCHEMA!r}, got {doc.get('schema')!r:.80}", "schema")
    run = doc.get("run")
    if not isinstance(run, dict):
        raise DocumentError("missing run object", "run")
    run_keys = ("id", "suite", "suite_version", "commit", "lab", "source", "state", "created_at", "ended_at", "selectors", "command", "suite_doc")
    for key in run:
        if key not in run_keys:
            raise DocumentError(f"unknown key {key!r}", "run")
    run_id = _text(run.get("id"), "run.id", default=uuid.uuid4().hex, pattern=_HEX_RE)
    suite = _text(run.get("suite"), "run.suite", pattern=NAME_RE)
    version = run.get("suite_version")
    version = _text(str(version) if isinstance(version, int) and not isinstance(version, bool) else version, "run.suite_version")
    commit = _text(run.get("commit"), "run.commit", pattern=_COMMIT_RE)
    state = run.get("state", "done")
    if state not in RUN_STATES:
        raise DocumentError(f"state must be one of {', '.join(RUN_STATES)}", "run.state")
    created = _time(run.get("created_at", time.time()), "run.created_at")
    ended = _time(run.get("ended_at"), "run.ended_at", optional=True)
    selectors = run.get("selectors", {})
    if not isinstance(selectors, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in selectors.items()):
        raise DocumentError("selectors must be an object of strings", "run.selectors")
    run_row = (
        run_id,
        suite,
        version,
        commit,
        _text(run.get("lab"), "run.lab", default=""),
        _text(run.get("source"), "run.source", default="submit"),
        state,
        created,
        ended,
        canonical_json(selectors),
        _text(run.get("command"), "run.command", default="", pattern=re.compile(r"^[^\x00]{0,4096}$")),
        _suite_doc(run.get("suite_doc", "")),
    )
    prints_raw = doc.get("fingerprints", {})
    if not isinstance(prints_raw, dict):
        raise DocumentError("fingerprints must be an object (hash -> the `accel env --json` document)", "fingerprints")
    prints: dict[str, str] = {}
    for h, fp in prints_raw.items():
        if not isinstance(fp, dict):
            raise DocumentError("a fingerprint is a JSON object", f"fingerprints.{h}")
        actual = fingerprint_hash(fp)
        if h != actual:
            raise DocumentError(f"the hash of this fingerprint is {actual}, not {h!r:.80}", f"fingerprints.{h:.80}")
        prints[h] = canonical_json(fp)
    results = doc.get("results")
    if not isinstance(results, list):
        raise DocumentError("results must be an array", "results")
    if len(results) > MAX_RESULTS_PER_DOCUMENT:
        raise DocumentError(f"{len(results)} results; at most {MAX_RESULTS_PER_DOCUMENT} per document", "results")
    rows = [_result_row(r, i, run_row) for i, r in enumerate(results)]
    return run_row, rows, prints


_RESULT_KEYS = (
    "id",
    "check",
    "case",
    "kind",
    "node",
    "vendor",
    "family",
    "sku",
    "accelerator_type",
    "commit",
    "env_hash",
    "machine_hash",
    "verdict",
    "queued_at",
    "started_at",
    "ended_at",
    "duration_s",
    "attempt",
    "message",
    "log",
    "series",
)


def _suite_doc(value: Any) -> str:
    """The run's checks as JSON text (what `repro` re-runs), bounded."""
    if not isinstance(value, str) or len(value) > MAX_SUITE_DOC_CHARS or "\x00" in value:
        raise DocumentError(f"suite_doc must be a string of at most {MAX_SUITE_DOC_CHARS} characters", "run.suite_doc")
    return value


def _result_row(r: Any, i: int, run_row: tuple[Any, ...]) -> tuple[Any, ...]:
    where = f"results[{i}]"
    if not isinstance(r, dict):
        raise DocumentError("a result is a JSON object", where)
    for key in r:
        if key not in _RESULT_KEYS:
            near = difflib.get_close_matches(key, _RESULT_KEYS, n=1)
            raise DocumentError(f"unknown key {key!r}" + (f"; did you mean {near[0]!r}?" if near else ""), where)
    kind = r.get("kind", "test")
    if kind not in KINDS:
        raise DocumentError(f"kind must be test or benchmark, got {kind!r:.80}", f"{where}.kind")
    verdict = r.get("verdict")
    if verdict not in VERDICTS:
        raise DocumentError(f"verdict must be one of {', '.join(VERDICTS)}, got {verdict!r:.80}", f"{where}.verdict")
    started = _time(r.get("started_at"), f"{where}.started_at")
    ended = _time(r.get("ended_at"), f"{where}.ended_at")
    assert started is not None and ended is not None
    if ended < started:
        raise DocumentError("ended_at is before started_at", where)
    duration = r.get("duration_s", ended - started)
    if isinstance(duration, bool) or not isinstance(duration, (int, float)) or not math.isfinite(duration) or duration < 0:
        raise DocumentError("duration_s must be a number of seconds, 0 or more", f"{where}.duration_s")
    attempt = r.get("attempt", 1)
    if isinstance(attempt, bool) or not isinstance(attempt, int) or not 1 <= attempt <= 100:
        raise DocumentError("attempt must be an integer from 1 to 100", f"{where}.attempt")
    series = r.get("series")
    series_text = None
    if series is not None:
        if not isinstance(series, dict) or not series or len(series) > MAX_SERIES:
            raise DocumentError(f"series must be an object of 1 to {MAX_SERIES} numbers", f"{where}.series")
        for name, value in series.items():
            if not NAME_RE.match(name) or isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise DocumentError(f"series {name!r:.80} must be a valid name with a finite number", f"{where}.series")
        series_text = canonical_json(series)
    message = r.get("message", "")
    log = r.get("log", "")
    if not isinstance(message, str) or not isinstance(log, str):
        raise DocumentError("message and log must be strings", where)
    env_hash = r.get("env_hash", "")
    if env_hash:
        _text(env_hash, f"{where}.env_hash", pattern=_HEX_RE)
    machine_hash = r.get("machine_hash", "")
    if machine_hash:
        _text(machine_hash, f"{where}.machine_hash", pattern=_HEX_RE)
    return (
        _text(r.get("id"), f"{where}.id", default=uuid.uuid4().hex, pattern=_HEX_RE),
        run_row[0],
        run_row[1],
        run_row[2],
        _text(r.get("check"), f"{where}.check", pattern=NAME_RE),
        _text(r.get("case"), f"{where}.case", default=""),
        kind,
        _text(r.get("node"), f"{where}.node", pattern=re.compile(r"^[^\x00-\x1f\x7f]{1,256}$")),
        _text(r.get("vendor"), f"{where}.vendor", default=""),
        _text(r.get("family"), f"{where}.family", default=""),
        _text(r.get("sku"), f"{where}.sku", default=""),
        _text(r.get("accelerator_type"), f"{where}.accelerator_type", default=""),
        _text(r.get("commit"), f"{where}.commit", default=run_row[3], pattern=_COMMIT_RE),
        env_hash,
        machine_hash,
        verdict,
        _time(r.get("queued_at"), f"{where}.queued_at", optional=True),
        started,
        ended,
        float(duration),
        attempt,
        message.replace("\x00", "")[:MAX_MESSAGE_CHARS],
        bound_log(log.replace("\x00", "")),
        series_text,
    )


class Store:
    """One connection to a results store (SQLite or PostgreSQL), migrated on open. Use as a
    context manager, or `close()` it. Safe to share between threads (one lock)."""

    dialect: str

    def __init__(self, conn: Any, dialect: str, label: str):
        self._conn = conn
        self.dialect = dialect
        self.label = label
        self._lock = threading.Lock()
        self.migrate()

    # -- plumbing ---------------------------------------------------------------------------

    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s") if self.dialect == "postgresql" else sql

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            cur = self._conn.cursor()
            try:
                cur.execute(self._sql(sql), tuple(params))
                rows = cur.fetchall() if cur.description is not None else []
                self._conn.commit()
                return [tuple(r) for r in rows]
            except BaseException:
                self._conn.rollback()
                raise
            finally:
                cur.close()

    def close(self) -> None:
        """Closes the connection."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema -----------------------------------------------------------------------------

    def schema_version(self) -> int:
        """The number of migrations applied."""
        rows = self._execute("SELECT MAX(version) FROM schema_version")
        return int(rows[0][0] or 0)

    def migrate(self) -> int:
        """Applies every migration not yet applied, each in its own transaction, under a lock
        (two processes opening a fresh store both succeed). Returns the schema version."""
        floats = "DOUBLE PRECISION" if self.dialect == "postgresql" else "REAL"
        with self._lock:
            cur = self._conn.cursor()
            try:
                if self.dialect == "postgresql":
                    cur.execute("SELECT pg_advisory_xact_lock(7411001)")
                else:
                    cur.execute("BEGIN IMMEDIATE")
                cur.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_at " + floats + " NOT NULL)")
                cur.execute("SELECT MAX(version) FROM schema_version")
                row = cur.fetchone()
                current = int(row[0] or 0) if row else 0
                if current > len(MIGRATIONS):
                    raise StoreError(f"{self.label} has schema version {current}; this accel knows {len(MIGRATIONS)} (upgrade accel)")
                for number, statements in enumerate(MIGRATIONS[current:], start=current + 1):
                    for statement in statements:
                        cur.execute(statement.format(float=floats))
                    cur.execute(self._sql("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)"), (number, time.time()))
                self._conn.commit()
                return len(MIGRATIONS)
            except BaseException:
                self._conn.rollback()
                raise
            finally:
                cur.close()

    # -- writing ----------------------------------------------------------------------------

    def ingest(self, doc: Any) -> str:
        """Stores a results document (validated whole first; one transaction). Returns the
        run's id. A run id that exists already is refused (`DocumentError`), never merged."""
        run_row, rows, prints = validate_document(doc)
        self._write(run_row, rows, prints, new_run=True)
        return str(run_row[0])

    def create_run(
        self,
        *,
        suite: str,
        suite_version: str,
        commit: str,
        lab: str = "",
        source: str = "ray",
        selectors: dict[str, str] | None = None,
        command: str = "",
        run_id: str | None = None,
        suite_doc: str = "",
    ) -> str:
        """Records a new run in state `running`; returns its id."""
        doc = {
            "schema": RESULTS_SCHEMA,
            "run": {
                "id": run_id or uuid.uuid4().hex,
                "suite": suite,
                "suite_version": suite_version,
                "commit": commit,
                "lab": lab,
                "source": source,
                "state": "running",
                "created_at": time.time(),
                "selectors": selectors or {},
                "command": command,
                "suite_doc": suite_doc,
            },
            "results": [],
        }
        return self.ingest(doc)

    def add_results(self, run_id: str, results: list[dict[str, Any]], fingerprints: dict[str, Any] | None = None) -> int:
        """Adds results (result objects of the document format) to an existing run."""
        run = self.run(run_id)
        if run is None:
            raise DocumentError(f"no run {run_id!r}")
        doc_run = {k: run[k] for k in ("id", "suite", "suite_version", "lab", "source", "state", "created_at", "command", "suite_doc")}
        doc_run["commit"] = run["commit_sha"]
        run_row, rows, prints = validate_document({"schema": RESULTS_SCHEMA, "run": doc_run, "results": results, "fingerprints": fingerprints or {}})
        self._write(run_row, rows, prints, new_run=False)
        return len(rows)

    def finish_run(self, run_id: str, state: str = "done") -> None:
        """Marks a run finished (`done`, `cancelled` or `failed`), with its end time."""
        if state not in RUN_STATES or state == "running":
            raise ValueError(f"a finished run's state is done, cancelled or failed, not {state!r}")
        self._execute("UPDATE runs SET state = ?, ended_at = ? WHERE id = ?", (state, time.time(), run_id))

    def request_cancel(self, run_id: str) -> bool:
        """Marks a running run `cancelled` (its driver sees it and stops). False when the run
        is not running."""
        with self._lock:
            cur = self._conn.cursor()
            try:
                cur.execute(self._sql("UPDATE runs SET state = 'cancelled' WHERE id = ? AND state = 'running'"), (run_id,))
                changed = int(cur.rowcount) > 0
                self._conn.commit()
                return changed
            except BaseException:
                self._conn.rollback()
                raise
            finally:
                cur.close()

    def _write(self, run_row: tuple[Any, ...], rows: list[tuple[Any, ...]], prints: dict[str, str], *, new_run: bool) -> None:
        placeholders = ", ".join("?" for _ in RESULT_COLUMNS)
        with self._lock:
            cur = self._conn.cursor()
            try:
                if self.dialect == "sqlite":
                    cur.execute("BEGIN IMMEDIATE")
                if new_run:
                    cur.execute(self._sql("SELECT 1 FROM runs WHERE id = ?"), (run_row[0],))
                    if cur.fetchone() is not None:
                        raise DocumentError(f"run {run_row[0]} is already stored", "run.id")
                    cur.execute(self._sql(f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}) VALUES ({', '.join('?' for _ in RUN_COLUMNS)})"), run_row)
                if prints:
                    conflict = "ON CONFLICT (hash) DO NOTHING"
                    cur.executemany(self._sql(f"INSERT INTO fingerprints (hash, doc) VALUES (?, ?) {conflict}"), list(prints.items()))
                if rows and self.dialect == "postgresql":
                    with cur.copy(f"COPY results ({', '.join(RESULT_COLUMNS)}) FROM STDIN") as copy:
                        for row in rows:
                            copy.write_row(row)
                elif rows:
                    cur.executemany(f"INSERT INTO results ({', '.join(RESULT_COLUMNS)}) VALUES ({placeholders})", rows)
                self._conn.commit()
            except BaseException as e:
                self._conn.rollback()
                if _is_integrity_error(e):
                    raise DocumentError(f"refused by the store: {e}") from None
                raise
            finally:
                cur.close()

    # -- reading ----------------------------------------------------------------------------

    def run(self, run_id: str) -> dict[str, Any] | None:
        """One run as a dict (`RUN_COLUMNS`, selectors decoded), or None."""
        rows = self._execute(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE id = ?", (run_id,))
        if not rows:
            return None
        out = dict(zip(RUN_COLUMNS, rows[0]))
        out["selectors"] = json.loads(out["selectors"])
        return out

    def runs(self, limit: int = 100) -> list[dict[str, Any]]:
        """The latest runs, newest first."""
        rows = self._execute(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs ORDER BY created_at DESC LIMIT ?", (int(limit),))
        out = []
        for row in rows:
            d = dict(zip(RUN_COLUMNS, row))
            d["selectors"] = json.loads(d["selectors"])
            out.append(d)
        return out

    def results(
        self,
        *,
        run_id: str | None = None,
        suite: str | None = None,
        since: float | None = None,
        with_logs: bool = False,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """Results in start order (oldest first), as dicts of `RESULT_COLUMNS` with `series`
        decoded; logs only when asked (`with_logs`)."""
        cols = [c for c in RESULT_COLUMNS if with_logs or c != "log"]
        where: list[str] = []
        params: list[Any] = []
        if run_id is not None:
            where.append("run_id = ?")
            params.append(run_id)
        if suite is not None:
            where.append("suite = ?")
            params.append(suite)
        if since is not None:
            where.append("started_at >= ?")
            params.append(since)
        sql = f"SELECT {', '.join(cols)} FROM results"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY started_at, id"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(int(limit))
        out = []
        for row in self._execute(sql, params):
            d = dict(zip(cols, row))
            d["series"] = json.loads(d["series"]) if d["series"] else None
            out.append(d)
        return out

    def result(self, result_id: str) -> dict[str, Any] | None:
        """One result with its log, or None."""
        rows = self._execute(f"SELECT {', '.join(RESULT_COLUMNS)} FROM results WHERE id = ?", (result_id,))
        if not rows:
            return None
        d = dict(zip(RESULT_COLUMNS, rows[0]))
        d["series"] = json.loads(d["series"]) if d["series"] else None
        return d

    def cells(self, since: float | None = None) -> list[tuple[str, str, str, str, str, int, float]]:
        """(suite, family, sku, run id, verdict, count, latest start) for every run of every
        matrix cell (family x SKU x suite): what the page's matrix is made of."""
        sql = "SELECT suite, family, sku, run_id, verdict, COUNT(*), MAX(started_at) FROM results"
        params: list[Any] = []
        if since is not None:
            sql += " WHERE started_at >= ?"
            params.append(since)
        sql += " GROUP BY suite, family, sku, run_id, verdict"
        return [(str(a), str(b), str(c), str(d), str(e), int(f), float(g)) for a, b, c, d, e, f, g in self._execute(sql, params)]

    def cell_history(self, suite: str, family: str, sku: str, limit: int = 50) -> list[dict[str, Any]]:
        """The latest `limit` runs of one matrix cell, newest first: run id, commit, start, and
        counts per verdict."""
        rows = self._execute(
            "SELECT run_id, commit_sha, verdict, COUNT(*), MIN(started_at) FROM results WHERE suite = ? AND family = ? AND sku = ? "
            "GROUP BY run_id, commit_sha, verdict",
            (suite, family, sku),
        )
        runs: dict[str, dict[str, Any]] = {}
        for run_id, commit, verdict, n, start in rows:
            r = runs.setdefault(run_id, {"run_id": run_id, "commit": commit, "started_at": float(start), "counts": {}})
            r["counts"][verdict] = int(n)
            r["started_at"] = min(r["started_at"], float(start))
        return sorted(runs.values(), key=lambda r: -r["started_at"])[:limit]

    def fingerprint(self, env_hash: str) -> dict[str, Any] | None:
        """The environment fingerprint stored under `env_hash`, or None."""
        rows = self._execute("SELECT doc FROM fingerprints WHERE hash = ?", (env_hash,))
        return json.loads(rows[0][0]) if rows else None

    def count(self, table: str) -> int:
        """How many rows `table` (runs, results or fingerprints) holds."""
        if table not in ("runs", "results", "fingerprints"):
            raise ValueError(f"no table {table!r}")
        return int(self._execute(f"SELECT COUNT(*) FROM {table}")[0][0])


def _is_integrity_error(e: BaseException) -> bool:
    if isinstance(e, sqlite3.IntegrityError):
        return True
    try:
        import psycopg
    except ImportError:
        return False
    return isinstance(e, psycopg.errors.IntegrityError)


def open_store(url: str | os.PathLike[str]) -> Store:
    """The store at `url`: `postgresql://...` (or `postgres://`), `sqlite:///path`, or a plain
    file path (SQLite). Creates and migrates it as needed; `StoreError` (one line, no
    password) when it cannot."""
    text = os.fspath(url)
    if text.startswith(("postgresql://", "postgres://")):
        return _open_postgres(text)
    path = text[len("sqlite://") :] if text.startswith("sqlite://") else text
    if not path or "://" in path:
        raise StoreError(f"unknown database URL {redact_url(text)!r}: use a file path, sqlite:///path or postgresql://...")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise StoreError(f"cannot open SQLite store {path}: directory {parent} does not exist")
    try:
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        _wal(conn)
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        # isolation_level=None: autocommit; transactions are explicit (BEGIN IMMEDIATE) and
        # plain statements commit on their own. commit()/rollback() outside one are no-ops.
        return Store(_SqliteConn(conn), "sqlite", path)
    except sqlite3.DatabaseError as e:
        raise StoreError(f"cannot open SQLite store {path}: {e}") from None


def _wal(conn: sqlite3.Connection) -> None:
    """Switches a database to WAL. On a fresh file that several processes open at once the
    switch can fail at once with "database is locked" (SQLite does not wait on its busy handler
    for it), so it is retried within the busy timeout."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


class _SqliteConn:
    """sqlite3 in autocommit mode with explicit transactions: `commit`/`rollback` end the
    transaction a `BEGIN IMMEDIATE` opened, and are no-ops outside one."""

    def __init__(self, conn: sqlite3.Connection):
        self._conn = conn

    def cursor(self) -> sqlite3.Cursor:
        return self._conn.cursor()

    def commit(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("COMMIT")

    def rollback(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

    def close(self) -> None:
        self._conn.close()


def _open_postgres(url: str) -> Store:
    try:
        import psycopg
    except ImportError:
        raise StoreError("a postgresql:// store needs psycopg 3: pip install 'psycopg[binary]'") from None
    try:
        conn = psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S, options=f"-c statement_timeout={STATEMENT_TIMEOUT_MS}")
    except psycopg.Error as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise StoreError(f"cannot connect to {redact_url(url)}: {first}") from None
    return Store(conn, "postgresql", redact_url(url))
