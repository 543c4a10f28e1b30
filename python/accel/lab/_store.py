"""The lab's results store: SQLite (the default: a file path or `sqlite:///path`, WAL) or
PostgreSQL (`postgresql://...`, through psycopg 3), one schema for both, built by one numbered
list of migrations (`MIGRATIONS`, recorded in `schema_version`).

A run groups results. Every result records its commit, suite name and version, check (and
case, for a test that reports cases), node, vendor (plugin), family, SKU, the hash of its environment fingerprint
(`accel env --json`, stored once per hash), the machine capture's hash, its verdict (`pass`,
`fail`, `error`, `infra`, `skip`, `cancelled`), queue, start and end times, duration, attempt,
a message, its log (bounded: the head and the tail of at most `MAX_LOG_BYTES`) and, for a
benchmark, its series; a failed or infra result also records its class (`hardware`,
`infrastructure`, `code`) with the evidence taken when it ran, and a pass after a re-run is
marked flaky. The results document (`RESULTS_SCHEMA`, docs/lab.md) is how results arrive from
outside Ray; `validate_document` checks all of it before anything is written (the stored suite
through the suite file's own rules, every pattern a full match), and one document is one
transaction, so bad input is refused whole and loses no stored data. Ingest writes in bulk
(`executemany` on SQLite, `COPY` on PostgreSQL) and needs only INSERT, so a PostgreSQL role
that may only submit (`grant_submit`) can store documents and read or change nothing.

Database URLs never carry a password (libpq reads it from `~/.pgpass`, `PGPASSFILE` or
`PGPASSWORD`), are shown as `scheme://user@host:port/db` only (`display_url`), and a PostgreSQL
server beyond loopback is reached only with its certificate verified (`sslmode=verify-full`,
against `sslrootcert` or `--ca-file`). Quarantined nodes and devices live here too."""

from __future__ import annotations

import difflib
import hashlib
import ipaddress
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

from ._suite import KINDS, NAME_RE, VERDICTS, SuiteError, suite_from_json, suite_json

RESULTS_SCHEMA = "accel-lab-results/1"
MAX_LOG_BYTES = 64 * 1024
MAX_MESSAGE_CHARS = 2000
MAX_RESULTS_PER_DOCUMENT = 1_000_000
MAX_SERIES = 256
CONNECT_TIMEOUT_S = 10
BUSY_TIMEOUT_MS = 15_000
STATEMENT_TIMEOUT_MS = 120_000
RUN_STATES = ("running", "done", "cancelled", "failed")
# Used with `fullmatch` only: a `$` anchor would let a trailing newline through.
_HEX_RE = re.compile(r"[0-9a-f]{8,128}")
_COMMIT_RE = re.compile(r"[0-9A-Za-z._/+-]{1,128}")
_TEXT_RE = re.compile(r"[^\x00-\x1f\x7f]{0,256}")
_NODE_RE = re.compile(r"[^\x00-\x1f\x7f]{1,256}")
_LINE_RE = re.compile(r"[^\x00-\x1f\x7f]{0,4096}")
CLASSES = ("hardware", "infrastructure", "code")
MAX_EVIDENCE_CHARS = 64 * 1024
MAX_JSON_DEPTH = 16


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
    [
        # Why a result failed (hardware, infrastructure or code) from the evidence taken when it
        # ran, and passes that came from a re-run (flaky, never "fixed").
        "ALTER TABLE results ADD COLUMN failure_class TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE results ADD COLUMN evidence TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE results ADD COLUMN flaky INTEGER NOT NULL DEFAULT 0",
        # Nodes and devices taken out of dispatch until their owner releases them.
        """CREATE TABLE quarantine (
            id TEXT PRIMARY KEY,
            node TEXT NOT NULL,
            device TEXT NOT NULL DEFAULT '',
            reason TEXT NOT NULL,
            owner TEXT NOT NULL DEFAULT '',
            evidence TEXT NOT NULL DEFAULT '',
            since {float} NOT NULL,
            released_at {float},
            released_by TEXT NOT NULL DEFAULT ''
        )""",
        "CREATE INDEX quarantine_by_node ON quarantine (node, released_at)",
        # What `accel lab bisect` concluded (its steps are ordinary runs, source `bisect`).
        """CREATE TABLE bisects (
            id TEXT PRIMARY KEY,
            suite TEXT NOT NULL,
            check_name TEXT NOT NULL,
            sku TEXT NOT NULL DEFAULT '',
            node TEXT NOT NULL,
            good TEXT NOT NULL,
            bad TEXT NOT NULL,
            first_bad TEXT NOT NULL DEFAULT '',
            state TEXT NOT NULL,
            evidence TEXT NOT NULL DEFAULT '',
            created_at {float} NOT NULL,
            ended_at {float}
        )""",
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
    "failure_class",
    "evidence",
    "flaky",
)
BISECT_COLUMNS = ("id", "suite", "check_name", "sku", "node", "good", "bad", "first_bad", "state", "evidence", "created_at", "ended_at")
QUARANTINE_COLUMNS = ("id", "node", "device", "reason", "owner", "evidence", "since", "released_at", "released_by")
RUN_COLUMNS = ("id", "suite", "suite_version", "commit_sha", "lab", "source", "state", "created_at", "ended_at", "selectors", "command", "suite_doc")
MAX_SUITE_DOC_CHARS = 1 << 20


def display_url(url: str | os.PathLike[str]) -> str:
    """How a store is named in messages and on pages: `scheme://user@host:port/db` for a
    server (never a password, a query or a fragment), the path for SQLite."""
    text = os.fspath(url)
    if not text.startswith(("postgresql://", "postgres://")):
        return text[len("sqlite://") :] if text.startswith("sqlite://") else text
    try:
        parts = urllib.parse.urlsplit(text)
        host, port, user = parts.hostname or "", parts.port or 5432, parts.username or ""
    except ValueError:
        return "postgresql://<unreadable URL>"
    if ":" in host:
        host = f"[{host}]"
    return f"postgresql://{user + '@' if user else ''}{host or 'localhost'}:{port}{parts.path or '/'}"



_SECRET_PARAMS = ("password", "sslpassword", "passfile_password")


def _pg_target(url: str, ca_file: str | None) -> tuple[str, dict[str, str]]:
    """A PostgreSQL URL checked for what must never be in it, and the connection's TLS
    settings: `StoreError` for a password in it (userinfo or query), a fragment, or a server
    beyond loopback reached without certificate verification."""
    shown = display_url(url)
    if "#" in url:
        raise StoreError(f"{shown}: a database URL holds no '#' (is it part of a password? put the password in ~/.pgpass)")
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 (raises for a port that is not a number)
        query = urllib.parse.parse_qs(parts.query, keep_blank_values=True)
    except ValueError as e:
        raise StoreError(f"{shown}: not a database URL ({type(e).__name__})") from None
    if parts.password is not None or any(k.lower() in _SECRET_PARAMS for k in query):
        raise StoreError(
            f"{shown}: a password does not belong on the command line (other users can read it there); "
            "put it in ~/.pgpass or the file PGPASSFILE names (mode 600), or in PGPASSWORD"
        )
    hosts = [h for h in (parts.hostname or "", *query.get("host", [])) if h]
    local = all(h.startswith("/") or h == "localhost" or _is_loopback_literal(h) for h in hosts)
    options: dict[str, str] = {}
    mode = (query.get("sslmode") or [""])[-1]
    if ca_file:
        options["sslrootcert"] = ca_file
    if not local:
        if mode and mode not in ("verify-full", "verify-ca"):
            raise StoreError(
                f"{shown}: refusing sslmode={mode} beyond loopback: the server's certificate must be verified "
                "(sslmode=verify-full, with --ca-file CA.pem or sslrootcert=CA.pem)"
            )
        options.setdefault("sslmode", mode or "verify-full")
    elif ca_file:
        options["sslmode"] = mode or "verify-full"
    return url, options


def _is_loopback_literal(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


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
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise DocumentError(f"expected a short string without control characters, got {value!r:.80}", where)
    return value


def load_json(text: str | bytes, where: str = "") -> Any:
    """JSON from outside (a submitted document, a file), with nesting too deep for the parser
    a `DocumentError` rather than a `RecursionError`."""
    try:
        return json.loads(text)
    except RecursionError:
        raise DocumentError("JSON nested too deeply", where) from None
    except ValueError as e:
        raise DocumentError(f"not JSON: {e}", where) from None


def _depth(value: Any, limit: int) -> bool:
    """Whether `value` nests at most `limit` levels (iteratively: no recursion to exhaust)."""
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if d > limit:
            return False
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v)
    return True


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
    run_row = _run_row(run)
    prints_raw = doc.get("fingerprints", {})
    if not isinstance(prints_raw, dict):
        raise DocumentError("fingerprints must be an object (hash -> the `accel env --json` document)", "fingerprints")
    prints: dict[str, str] = {}
    for h, fp in prints_raw.items():
        if not isinstance(fp, dict) or not _depth(fp, MAX_JSON_DEPTH):
            raise DocumentError(f"a fingerprint is a JSON object nested at most {MAX_JSON_DEPTH} deep", f"fingerprints.{h:.80}")
        actual = fingerprint_hash(fp)
        if h != actual:
            raise DocumentError(f"the hash of this fingerprint is {actual}, not {h!r:.80}", f"fingerprints.{h:.80}")
        prints[h] = canonical_json(fp)
    return run_row, validate_results(doc.get("results"), run_row), prints


def validate_results(results: Any, run_row: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """The result rows of a document's `results` for the run `run_row`, every field checked."""
    if not isinstance(results, list):
        raise DocumentError("results must be an array", "results")
    if len(results) > MAX_RESULTS_PER_DOCUMENT:
        raise DocumentError(f"{len(results)} results; at most {MAX_RESULTS_PER_DOCUMENT} per document", "results")
    return [_result_row(r, i, run_row) for i, r in enumerate(results)]


def _run_row(run: dict[str, Any]) -> tuple[Any, ...]:
    """A document's `run` object as a row of `RUN_COLUMNS`, every field checked: the command one
    line of text, the stored suite a suite by the suite file's rules (stored normalised)."""
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
    for k, v in selectors.items():
        if not _TEXT_RE.fullmatch(k) or not _TEXT_RE.fullmatch(v):
            raise DocumentError(f"selector {k!r:.80} is not one line of text", "run.selectors")
    return (
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
        _text(run.get("command"), "run.command", default="", pattern=_LINE_RE),
        _suite_doc(run.get("suite_doc", ""), suite, version),
    )


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
    "class",
    "evidence",
    "flaky",
)


def _suite_doc(value: Any, suite: str, version: str) -> str:
    """The run's suite as JSON text (what `repro` shows), read through the suite file's rules
    and stored normalised; its name and version must be the run's."""
    if value == "":
        return ""
    if not isinstance(value, str) or len(value) > MAX_SUITE_DOC_CHARS:
        raise DocumentError(f"suite_doc must be a string of at most {MAX_SUITE_DOC_CHARS} characters", "run.suite_doc")
    try:
        parsed = suite_from_json(value, "run.suite_doc")
    except SuiteError as e:
        raise DocumentError(str(e)) from None
    if (parsed.name, parsed.version) != (suite, version):
        raise DocumentError(f"the stored suite is {parsed.name} {parsed.version}, not the run's {suite} {version}", "run.suite_doc")
    return suite_json(parsed)


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
            if not NAME_RE.fullmatch(name) or isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
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
    failure_class = r.get("class", "")
    if failure_class not in ("", *CLASSES):
        raise DocumentError(f"class must be one of {', '.join(CLASSES)}, got {failure_class!r:.80}", f"{where}.class")
    evidence = r.get("evidence")
    evidence_text = ""
    if evidence is not None:
        if not isinstance(evidence, dict) or not _depth(evidence, MAX_JSON_DEPTH):
            raise DocumentError(f"evidence must be a JSON object nested at most {MAX_JSON_DEPTH} deep", f"{where}.evidence")
        evidence_text = canonical_json(evidence)
        if len(evidence_text) > MAX_EVIDENCE_CHARS:
            raise DocumentError(f"evidence is larger than {MAX_EVIDENCE_CHARS} characters", f"{where}.evidence")
    flaky = r.get("flaky", False)
    if not isinstance(flaky, bool):
        raise DocumentError("flaky must be true or false", f"{where}.flaky")
    return (
        _text(r.get("id"), f"{where}.id", default=uuid.uuid4().hex, pattern=_HEX_RE),
        run_row[0],
        run_row[1],
        run_row[2],
        _text(r.get("check"), f"{where}.check", pattern=NAME_RE),
        _text(r.get("case"), f"{where}.case", default=""),
        kind,
        _text(r.get("node"), f"{where}.node", pattern=_NODE_RE),
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
        failure_class,
        evidence_text,
        int(flaky),
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

    def _current_version(self) -> int:
        """The applied schema version, 0 for a fresh store; reads only `schema_version`."""
        exists = "SELECT to_regclass('schema_version') IS NOT NULL" if self.dialect == "postgresql" else "SELECT COUNT(*) FROM sqlite_master WHERE name = 'schema_version'"
        if not self._execute(exists)[0][0]:
            return 0
        return self.schema_version()

    def migrate(self) -> int:
        """Applies every migration not yet applied, each in its own transaction, under a lock
        (two processes opening a fresh store both succeed). Returns the schema version."""
        floats = "DOUBLE PRECISION" if self.dialect == "postgresql" else "REAL"
        current = self._current_version()
        if current == len(MIGRATIONS):
            return current  # nothing to do, and no DDL: a role that may only submit opens it too
        if current > len(MIGRATIONS):
            raise StoreError(f"{self.label} has schema version {current}; this accel knows {len(MIGRATIONS)} (upgrade accel)")
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
        run_row = tuple(run[c] for c in RUN_COLUMNS)
        _, _, prints = validate_document({"schema": RESULTS_SCHEMA, "run": {"suite": run["suite"], "suite_version": run["suite_version"], "commit": run["commit_sha"]}, "results": [], "fingerprints": fingerprints or {}})
        rows = validate_results(results, run_row)
        self._write(run_row, rows, prints, new_run=False)
        return len(rows)

    def finish_run(self, run_id: str, state: str = "done") -> None:
        """Marks a run finished (`done`, `cancelled` or `failed`), with its end time."""
        if state not in RUN_STATES or state == "running":
            raise ValueError(f"a finished run's state is done, cancelled or failed, not {state!r}")
        self._execute("UPDATE runs SET state = ?, ended_at = ? WHERE id = ?", (state, time.time(), run_id))

    def set_class(self, result_id: str, failure_class: str, evidence: dict[str, Any]) -> None:
        """Records why a result failed (`hardware`, `infrastructure`, `code`) with its evidence."""
        if failure_class not in CLASSES:
            raise ValueError(f"class must be one of {', '.join(CLASSES)}")
        text = canonical_json(evidence)
        if len(text) > MAX_EVIDENCE_CHARS or not _depth(evidence, MAX_JSON_DEPTH):
            raise ValueError("evidence too large or too deep")
        self._execute("UPDATE results SET failure_class = ?, evidence = ? WHERE id = ?", (failure_class, text, result_id))

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
                    # No look first: a role that may only submit cannot read `runs`; the primary
                    # key refuses a stored id.
                    cur.execute(self._sql(f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}) VALUES ({', '.join('?' for _ in RUN_COLUMNS)})"), run_row)
                if prints and self.dialect == "postgresql":
                    # Each in a savepoint, a stored one refused by the key: `ON CONFLICT` would
                    # need SELECT on the table, which a role that may only submit has not.
                    import psycopg

                    for item in prints.items():
                        cur.execute("SAVEPOINT fingerprint")
                        try:
                            cur.execute("INSERT INTO fingerprints (hash, doc) VALUES (%s, %s)", item)
                        except psycopg.errors.UniqueViolation:
                            cur.execute("ROLLBACK TO SAVEPOINT fingerprint")
                        else:
                            cur.execute("RELEASE SAVEPOINT fingerprint")
                elif prints:
                    cur.executemany("INSERT INTO fingerprints (hash, doc) VALUES (?, ?) ON CONFLICT (hash) DO NOTHING", list(prints.items()))
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
                    if new_run and _names_runs_key(e):
                        raise DocumentError(f"run {run_row[0]} is already stored", "run.id") from None
                    raise DocumentError(f"refused by the store: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
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
        decoded, and their run's `run_source` (`ray`, `submit`, `repro`, `bisect`); logs only
        when asked (`with_logs`)."""
        cols = [c for c in RESULT_COLUMNS if with_logs or c != "log"]
        where: list[str] = []
        params: list[Any] = []
        if run_id is not None:
            where.append("r.run_id = ?")
            params.append(run_id)
        if suite is not None:
            where.append("r.suite = ?")
            params.append(suite)
        if since is not None:
            where.append("r.started_at >= ?")
            params.append(since)
        sql = f"SELECT {', '.join('r.' + c for c in cols)}, runs.source FROM results r JOIN runs ON runs.id = r.run_id"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY r.started_at, r.id"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(int(limit))
        return [_decode(dict(zip([*cols, "run_source"], row))) for row in self._execute(sql, params)]

    def result(self, result_id: str) -> dict[str, Any] | None:
        """One result with its log, or None."""
        rows = self._execute(f"SELECT {', '.join(RESULT_COLUMNS)} FROM results WHERE id = ?", (result_id,))
        return _decode(dict(zip(RESULT_COLUMNS, rows[0]))) if rows else None

    def cells(self, since: float | None = None) -> list[tuple[str, str, str, str, str, int, float]]:
        """(suite, family, sku, run id, verdict, count, latest start) for every run of every
        matrix cell (family x SKU x suite): what the page's matrix is made of. A bisect's steps
        (runs of past commits) are not."""
        sql = "SELECT r.suite, r.family, r.sku, r.run_id, r.verdict, COUNT(*), MAX(r.started_at) FROM results r JOIN runs ON runs.id = r.run_id WHERE runs.source <> 'bisect'"
        params: list[Any] = []
        if since is not None:
            sql += " AND r.started_at >= ?"
            params.append(since)
        sql += " GROUP BY r.suite, r.family, r.sku, r.run_id, r.verdict"
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

    def latest_change(self) -> tuple[int, float]:
        """(runs, latest result end or run change) of the store: what a page renderer polls."""
        row = self._execute("SELECT COUNT(*), MAX(COALESCE(ended_at, created_at)) FROM runs")[0]
        result = self._execute("SELECT COUNT(*) FROM results")[0][0]
        quarantine = self._execute("SELECT COUNT(*), MAX(COALESCE(released_at, since)) FROM quarantine")[0]
        return int(row[0] or 0) + int(result or 0) + int(quarantine[0] or 0), max(float(row[1] or 0), float(quarantine[1] or 0))

    # -- quarantine -------------------------------------------------------------------------

    def quarantine(self, node: str, device: str, reason: str, owner: str, evidence: dict[str, Any] | None = None) -> str | None:
        """Takes a node (`device` "") or one of its devices out of dispatch; returns the entry's
        id, or None when it is quarantined already."""
        for what, value, pattern in (("node", node, _NODE_RE), ("device", device, _TEXT_RE), ("reason", reason, _LINE_RE), ("owner", owner, _TEXT_RE)):
            _text(value, f"quarantine.{what}", pattern=pattern)
        if any(q["device"] == device for q in self.quarantined(node)):
            return None
        qid = uuid.uuid4().hex
        row = (qid, node, device, reason, owner, canonical_json(evidence or {}), time.time(), None, "")
        self._execute(f"INSERT INTO quarantine ({', '.join(QUARANTINE_COLUMNS)}) VALUES ({', '.join('?' for _ in QUARANTINE_COLUMNS)})", row)
        return qid

    def quarantined(self, node: str | None = None, *, released: bool = False) -> list[dict[str, Any]]:
        """Quarantine entries in force (or, with `released`, all of them), oldest first."""
        sql = f"SELECT {', '.join(QUARANTINE_COLUMNS)} FROM quarantine"
        where, params = ([] if released else ["released_at IS NULL"]), []
        if node is not None:
            where.append("node = ?")
            params.append(node)
        if where:
            sql += " WHERE " + " AND ".join(where)
        out = []
        for row in self._execute(sql + " ORDER BY since, id", params):
            d = dict(zip(QUARANTINE_COLUMNS, row))
            d["evidence"] = json.loads(d["evidence"]) if d["evidence"] else {}
            out.append(d)
        return out

    def release(self, node: str, device: str | None, by: str) -> int:
        """Ends the quarantine of a node's device (or, `device` None, of the node and every
        device of it); returns how many entries ended."""
        sql = "UPDATE quarantine SET released_at = ?, released_by = ? WHERE node = ? AND released_at IS NULL"
        params: list[Any] = [time.time(), by, node]
        if device is not None:
            sql += " AND device = ?"
            params.append(device)
        with self._lock:
            cur = self._conn.cursor()
            try:
                cur.execute(self._sql(sql), tuple(params))
                n = int(cur.rowcount)
                self._conn.commit()
                return n
            except BaseException:
                self._conn.rollback()
                raise
            finally:
                cur.close()

    # -- bisects ---------------------------------------------------------------------------

    def record_bisect(self, doc: dict[str, Any]) -> str:
        """Stores what a bisect concluded (`BISECT_COLUMNS`, `evidence` a JSON object)."""
        row = dict(doc)
        row.setdefault("id", uuid.uuid4().hex)
        row["evidence"] = canonical_json(row.get("evidence") or {})
        for key in ("suite", "check_name", "sku", "node", "good", "bad", "first_bad", "state"):
            _text(row.get(key, ""), f"bisect.{key}", pattern=_TEXT_RE)
        self._execute(f"INSERT INTO bisects ({', '.join(BISECT_COLUMNS)}) VALUES ({', '.join('?' for _ in BISECT_COLUMNS)})", tuple(row.get(c) for c in BISECT_COLUMNS))
        return str(row["id"])

    def bisects(self, limit: int = 100) -> list[dict[str, Any]]:
        """The latest bisects, newest first."""
        out = []
        for row in self._execute(f"SELECT {', '.join(BISECT_COLUMNS)} FROM bisects ORDER BY created_at DESC LIMIT ?", (int(limit),)):
            d = dict(zip(BISECT_COLUMNS, row))
            d["evidence"] = json.loads(d["evidence"]) if d["evidence"] else {}
            out.append(d)
        return out

    def grant_submit(self, role: str) -> None:
        """Lets PostgreSQL role `role` submit results and nothing else: INSERT on runs, results
        and fingerprints, SELECT on schema_version (to see the store is current), no SELECT,
        UPDATE or DELETE on anything else. The role itself is the database administrator's
        (`CREATE ROLE ... LOGIN`)."""
        if self.dialect != "postgresql":
            raise StoreError("a submit-only role is PostgreSQL's: SQLite has no roles (submit with `accel lab submit` on the machine that holds the file)")
        if not NAME_RE.fullmatch(role):
            raise StoreError(f"role {role!r:.80}: letters, digits, '.', '_', '-'")
        from psycopg import sql

        who = sql.Identifier(role)
        schema = self._schema()
        with self._lock:
            try:
                for statement in (
                    sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), who),
                    sql.SQL("GRANT INSERT ON runs, results, fingerprints TO {}").format(who),
                    sql.SQL("GRANT SELECT ON schema_version TO {}").format(who),
                ):
                    self._conn.execute(statement)
                self._conn.commit()
            except BaseException:
                self._conn.rollback()
                raise

    def _schema(self) -> str:
        return str(self._execute("SELECT current_schema()")[0][0])

    def count(self, table: str) -> int:
        """How many rows `table` (runs, results, fingerprints or quarantine) holds."""
        if table not in ("runs", "results", "fingerprints", "quarantine", "bisects"):
            raise ValueError(f"no table {table!r}")
        return int(self._execute(f"SELECT COUNT(*) FROM {table}")[0][0])


def _decode(d: dict[str, Any]) -> dict[str, Any]:
    """A result row with its JSON columns decoded."""
    d["series"] = json.loads(d["series"]) if d.get("series") else None
    if "evidence" in d:
        d["evidence"] = json.loads(d["evidence"]) if d["evidence"] else {}
    if "flaky" in d:
        d["flaky"] = bool(d["flaky"])
    return d


def _names_runs_key(e: BaseException) -> bool:
    """Whether an integrity error is the runs table's primary key (a stored run id)."""
    diag = getattr(e, "diag", None)
    constraint = getattr(diag, "constraint_name", None) if diag is not None else None
    return constraint == "runs_pkey" or "runs.id" in str(e)


def _is_integrity_error(e: BaseException) -> bool:
    if isinstance(e, sqlite3.IntegrityError):
        return True
    try:
        import psycopg
    except ImportError:
        return False
    return isinstance(e, psycopg.errors.IntegrityError)


def open_store(url: str | os.PathLike[str], *, ca_file: str | None = None) -> Store:
    """The store at `url`: `postgresql://...` (or `postgres://`), `sqlite:///path`, or a plain
    file path (SQLite). Creates and migrates it as needed; `StoreError` (one line, no
    password) when it cannot. `ca_file` verifies a PostgreSQL server's certificate."""
    text = os.fspath(url)
    if text.startswith(("postgresql://", "postgres://")):
        return _open_postgres(text, ca_file)
    path = text[len("sqlite://") :] if text.startswith("sqlite://") else text
    if not path or "://" in path:
        raise StoreError(f"unknown database URL {text.split('://', 1)[0]}://...: use a file path, sqlite:///path or postgresql://...")
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


def _open_postgres(url: str, ca_file: str | None) -> Store:
    target, tls = _pg_target(url, ca_file)
    shown = display_url(url)
    try:
        import psycopg
    except ImportError:
        raise StoreError("a postgresql:// store needs psycopg 3: pip install 'psycopg[binary]'") from None
    try:
        extra: dict[str, Any] = dict(tls)
        conn = psycopg.connect(target, connect_timeout=CONNECT_TIMEOUT_S, options=f"-c statement_timeout={STATEMENT_TIMEOUT_MS}", **extra)
    except psycopg.Error as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise StoreError(f"cannot connect to {shown}: {first}") from None
    try:
        return Store(conn, "postgresql", shown)
    except psycopg.errors.InsufficientPrivilege as e:
        conn.close()
        raise StoreError(f"{shown}: this role may not {str(e).splitlines()[0]} (the store needs migrating by its owner?)") from None
