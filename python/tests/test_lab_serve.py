"""`accel lab serve`: the page over SQLite and a real PostgreSQL, in headless Debian chromium
(driven over the DevTools protocol as in test_agent_browser.py) and over raw HTTP: the matrix,
a cell's history, a run with its fingerprint and reproduction commands, a log holding markup
shown as text; the security rules of docs/security.md (loopback by default, a network
listener without a token refused before binding, a token file others can read refused,
421 for a foreign or missing Host, a CSP that allows no script, 405 for other methods), and
`POST /v1/submit` with a bearer token (compared in constant time, never echoed; a bad
document refused whole)."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from accel.lab import RESULTS_SCHEMA, fingerprint_hash, open_store
from accel.lab._serve import host_allowed
from test_lab_store import fresh_pg_database, postgres  # noqa: F401 (the server fixture)

aiohttp = pytest.importorskip("aiohttp")
from test_agent_browser import CHROMIUM_FLAGS, DevTools  # noqa: E402

PY = sys.executable
XSS = "<script>alert('x')</script><img src=x onerror=alert(1)>"
ENVS = {"h100": {"fingerprint_version": 1, "fields": {"driver": {"value": "550", "source": "t"}}}, "mi300x": {"fingerprint_version": 1, "fields": {"driver": {"value": "rocm-6", "source": "t"}}}}
SKUS = {"h100": ("nvidia", "hopper", "nvidia-h100-sxm"), "mi300x": ("amd", "cdna3", "amd-mi300x")}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _result(node: str, check: str, verdict: str, t: float, **kw: Any) -> dict[str, Any]:
    vendor, family, sku = SKUS[node]
    return {"check": check, "node": node, "vendor": vendor, "family": family, "sku": sku, "env_hash": fingerprint_hash(ENVS[node]), "verdict": verdict, "started_at": t, "ended_at": t + 2, **kw}


def populate(url: str) -> dict[str, str]:
    """Runs of suite `nightly` on two SKUs: the H100 passes (with a bandwidth regression at
    c08), the MI300X fails with a log full of markup; a flaky check. Returns run ids."""
    rng = np.random.default_rng(1)
    now = time.time() - 3600
    ids = {}
    with open_store(url) as store:
        for i in range(12):
            t = now + i * 60
            lat = (100.0 if i < 8 else 140.0) + float(rng.normal(0, 1))
            results = [
                _result("h100", "unit", "pass", t),
                _result("h100", "bw", "pass", t + 1, kind="benchmark", series={"lat_us": lat}),
                _result("mi300x", "unit", "fail", t, message=f"boom {XSS}", log=f"line 1\n{XSS}\nline 3\n"),
            ]
            if i == 10:
                results += [_result("h100", "flaky", "pass", t + 2), _result("h100", "flaky", "fail", t + 3)]
            doc = {
                "schema": RESULTS_SCHEMA,
                "run": {"suite": "nightly", "suite_version": "2", "commit": f"c{i:02d}", "lab": "lab-x", "created_at": t, "command": "accel lab run nightly.toml --db <URL>"},
                "fingerprints": {fingerprint_hash(e): e for e in ENVS.values()},
                "results": results,
            }
            ids[f"c{i:02d}"] = store.ingest(doc)
    return ids


OWNERS = '[skus]\n"nvidia-h100-sxm" = "h100-team"\n"amd-mi300x" = ["amd-team", "amd-oncall"]\n'


class Served:
    def __init__(self, proc: subprocess.Popen[str], port: int, db: str, runs: dict[str, str]):
        self.proc, self.port, self.db, self.runs = proc, port, db, runs

    def request(self, method: str, path: str, *, host: str | None = "127.0.0.1", headers: dict[str, str] | None = None, body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            if host is not None:
                conn.putheader("Host", f"{host}:{self.port}")
            for k, v in (headers or {}).items():
                conn.putheader(k, v)
            if body is not None:
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            conn.close()


def start_serve(tmp: pathlib.Path, db: str, *extra: str) -> tuple[subprocess.Popen[str], int]:
    port = _free_port()
    owners = tmp / "owners.toml"
    owners.write_text(OWNERS)
    suite = tmp / "nightly.toml"
    suite.write_text('[suite]\nname = "nightly"\nversion = "2"\n\n[[check]]\nname = "bw"\nkind = "benchmark"\ncommand = ["true"]\ntimeout_s = 5\nbetter = "lower"\n')
    proc = subprocess.Popen(
        [PY, "-m", "accel.lab", "serve", "--db", db, "--listen", f"127.0.0.1:{port}", "--owners", str(owners), "--suite", str(suite), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    assert proc.stderr is not None
    line = proc.stderr.readline()
    while "serving http://" not in line:
        assert proc.poll() is None and time.monotonic() < deadline, f"serve did not start: {line}{proc.stderr.read() if proc.poll() is not None else ''}"
        line = proc.stderr.readline()
    return proc, port


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture(params=["sqlite", "postgresql"], scope="module")
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("serve")
    db = str(tmp / "lab.db") if request.param == "sqlite" else fresh_pg_database(request.getfixturevalue("postgres"))
    runs = populate(db)
    proc, port = start_serve(tmp, db)
    try:
        yield Served(proc, port, db, runs)
    finally:
        stop(proc)


def test_the_matrix_and_findings_over_http(served: Served) -> None:
    code, headers, body = served.request("GET", "/")
    assert code == 200
    assert headers["content-security-policy"].startswith("default-src 'none'") and "script-src" not in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff" and "access-control-allow-origin" not in headers
    page = body.decode()
    assert "<script" not in page.lower()
    assert "data-suite='nightly' data-sku='nvidia-h100-sxm'" in page and "data-suite='nightly' data-sku='amd-mi300x'" in page
    assert "h100-team" in page and "amd-team, amd-oncall" in page
    assert "c07..c08" in page  # the regression's commit range
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page  # the failure's message, escaped


def test_a_run_page_has_its_results_fingerprints_and_repro(served: Served) -> None:
    run_id = served.runs["c11"]
    code, _, body = served.request("GET", f"/run/{run_id}")
    page = body.decode()
    assert code == 200 and f"accel lab repro {run_id} --db" in page and "--on-node" in page
    assert "git checkout c11" in page and "rocm-6" in page and "550" in page
    result_link = page.split("href='/result/")[1].split("'")[0]
    code, _, body = served.request("GET", f"/result/{result_link}")
    assert code == 200
    assert served.request("GET", "/run/nope")[0] == 404
    assert served.request("GET", "/cell?suite=nightly&family=none&sku=none")[0] == 404


@pytest.mark.parametrize(
    ("host", "code"),
    [("127.0.0.1", 200), ("localhost", 200), ("[::1]", 200), ("attacker.example", 421), ("127.0.0.1.nip.io", 421), (None, 421)],
)
def test_the_host_header_must_name_the_server(served: Served, host: str | None, code: int) -> None:
    assert served.request("GET", "/v1/health", host=host)[0] == code


def test_two_hosts_other_methods_and_submit_without_a_token_are_refused(served: Served) -> None:
    conn = socket.create_connection(("127.0.0.1", served.port), timeout=10)
    conn.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n\r\n")
    assert conn.recv(100).startswith(b"HTTP/1.1 421")
    conn.close()
    assert served.request("PUT", "/", body=b"x")[0] == 405
    assert served.request("DELETE", "/")[0] == 405
    doc = json.dumps({"schema": RESULTS_SCHEMA, "run": {"suite": "x", "suite_version": "1", "commit": "c"}, "results": []}).encode()
    assert served.request("POST", "/v1/submit", headers={"Content-Type": "application/json"}, body=doc)[0] == 403
    assert served.request("GET", "/?", host="127.0.0.1", headers={"Content-Length": "5"})[0] == 413


def test_host_rule_unit() -> None:
    assert host_allowed("node-1.example:9478", "0.0.0.0", ("node-1.example",))
    assert host_allowed("10.1.2.3:9478", "0.0.0.0", ())  # an address literal on a wildcard listener
    assert not host_allowed("10.1.2.3:9478", "127.0.0.1", ())
    assert not host_allowed("evil.example", "0.0.0.0", ())
    assert not host_allowed("", "127.0.0.1", ())


def test_a_network_listener_needs_a_safe_token_file(tmp_path: pathlib.Path) -> None:
    db = str(tmp_path / "lab.db")

    def serve(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([PY, "-m", "accel.lab", "serve", "--db", db, *args], capture_output=True, text=True, timeout=60)

    no = serve("--listen", f"0.0.0.0:{_free_port()}")
    assert no.returncode == 2 and "without a token" in no.stderr
    token = tmp_path / "token"
    token.write_text("t" * 32 + "\n")
    token.chmod(0o644)
    no = serve("--listen", f"0.0.0.0:{_free_port()}", "--token-file", str(token))
    assert no.returncode == 2 and "chmod 600" in no.stderr and "t" * 32 not in no.stderr
    token.write_text("short\n")
    token.chmod(0o600)
    no = serve("--token-file", str(token), "--listen", f"127.0.0.1:{_free_port()}")
    assert no.returncode == 2 and "at least 16" in no.stderr


def test_with_a_token_pages_and_submit_need_it(tmp_path: pathlib.Path) -> None:
    db = str(tmp_path / "lab.db")
    populate(db)
    secret = "tok-" + os.urandom(16).hex()
    token = tmp_path / "token"
    token.write_text(secret + "\n")
    token.chmod(0o600)
    proc, port = start_serve(tmp_path, db, "--token-file", str(token))
    s = Served(proc, port, db, {})
    seen: list[bytes] = []
    try:
        code, _, body = s.request("GET", "/")
        assert code == 401 and b"<form method=post action=/login>" in body
        assert s.request("GET", "/", headers={"Authorization": "Bearer wrong-token-wrong-token"})[0] == 401
        code, _, body = s.request("GET", "/", headers={"Authorization": f"Bearer {secret}"})
        assert code == 200 and b"id=matrix" in body
        seen.append(body)
        # The form: a cookie that is not the token, and that works only as a cookie.
        code, headers, body = s.request("POST", "/login", headers={"Content-Type": "application/x-www-form-urlencoded"}, body=urllib.parse.urlencode({"token": secret}).encode())
        assert code == 303 and "HttpOnly" in headers["set-cookie"] and "SameSite=Strict" in headers["set-cookie"]
        cookie = headers["set-cookie"].split(";")[0]
        assert secret not in cookie
        assert s.request("GET", "/", headers={"Cookie": cookie})[0] == 200
        assert s.request("POST", "/login", body=b"token=wrong")[0] == 401
        # Submitting: the bearer header only (a cookie cannot submit).
        good = {"schema": RESULTS_SCHEMA, "run": {"suite": "ext", "suite_version": "1", "commit": "c99"}, "results": [{"check": "a", "node": "n", "verdict": "pass", "started_at": 1.0, "ended_at": 2.0}]}
        js = {"Content-Type": "application/json"}
        assert s.request("POST", "/v1/submit", headers={**js, "Cookie": cookie}, body=json.dumps(good).encode())[0] == 401
        code, _, body = s.request("POST", "/v1/submit", headers={**js, "Authorization": f"Bearer {secret}"}, body=json.dumps(good).encode())
        assert code == 201 and json.loads(body)["results"] == 1
        seen.append(body)
        bad = json.loads(json.dumps(good))
        bad["results"].append({"check": "b", "node": "n", "verdict": "meh", "started_at": 1.0, "ended_at": 2.0})
        code, _, body = s.request("POST", "/v1/submit", headers={**js, "Authorization": f"Bearer {secret}"}, body=json.dumps(bad).encode())
        assert code == 400 and "results[1].verdict" in json.loads(body)["error"]
        seen.append(body)
        code, _, body = s.request("POST", "/v1/submit", headers={"Content-Type": "text/plain", "Authorization": f"Bearer {secret}"}, body=b"{}")
        assert code == 415
        code, _, body = s.request("POST", "/v1/submit", headers={**js, "Authorization": f"Bearer {secret}", "Content-Length": str(1 << 30)})
        assert code == 413
    finally:
        stop(proc)
    assert all(secret.encode() not in b for b in seen)
    assert proc.stdout is not None and proc.stderr is not None
    assert secret not in proc.stdout.read() + proc.stderr.read()
    with open_store(db) as store:
        assert [r["suite"] for r in store.runs()].count("ext") == 1


async def _browse(base: str, profile: pathlib.Path, screenshot: pathlib.Path) -> dict[str, Any]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Debian's chromium is needed (scripts/test.sh installs it)"
    proc = subprocess.Popen([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text().strip():
            assert proc.poll() is None and time.monotonic() < deadline, "chromium did not open its DevTools port"
            await asyncio.sleep(0.2)
        port = int(port_file.read_text().split()[0])
        async with aiohttp.ClientSession() as http_session:
            async with http_session.get(f"http://127.0.0.1:{port}/json/list") as r:
                page = next(t for t in await r.json() if t["type"] == "page")
            async with http_session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=64 << 20) as ws:
                dt = DevTools(ws)
                for domain in ("Runtime", "Log", "Page"):
                    await dt.call(f"{domain}.enable")

                async def load(url: str) -> None:
                    await dt.call("Page.navigate", url=url)
                    deadline = time.monotonic() + 30
                    await asyncio.sleep(0.2)
                    while await dt.evaluate("document.readyState") != "complete":
                        assert time.monotonic() < deadline, f"{url} never loaded"
                        await asyncio.sleep(0.1)

                facts: dict[str, Any] = {}
                await load(base + "/")
                facts["matrix"] = await dt.evaluate("[...document.querySelectorAll('#matrix td[data-sku]')].map(td => td.dataset.sku + ' ' + td.className + ' ' + td.textContent)")
                facts["styled"] = await dt.evaluate("getComputedStyle(document.querySelector('#matrix td.pass')).backgroundColor")
                facts["regressions"] = await dt.evaluate("[...document.querySelectorAll('#regressions tr')].slice(1).map(r => r.textContent)")
                facts["stale"] = await dt.evaluate("[...document.querySelectorAll('#stale tr')].slice(1).map(r => r.textContent)")
                facts["flaky"] = await dt.evaluate("[...document.querySelectorAll('#flaky tr')].slice(1).map(r => r.textContent)")
                facts["scripts"] = await dt.evaluate("document.querySelectorAll('script').length")
                shot = await dt.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
                screenshot.write_bytes(__import__("base64").b64decode(shot["data"]))
                cell = await dt.evaluate("document.querySelector('#matrix td.fail a').href")
                await load(cell)
                facts["history"] = await dt.evaluate("document.querySelectorAll('#history tr').length - 1")
                await load(await dt.evaluate("document.querySelector('#history a').href"))
                facts["repro"] = await dt.evaluate("document.getElementById('repro').textContent")
                await load(await dt.evaluate("[...document.querySelectorAll('#results tr')].find(r => r.textContent.includes('amd-mi300x')).querySelector('a').href"))
                facts["log"] = await dt.evaluate("document.getElementById('log').textContent")
                facts["log_scripts"] = await dt.evaluate("document.querySelectorAll('script, img').length")
                facts["alerted"] = await dt.evaluate("window.__alerted || false")
                facts["errors"] = dt.errors()
                return facts
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_the_page_in_chromium(served: Served, tmp_path: pathlib.Path) -> None:
    with tempfile.TemporaryDirectory(prefix="accel-chromium-") as profile:
        facts = asyncio.run(_browse(f"http://127.0.0.1:{served.port}", pathlib.Path(profile), tmp_path / "lab.png"))
    assert facts["errors"] == [], facts["errors"]
    assert sorted(facts["matrix"]) == ["amd-mi300x fail 1 fail", "nvidia-h100-sxm pass 2 pass"], facts["matrix"]
    assert facts["styled"] == "rgb(217, 242, 217)", "the same-origin stylesheet applies under the CSP"
    [reg] = facts["regressions"]
    assert "lat_us" in reg and "c07..c08" in reg and "h100-team" in reg
    # The flaky check (pass and fail at c10 in one environment), and the MI300X, which never
    # passed, as stale hardware with its owners.
    [flaky] = facts["flaky"]
    assert "nightly/flaky" in flaky and "c10" in flaky and "h100-team" in flaky, flaky
    assert any("amd-mi300x" in row and "amd-team, amd-oncall" in row for row in facts["stale"]), facts["stale"]
    assert not any("nvidia-h100-sxm" in row for row in facts["stale"]), facts["stale"]
    assert facts["scripts"] == 0
    assert facts["history"] == 12
    assert "accel lab repro" in facts["repro"]
    assert XSS in facts["log"] and facts["log_scripts"] == 0 and facts["alerted"] is False
    assert (tmp_path / "lab.png").stat().st_size > 10_000


def test_a_trickled_body_is_cut_off_at_its_deadline(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from accel.lab import _serve

    monkeypatch.setattr(_serve, "BODY_DEADLINE_S", 1.0)
    token = tmp_path / "token"
    token.write_text("t" * 24 + "\n")
    token.chmod(0o600)
    with open_store(tmp_path / "lab.db") as store:
        srv, _ = _serve.make_server(store, "t", listen="127.0.0.1:0", token_file=str(token))
        thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        thread.start()
        try:
            s = socket.create_connection(("127.0.0.1", srv.server_address[1]), timeout=10)
            s.sendall(b"POST /v1/submit HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + b"t" * 24 + b"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
            start = time.monotonic()
            answer = b""
            for _ in range(30):
                time.sleep(0.2)
                try:
                    s.sendall(b" ")
                except OSError:
                    break
                s.setblocking(False)
                try:
                    answer += s.recv(200)
                except BlockingIOError:
                    pass
                s.setblocking(True)
                if answer:
                    break
            s.close()
            assert answer.startswith(b"HTTP/1.1 408") and time.monotonic() - start < 5
            assert store.count("runs") == 0
        finally:
            srv.shutdown()
            srv.server_close()
