"""The agent's dashboard in a real browser: Debian's chromium, headless, driven over the
DevTools protocol, against `accel agent` serving a real Ray 2.60 cluster
(`ray.cluster_utils.Cluster`) whose nodes are sample machines. A placement group made through
`accel.ray.placement_group` must appear on its devices; the page must load without console
errors; topology, links and metrics must be drawn; a view that stops being refreshed must show
as stale with the age the agent measured; a placement group Ray removed leaves the page (its
row and its devices' tags) at the next refresh. The screenshot goes to the test's temporary
directory, and to docs/img/dashboard.png (the one the docs show) with `UPDATE_EXPECT=1`."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import pytest

ray = pytest.importorskip("ray")
aiohttp = pytest.importorskip("aiohttp")
from ray.cluster_utils import Cluster  # noqa: E402

import accel  # noqa: E402
import accel.ray as aray  # noqa: E402
from accel.ray import _agent  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
NODES = {"nvl-a0": "gb200-nvl72-tray", "mi300x": "mi300x"}
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1700",
]


@ray.remote(num_cpus=0)
class Trainer:
    def ping(self) -> str:
        return "ok"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_http(url: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.fixture(scope="module")
def served(accel_bin, tmp_path_factory):
    """A Ray cluster of sample nodes, an agent per node (the first is the head, serving the
    cluster file), one sidecar round per node, and an accel placement group with an actor."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    tmp = tmp_path_factory.mktemp("agent")
    cluster_file = tmp / "cluster.json"
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    agents: list[subprocess.Popen[bytes]] = []
    apg = None
    try:
        for name, sample in NODES.items():
            spec = aray.node_spec(accel.sample(sample), name)
            c.add_node(num_cpus=1, num_gpus=spec["num_gpus"], resources=spec["resources"], labels=spec["labels"])
        c.wait_for_nodes()
        ray.init(address=c.address, log_to_driver=False)
        urls = {}
        for i, (name, sample) in enumerate(NODES.items()):
            aray.publish_machine(name, accel.sample(sample))
            port = _free_port()
            cmd = [str(accel_bin), "agent", "--sample", sample, "--node-name", name, "--listen", f"127.0.0.1:{port}", "--interval", "1"]
            if i == 0:
                cmd += ["--cluster-file", str(cluster_file)]
            agents.append(subprocess.Popen(cmd, stderr=subprocess.DEVNULL))
            urls[name] = f"http://127.0.0.1:{port}"
            _wait_http(urls[name] + "/v1/health")
        apg = aray.placement_group({"bundles": [{"count": 2, "connectivity": "scale-up", "vendor": ["nvidia"]}]}, name="train-pg")
        actor = Trainer.options(**apg.options(0)).remote()
        assert ray.get(actor.ping.remote(), timeout=120) == "ok"
        # Rounds "every 60 s": the document stays fresh (not stale) for the tests below.
        for i, name in enumerate(NODES):
            _agent.run_sidecar(name, urls[name], cluster_file=str(cluster_file) if i == 0 else None, once=True, interval_s=60)
        _agent.run_sidecar(next(iter(NODES)), urls[next(iter(NODES))], cluster_file=str(cluster_file), once=True, interval_s=60)
        yield {"url": urls[next(iter(NODES))], "urls": urls, "apg": apg, "cluster_file": cluster_file, "tmp": tmp}
    finally:
        for p in agents:
            p.terminate()
            p.wait(timeout=10)
        if apg is not None and not getattr(apg, "_removed_by_test", False):
            apg.remove()
        ray.shutdown()
        c.shutdown()


def test_cluster_document_holds_the_placement(served):
    doc = json.loads(served["cluster_file"].read_text())
    assert sorted(n["name"] for n in doc["nodes"]) == sorted(NODES)
    gb = next(n for n in doc["nodes"] if n["name"] == "nvl-a0")
    assert len(gb["readings"]["devices"]) == 4 and gb["readings_at"] is not None
    mi = next(n for n in doc["nodes"] if n["name"] == "mi300x")
    assert mi["readings"]["devices"] == [], "a sample without recorded readings has none"
    (pg,) = [p for p in doc["placement_groups"] if p["name"] == "train-pg"]
    planned = [d["id"] for d in served["apg"].devices(0)]
    assert pg["bundles"][0]["node"] == "nvl-a0"
    assert pg["bundles"][0]["devices"] == planned
    (actor,) = [a for a in doc["actors"] if a["class_name"] == "Trainer"]
    assert actor["placement_group_id"] == pg["id"] and actor["bundle_index"] == 0
    assert actor["node"] == "nvl-a0" and actor["devices"] == planned


class DevTools:
    """The few DevTools-protocol calls the test needs, over one page's websocket."""

    def __init__(self, ws: Any):
        self.ws = ws
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        my_id = self.next_id
        await self.ws.send_str(json.dumps({"id": my_id, "method": method, "params": params}))
        while True:
            msg = json.loads((await self.ws.receive(timeout=60)).data)
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return dict(msg.get("result", {}))
            if "method" in msg:
                self.events.append(msg)

    async def evaluate(self, expression: str) -> Any:
        r = await self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def errors(self) -> list[str]:
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.exceptionThrown":
                out.append(json.dumps(p.get("exceptionDetails", {}))[:500])
            elif e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(json.dumps(p.get("args", []))[:500])
            elif e["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(p["entry"].get("text", "") + " " + p["entry"].get("url", ""))
        return out


@contextlib.asynccontextmanager
async def chromium_devtools() -> AsyncIterator[int]:
    """Debian's headless chromium on a fresh profile, in its own process group: yields its
    DevTools port. On the way out the whole group is stopped, not only the browser: its helper
    processes write into the profile until they exit, and a profile removed while they do
    fails with "Directory not empty"."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Debian's chromium is needed (scripts/test.sh installs it)"
    profile = pathlib.Path(tempfile.mkdtemp(prefix="accel-chromium-"))
    proc = subprocess.Popen(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text().strip():
            assert proc.poll() is None, "chromium exited"
            assert time.monotonic() < deadline, "chromium did not open its DevTools port"
            await asyncio.sleep(0.2)
        yield int(port_file.read_text().split()[0])
    finally:
        _stop_group(proc)
        for attempt in range(50):  # a helper that was exiting may still flush a file
            try:
                shutil.rmtree(profile)
                break
            except FileNotFoundError:
                break
            except OSError:
                if attempt == 49:
                    raise
                time.sleep(0.1)


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the browser's process group, SIGKILL after 10 s; waits until no member is
    left (at most 10 s more)."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            proc.poll()  # reap the leader, so that the group's lookup sees only live members
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
    proc.wait(timeout=10)


async def _drive(url: str, screenshot: pathlib.Path, make_stale: Any = None) -> dict[str, Any]:
    async with chromium_devtools() as port:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/json/list") as r:
                targets = await r.json()
            page = next(t for t in targets if t["type"] == "page")
            async with http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=64 << 20) as ws:
                dt = DevTools(ws)
                for domain in ("Runtime", "Log", "Page"):
                    await dt.call(f"{domain}.enable")
                await dt.call("Page.navigate", url=url)
                deadline = time.monotonic() + 60
                while await dt.evaluate("document.readyState + '/' + (document.body && document.body.dataset.ready)") != "complete/1":
                    assert time.monotonic() < deadline, "the dashboard never finished drawing"
                    await asyncio.sleep(0.2)
                # A second poll round, so link rates and a re-render are exercised too.
                await asyncio.sleep(5.5)
                facts = await dt.evaluate(
                    """(() => {
                      const node = document.querySelector('[data-node="nvl-a0"]');
                      const q = (sel) => node ? node.querySelectorAll(sel) : [];
                      return {
                        summary: document.getElementById('summary').textContent,
                        nodes: [...document.querySelectorAll('[data-node]')].map(n => n.dataset.node),
                        devices: q('.device').length,
                        held: [...q('.device.held')].map(d => d.dataset.device),
                        pgLabels: [...q('.device .pg')].map(p => p.textContent),
                        edges: q('svg.topology line').length,
                        linkRows: q('table.links tr').length - 1,
                        deviceText: node ? node.querySelector('.device').textContent : '',
                        pgRows: [...document.querySelectorAll('#pg-table tr[data-pg]')].map(r => r.textContent),
                        status: document.getElementById('status').className,
                      };
                    })()"""
                )
                shot = await dt.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
                screenshot.parent.mkdir(parents=True, exist_ok=True)
                screenshot.write_bytes(base64.b64decode(shot["data"]))
                facts["status_text"] = await dt.evaluate("document.getElementById('status').textContent")
                if make_stale is not None:
                    # The view stops being refreshed (Ray or its sidecar gone): the page says so
                    # from the agent's age_s and stale, whatever the browser's clock says.
                    make_stale()
                    deadline = time.monotonic() + 15
                    while "stale" not in (await dt.evaluate("document.getElementById('status').className")):
                        assert time.monotonic() < deadline, "the page never showed the view as stale"
                        await asyncio.sleep(0.3)
                    facts["stale_text"] = await dt.evaluate("document.getElementById('status').textContent")
                    facts["sick"] = await dt.evaluate(
                        "[...document.querySelectorAll('.device.sick')].map(d => d.dataset.device + ' ' + d.querySelector('.health').textContent)"
                    )
                facts["errors"] = dt.errors()
                return facts


def test_dashboard_in_chromium_shows_topology_metrics_and_placement(served, tmp_path):
    # The docs' screenshot is refreshed only on request, so a test run leaves the tree clean.
    update = os.environ.get("UPDATE_EXPECT") == "1"
    screenshot = REPO / "docs" / "img" / "dashboard.png" if update else tmp_path / "dashboard.png"
    cluster_file = served["cluster_file"]
    fresh = cluster_file.read_text()

    def make_stale() -> None:
        doc = json.loads(fresh)
        doc["updated_at"] = time.time() - 300
        # And a device whose health went bad: the page marks it with its reason.
        mi = next(n for n in doc["nodes"] if n["name"] == "mi300x")
        mi["machine"]["accelerators"][2]["health"] = {"state": "unhealthy", "reasons": ["XID 79"]}
        _agent.write_json_atomic(str(cluster_file), doc)

    try:
        facts = asyncio.run(_drive(served["url"] + "/", screenshot, make_stale))
    finally:
        cluster_file.write_text(fresh)
    assert facts["errors"] == [], facts["errors"]
    assert facts["status"] == "status", facts
    assert facts["status_text"].startswith("updated, ") and "s old" in facts["status_text"], facts["status_text"]
    stale_age = int(facts["stale_text"].split("stale, ")[1].split(" s old")[0])
    assert 300 <= stale_age < 400, facts["stale_text"]
    sick = accel.sample("mi300x")["accelerators"][2]["id"]
    assert facts["sick"] == [f"{sick} unhealthy: XID 79"], facts["sick"]
    assert sorted(facts["nodes"]) == sorted(NODES)
    assert "2 nodes" in facts["summary"], facts["summary"]
    assert facts["devices"] == 4
    assert facts["edges"] == 6, "the tray's six switched GPU pairs"
    assert facts["linkRows"] == 72, "the 18 NVLinks of each of 4 GPUs (NV18), as the model has them"
    assert "72.0 W" in facts["deviceText"] and "33 °C" in facts["deviceText"], facts["deviceText"]
    planned = [d["id"] for d in served["apg"].devices(0)]
    assert sorted(facts["held"]) == sorted(planned), facts
    assert all("train-pg" in label and "Trainer" in label for label in facts["pgLabels"]), facts["pgLabels"]
    assert any("train-pg" in row and "nvl-a0" in row for row in facts["pgRows"]), facts["pgRows"]
    assert screenshot.stat().st_size > 10_000


def test_a_removed_placement_group_leaves_the_page_at_the_next_refresh(served, tmp_path):
    # Runs last (it removes the module's placement group). Ray keeps a removed group in its
    # table as REMOVED; one sidecar round later the document and the page no longer hold it.
    apg = served["apg"]
    apg.remove()
    apg._removed_by_test = True
    head = next(iter(NODES))
    _agent.run_sidecar(head, served["urls"][head], cluster_file=str(served["cluster_file"]), once=True, interval_s=60)
    doc = json.loads(served["cluster_file"].read_text())
    assert [p["name"] for p in doc["placement_groups"]] == [], doc["placement_groups"]
    facts = asyncio.run(_drive(served["url"] + "/", tmp_path / "after.png"))
    assert facts["errors"] == [], facts["errors"]
    assert facts["held"] == [] and facts["pgLabels"] == [], facts
    assert facts["pgRows"] == [] and "0 placement groups" in facts["summary"], facts
