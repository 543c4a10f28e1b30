"""One attack suite for every HTTP server of the project (test_http_attacks.py runs it against
the node agent plain and over TLS, with and without a token, and against the lab's old
hand-written server from git history, where the audit's attacks succeed).

Each attack takes a `Target` and returns what went wrong (an empty list: the server held):

- `trickling_heads`: more sockets than the old server had slots send their request head a byte
  a second; a real client must still be served, and the tricklers must be cut off;
- `idle_flood`: hundreds of idle sockets against a server whose open-file limit is low (the
  fixtures start it under `RLIMIT_NOFILE` 256); a real client must still be served;
- `oversized_body`: two 32 MiB bodies to the sign-in form; the server must not hold them
  (its resident memory may not grow by half of that);
- `nested_body`: JSON nested 100,000 deep to the submit path with the token; the server must
  answer with a 4xx, never fail inside or drop the connection;
- `odd_host`: foreign, missing, doubled and malformed `Host` headers must get 421;
- `token_case_and_type`: the bearer scheme in any case is accepted, the token only exactly;
  Basic, other schemes and a token in the query are refused;
- `absolute_uri`: an absolute request target naming another host gets 421;
- `csp`: pages carry a policy that allows no script, no framing, and `nosniff`;
- `cookie_flags`: the sign-in cookie is HttpOnly, SameSite=Strict, expires, is Secure over TLS,
  is never the token or a value derived from it alone (two sign-ins, two sessions);
- `read_token_writes`: the read token (the page's) cannot write anything."""

from __future__ import annotations

import base64
import dataclasses
import json
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable


@dataclasses.dataclass
class Target:
    """An HTTP server under attack."""

    name: str
    port: int
    pid: int
    page: str  # a page that needs the token when there is one
    login: str | None  # the sign-in form, if any
    write: str  # where a write would go (the old server's submit path)
    token: str | None = None
    tls: ssl.SSLContext | None = None
    host: str = "127.0.0.1"


def connect(t: Target, timeout: float = 10.0) -> socket.socket:
    s = socket.create_connection((t.host, t.port), timeout=timeout)
    if t.tls is not None:
        return t.tls.wrap_socket(s, server_hostname="localhost")
    return s


def exchange(t: Target, raw: bytes, timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    """Sends `raw`, reads the answer until the server closes or `timeout`: (status, lower-cased
    headers, body); status 0 when it closed without a word."""
    try:
        s = connect(t, timeout)
    except OSError:
        return 0, {}, b""
    data = b""
    try:
        s.sendall(raw)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
            head, sep, body = data.partition(b"\r\n\r\n")
            if sep:
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")[1:] if line.lower().startswith(b"content-length:")), None)
                if length is not None and len(body) >= length:
                    break
    except OSError:
        pass
    finally:
        s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    try:
        status = int(lines[0].split()[1])
    except (IndexError, ValueError):
        return 0, {}, b""
    headers: dict[str, str] = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers.setdefault(k.strip().lower(), v.strip())
        if k.strip().lower() == "set-cookie":
            headers["set-cookie"] = v.strip()
    return status, headers, body


def request(t: Target, method: str, path: str, *, host: str | None = None, headers: dict[str, str] | None = None, body: bytes = b"", timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host or f'127.0.0.1:{t.port}'}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    if body or method == "POST":
        lines.append(f"Content-Length: {len(body)}")
    return exchange(t, ("\r\n".join(lines) + "\r\n\r\n").encode() + body, timeout)


def authorised(t: Target) -> dict[str, str]:
    return {"Authorization": f"Bearer {t.token}"} if t.token else {}


def served(t: Target, timeout: float = 5.0) -> bool:
    """Whether a real client gets the page within `timeout`."""
    code, _, _ = request(t, "GET", t.page, headers=authorised(t), timeout=timeout)
    return code == 200


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


# -- the attacks --------------------------------------------------------------------------------


def trickling_heads(t: Target, sockets: int = 70, seconds: float = 12.0) -> list[str]:
    problems: list[str] = []
    held: list[socket.socket] = []
    for _ in range(sockets):
        try:
            s = connect(t, 5)
            s.sendall(b"GET / HTTP/1.1\r\nX-Slow: ")
            held.append(s)
        except OSError:
            break
    stop = threading.Event()
    closed: set[int] = set()

    def trickle() -> None:
        while not stop.wait(1.0):
            for i, s in enumerate(held):
                if i in closed:
                    continue
                try:
                    s.sendall(b"a")
                except OSError:
                    closed.add(i)

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        time.sleep(3.0)
        if not served(t):
            problems.append(f"a client was not served while {len(held)} sockets trickled their heads (3 s in)")
        time.sleep(max(seconds - 3.0 - 5.0, 0.0))
        if not served(t):
            problems.append(f"a client was not served while {len(held)} sockets trickled their heads ({seconds - 5:.0f} s in)")
        time.sleep(2.0)
        for i, s in enumerate(held):
            s.settimeout(0.2)
            try:
                if s.recv(1) == b"":
                    closed.add(i)
            except (TimeoutError, ssl.SSLWantReadError):
                pass
            except OSError:
                closed.add(i)
        if len(closed) < len(held):
            problems.append(f"{len(held) - len(closed)} of {len(held)} trickling sockets were still open after {seconds:.0f} s (no deadline for a request head)")
    finally:
        stop.set()
        thread.join(timeout=5)
        for s in held:
            s.close()
    return problems


def idle_flood(t: Target, sockets: int = 400) -> list[str]:
    held: list[socket.socket] = []
    try:
        for _ in range(sockets):
            try:
                held.append(socket.create_connection((t.host, t.port), timeout=2))
            except OSError:
                break
        time.sleep(1.0)
        ok = any(served(t, timeout=5.0) for _ in range(2))
        return [] if ok else [f"a client was not served while {len(held)} idle sockets were open against an open-file limit of 256"]
    finally:
        for s in held:
            s.close()


def oversized_body(t: Target, size: int = 32 << 20) -> list[str]:
    if t.login is None:
        return []
    before = rss_kib(t.pid)
    peak = before

    def push() -> None:
        try:
            s = connect(t, 10)
            s.sendall(f"POST {t.login} HTTP/1.1\r\nHost: 127.0.0.1:{t.port}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {size}\r\n\r\n".encode())
            chunk = b"token=" + b"a" * (1 << 20)
            sent = 0
            while sent < size:
                s.sendall(chunk[: min(len(chunk), size - sent)])
                sent += len(chunk)
            s.settimeout(5)
            s.recv(100)
            s.close()
        except OSError:
            pass

    threads = [threading.Thread(target=push, daemon=True) for _ in range(2)]
    for th in threads:
        th.start()
    while any(th.is_alive() for th in threads):
        peak = max(peak, rss_kib(t.pid))
        time.sleep(0.02)
    grown = (peak - before) * 1024
    return [f"two {size >> 20} MiB bodies to {t.login} grew the server by {grown >> 20} MiB"] if grown > size // 2 else []


def nested_body(t: Target) -> list[str]:
    """The head first: a server that refuses the body answers before it is sent (and may then
    reset the connection, which is no failure); otherwise the body follows and the answer must
    be a 4xx."""
    body = b"[" * 100_000 + b"]" * 100_000
    head = f"POST {t.write} HTTP/1.1\r\nHost: 127.0.0.1:{t.port}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in authorised(t).items()) + "\r\n"
    try:
        s = connect(t, 30)
    except OSError as e:
        return [f"cannot connect: {e}"]
    data = b""
    try:
        s.sendall(head.encode())
        s.settimeout(1.0)
        try:
            data = s.recv(65536)
        except (TimeoutError, ssl.SSLWantReadError):
            data = b""
        if not data:
            s.settimeout(30)
            s.sendall(body)
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
    except OSError:
        pass
    finally:
        s.close()
    try:
        code = int(data.split(b"\r\n", 1)[0].split()[1])
    except (IndexError, ValueError):
        code = 0
    if code == 0 or code >= 500:
        return [f"JSON nested 100,000 deep to {t.write}: {'no answer' if code == 0 else code} (the server failed inside)"]
    return []


def odd_host(t: Target) -> list[str]:
    problems = []
    for host in ("attacker.example", "127.0.0.1.nip.io", "localhost.attacker.example", "localhost:80:80", "[::1", "127.0.0.1 evil.example"):
        code = request(t, "GET", t.page, host=host, headers=authorised(t))[0]
        if code not in (400, 421):
            problems.append(f"Host {host!r}: {code}, not 421 (or 400)")
    raw = f"GET {t.page} HTTP/1.1\r\nConnection: close\r\n{''.join(f'{k}: {v}' + chr(13) + chr(10) for k, v in authorised(t).items())}\r\n".encode()
    code = exchange(t, raw)[0]
    if code not in (400, 421):
        problems.append(f"no Host: {code}, not 421 (or 400)")
    raw = f"GET {t.page} HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: attacker.example\r\nConnection: close\r\n{''.join(f'{k}: {v}' + chr(13) + chr(10) for k, v in authorised(t).items())}\r\n".encode()
    code = exchange(t, raw)[0]
    if code not in (400, 421):
        problems.append(f"two Host headers: {code}, not 421 (or 400)")
    return problems


def token_case_and_type(t: Target) -> list[str]:
    if t.token is None:
        return []
    problems = []
    for scheme in ("Bearer", "bearer", "BEARER"):
        code = request(t, "GET", t.page, headers={"Authorization": f"{scheme} {t.token}"})[0]
        if code != 200:
            problems.append(f"Authorization: {scheme} <token>: {code} (the scheme is case-insensitive, RFC 9110)")
    wrong = {
        "the token in upper case": {"Authorization": f"Bearer {t.token.upper()}"},
        "the token and one more byte": {"Authorization": f"Bearer {t.token}x"},
        "Basic": {"Authorization": "Basic " + base64.b64encode(f"user:{t.token}".encode()).decode()},
        "another scheme": {"Authorization": f"Token {t.token}"},
        "no header": {},
    }
    for what, headers in wrong.items():
        code = request(t, "GET", t.page, headers=headers)[0]
        if code == 200:
            problems.append(f"{what}: 200")
    code = request(t, "GET", t.page + ("&" if "?" in t.page else "?") + urllib.parse.urlencode({"token": t.token}))[0]
    if code == 200:
        problems.append("the token in the query: 200")
    return problems


def absolute_uri(t: Target) -> list[str]:
    problems = []
    for target, host in ((f"http://attacker.example{t.page}", f"127.0.0.1:{t.port}"), (f"http://127.0.0.1:{t.port}{t.page}", "attacker.example")):
        code = request(t, "GET", target, host=host, headers=authorised(t))[0]
        if code != 421:
            problems.append(f"GET {target} with Host {host}: {code}, not 421")
    return problems


def csp(t: Target) -> list[str]:
    code, headers, body = request(t, "GET", t.page, headers=authorised(t))
    if code != 200:
        return [f"{t.page}: {code}"]
    policy = headers.get("content-security-policy", "")
    problems = []
    if not policy:
        problems.append("no Content-Security-Policy")
    for bad in ("unsafe-inline", "unsafe-eval", "*", "data:"):
        if "script-src" in policy and bad in policy.split("script-src", 1)[1].split(";")[0]:
            problems.append(f"script-src allows {bad}")
    if "default-src 'none'" not in policy and "default-src 'self'" not in policy:
        problems.append(f"default-src is not 'none' or 'self': {policy!r}")
    if "frame-ancestors 'none'" not in policy and headers.get("x-frame-options", "").upper() != "DENY":
        problems.append("the page may be framed")
    if headers.get("x-content-type-options") != "nosniff":
        problems.append("no X-Content-Type-Options: nosniff")
    if "access-control-allow-origin" in headers:
        problems.append("a CORS header")
    return problems


def _sign_in(t: Target) -> tuple[int, str]:
    assert t.login is not None and t.token is not None
    form = urllib.parse.urlencode({"token": t.token}).encode()
    code, headers, _ = request(t, "POST", t.login, headers={"Content-Type": "application/x-www-form-urlencoded"}, body=form)
    return code, headers.get("set-cookie", "")


def cookie_flags(t: Target) -> list[str]:
    if t.login is None or t.token is None:
        return []
    code, first = _sign_in(t)
    if code not in (302, 303) or not first:
        return [f"signing in with the token: {code}, no cookie"]
    flags = [f.strip().lower() for f in first.split(";")[1:]]
    problems = []
    if "httponly" not in flags:
        problems.append("the session cookie is not HttpOnly")
    if "samesite=strict" not in flags:
        problems.append("the session cookie is not SameSite=Strict")
    if not any(f.startswith(("max-age=", "expires=")) for f in flags):
        problems.append("the session cookie never expires (no Max-Age or Expires)")
    if t.tls is not None and "secure" not in flags:
        problems.append("the session cookie is not Secure over TLS")
    value = first.split(";")[0].split("=", 1)[1]
    if t.token in value:
        problems.append("the session cookie holds the token")
    _, second = _sign_in(t)
    if second.split(";")[0] == first.split(";")[0]:
        problems.append("two sign-ins get the same session (derived from the token: it can never be revoked)")
    return problems


def read_token_writes(t: Target) -> list[str]:
    doc = {"schema": "accel-lab-results/1", "run": {"suite": "planted", "suite_version": "1", "commit": "c0"}, "results": [{"check": "x", "node": "n", "verdict": "pass", "started_at": 1.0, "ended_at": 2.0}]}
    code = request(t, "POST", t.write, headers={**authorised(t), "Content-Type": "application/json"}, body=json.dumps(doc).encode())[0]
    return [f"POST {t.write} with the page's token: {code} (reading the page grants writing)"] if 200 <= code < 300 else []


ATTACKS: dict[str, Callable[[Target], list[str]]] = {
    "trickling_heads": trickling_heads,
    "idle_flood": idle_flood,
    "oversized_body": oversized_body,
    "nested_body": nested_body,
    "odd_host": odd_host,
    "token_case_and_type": token_case_and_type,
    "absolute_uri": absolute_uri,
    "csp": csp,
    "cookie_flags": cookie_flags,
    "read_token_writes": read_token_writes,
}
