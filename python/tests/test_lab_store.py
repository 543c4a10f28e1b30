"""The lab's results store, on SQLite and on a real PostgreSQL server this module starts
(`initdb` + `pg_ctl` in the test's own temp directory: loopback on a random port, the unix
socket beside the data, TLS from a test CA, stopped at the end; as the `postgres` user when
the tests run as root, since PostgreSQL refuses root). Both backends: the numbered migrations,
a document round trip with every recorded field, bounded logs, fingerprints stored once, bad
documents refused whole (nothing written), duplicate runs refused, no password on the command
line or in any message, and a submit-only role that can store a document over verified TLS
and is refused by the database when it reads another table or changes a row.

`postgres` (the server's URL) is imported by the other lab tests."""

from __future__ import annotations

import glob
import os
import pathlib
import shutil
import socket
import sqlite3
import subprocess
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from accel.lab import RESULTS_SCHEMA, DocumentError, StoreError, fingerprint_hash, open_store
from accel.lab._store import MAX_LOG_BYTES, MIGRATIONS, display_url
from tlsfiles import tls_files

PG_TIMEOUT_S = 60
SUBMIT_ROLE = "lab_submit"
PG_CA: list[pathlib.Path] = []  # the test server's CA certificate, once it runs


def _pg_bindir() -> pathlib.Path:
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(d.split("/")[-2]) if d.split("/")[-2].isdigit() else 0)
    if not dirs or not os.path.exists(os.path.join(dirs[-1], "initdb")):
        pytest.fail("PostgreSQL is not installed (scripts/setup.sh installs Debian's postgresql)")
    return pathlib.Path(dirs[-1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _let_traverse(path: pathlib.Path) -> None:
    """Lets another user reach `path` (x, not r, on each directory above it up to the run's
    temp root), so the `postgres` user can use a data directory inside the test's tmp dir."""
    root = pathlib.Path(os.environ.get("TMPDIR") or "/tmp").resolve()
    p = path.resolve()
    while True:
        mode = p.stat().st_mode & 0o7777
        if mode & 0o011 != 0o011:
            p.chmod(mode | 0o011)
        if p == root or p.parent == p or not p.is_relative_to(root):
            break
        p = p.parent


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A PostgreSQL server of its own for this run; its admin URL (trust auth, loopback)."""
    bindir = _pg_bindir()
    base = tmp_path_factory.mktemp("pg")
    data, sock = base / "data", base / "s"
    sock.mkdir()
    prefix: list[str] = []
    if os.geteuid() == 0:
        _let_traverse(base)
        shutil.chown(base, "postgres", "postgres")
        shutil.chown(sock, "postgres", "postgres")
        prefix = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    subprocess.run(
        [*prefix, str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--no-locale"],
        check=True,
        capture_output=True,
        timeout=PG_TIMEOUT_S,
    )
    # TLS from a test CA, and the submit role (test_a_submit_only_role_...) allowed in only over
    # TLS with its password (SCRAM); everyone else keeps the trust of a test server.
    ca, cert, key = tls_files(base / "tls")
    PG_CA[:] = [ca]
    if prefix:
        for f in (base / "tls", cert, key):
            shutil.chown(f, "postgres", "postgres")
    hba = data / "pg_hba.conf"
    hba.write_text(f"hostssl all {SUBMIT_ROLE} 127.0.0.1/32 scram-sha-256\nhost all {SUBMIT_ROLE} 127.0.0.1/32 reject\n" + hba.read_text())
    opts = (
        f"-c listen_addresses=127.0.0.1 -p {port} -k {sock} -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        f" -c ssl=on -c ssl_cert_file={cert} -c ssl_key_file={key}"
    )
    ctl = [*prefix, str(bindir / "pg_ctl"), "-D", str(data)]
    subprocess.run([*ctl, "-l", str(base / "server.log"), "-o", opts, "-w", "-t", str(PG_TIMEOUT_S), "start"], check=True, capture_output=True, timeout=PG_TIMEOUT_S + 10)
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*ctl, "-m", "immediate", "-w", "-t", "30", "stop"], capture_output=True, timeout=40)


def fresh_pg_database(admin_url: str) -> str:
    """A new, empty database on the test server; its URL."""
    import psycopg

    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=10) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return admin_url.rsplit("/", 1)[0] + "/" + name


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "lab.db")
    return fresh_pg_database(request.getfixturevalue("postgres"))


ENV = {"schema_version": 1, "fields": {"kernel": {"value": "6.1", "source": "uname"}}}


def document(n: int = 3, *, run_id: str | None = None, **run: Any) -> dict[str, Any]:
    """A results document of `n` results (one benchmark, the rest tests) at commit c1."""
    h = fingerprint_hash(ENV)
    results: list[dict[str, Any]] = []
    for i in range(n):
        r: dict[str, Any] = {
            "check": "bench" if i == 0 else f"t{i}",
            "kind": "benchmark" if i == 0 else "test",
            "node": "node-a",
            "family": "nvidia-hopper",
            "sku": "H100-SXM5-80GB",
            "accelerator_type": "H100",
            "env_hash": h,
            "machine_hash": "ab" * 32,
            "verdict": "pass" if i % 2 == 0 else "fail",
            "queued_at": 1000.0 + i,
            "started_at": 1001.0 + i,
            "ended_at": 1003.5 + i,
            "log": f"log of {i}\n",
        }
        if i == 0:
            r["series"] = {"busbw": 180.5, "lat_us": 12}
        results.append(r)
    return {
        "schema": RESULTS_SCHEMA,
        "run": {"id": run_id or uuid.uuid4().hex, "suite": "collectives", "suite_version": "3", "commit": "c1", "lab": "lab-a", **run},
        "fingerprints": {h: ENV},
        "results": results,
    }


def test_migrations_make_the_schema_once_and_a_newer_store_is_refused(store_url: str) -> None:
    with open_store(store_url) as store:
        assert store.schema_version() == len(MIGRATIONS)
        assert store.count("runs") == 0
    with open_store(store_url) as store:  # again: nothing re-applied
        assert store.schema_version() == len(MIGRATIONS)
        store._execute("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)", (len(MIGRATIONS) + 1, 0.0))
    with pytest.raises(StoreError, match="upgrade accel"):
        open_store(store_url)


def test_two_processes_opening_a_fresh_store_both_migrate(store_url: str) -> None:
    errors: list[BaseException] = []

    def opener() -> None:
        try:
            open_store(store_url).close()
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=opener) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    with open_store(store_url) as store:
        assert store._execute("SELECT COUNT(*) FROM schema_version")[0][0] == len(MIGRATIONS)


def test_a_document_round_trips_with_every_field(store_url: str) -> None:
    doc = document(3)
    doc["results"][1]["log"] = "x" * (MAX_LOG_BYTES * 3)
    with open_store(store_url) as store:
        run_id = store.ingest(doc)
        run = store.run(run_id)
        assert run is not None
        assert (run["suite"], run["suite_version"], run["commit_sha"], run["lab"], run["state"]) == ("collectives", "3", "c1", "lab-a", "done")
        results = store.results(run_id=run_id, with_logs=True)
        assert [r["check_name"] for r in results] == ["bench", "t1", "t2"]
        bench = results[0]
        assert bench["series"] == {"busbw": 180.5, "lat_us": 12}
        assert bench["duration_s"] == pytest.approx(2.5)
        assert (bench["node"], bench["sku"], bench["commit_sha"], bench["verdict"]) == ("node-a", "H100-SXM5-80GB", "c1", "pass")
        assert bench["queued_at"] == 1000.0 and bench["machine_hash"] == "ab" * 32
        assert bench["env_hash"] == fingerprint_hash(ENV) and store.fingerprint(bench["env_hash"]) == ENV
        long_log = results[1]["log"]
        assert len(long_log.encode()) <= MAX_LOG_BYTES and "bytes left out" in long_log
        assert "log" not in store.results(run_id=run_id)[0]
        one = store.result(results[2]["id"])
        assert one is not None and one["log"] == "log of 2\n"
        # A second run with the same environment stores its fingerprint once.
        store.ingest(document(2))
        assert store.count("fingerprints") == 1 and store.count("runs") == 2 and store.count("results") == 5


BAD_RESULTS = [
    ({"verdict": "passed"}, "results[2].verdict", "verdict must be one of"),
    ({"started_at": "yesterday"}, "results[2].started_at", "seconds since the epoch"),
    ({"ended_at": 1.0}, "results[2]", "ended_at is before started_at"),
    ({"check": "has space"}, "results[2].check", "expected a short string"),
    ({"node": ""}, "results[2].node", "expected a short string"),
    ({"kind": "bench"}, "results[2].kind", "kind must be test or benchmark"),
    ({"series": {"x": "fast"}}, "results[2].series", "finite number"),
    ({"attempt": 0}, "results[2].attempt", "attempt must be"),
    ({"vedict": "pass"}, "results[2]", "did you mean 'verdict'"),
    ({"env_hash": "not-hex"}, "results[2].env_hash", "expected a short string"),
]


@pytest.mark.parametrize(("change", "where", "message"), BAD_RESULTS)
def test_a_bad_result_refuses_the_whole_document_and_writes_nothing(store_url: str, change: dict[str, Any], where: str, message: str) -> None:
    with open_store(store_url) as store:
        store.ingest(document(2))
        doc = document(4)
        doc["results"][2].update(change)
        with pytest.raises(DocumentError, match=message) as err:
            store.ingest(doc)
        assert err.value.where == where
        assert (store.count("runs"), store.count("results")) == (1, 2)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(schema="accel-lab-results/0"), "schema must be"),
        (lambda d: d.pop("run"), "missing run"),
        (lambda d: d["run"].update(commit="bad commit"), "run.commit"),
        (lambda d: d["run"].update(state="finished"), "state must be"),
        (lambda d: d.update(fingerprints={"00" * 32: ENV}), "the hash of this fingerprint is"),
        (lambda d: d.update(reslts=[]), "did you mean 'results'"),
        (lambda d: d.update(results={}), "results must be an array"),
    ],
)
def test_a_bad_document_is_refused_with_its_place(tmp_path: pathlib.Path, mutate: Any, message: str) -> None:
    doc = document(1)
    mutate(doc)
    with open_store(tmp_path / "lab.db") as store:
        with pytest.raises(DocumentError, match=message):
            store.ingest(doc)
        assert store.count("runs") == 0


def test_a_stored_run_is_never_merged_and_a_duplicate_result_id_writes_nothing(store_url: str) -> None:
    with open_store(store_url) as store:
        run_id = store.ingest(document(2))
        with pytest.raises(DocumentError, match="already stored"):
            store.ingest(document(1, run_id=run_id))
        doc = document(2)
        doc["results"][0]["id"] = doc["results"][1]["id"] = "cd" * 16
        with pytest.raises(DocumentError, match="refused by the store"):
            store.ingest(doc)
        assert (store.count("runs"), store.count("results")) == (1, 2)


def test_a_run_grows_by_results_and_finishes(store_url: str) -> None:
    with open_store(store_url) as store:
        run_id = store.create_run(suite="s", suite_version="1", commit="c9", lab="l", selectors={"accel.io/accelerator-type": "H100"})
        run = store.run(run_id)
        assert run is not None and run["state"] == "running" and run["selectors"] == {"accel.io/accelerator-type": "H100"}
        added = document(2)["results"]
        assert store.add_results(run_id, added, {fingerprint_hash(ENV): ENV}) == 2
        assert {r["commit_sha"] for r in store.results(run_id=run_id)} == {"c9"}
        assert store.request_cancel(run_id) and not store.request_cancel(run_id)  # once, while running
        assert not store.request_cancel("ee" * 16)
        store.finish_run(run_id, "cancelled")
        run = store.run(run_id)
        assert run is not None and run["state"] == "cancelled" and run["ended_at"] is not None
        with pytest.raises(DocumentError, match="no run"):
            store.add_results("ff" * 16, added)
        with pytest.raises(ValueError, match="finished run"):
            store.finish_run(run_id, "running")


def test_sqlite_urls_and_wal(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "a.db"
    with open_store(f"sqlite://{path}") as store:
        store.ingest(document(1))
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 1
    finally:
        conn.close()
    with pytest.raises(StoreError, match="does not exist"):
        open_store(tmp_path / "no" / "such" / "dir.db")
    with pytest.raises(StoreError, match="unknown database URL"):
        open_store("mysql://u:pw@h/db")
    (tmp_path / "junk.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="cannot open SQLite store"):
        open_store(tmp_path / "junk.db")


@pytest.mark.parametrize(
    "form",
    ["postgresql://someone:{pw}@127.0.0.1:{port}/lab", "postgresql://someone@127.0.0.1:{port}/lab?password={pw}", "postgresql://someone@127.0.0.1:{port}/lab?sslpassword={pw}&sslmode=disable", "postgresql://someone:pa#{pw}@127.0.0.1:{port}/lab"],
)
def test_a_password_on_the_command_line_is_refused_and_never_shown(form: str) -> None:
    """The audit: `?password=` (or `sslpassword`, or an unencoded `#`) was shown on the page and
    in errors. A URL with a password anywhere is refused before connecting, and nothing of it
    but `scheme://user@host:port/db` is shown."""
    secret = "pw-" + uuid.uuid4().hex
    url = form.format(pw=secret, port=_free_port())
    with pytest.raises(StoreError) as err:
        open_store(url)
    assert secret not in str(err.value)
    assert "~/.pgpass" in str(err.value) or "'#'" in str(err.value), err.value
    if "#" not in form:
        assert str(err.value).startswith("postgresql://someone@127.0.0.1:"), err.value


def test_urls_are_shown_as_scheme_user_host_port_db() -> None:
    assert display_url("postgresql://lab@db.example.org/lab?sslmode=verify-full&sslrootcert=/ca.pem") == "postgresql://lab@db.example.org:5432/lab"
    assert display_url("postgres://[::1]:6000/x") == "postgresql://[::1]:6000/x"
    assert display_url("sqlite:///srv/lab.db") == "/srv/lab.db"


def test_a_server_beyond_loopback_needs_its_certificate_verified() -> None:
    with pytest.raises(StoreError, match="refusing sslmode=require beyond loopback"):
        open_store("postgresql://lab@192.0.2.7/lab?sslmode=require")


def test_no_message_holds_the_server_error_password(postgres: str) -> None:
    closed = f"postgresql://u@127.0.0.1:{_free_port()}/x"
    with pytest.raises(StoreError) as err:
        open_store(closed)
    assert "cannot connect to postgresql://u@127.0.0.1:" in str(err.value)


def test_a_submit_only_role_submits_over_tls_and_the_database_refuses_it_the_rest(postgres: str, tmp_path: pathlib.Path) -> None:
    import json as _json
    import subprocess as sp
    import sys

    import psycopg

    url = fresh_pg_database(postgres)
    port = url.rsplit(":", 1)[1].split("/")[0]
    db = url.rsplit("/", 1)[1]
    password = "pw-" + uuid.uuid4().hex
    with psycopg.connect(postgres, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (SUBMIT_ROLE,)).fetchone():
            conn.execute(f"CREATE ROLE {SUBMIT_ROLE} LOGIN")
        conn.execute(f"ALTER ROLE {SUBMIT_ROLE} PASSWORD '{password}'")
    with open_store(url) as store:
        store.ingest(document(2))
        store.grant_submit(SUBMIT_ROLE)
        store.quarantine("node-a", "", "test", "owner@example.org")
    pgpass = tmp_path / "pgpass"
    pgpass.write_text(f"127.0.0.1:{port}:{db}:{SUBMIT_ROLE}:{password}\n")
    pgpass.chmod(0o600)
    [ca] = PG_CA
    submit_url = f"postgresql://{SUBMIT_ROLE}@127.0.0.1:{port}/{db}"
    doc = tmp_path / "results.json"
    doc.write_text(_json.dumps(document(3)))
    env = {**os.environ, "PGPASSFILE": str(pgpass)}
    ok = sp.run([sys.executable, "-m", "accel.lab", "submit", str(doc), "--db", submit_url, "--ca-file", str(ca)], capture_output=True, text=True, timeout=60, env=env)
    assert ok.returncode == 0, ok.stderr
    assert "stored run" in ok.stdout and password not in ok.stdout + ok.stderr
    # The same run again: the database's key refuses it, without the role reading anything.
    again = sp.run([sys.executable, "-m", "accel.lab", "submit", str(doc), "--db", submit_url, "--ca-file", str(ca)], capture_output=True, text=True, timeout=60, env=env)
    assert again.returncode == 2 and "already stored" in again.stderr, again.stderr
    # Without TLS the server refuses the role (pg_hba), as it does a wrong CA.
    plain = sp.run([sys.executable, "-m", "accel.lab", "submit", str(doc), "--db", submit_url + "?sslmode=disable"], capture_output=True, text=True, timeout=60, env=env)
    assert plain.returncode == 2 and "cannot connect" in plain.stderr and password not in plain.stderr
    with open_store(url) as store:
        assert store.count("runs") == 2 and store.count("results") == 5
    # What the role may not do, the database refuses.
    with psycopg.connect(submit_url, passfile=str(pgpass), sslmode="verify-full", sslrootcert=str(ca), autocommit=True) as conn:
        for statement in (
            "SELECT * FROM results",
            "SELECT id FROM runs",
            "SELECT * FROM fingerprints",
            "SELECT * FROM quarantine",
            "UPDATE runs SET state = 'failed'",
            "UPDATE results SET verdict = 'pass'",
            "DELETE FROM results",
            "INSERT INTO quarantine (id, node, reason, since) VALUES ('x', 'n', 'r', 0)",
            "DROP TABLE results",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
