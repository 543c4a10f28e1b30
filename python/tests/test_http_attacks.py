"""The shared HTTP attack suite (http_attacks.py) against every HTTP server of the project: the
node agent (`accel agent`, the built binary) serving the lab's pages, plain on loopback with a
token and without one, and over TLS; each attack must fail there. And against the lab's old
hand-written server (`python/accel/lab/_serve.py` as the audit found it, taken from git
history at `AUDITED`), where the audit's attacks are shown to succeed: the demonstration that
the suite can fail."""

from __future__ import annotations

import json
import pathlib
import resource
import subprocess
import sys
import io
import tarfile
import time
from collections.abc import Iterator

import pytest

from http_attacks import ATTACKS, Target
from labsite import ACCEL_BIN, stop, token_file
from tlsfiles import tls_files

REPO = pathlib.Path(__file__).resolve().parents[2]
AUDITED = "9bf77bf7c9fd88a79934b6a429976f2b74134465"  # the lab as issue 37's audit attacked it
FD_LIMIT = 256
# The audit's findings against the old server: each of these attacks succeeds there.
AUDIT_FINDINGS = ("trickling_heads", "idle_flood", "oversized_body", "nested_body", "token_case_and_type", "cookie_flags", "read_token_writes")


def _low_fd_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


def _pages(tmp: pathlib.Path) -> pathlib.Path:
    db = str(tmp / "lab.db")
    out = tmp / "pages"
    done = subprocess.run([sys.executable, "-m", "accel.lab", "pages", "--db", db, "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return out


def _agent(tmp: pathlib.Path, *extra: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [str(ACCEL_BIN), "agent", "--sample", "mi300x", "--listen", "127.0.0.1:0", "--interval", "60", "--lab-pages", str(_pages(tmp)), *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_low_fd_limit,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    assert "serving " in line, line + proc.stderr.read()
    return proc, int(line.strip().rstrip("/").rsplit(":", 1)[1])


@pytest.fixture(scope="module", params=["agent-token", "agent-tls", "agent-open"])
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    tmp = tmp_path_factory.mktemp(request.param)
    if request.param == "agent-open":
        proc, port = _agent(tmp)
        t = Target(request.param, port, proc.pid, page="/lab/", login=None, write="/v1/submit")
    else:
        secret, token = token_file(tmp)
        if request.param == "agent-tls":
            ca, cert, key = tls_files(tmp / "tls")
            proc, port = _agent(tmp, "--token-file", str(token), "--tls-cert", str(cert), "--tls-key", str(key))
            import ssl

            context = ssl.create_default_context(cafile=str(ca))
        else:
            proc, port = _agent(tmp, "--token-file", str(token))
            context = None
        t = Target(request.param, port, proc.pid, page="/lab/", login="/lab/login", write="/v1/submit", token=secret, tls=context)
    try:
        yield t
    finally:
        stop(proc)


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_the_agent_holds_against_every_attack(target: Target, attack: str) -> None:
    problems = ATTACKS[attack](target)
    assert problems == [], f"{attack} against {target.name}: {problems}"


def test_the_api_holds_too(target: Target) -> None:
    """The same attacks that read, against the agent's API rather than its pages."""
    import dataclasses

    api = dataclasses.replace(target, page="/v1/health", login=None)
    for attack in ("odd_host", "token_case_and_type", "absolute_uri"):
        assert ATTACKS[attack](api) == [], attack


def test_plain_http_to_the_tls_port_reads_nothing(tmp_path: pathlib.Path) -> None:
    from http_attacks import exchange

    secret, token = token_file(tmp_path)
    ca, cert, key = tls_files(tmp_path / "tls")
    proc, port = _agent(tmp_path, "--token-file", str(token), "--tls-cert", str(cert), "--tls-key", str(key))
    try:
        plain = Target("plain", port, proc.pid, page="/lab/", login=None, write="/v1/submit")
        code, _, body = exchange(plain, f"GET /lab/ HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {secret}\r\n\r\n".encode(), timeout=6)
        assert code == 0 and b"matrix" not in body
    finally:
        stop(proc)


# -- the old server ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    """The lab's old server from git history (`AUDITED`), with a token, under the same
    open-file limit."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", AUDITED, "python/accel/lab"], capture_output=True, timeout=60)
    if archive.returncode != 0:
        pytest.skip(f"the audited lab server ({AUDITED[:12]}) is not in this clone's history (a shallow clone?): {archive.stderr.decode().strip()[:200]}")
    tmp = tmp_path_factory.mktemp("audited")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tmp, filter="data")
    (tmp / "python" / "accel" / "lab").rename(tmp / "oldlab")
    secret, token = token_file(tmp)
    script = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from oldlab._serve import make_server, serve\n"
        "from oldlab._store import open_store\n"
        "store = open_store(sys.argv[2])\n"
        "srv, analysis = make_server(store, 'lab', listen='127.0.0.1:0', token_file=sys.argv[3])\n"
        "print(srv.server_address[1], flush=True)\n"
        "serve(srv, analysis, 60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp), str(tmp / "lab.db"), str(token)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, preexec_fn=_low_fd_limit, cwd=tmp)
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    try:
        yield Target("audited", port, proc.pid, page="/", login="/login", write="/v1/submit", token=secret)
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.parametrize("attack", AUDIT_FINDINGS)
def test_the_audits_attacks_succeed_on_the_old_lab_server(audited: Target, attack: str) -> None:
    problems = ATTACKS[attack](audited)
    assert problems, f"{attack} was expected to succeed against the old lab server"
    print(f"{attack} against the old lab server: {json.dumps(problems)}")
    if attack in ("trickling_heads", "idle_flood"):
        time.sleep(11)  # let the old server's slots drain (its socket timeout) before the next attack
