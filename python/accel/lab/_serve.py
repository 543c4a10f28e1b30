"""`accel lab serve`: the lab's page and its submit endpoint, under the agent's security rules
(docs/security.md, docs/agent.md).

Pages (server-rendered HTML; no script at all, one same-origin stylesheet): `/` the matrix
(family x SKU x suite, each cell the latest run's verdicts) with the failures, regressions
(with their commit range), flaky checks and stale hardware, each naming its owners;
`/cell?suite=&family=&sku=` a cell's history; `/run/ID` a run's results, fingerprints and
reproduction commands; `/result/ID` one result with its log. `POST /v1/submit` stores a
results document (docs/lab.md) and needs the bearer token.

- Loopback by default; another address needs `--token-file` (first line, at least 16
  printable characters; the file must be this user's and unreadable by others), else it exits
  2 before binding.
- With a token, every page needs it: `Authorization: Bearer`, or the session cookie that
  `/login` sets (HttpOnly, SameSite=Strict; an HMAC of the token, never the token). Submitting
  needs the bearer header itself, and is off without a token. Tokens compare in constant time
  and are never echoed or logged.
- Every request must name the server in `Host` (localhost, a loopback address, the listen
  address, an `--allow-host` name; any address literal when listening on a wildcard), else
  421. Every answer carries a Content-Security-Policy that allows nothing but this origin's
  stylesheet (`default-src 'none'; style-src 'self'`), `nosniff`, no referrer and no CORS
  header. Every value on a page is HTML-escaped.
- Bounded: a 10 s socket timeout, at most `MAX_CONNECTIONS` handled at once, request bodies
  of at most `MAX_SUBMIT_BYTES` (with Content-Length; else 411/413) arriving within 60 s.

The analysis (flaky, regressions, failures, stale) is recomputed in the background every
`--refresh` seconds over `--window-days` of results; the matrix is read on each request."""

from __future__ import annotations

import hashlib
import hmac
import html
import http.cookies
import http.server
import ipaddress
import json
import os
import shlex
import socket
import stat
import sys
import threading
import time
import urllib.parse
from typing import Any, Callable

from ._analysis import Owners, Report, analyze
from ._store import DocumentError, Store

MAX_CONNECTIONS = 64
MAX_SUBMIT_BYTES = 64 << 20
SOCKET_TIMEOUT_S = 10.0
BODY_DEADLINE_S = 60.0
TOKEN_MIN = 16
COOKIE = "accel_lab_session"
CSP = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
td.pass { background: #d9f2d9; } td.fail, td.error { background: #f8d0d0; }
td.infra { background: #f8e6c0; } td.skip, td.cancelled, td.none { background: #eee; }
pre { background: #f6f6f6; padding: .6em; overflow-x: auto; max-height: 40em; white-space: pre-wrap; }
.muted { color: #777; } a { color: #0b5cad; }
"""


class ServeError(Exception):
    """A server that must not start (a network listener without a token, a bad token file)."""


def read_token(path: str) -> str:
    """The token file's first line, refused unless the file is a regular file of this user
    that nobody else may read or write, and the token is 16 or more printable characters."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise ServeError(f"token file {path}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ServeError(f"token file {path}: not a regular file")
        if st.st_uid != os.geteuid():
            raise ServeError(f"token file {path}: belongs to another user")
        if st.st_mode & 0o077:
            raise ServeError(f"token file {path}: others may read or write it (mode {st.st_mode & 0o777:o}); chmod 600 {path}")
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    lines = data.decode("utf-8", "replace").splitlines()
    token = lines[0].strip() if lines else ""
    if len(token) < TOKEN_MIN or any(not 0x21 <= ord(c) < 0x7F for c in token):
        raise ServeError(f"token file {path}: the token must be at least {TOKEN_MIN} printable ASCII characters without spaces")
    return token


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def _is_wildcard(host: str) -> bool:
    return host.strip("[]") in ("0.0.0.0", "::", "")


def parse_listen(listen: str) -> tuple[str, int]:
    """`HOST:PORT` (IPv6 in brackets) -> (host, port); ValueError when malformed."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"--listen {listen!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


def host_allowed(header: str | None, listen_host: str, allow: tuple[str, ...]) -> bool:
    """Whether a request's `Host` names this server (the DNS-rebinding defence)."""
    if not header:
        return False
    value = header.strip().lower()
    if value.startswith("["):
        name = value[1 : value.find("]")] if "]" in value else ""
    else:
        name = value.rsplit(":", 1)[0] if value.count(":") == 1 else value
    if not name:
        return False
    if name == "localhost" or _is_loopback(name) or name == listen_host.lower() or name in allow:
        return True
    if _is_wildcard(listen_host):
        try:
            ipaddress.ip_address(name)
            return True
        except ValueError:
            return False
    return False


class _Analysis:
    """The latest report, recomputed in the background."""

    def __init__(self, store: Store, owners: Owners, direction: Callable[[str, str, str], str], window_days: float, stale_days: float):
        self.store, self.owners, self.direction = store, owners, direction
        self.window_days, self.stale_days = window_days, stale_days
        self.report: Report | None = None
        self.at = 0.0
        self.error = ""

    def refresh(self) -> None:
        try:
            since = time.time() - self.window_days * 86400.0 if self.window_days else None
            results = self.store.results(since=since)
            self.report = analyze(results, self.owners, now=time.time(), stale_days=self.stale_days, direction=self.direction)
            self.at = time.time()
            self.error = ""
        except Exception as e:  # noqa: BLE001 (shown on the page; the server goes on)
            self.error = f"{type(e).__name__}: {e}"

    def loop(self, every_s: float, stop: threading.Event) -> None:
        while not stop.wait(every_s):
            self.refresh()


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + " UTC" if t else "never"


def _page(title: str, body: str) -> bytes:
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{_e(title)}</title><link rel=stylesheet href=/lab.css></head>"
        f"<body><h1>{_e(title)}</h1>{body}</body></html>"
    ).encode()


def _summary(counts: dict[str, int]) -> tuple[str, str]:
    """(css class, text) of a cell's verdict counts: the worst verdict names the class."""
    for worst in ("fail", "error", "infra", "cancelled", "pass", "skip"):
        if counts.get(worst):
            total = sum(counts.values())
            text = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
            return worst, text if len(counts) > 1 else f"{total} {worst}"
    return "none", "-"


def _owners(xs: Any) -> str:
    return _e(", ".join(xs) or "no owner")


class LabServer:
    """The page's state: the store, the analysis, the security settings."""

    def __init__(self, store: Store, db_label: str, *, listen_host: str, token: str | None, allow_hosts: tuple[str, ...], analysis: _Analysis):
        self.store, self.db_label = store, db_label
        self.listen_host = listen_host
        self.token = token
        self.session = hmac.new(token.encode(), b"accel-lab-session", hashlib.sha256).hexdigest() if token else None
        self.allow_hosts = tuple(h.lower() for h in allow_hosts)
        self.analysis = analysis
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    # -- pages ------------------------------------------------------------------------------

    def matrix(self) -> bytes:
        latest: dict[tuple[str, str, str], tuple[float, str]] = {}
        counts: dict[tuple[str, str, str, str], dict[str, int]] = {}
        for suite, family, sku, run_id, verdict, n, at in self.store.cells():
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
                q = urllib.parse.urlencode({"suite": suite, "family": family, "sku": sku})
                parts.append(f"<td class={cls} data-suite='{_e(suite)}' data-sku='{_e(sku)}'><a href='/cell?{_e(q)}'>{_e(text)}</a></td>")
            parts.append("</tr>")
        parts.append("</table>")
        if not rows:
            parts.append("<p class=muted>No results yet.</p>")
        parts.append(self._findings())
        return _page("accel lab", "".join(parts))

    def _findings(self) -> str:
        a = self.analysis
        if a.report is None:
            return f"<h2>Analysis</h2><p class=muted>Not computed yet. {_e(a.error)}</p>"
        r = a.report
        out = [f"<p class=muted id=analysis-at>Analysis of {_e(self.db_label)} as of {_e(_when(a.at))}. {_e(a.error)}</p>"]
        out.append(f"<h2>Failures ({len(r.failures)})</h2><table id=failures><tr><th>suite/check</th><th>SKU</th><th>node</th><th>verdict</th><th>commit</th><th>message</th><th>owners</th></tr>")
        for f in r.failures:
            name = f"{f.suite}/{f.check}" + (f"/{f.case}" if f.case else "")
            out.append(
                f"<tr><td><a href='/run/{_e(f.run_id)}'>{_e(name)}</a></td><td>{_e(f.sku)}</td><td>{_e(f.node)}</td><td class={_e(f.verdict)}>{_e(f.verdict)}</td>"
                f"<td>{_e(f.commit)}</td><td>{_e(f.message[:300])}</td><td>{_owners(f.owners)}</td></tr>"
            )
        out.append("</table>")
        regs = [c for c in r.regressions if c.regression]
        out.append(f"<h2>Regressions ({len(regs)})</h2><table id=regressions><tr><th>suite/check</th><th>series</th><th>SKU</th><th>before</th><th>after</th><th>change</th><th>commits</th><th>p</th><th>owners</th></tr>")
        for c in regs:
            out.append(
                f"<tr><td>{_e(c.suite)}/{_e(c.check)}</td><td>{_e(c.series)}</td><td>{_e(c.sku)}</td><td>{c.before:.4g}</td><td>{c.after:.4g}</td>"
                f"<td>{c.relative:+.1%}</td><td class=range>{_e(c.last_good)}..{_e(c.first_bad)}</td><td>{c.p_value:.3f}</td><td>{_owners(c.owners)}</td></tr>"
            )
        out.append("</table>")
        out.append(f"<h2>Flaky ({len(r.flaky)})</h2><table id=flaky><tr><th>suite/check</th><th>commit</th><th>passes</th><th>failures</th><th>nodes</th><th>owners</th></tr>")
        for fl in r.flaky:
            name = f"{fl.suite}/{fl.check}" + (f"/{fl.case}" if fl.case else "")
            out.append(f"<tr><td>{_e(name)}</td><td>{_e(fl.commit)}</td><td>{fl.passes}</td><td>{fl.failures}</td><td>{_e(', '.join(fl.nodes))}</td><td>{_owners(fl.owners)}</td></tr>")
        out.append("</table>")
        out.append(f"<h2>Stale ({len(r.stale)})</h2><table id=stale><tr><th>what</th><th>name</th><th>last pass</th><th>owners</th></tr>")
        for s in r.stale:
            out.append(f"<tr><td>{_e(s.what)}</td><td>{_e(s.name)}</td><td>{_e(_when(s.last_pass))}</td><td>{_owners(s.owners)}</td></tr>")
        out.append("</table>")
        return "".join(out)

    def cell(self, query: dict[str, list[str]]) -> bytes | None:
        suite, family, sku = (query.get(k, [""])[0] for k in ("suite", "family", "sku"))
        history = self.store.cell_history(suite, family, sku)
        if not history:
            return None
        parts = ["<p><a href='/'>matrix</a></p><table id=history><tr><th>run</th><th>commit</th><th>started</th><th>verdicts</th></tr>"]
        for h in history:
            cls, text = _summary(h["counts"])
            parts.append(f"<tr><td><a href='/run/{_e(h['run_id'])}'>{_e(h['run_id'][:12])}</a></td><td>{_e(h['commit'])}</td><td>{_e(_when(h['started_at']))}</td><td class={cls}>{_e(text)}</td></tr>")
        parts.append("</table>")
        return _page(f"{suite} on {family or '-'} / {sku or '-'}", "".join(parts))

    def run(self, run_id: str) -> bytes | None:
        run = self.store.run(run_id)
        if run is None:
            return None
        results = self.store.results(run_id=run_id)
        parts = ["<p><a href='/'>matrix</a></p><table id=run>"]
        for k in ("suite", "suite_version", "commit_sha", "lab", "source", "state"):
            parts.append(f"<tr><th>{_e(k)}</th><td>{_e(run[k])}</td></tr>")
        parts.append(f"<tr><th>created</th><td>{_e(_when(run['created_at']))}</td></tr><tr><th>ended</th><td>{_e(_when(run['ended_at']))}</td></tr>")
        parts.append(f"<tr><th>selectors</th><td>{_e(json.dumps(run['selectors'], sort_keys=True))}</td></tr></table>")
        parts.append("<h2>Reproduce</h2><pre id=repro>")
        parts.append(_e(f"git checkout {shlex.quote(run['commit_sha'])}\naccel lab repro {run_id} --db {shlex.quote(self.db_label)}\n"))
        parts.append(_e(f"accel lab repro {run_id} --db {shlex.quote(self.db_label)} --on-node   # the same checks on the same nodes, through Ray\n"))
        if run["command"]:
            parts.append(_e(f"{run['command']}   # the whole run again\n"))
        parts.append("</pre>")
        parts.append("<h2>Results</h2><table id=results><tr><th>check</th><th>case</th><th>node</th><th>SKU</th><th>verdict</th><th>attempt</th><th>duration</th><th>message</th><th>log</th></tr>")
        for r in results:
            parts.append(
                f"<tr><td>{_e(r['check_name'])}</td><td>{_e(r['case_name'])}</td><td>{_e(r['node'])}</td><td>{_e(r['sku'])}</td>"
                f"<td class={_e(r['verdict'])}>{_e(r['verdict'])}</td><td>{r['attempt']}</td><td>{r['duration_s']:.2f} s</td>"
                f"<td>{_e(r['message'][:300])}</td><td><a href='/result/{_e(r['id'])}'>log</a></td></tr>"
            )
        parts.append("</table><h2>Environment fingerprints</h2>")
        for env_hash in sorted({r["env_hash"] for r in results if r["env_hash"]}):
            nodes = sorted({r["node"] for r in results if r["env_hash"] == env_hash})
            doc = self.store.fingerprint(env_hash)
            parts.append(f"<h3>{_e(', '.join(nodes))}: {_e(env_hash[:16])}</h3><pre class=fingerprint>{_e(json.dumps(doc, indent=1, sort_keys=True) if doc else 'not stored')}</pre>")
        return _page(f"run {run_id[:12]}: {run['suite']} at {run['commit_sha']}", "".join(parts))

    def result(self, result_id: str) -> bytes | None:
        r = self.store.result(result_id)
        if r is None:
            return None
        parts = [f"<p><a href='/run/{_e(r['run_id'])}'>run</a></p><table>"]
        for k in ("suite", "check_name", "case_name", "node", "sku", "commit_sha", "verdict", "attempt", "message", "env_hash", "machine_hash"):
            parts.append(f"<tr><th>{_e(k)}</th><td>{_e(r[k])}</td></tr>")
        parts.append(f"<tr><th>started</th><td>{_e(_when(r['started_at']))}</td></tr><tr><th>duration</th><td>{r['duration_s']:.2f} s</td></tr>")
        if r["series"]:
            parts.append(f"<tr><th>series</th><td>{_e(json.dumps(r['series'], sort_keys=True))}</td></tr>")
        parts.append(f"</table><h2>Log</h2><pre id=log>{_e(r['log'])}</pre>")
        return _page(f"{r['check_name']} on {r['node']}: {r['verdict']}", "".join(parts))

    def login(self) -> bytes:
        return _page("accel lab: sign in", "<form method=post action=/login><label>token <input type=password name=token autocomplete=off></label> <button>sign in</button></form>")

    # -- security ---------------------------------------------------------------------------

    def authorised(self, headers: Any, *, bearer_only: bool = False) -> bool:
        if self.token is None:
            return True
        auth = headers.get("Authorization", "")
        if auth.startswith("Bearer ") and hmac.compare_digest(auth[7:].strip().encode(), self.token.encode()):
            return True
        if bearer_only or self.session is None:
            return False
        cookies = http.cookies.SimpleCookie()
        try:
            cookies.load(headers.get("Cookie", ""))
        except http.cookies.CookieError:
            return False
        morsel = cookies.get(COOKIE)
        return morsel is not None and hmac.compare_digest(morsel.value.encode(), self.session.encode())


def _handler(server: LabServer) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        timeout = SOCKET_TIMEOUT_S
        protocol_version = "HTTP/1.1"
        server_version = "accel-lab"
        sys_version = ""

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
            pass  # no access log: a request line may carry anything

        def _send(self, code: int, body: bytes, ctype: str = "text/html; charset=utf-8", extra: dict[str, str] | None = None) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Content-Security-Policy", CSP)
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Referrer-Policy", "no-referrer")
            self.send_header("X-Frame-Options", "DENY")
            self.send_header("Cache-Control", "no-store")
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _text(self, code: int, message: str) -> None:
            self._send(code, (message + "\n").encode(), "text/plain; charset=utf-8")

        def _host_ok(self) -> bool:
            hosts = self.headers.get_all("Host") or []
            if len(hosts) != 1 or not host_allowed(hosts[0], server.listen_host, server.allow_hosts):
                self._text(421, "misdirected request: this server does not answer for that Host")
                return False
            if urllib.parse.urlsplit(self.path).netloc:
                self._text(421, "misdirected request: absolute URIs are not served")
                return False
            return True

        def do_GET(self) -> None:  # noqa: N802 (the base's name)
            if self.headers.get("Content-Length", "0") not in ("", "0") or self.headers.get("Transfer-Encoding"):
                self.close_connection = True
                self._text(413, "a GET has no body")
                return
            if not self._host_ok():
                return
            url = urllib.parse.urlsplit(self.path)
            path = url.path
            if path == "/lab.css":
                self._send(200, CSS.encode(), "text/css; charset=utf-8")
                return
            if path == "/login":
                self._send(200, server.login())
                return
            if path == "/favicon.ico":
                self._send(204, b"", "image/x-icon")
                return
            if not server.authorised(self.headers):
                if path.startswith("/v1/"):
                    self._text(401, "unauthorised: send Authorization: Bearer <token>")
                else:
                    self._send(401, server.login())
                return
            try:
                body: bytes | None
                if path == "/":
                    body = server.matrix()
                elif path == "/v1/health":
                    self._send(200, b'{"status":"ok"}\n', "application/json")
                    return
                elif path == "/cell":
                    body = server.cell(urllib.parse.parse_qs(url.query))
                elif path.startswith("/run/"):
                    body = server.run(path[len("/run/") :])
                elif path.startswith("/result/"):
                    body = server.result(path[len("/result/") :])
                else:
                    body = None
            except Exception as e:  # noqa: BLE001 (one line to the client, the server goes on)
                self._text(500, f"the store could not answer: {type(e).__name__}")
                return
            if body is None:
                self._send(404, _page("not found", "<p><a href='/'>matrix</a></p>"))
                return
            self._send(200, body)

        def do_HEAD(self) -> None:  # noqa: N802
            self.do_GET()

        def _body(self) -> bytes | None:
            if self.headers.get("Transfer-Encoding"):
                self.close_connection = True
                self._text(411, "send Content-Length (no chunked bodies)")
                return None
            length = self.headers.get("Content-Length")
            if length is None or not length.isdigit():
                self.close_connection = True
                self._text(411, "Content-Length required")
                return None
            if int(length) > MAX_SUBMIT_BYTES:
                self.close_connection = True
                self._text(413, f"body larger than {MAX_SUBMIT_BYTES} bytes")
                return None
            # One deadline for the whole body, however slowly it trickles.
            deadline = time.monotonic() + BODY_DEADLINE_S
            chunks, left = [], int(length)
            while left > 0:
                if time.monotonic() > deadline:
                    self.close_connection = True
                    self._text(408, f"the body did not arrive within {BODY_DEADLINE_S:g} s")
                    return None
                chunk = self.rfile.read1(min(left, 1 << 20))
                if not chunk:
                    self.close_connection = True
                    return None
                chunks.append(chunk)
                left -= len(chunk)
            return b"".join(chunks)

        def do_POST(self) -> None:  # noqa: N802
            if not self._host_ok():
                self.close_connection = True
                return
            path = urllib.parse.urlsplit(self.path).path
            if path == "/login":
                data = self._body()
                if data is None:
                    return
                given = urllib.parse.parse_qs(data.decode("utf-8", "replace")).get("token", [""])[0]
                if server.token is None or server.session is None:
                    self._send(303, b"", extra={"Location": "/"})
                elif hmac.compare_digest(given.encode(), server.token.encode()):
                    cookie = f"{COOKIE}={server.session}; HttpOnly; SameSite=Strict; Path=/"
                    self._send(303, b"", extra={"Location": "/", "Set-Cookie": cookie})
                else:
                    self._send(401, server.login())
                return
            if path != "/v1/submit":
                self.close_connection = True
                self._text(405, "only GET, and POST /v1/submit")
                return
            if server.token is None:
                self.close_connection = True
                self._text(403, "submitting is off: start `accel lab serve` with --token-file")
                return
            if not server.authorised(self.headers, bearer_only=True):
                self.close_connection = True
                self._text(401, "unauthorised: send Authorization: Bearer <token>")
                return
            if self.headers.get_content_type() != "application/json":
                self.close_connection = True
                self._text(415, "send Content-Type: application/json")
                return
            data = self._body()
            if data is None:
                return
            try:
                doc = json.loads(data)
                run_id = server.store.ingest(doc)
            except ValueError as e:  # DocumentError is a ValueError, as is bad JSON
                msg = str(e) if isinstance(e, DocumentError) else f"not JSON: {e}"
                self._send(400, json.dumps({"error": msg + " (nothing was stored)"}).encode(), "application/json")
                return
            self._send(201, json.dumps({"run_id": run_id, "results": len(doc["results"])}).encode(), "application/json")

        def _refuse(self) -> None:
            self.close_connection = True
            self._text(405, "only GET, and POST /v1/submit")

        do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _refuse  # noqa: N815

    return Handler


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    lab: LabServer

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.lab.slots.acquire(blocking=False):
            try:
                request.close()
            finally:
                return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.lab.slots.release()


def make_server(
    store: Store,
    db_label: str,
    *,
    listen: str = "127.0.0.1:9478",
    token_file: str | None = None,
    allow_hosts: tuple[str, ...] = (),
    owners: Owners = Owners(),
    direction: Callable[[str, str, str], str] = lambda s, c, x: "lower",
    window_days: float = 30.0,
    stale_days: float = 7.0,
) -> tuple[http.server.ThreadingHTTPServer, _Analysis]:
    """The bound server (not yet serving) and its analysis (computed once here). `ServeError`
    when the listener or the token file is refused."""
    try:
        host, port = parse_listen(listen)
    except ValueError as e:
        raise ServeError(str(e)) from None
    token = read_token(token_file) if token_file else None
    if token is None and not _is_loopback(host):
        raise ServeError(f"refusing to listen on {listen} without a token: pass --token-file FILE (a file holding a random secret, mode 600), or listen on 127.0.0.1")
    analysis = _Analysis(store, owners, direction, window_days, stale_days)
    analysis.refresh()
    lab = LabServer(store, db_label, listen_host=host, token=token, allow_hosts=allow_hosts, analysis=analysis)

    class Bound(_Server):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    srv = Bound((host, port), _handler(lab))
    srv.lab = lab
    return srv, analysis


def serve(srv: http.server.ThreadingHTTPServer, analysis: _Analysis, refresh_s: float) -> None:
    """Serves until interrupted, refreshing the analysis every `refresh_s` seconds."""
    stop = threading.Event()
    t = threading.Thread(target=analysis.loop, args=(refresh_s, stop), daemon=True)
    t.start()
    host, port = str(srv.server_address[0]), int(srv.server_address[1])
    shown = f"[{host}]" if ":" in host else host
    print(f"accel lab: serving http://{shown}:{port}/", file=sys.stderr, flush=True)
    try:
        srv.serve_forever(poll_interval=0.5)
    finally:
        stop.set()
        srv.server_close()

