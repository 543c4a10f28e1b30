"""The lab's pages as a user reaches them: rendered into a directory (`accel lab pages`) and
served by a real node agent (`accel agent --lab-pages DIR`, the built binary), plain on
loopback or over TLS, with a token or without; and Debian's headless chromium driven over the
DevTools protocol (as in test_agent_browser.py) to read them, signing in through the form when
the agent has a token."""

from __future__ import annotations

import asyncio
import http.client
import os
import pathlib
import ssl
import subprocess
import time
from collections.abc import Awaitable, Callable
from typing import Any

ACCEL_BIN = pathlib.Path(__file__).resolve().parents[2] / "target" / "debug" / "accel"


class Agent:
    """A running `accel agent` serving a lab pages directory; stopped by `stop()`."""

    def __init__(self, pages: pathlib.Path, *, token_file: pathlib.Path | None = None, tls: tuple[pathlib.Path, pathlib.Path] | None = None, ca: pathlib.Path | None = None, extra: tuple[str, ...] = ()):
        args = [str(ACCEL_BIN), "agent", "--sample", "mi300x", "--listen", "127.0.0.1:0", "--interval", "60", "--lab-pages", str(pages), *extra]
        if token_file is not None:
            args += ["--token-file", str(token_file)]
        if tls is not None:
            args += ["--tls-cert", str(tls[0]), "--tls-key", str(tls[1])]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert self.proc.stderr is not None
        deadline = time.monotonic() + 60
        line, said = "", ""
        while "serving " not in line:
            line = self.proc.stderr.readline()
            said += line
            assert line or self.proc.poll() is None, f"the agent did not start: {said}"
            assert time.monotonic() < deadline, "the agent did not start in 60 s"
        self.url = line.strip().split("serving ", 1)[1].rstrip("/")
        self.port = int(self.url.rsplit(":", 1)[1])
        self.tls = tls is not None
        self.ca = ca

    def context(self) -> ssl.SSLContext | None:
        return ssl.create_default_context(cafile=str(self.ca)) if self.tls else None

    def request(self, method: str, path: str, *, host: str | None = "127.0.0.1", headers: dict[str, str] | None = None, body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
        """One request; (status, lower-cased headers, body)."""
        if self.tls:
            conn: http.client.HTTPConnection = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=30, context=self.context())
        else:
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

    def stop(self) -> str:
        stop(self.proc)
        assert self.proc.stderr is not None
        return self.proc.stderr.read()


def stop(proc: subprocess.Popen[str]) -> None:
    """SIGTERM, then SIGKILL after 10 s."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def token_file(tmp: pathlib.Path) -> tuple[str, pathlib.Path]:
    """A random token in `tmp/token`, mode 0600 (as the agent wants it)."""
    secret = "tok-" + os.urandom(16).hex()
    path = tmp / "token"
    path.write_text(secret + "\n")
    path.chmod(0o600)
    return secret, path


async def browse(base: str, visit: Callable[[Any, Callable[[str], Awaitable[None]]], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    """Opens headless chromium, hands `visit(devtools, load)` the page, returns its facts with
    the page's errors under `errors`."""
    import aiohttp
    from test_agent_browser import DevTools, chromium_devtools

    async with chromium_devtools() as port:
        async with aiohttp.ClientSession() as http_session:
            async with http_session.get(f"http://127.0.0.1:{port}/json/list") as r:
                page = next(t for t in await r.json() if t["type"] == "page")
            async with http_session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=64 << 20) as ws:
                dt = DevTools(ws)
                for domain in ("Runtime", "Log", "Page"):
                    await dt.call(f"{domain}.enable")

                async def load(url: str) -> None:
                    await dt.call("Page.navigate", url=url if url.startswith("http") else base + url)
                    await settle()

                async def settle() -> None:
                    deadline = time.monotonic() + 30
                    await asyncio.sleep(0.3)
                    while await dt.evaluate("document.readyState") != "complete":
                        assert time.monotonic() < deadline, "the page never loaded"
                        await asyncio.sleep(0.1)

                dt.settle = settle
                facts = await visit(dt, load)
                facts["errors"] = dt.errors()
                return facts


async def sign_in(dt: Any, load: Callable[[str], Awaitable[None]], token: str) -> None:
    """Signs in through the lab's form, as a person would: type the token, press the button."""
    await load("/lab/login")
    await dt.evaluate(f"document.querySelector('input[name=token]').value = {token!r}; document.querySelector('form').submit(); true")
    await dt.settle()
