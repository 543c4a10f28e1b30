"""Start-up as a new user meets it, with real processes and a real `ray start --head`:
`python -m accel.ray start` runs this interpreter's Ray with the venv off PATH; `--temp-dir DIR`
(space form) puts accel's files in Ray's real session directory under DIR; an agent that dies
at once makes `start` fail with its log's last lines; `stop` leaves no agent or sidecar and
leaves Ray running (saying so), and runs `ray stop` only with `--ray`; a sidecar exits when its
cluster is gone; the agent marks a stale cluster view with its age by its own clock; bad input
exits 2 with one line.

Each Ray here has its own temp dir (short: Ray's socket paths are limited to 107 bytes) and
ports, and the tests stop it by signalling the processes of that temp dir: `ray stop` would
stop every Ray of this user on the machine, other sessions' too."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from accel.ray._start import ray_option

PY = sys.executable
START_TIMEOUT_S = 240


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(accel_bin: pathlib.Path) -> dict[str, str]:
    """The environment of a user who did not activate the venv: no venv on PATH, no `ray` on
    PATH (else the test could not tell which Ray ran)."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "RAY_ADDRESS")}
    venv_bin = os.path.dirname(PY)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "/usr/bin:/bin").split(os.pathsep) if p and os.path.realpath(p) != os.path.realpath(venv_bin))
    assert shutil.which("ray", path=env["PATH"]) is None, "a `ray` outside the venv is on PATH; this test needs none"
    env["ACCEL_BIN"] = str(accel_bin)
    env["RAY_AUTH_MODE"] = env.get("RAY_AUTH_MODE", "disabled")
    return env


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except OSError:
        return False


def _procs_mentioning(text: str) -> list[str]:
    """Live processes whose command line holds `text`."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if text in cmd and int(pid) != os.getpid() and _pid_alive(int(pid)):
            out.append(f"{pid} {cmd[:200]}")
    return out


def _stop_ray_in(d: pathlib.Path) -> None:
    """Stops the Ray this test started in temp dir `d` (and only it): SIGTERM to the processes
    of that dir, SIGKILL to what is left after 30 s."""
    for sig, wait_s in ((15, 30.0), (9, 10.0)):
        for line in _procs_mentioning(str(d)):
            try:
                os.kill(int(line.split()[0]), sig)
            except OSError:
                pass
        deadline = time.monotonic() + wait_s
        while _procs_mentioning(str(d)) and time.monotonic() < deadline:
            time.sleep(0.2)


def _wait(cond: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def _get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=5) as r:
        doc: dict[str, Any] = json.loads(r.read())
    return doc


@pytest.fixture
def ray_dir() -> Iterator[pathlib.Path]:
    """A Ray temp dir of its own; whatever still runs from it at the end is stopped."""
    d = pathlib.Path(tempfile.mkdtemp(prefix="r", dir=os.environ.get("RAY_TMPDIR")))
    yield d
    if _procs_mentioning(str(d)):
        subprocess.run([PY, "-m", "accel.ray", "stop", "--temp-dir", str(d)], capture_output=True, timeout=120)
    _stop_ray_in(d)


def _start(env: dict[str, str], ray_dir: pathlib.Path, *extra: str) -> subprocess.CompletedProcess[str]:
    ports = {opt: str(_free_port()) for opt in ("--port", "--ray-client-server-port", "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--runtime-env-agent-port")}
    cmd = [PY, "-m", "accel.ray", "start", "--head", "--temp-dir", str(ray_dir), "--num-cpus", "1", "--include-dashboard=false"]
    for opt, port in ports.items():
        cmd += [opt, port]
    return subprocess.run(cmd + list(extra), env=env, capture_output=True, text=True, timeout=START_TIMEOUT_S)


@pytest.mark.parametrize(
    "args, says",
    [
        (["--sample", "dgx-h10"], "unknown sample 'dgx-h10'; did you mean 'dgx-h100'?"),
        (["--sample", "no-such-machine"], "(known: aws-p4d-24xlarge, aws-p5en-48xlarge, aws-p6-b200-48xlarge, aws-p6-b300-48xlarge, "
            "aws-p6e-gb200-36xlarge, dgx-h100, "),
        (["--root", "/nonexistent-accel-root"], "--root /nonexistent-accel-root:"),
        (["--sample", "mi300x", "--agent-interval", "0"], "--agent-interval 0 is not between"),
    ],
)
def test_bad_input_exits_2_with_one_line(args: list[str], says: str) -> None:
    done = subprocess.run([PY, "-m", "accel.ray", "start", *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    assert done.stderr.count("\n") == 1 and says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_ray_option_takes_both_forms() -> None:
    assert ray_option(["--head", "--temp-dir", "/a"], "--temp-dir") == "/a"
    assert ray_option(["--temp-dir=/b", "--head"], "--temp-dir") == "/b"
    assert ray_option(["--temp-dir-x=/c"], "--temp-dir") is None


def test_start_without_the_venv_on_path_then_stop_leaves_nothing(accel_bin: pathlib.Path, ray_dir: pathlib.Path) -> None:
    env = _env(accel_bin)
    port = _free_port()
    done = _start(env, ray_dir, "--sample", "gb200-nvl72-tray", "--node-name", "n0", "--agent", "--agent-listen", f"127.0.0.1:{port}", "--agent-interval", "1")
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    # --temp-dir DIR (space form): Ray's session and accel's files are under DIR, and accel
    # made no directory where Ray keeps its session_latest link.
    latest = ray_dir / "session_latest"
    assert latest.is_symlink(), sorted(p.name for p in ray_dir.iterdir())
    session = latest.resolve()
    assert session.parent == ray_dir.resolve()
    default_latest = pathlib.Path(os.environ["RAY_TMPDIR"]) / "ray" / "session_latest"
    assert not (default_latest.exists() and not default_latest.is_symlink()), "a directory in the place of Ray's link"
    agent_pid = int((session / "accel" / "accel-agent.pid").read_text())
    sidecar_pid = int((session / "accel" / "accel-sidecar.pid").read_text())
    assert (session / "logs" / "accel-agent.log").exists() and (session / "accel" / "cluster.json").exists()
    # The agent answered before start returned, and serves the head sidecar's live view.
    doc = _get_json(f"http://127.0.0.1:{port}/v1/cluster")
    assert doc["source"] == "ray" and doc["stale"] is False and 0 <= doc["age_s"] < 5, {k: doc.get(k) for k in ("source", "stale", "age_s")}
    assert [n["name"] for n in doc["nodes"]] == ["n0"]
    assert _pid_alive(agent_pid) and _pid_alive(sidecar_pid)

    stopped = subprocess.run([PY, "-m", "accel.ray", "stop", "--temp-dir", str(ray_dir)], env=env, capture_output=True, text=True, timeout=120)
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    assert f"pid {agent_pid}" in stopped.stderr and f"pid {sidecar_pid}" in stopped.stderr, stopped.stderr
    assert not _pid_alive(agent_pid) and not _pid_alive(sidecar_pid)
    # Only what accel started: Ray keeps running, and stop says how to stop it too.
    assert "Ray keeps running" in stopped.stderr and "stop --ray" in stopped.stderr, stopped.stderr
    assert any("raylet" in p or "gcs_server" in p for p in _procs_mentioning(str(ray_dir))), "stop stopped Ray"
    _stop_ray_in(ray_dir)
    assert not _procs_mentioning(str(ray_dir)), _procs_mentioning(str(ray_dir))


def test_stop_runs_ray_stop_only_with_ray_and_says_what_it_stops(monkeypatch, capsys, tmp_path: pathlib.Path) -> None:
    from accel.ray import _start

    calls: list[list[str]] = []
    monkeypatch.setattr(_start.subprocess, "call", lambda cmd: calls.append(cmd) or 0)
    assert _start.stop(["--temp-dir", str(tmp_path)]) == 0
    assert calls == [] and "Ray keeps running" in capsys.readouterr().err
    assert _start.stop(["--temp-dir", str(tmp_path), "--force"]) == 2, "ray stop's arguments need --ray"
    assert "need --ray" in capsys.readouterr().err and calls == []
    assert _start.stop(["--temp-dir", str(tmp_path), "--ray", "--force"]) == 0
    assert calls == [[*_start.ray_cli(), "stop", "--force"]]
    assert "every Ray process of this user on this machine" in capsys.readouterr().err


def test_an_agent_that_dies_fails_start_and_a_sidecar_leaves_with_its_cluster(accel_bin: pathlib.Path, ray_dir: pathlib.Path, tmp_path: pathlib.Path) -> None:
    env = _env(accel_bin)
    with socket.socket() as busy:  # the agent's port, already taken
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = _start(env, ray_dir, "--sample", "mi300x", "--agent", "--agent-listen", f"127.0.0.1:{port}")
    assert done.returncode == 1, f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    assert "the agent exited with status" in done.stderr, done.stderr[-3000:]
    assert "cannot listen on" in done.stderr, "the last lines of the agent's log are printed"
    assert "accel-sidecar" not in done.stderr.split("the agent exited")[0], "no sidecar for a dead agent"
    assert not any("agent --listen" in p for p in _procs_mentioning(str(ray_dir)))

    # Ray still runs: a sidecar on it exits on its own once Ray is stopped.
    address = (ray_dir / "ray_current_cluster").read_text().strip()
    log = tmp_path / "sidecar.log"
    ready = tmp_path / "ready"
    sidecar_cmd = [PY, "-m", "accel.ray", "sidecar", "--node-name", "x", "--agent-url", f"http://127.0.0.1:{_free_port()}"]
    sidecar_cmd += ["--address", address, "--interval", "0.5", "--ready-file", str(ready)]
    with open(log, "wb") as out:
        sidecar = subprocess.Popen(sidecar_cmd, env=env, stdout=out, stderr=out)
    try:
        _wait(lambda: ready.exists() or sidecar.poll() is not None, 120, "the sidecar never finished a round")
        assert sidecar.poll() is None, log.read_text()
        _stop_ray_in(ray_dir)
        # Its own check, within seconds (Ray's client alone would end it only after a minute).
        _wait(lambda: sidecar.poll() is not None, 20, "the sidecar outlived its cluster")
        assert "is gone; exiting" in log.read_text(), log.read_text()[-2000:]
    finally:
        if sidecar.poll() is None:
            sidecar.kill()
        sidecar.wait(timeout=10)


def test_the_agent_marks_a_stale_cluster_view_by_its_own_clock(accel_bin: pathlib.Path, tmp_path: pathlib.Path) -> None:
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"source": "ray", "updated_at": time.time() - 120, "interval_s": 1, "nodes": []}))
    port = _free_port()
    agent = subprocess.Popen(
        [str(accel_bin), "agent", "--sample", "mi300x", "--listen", f"127.0.0.1:{port}", "--cluster-file", str(cluster)],
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}/v1/cluster"
        docs: list[dict[str, Any]] = []

        def answered() -> bool:
            try:
                docs.append(_get_json(url))
                return True
            except OSError:
                return False

        _wait(answered, 60, "the agent never answered")
        assert docs[-1]["stale"] is True and 119 <= docs[-1]["age_s"] < 180, docs[-1]
        cluster.write_text(json.dumps({"source": "ray", "updated_at": time.time(), "interval_s": 1, "nodes": []}))
        doc = _get_json(url)
        assert doc["stale"] is False and doc["age_s"] < 5, doc
        cluster.write_text(json.dumps({"source": "ray", "nodes": []}))
        doc = _get_json(url)
        assert doc["stale"] is True and doc["age_s"] is None, "a view without its time is never live"
    finally:
        agent.terminate()
        agent.wait(timeout=10)
