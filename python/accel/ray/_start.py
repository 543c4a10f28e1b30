"""`ray start` with accel's view of the node: one custom resource per device, the device-kind
counts, `accel.io/*` labels, and the machine published to Ray's KV for the planner; with
`--agent`, the node agent and its Ray sidecar beside it; and `stop`, which stops what accel
started (and, with `--ray`, Ray: `ray stop`, which stops every Ray process of the user).

Start-up never reports what did not happen: Ray runs with this interpreter's own Ray (not
whichever `ray` comes first on PATH); bad input exits 2 with one line before anything starts;
an agent or sidecar that dies or does not come up exits 1 with the last lines of its log. What
accel starts lives in Ray's real session directory (`<session>/accel/`, logs in
`<session>/logs/accel-*.log`), never in the `session_latest` link's place.

`cluster-json` prints the published machines as one cluster document (`accel.ray._export`)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

from .. import AccelError, discover
from .._errors import INSTALL_RAY, did_you_mean
from .._plan import sample, samples
from .._python import module_argv
from ._agent import agent_context, default_ray_temp_dir, install_grafana_dashboard
from ._placement import allow_unknown_health, label_value, node_spec, publish_machine
from ._monitor import publish_source

PROG = "python -m accel.ray"
# How long `start` waits for the agent to serve (it discovers the node first), and for the
# sidecar's first round (it connects to Ray first).
AGENT_READY_S = 60.0
SIDECAR_READY_S = 120.0
# How long `stop` waits for a process after SIGTERM before SIGKILL.
STOP_GRACE_S = 5.0
LOG_TAIL_LINES = 20
# The line the agent prints once it listens (crates/cli/src/agent.rs): proof that the process
# answering is the one just started, not an older agent on the same port.
AGENT_SERVING = "accel agent: serving http"  # http:// or https://
_PID_FILES = {"accel-sidecar": "accel.ray", "accel-agent": "agent"}  # pid file -> word its command line holds


def ray_cli() -> list[str]:
    """This interpreter's Ray command line (`ray ...`), whatever else is on PATH."""
    return module_argv("ray.scripts.scripts")


def ray_start_command(machine: dict[str, Any], name: str, ray_args: list[str]) -> list[str]:
    """The `ray start` command line for a node backed by `machine` (`start` runs it with
    this interpreter's Ray, `ray_cli()`)."""
    spec = node_spec(machine, name)
    cmd = ["ray", "start", f"--num-gpus={spec['num_gpus']}"]
    if spec["resources"]:
        cmd.append("--resources=" + json.dumps(spec["resources"], sort_keys=True, separators=(",", ":")))
    cmd.append("--labels=" + ",".join(f"{k}={v}" for k, v in sorted(spec["labels"].items())))
    return cmd + list(ray_args)


def _warn_left_out(machine: dict[str, Any]) -> None:
    """Says which devices Ray will not get for their health, and why (fail closed is loud)."""
    allow = (machine.get("attributes") or {}).get("health.unknown") == "allow"
    for acc in machine.get("accelerators", []):
        health = acc.get("health") or {}
        state = health.get("state")
        if state == "unhealthy" or (state == "unknown" and not allow):
            reasons = "; ".join(health.get("reasons") or []) or "no reason given"
            hint = " (--allow-unknown-health places it)" if state == "unknown" else ""
            print(f"accel: warning: {acc.get('id')} left out: {state}: {reasons}{hint}", file=sys.stderr)


def ray_option(args: list[str], name: str) -> str | None:
    """The value of a `ray start` option in either form (`--temp-dir=DIR`, `--temp-dir DIR`);
    the last one wins, as in Ray's own parser."""
    value = None
    for i, arg in enumerate(args):
        if arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
        elif arg == name and i + 1 < len(args):
            value = args[i + 1]
    return value


def _local_url(listen: str, tls: bool = False) -> str:
    """How a process on this node reaches an agent listening on `listen` (over TLS: https)."""
    host, _, port = listen.rpartition(":")
    scheme = "https" if tls else "http"
    return f"{scheme}://127.0.0.1:{port}" if host in ("0.0.0.0", "[::]", "") else f"{scheme}://{listen}"


def agent_commands(
    name: str,
    *,
    head: bool,
    accel_bin: str,
    listen: str = "127.0.0.1:9477",
    sample: str | None = None,
    root: str | None = None,
    token_file: str | None = None,
    session_dir: str = "/tmp/ray/session_latest",
    temp_dir: str = "/tmp/ray",
    address: str = "auto",
    interval: float | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
) -> list[list[str]]:
    """The node agent and its Ray sidecar started beside `ray start` (`--agent`): the agent
    serves this node; on the head it also serves the cluster document the head's sidecar
    writes, and the sidecar writes the Prometheus file-SD entry of every node's agent."""
    state = os.path.join(session_dir, "accel")
    agent = [accel_bin, "agent", "--listen", listen, "--node-name", name, "--transport-dir", os.path.join(state, "transport")]
    if sample:
        agent += ["--sample", sample]
    elif root:
        agent += ["--root", root]
    sidecar = [*module_argv("accel.ray"), "sidecar", "--node-name", name, "--agent-url", _local_url(listen, bool(tls_cert)), "--address", address]
    if tls_cert and tls_key:
        agent += ["--tls-cert", tls_cert, "--tls-key", tls_key]
        sidecar += ["--agent-cert", tls_cert]
    sidecar += ["--ready-file", os.path.join(state, "sidecar.ready")]
    if interval is not None:
        agent += ["--interval", f"{interval:g}"]
        sidecar += ["--interval", f"{interval:g}"]
    if token_file:
        agent += ["--token-file", token_file]
        sidecar += ["--token-file", token_file]
    if head:
        cluster = os.path.join(state, "cluster.json")
        agent += ["--cluster-file", cluster]
        sidecar += ["--cluster-file", cluster, "--file-sd", os.path.join(temp_dir, "accel_prom_metrics_service_discovery.json")]
    return [agent, sidecar]


class StartError(Exception):
    """A process `start` launched died or did not come up; carries its log's last lines."""

    def __init__(self, message: str, log: str | None = None):
        super().__init__(message)
        self.log = log


def log_tail(path: str, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a log file ("" when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _read_from(path: str, offset: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(1 << 20).decode("utf-8", "replace")
    except OSError:
        return ""


def _spawn(cmd: list[str], log: str, pid_file: str) -> subprocess.Popen[bytes]:
    """Starts `cmd` as a daemon (own session, output appended to `log`) and records its pid."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True)
    with open(pid_file, "w") as f:
        f.write(f"{proc.pid}\n")
    return proc


def _answers(url: str, token: str | None, context: Any = None) -> bool:
    req = urllib.request.Request(url + "/v1/health")
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=2, context=context):  # noqa: S310 (this node's agent)
            return True
    except urllib.error.HTTPError:
        return True  # it answers (503 while its sampler is stuck is still an answer)
    except OSError:
        return False


def wait_agent(proc: subprocess.Popen[bytes], url: str, log: str, offset: int, token: str | None, timeout_s: float, context: Any = None) -> None:
    """Returns once the agent just started listens and answers `/v1/health`; raises
    `StartError` if it exits first or takes longer than `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        rc = proc.poll()
        if rc is not None:
            raise StartError(f"the agent exited with status {rc} before it served", log)
        if AGENT_SERVING in _read_from(log, offset) and _answers(url, token, context):
            return
        if time.monotonic() > deadline:
            raise StartError(f"the agent did not answer at {url} within {timeout_s:g} s", log)
        time.sleep(0.2)


def wait_sidecar(proc: subprocess.Popen[bytes], ready_file: str, log: str, timeout_s: float) -> None:
    """Returns once the sidecar finished its first round (it writes `ready_file`) and still
    runs; raises `StartError` if it exits or takes longer than `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        rc = proc.poll()
        if rc is not None:
            raise StartError(f"the sidecar exited with status {rc}", log)
        if os.path.exists(ready_file):
            time.sleep(0.5)  # still alive just after its first round?
            rc = proc.poll()
            if rc is not None:
                raise StartError(f"the sidecar exited with status {rc} after its first round", log)
            return
        if time.monotonic() > deadline:
            raise StartError(f"the sidecar did not finish its first round within {timeout_s:g} s", log)
        time.sleep(0.2)


def _connect(address: str) -> tuple[str, str, str]:
    """Connects to the Ray node just started: its real session and temp directories and its
    GCS address. Needs `ray.shutdown()` after."""
    import ray

    ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    node: Any = getattr(ray._private.worker, "_global_node")
    return str(node.get_session_dir_path()), str(node.get_temp_dir_path()), str(ray.get_runtime_context().gcs_address)


def _ray_address(ray_args: list[str], temp_dir: str | None) -> str:
    """The cluster `ray start` just joined (`--address`) or started (the address it wrote
    under its temp dir); "auto" when neither is known."""
    given = ray_option(ray_args, "--address")
    if given:
        return given
    try:
        from ray._private.utils import read_ray_address

        found = read_ray_address(temp_dir)
    except (ImportError, OSError):
        found = None
    return str(found) if found else "auto"


def _stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_GRACE_S)


def _start_agent(args: argparse.Namespace, accel_bin: str, name: str, ray_args: list[str], session: str, temp_dir: str, gcs: str) -> int:
    """Starts the agent, waits until it serves, then the sidecar, and waits for its first
    round. Either failing stops both and exits 1 with its log's last lines; Ray keeps running."""
    head = "--head" in ray_args
    agent_cmd, sidecar_cmd = agent_commands(
        name,
        head=head,
        accel_bin=accel_bin,
        listen=args.agent_listen,
        sample=args.sample,
        root=args.root,
        token_file=args.agent_token_file,
        session_dir=session,
        temp_dir=temp_dir,
        address=gcs,
        interval=args.agent_interval,
        tls_cert=args.agent_tls_cert,
        tls_key=args.agent_tls_key,
    )
    tls = bool(args.agent_tls_cert)
    state, logs = os.path.join(session, "accel"), os.path.join(session, "logs")
    os.makedirs(state, exist_ok=True)
    os.makedirs(logs, exist_ok=True)
    ready_file = sidecar_cmd[sidecar_cmd.index("--ready-file") + 1]
    if os.path.exists(ready_file):
        os.unlink(ready_file)
    token = None
    if args.agent_token_file:
        try:
            with open(args.agent_token_file) as f:
                token = f.readline().strip()
        except OSError:
            token = None  # the agent says what is wrong with it, in its log
    started: list[subprocess.Popen[bytes]] = []
    try:
        agent_log = os.path.join(logs, "accel-agent.log")
        offset = os.path.getsize(agent_log) if os.path.exists(agent_log) else 0
        agent = _spawn(agent_cmd, agent_log, os.path.join(state, "accel-agent.pid"))
        started.append(agent)
        print(f"accel: starting accel-agent (pid {agent.pid}): {shlex.join(agent_cmd)}", file=sys.stderr)
        wait_agent(agent, _local_url(args.agent_listen, tls), agent_log, offset, token, AGENT_READY_S, agent_context(args.agent_tls_cert))
        print(f"accel: accel-agent serves {_local_url(args.agent_listen, tls)}/", file=sys.stderr)
        sidecar_log = os.path.join(logs, "accel-sidecar.log")
        sidecar = _spawn(sidecar_cmd, sidecar_log, os.path.join(state, "accel-sidecar.pid"))
        started.append(sidecar)
        print(f"accel: starting accel-sidecar (pid {sidecar.pid}): {shlex.join(sidecar_cmd)}", file=sys.stderr)
        wait_sidecar(sidecar, ready_file, sidecar_log, SIDECAR_READY_S)
        print("accel: accel-sidecar finished its first round", file=sys.stderr)
    except StartError as e:
        _stop_all(started)
        print(f"accel: error: {e}", file=sys.stderr)
        if e.log:
            tail = log_tail(e.log)
            print(f"accel: last lines of {e.log}:", file=sys.stderr)
            print(tail or "(empty)", file=sys.stderr)
        print(f"accel: Ray itself is still running on this node; `{PROG} stop --ray` stops it", file=sys.stderr)
        return 1
    if head:
        print(f"accel: Grafana dashboard {install_grafana_dashboard(session_dir=session)}", file=sys.stderr)
    return 0


def _usage_error(command: str, message: str) -> int:
    print(f"{PROG}{' ' + command if command else ''}: error: {message}", file=sys.stderr)
    return 2


def _machine(args: argparse.Namespace) -> dict[str, Any]:
    """The machine the node stands for; `ValueError` (one line) for a bad --sample or --root."""
    if args.sample and args.root:
        raise ValueError("--sample and --root are exclusive")
    if args.sample:
        known = samples()
        if args.sample not in known:
            hint = did_you_mean(args.sample, known)
            raise ValueError(f"unknown sample {args.sample!r}{hint} (known: {', '.join(known)})")
        return sample(args.sample)
    try:
        return discover(args.root)
    except AccelError as e:
        raise ValueError(f"--root {args.root}: {e}" if args.root else f"cannot discover this machine: {e}") from None


def _publish_lab(args: argparse.Namespace, name: str) -> None:
    """`--lab`: the lab's name, the owner and this node's environment fingerprint (what `accel env
    --json` gives, of the same --sample or --root, computed in process) into Ray's KV, for `accel
    lab run`."""
    from ..lab._repro import ReproError, this_environment  # the lab needs Python 3.11 (tomllib): imported only here
    from ..lab._run import publish_lab

    where = ["--sample", args.sample] if args.sample else ["--root", args.root] if args.root else []
    env: dict[str, Any] | None
    try:
        env = this_environment("accel", where)
    except ReproError as e:
        env = None
        print(f"accel: warning: no environment fingerprint for the lab: {e}", file=sys.stderr)
    # Where discovery reads this node, so the lab takes device health before and after each check.
    source = {"sample": args.sample} if args.sample else {"root": os.path.abspath(args.root)} if args.root else {}
    publish_lab(name, args.lab, args.owner, env, source)
    print(f"accel: node {name} joined lab {args.lab!r}" + (f" (owner {args.owner})" if args.owner else ""), file=sys.stderr)


def start(argv: list[str]) -> int:
    """`python -m accel.ray start`."""
    parser = argparse.ArgumentParser(
        prog=f"{PROG} start",
        description="Start a Ray node with the resources and labels accel discovers on this machine "
        "(with this interpreter's Ray). Other arguments go to `ray start`.",
        epilog="Exit status:\n  0  success\n  1  Ray, the agent or its sidecar did not start (the log's last lines "
        "are printed)\n  2  invalid input (an unknown sample, a bad --root or option)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--node-name", help="the planner's name for this node (default: the hostname)")
    parser.add_argument("--sample", help="use an embedded sample machine instead of this one (demos, tests)")
    parser.add_argument("--root", help="discover a captured machine (a directory holding sys/ and proc/)")
    parser.add_argument("--dry-run", action="store_true", help="print the ray start command and exit")
    parser.add_argument(
        "--allow-unknown-health",
        action="store_true",
        help="place devices whose health is unknown (a family with no health source here); by default they are "
        "left out of Ray's resources and of plans, like unhealthy ones (fail closed)",
    )
    parser.add_argument("--agent", action="store_true", help="also start `accel agent` and its Ray sidecar on this node")
    parser.add_argument("--agent-listen", default="127.0.0.1:9477", help="the agent's address (non-loopback needs a token and TLS)")
    parser.add_argument("--agent-token-file", help="the agent's bearer token file")
    parser.add_argument("--agent-tls-cert", help="the agent's TLS certificate (PEM; with --agent-tls-key): needed with a non-loopback --agent-listen")
    parser.add_argument("--agent-tls-key", help="the agent's TLS key (PEM, mode 600)")
    parser.add_argument("--agent-interval", type=float, default=5.0, help="seconds between the agent's samples and the sidecar's rounds")
    parser.add_argument("--lab", help="join the lab NAME (docs/lab.md): publish the lab, --owner and this node's `accel env` fingerprint")
    parser.add_argument("--owner", default="", help="who maintains this lab node (with --lab)")
    args, ray_args = parser.parse_known_args(argv)
    if args.owner and not args.lab:
        return _usage_error("start", "--owner needs --lab")
    try:
        machine = _machine(args)
    except ValueError as e:
        return _usage_error("start", str(e))
    if not 0.05 <= args.agent_interval <= 3600:
        return _usage_error("start", f"--agent-interval {args.agent_interval:g} is not between 0.05 and 3600 seconds")
    accel_bin = os.environ.get("ACCEL_BIN") or shutil.which("accel")
    if args.agent and not args.dry_run:
        if not accel_bin:
            return _usage_error("start", "--agent needs the `accel` binary on PATH (or ACCEL_BIN)")
        if not os.access(accel_bin, os.X_OK):
            return _usage_error("start", f"ACCEL_BIN={accel_bin} is not an executable file")
    if args.allow_unknown_health:
        machine = allow_unknown_health(machine)
    # The node's name is a label value too (accel.io/node), so it takes the label alphabet.
    given = args.node_name or machine.get("host", {}).get("hostname") or socket.gethostname()
    name = label_value(given)
    if not name:
        return _usage_error("start", f"the node name {given!r} keeps no character of a label value ([A-Za-z0-9._-]): pass --node-name")
    cmd = ray_start_command(machine, name, ray_args)
    _warn_left_out(machine)
    if args.dry_run:
        print(shlex.join(cmd))
        if args.agent:
            # Ray names the session directory when it starts; <session> stands for it.
            temp_dir = ray_option(ray_args, "--temp-dir") or default_ray_temp_dir()
            for extra in agent_commands(
                name,
                head="--head" in ray_args,
                accel_bin=accel_bin or "accel",
                listen=args.agent_listen,
                sample=args.sample,
                root=args.root,
                token_file=args.agent_token_file,
                session_dir=os.path.join(temp_dir, "<session>"),
                temp_dir=temp_dir,
                address=ray_option(ray_args, "--address") or "<this cluster>",
                interval=args.agent_interval,
            ):
                print(shlex.join(extra))
        return 0
    if importlib.util.find_spec("ray") is None:
        return _usage_error("start", f"Ray is not installed in {sys.executable}: {INSTALL_RAY}")
    rc = subprocess.call(ray_cli() + cmd[1:])
    if rc != 0:
        return rc
    import ray

    address = _ray_address(ray_args, ray_option(ray_args, "--temp-dir"))
    try:
        session, temp_dir, gcs = _connect(address)
        publish_machine(name, machine)
        # Where this node's health monitor probes (accel.ray.start_monitors): the same machine.
        publish_source(name, {"sample": args.sample} if args.sample else {"root": os.path.abspath(args.root)} if args.root else {})
        if args.lab:
            _publish_lab(args, name)
    except (ConnectionError, RuntimeError, TimeoutError) as e:
        print(f"accel: error: Ray started, but publishing this node at {address} failed: {e}", file=sys.stderr)
        print(f"accel: `{PROG} stop --ray` stops Ray", file=sys.stderr)
        return 1
    finally:
        ray.shutdown()
    print(f"accel: node {name} published ({len(machine.get('accelerators', []))} accelerators); session {session}", file=sys.stderr)
    if args.agent:
        assert accel_bin is not None
        return _start_agent(args, accel_bin, name, ray_args, session, temp_dir, gcs)
    return 0


def _cmdline(pid: int) -> str | None:
    """A live process's command line (None when it is gone or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            if f.read().rsplit(b")", 1)[-1].split()[0] == b"Z":
                return None
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except (OSError, IndexError):
        return None


def stop_pid_file(pid_file: str, word: str, grace_s: float = STOP_GRACE_S) -> str | None:
    """Stops the process a pid file names, if it still runs and its command line holds `word`
    (a reused pid is left alone): SIGTERM, then SIGKILL after `grace_s`. Removes the file.
    Returns what it did, or None when there was nothing to stop."""
    try:
        with open(pid_file) as f:
            pid = int(f.read().strip())
    except (OSError, ValueError):
        return None
    cmdline = _cmdline(pid)
    if cmdline is None or word not in cmdline:
        os.unlink(pid_file)
        return None
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while _cmdline(pid) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    how = "stopped"
    if _cmdline(pid) is not None:
        os.kill(pid, signal.SIGKILL)
        how = "killed"
        deadline = time.monotonic() + grace_s
        while _cmdline(pid) is not None and time.monotonic() < deadline:
            time.sleep(0.1)
    os.unlink(pid_file)
    return f"{how} {os.path.basename(pid_file).removesuffix('.pid')} (pid {pid})"


RAY_STOP_WARNING = (
    "`ray stop` stops every Ray process of this user on this machine, not only the ones accel "
    "started (other jobs' clusters too)"
)


def stop(argv: list[str]) -> int:
    """`python -m accel.ray stop`."""
    parser = argparse.ArgumentParser(
        prog=f"{PROG} stop",
        description="Stop what `start` started: every agent and sidecar recorded in the Ray temp dir's "
        "sessions. Ray keeps running unless --ray is given: then `ray stop` (this interpreter's Ray) runs "
        f"too, and {RAY_STOP_WARNING}. Arguments after --ray go to `ray stop`.",
        epilog="Exit status:\n  0  success\n  1  an agent or sidecar could not be stopped, or `ray stop` failed\n"
        "  2  invalid usage",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--temp-dir", help="Ray's temp dir, as given to start (default: Ray's own)")
    parser.add_argument("--ray", action="store_true", help=f"also run `ray stop` ({RAY_STOP_WARNING})")
    args, ray_args = parser.parse_known_args(argv)
    if ray_args and not args.ray:
        return _usage_error("stop", f"{' '.join(ray_args)}: arguments for `ray stop` need --ray")
    temp_dir = args.temp_dir or default_ray_temp_dir()
    failed = 0
    if os.path.isdir(temp_dir):
        for entry in sorted(os.listdir(temp_dir)):
            state = os.path.join(temp_dir, entry, "accel")
            if not entry.startswith("session_") or entry == "session_latest" or not os.path.isdir(state):
                continue
            for base, word in _PID_FILES.items():
                try:
                    done = stop_pid_file(os.path.join(state, base + ".pid"), word)
                except OSError as e:
                    print(f"accel: cannot stop {base}: {e}", file=sys.stderr)
                    failed = 1
                    continue
                if done:
                    print(f"accel: {done}", file=sys.stderr)
    if not args.ray:
        print(f"accel: Ray keeps running; `{PROG} stop --ray` also runs `ray stop` ({RAY_STOP_WARNING})", file=sys.stderr)
        return failed
    print(f"accel: running `ray stop`: {RAY_STOP_WARNING}", file=sys.stderr)
    rc = subprocess.call(ray_cli() + ["stop", *ray_args])
    return rc or failed


def main(argv: list[str]) -> int:
    """`python -m accel.ray {start,stop,cluster-json} ...`."""
    from ._export import main as cluster_json

    commands = {"start": start, "stop": stop, "cluster-json": cluster_json}
    if not argv or argv[0] not in commands:
        if argv[:1] in (["-h"], ["--help"]):
            print(f"usage: {PROG} {{start,stop,cluster-json,sidecar}} [-h] ...\n\n{__doc__}")
            print("\nExit status: each command's --help states its own (0 success, 2 invalid usage).")
            return 0
        expected = "expected a command: start, stop or cluster-json"
        return _usage_error("", f"{expected} (got {argv[0]!r})" if argv else expected)
    return commands[argv[0]](argv[1:])
