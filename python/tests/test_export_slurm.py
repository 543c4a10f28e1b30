"""`accel export slurm` against Debian's real slurmctld and slurmd (22.05): the controller loads
the generated nodes, gres and tree topology, slurmd accepts the gres lines (device files
included), and `scontrol` shows the GPUs and the switches. Needs root; scripts/test.sh installs
the daemons and sets ACCEL_REQUIRE_SLURM=1, which turns a skip into a failure."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import time
from typing import Iterator

import pytest

REQUIRED = os.environ.get("ACCEL_REQUIRE_SLURM") == "1"


def _need(ok: bool, why: str) -> None:
    if not ok:
        if REQUIRED:
            pytest.fail(why)
        pytest.skip(why)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def _pid(path: pathlib.Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _wait_for(path: pathlib.Path, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while _pid(path) is None:
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.1)


@pytest.fixture
def slurm_tree(accel_bin: pathlib.Path, tmp_path: pathlib.Path) -> Iterator[tuple[pathlib.Path, dict[str, str]]]:
    """Generates the files for a 4-node, 2-rack cluster (2 DGX H100, 2 MI300X), starts
    slurmctld and one slurmd (node dgx-h100-0) on them, and stops both afterwards."""
    _need(all(shutil.which(d) for d in ("slurmctld", "slurmd", "scontrol")), "slurmctld/slurmd/scontrol not installed")
    _need(os.geteuid() == 0, "slurmd must run as root")
    etc, dev, state = tmp_path / "etc", tmp_path / "dev", tmp_path / "state"
    for d in (etc, dev, state, tmp_path / "spool"):
        d.mkdir()
    cluster = tmp_path / "cluster.json"
    out = subprocess.run(
        [accel_bin, "cluster", "--sample", "dgx-h100:2,mi300x:2", "--rack-size", "2"],
        check=True, capture_output=True, text=True,
    ).stdout
    cluster.write_text(out)
    subprocess.run(
        [accel_bin, "export", "slurm", "--cluster", cluster, "--out-dir", etc, "--dev-dir", dev],
        check=True, capture_output=True, text=True,
    )
    # slurmd wants a character or block device behind every File=: make them (NVIDIA's major 195,
    # DRM's 226), in the temporary directory the export pointed at.
    for path in sorted(set(re.findall(r"File=(\S+)", (etc / "gres.conf").read_text()))):
        p = pathlib.Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        number = int(re.search(r"(\d+)$", p.name).group(1))  # type: ignore[union-attr]
        os.mknod(p, 0o600 | 0o020000, os.makedev(226 if "renderD" in p.name else 195, number))
    # Every node is reached on loopback here: the one address accel cannot know, added to each
    # generated NodeName line (Slurm refuses NodeAddr on a NodeName=DEFAULT line).
    local = etc / "nodes-loopback.conf"
    local.write_text("".join(
        line + (" NodeAddr=127.0.0.1" if line.startswith("NodeName=") else "") + "\n"
        for line in (etc / "nodes.conf").read_text().splitlines()
    ))
    ctld_port, slurmd_port = _free_port(), _free_port()
    conf = etc / "slurm.conf"
    conf.write_text(
        f"""ClusterName=accel-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation={state}
SlurmdSpoolDir={tmp_path}/spool
SlurmctldPidFile={tmp_path}/slurmctld.pid
SlurmdPidFile={tmp_path}/slurmd.pid
SlurmctldLogFile={tmp_path}/slurmctld.log
SlurmdLogFile={tmp_path}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
GresTypes=gpu
TopologyPlugin=topology/tree
# The test machine is smaller than a DGX: trust the configured sockets and cores.
SlurmdParameters=config_overrides
ReturnToService=2
Include {local}
PartitionName=all Nodes=ALL Default=YES State=UP
"""
    )
    env = {**os.environ, "SLURM_CONF": str(conf)}
    pid_files = [tmp_path / "slurmctld.pid", tmp_path / "slurmd.pid"]
    try:
        # Both daemonise; each writes its pid file once it is up.
        subprocess.run(["slurmctld", "-f", conf, "-i"], check=True, env=env, timeout=30)
        _wait_for(pid_files[0], 30)
        subprocess.run(["slurmd", "-f", conf, "-N", "dgx-h100-0"], check=True, env=env, timeout=30)
        _wait_for(pid_files[1], 30)
        yield tmp_path, env
    finally:
        subprocess.run(["scontrol", "shutdown"], env=env, capture_output=True, timeout=30)
        for f in pid_files:
            pid = _pid(f)
            if pid and not _wait_gone(pid, 15):
                os.kill(pid, signal.SIGKILL)
                _wait_gone(pid, 5)


def _scontrol(env: dict[str, str], *args: str) -> str:
    return subprocess.run(["scontrol", *args], check=True, capture_output=True, text=True, env=env, timeout=30).stdout


def test_slurmctld_accepts_the_generated_configuration(slurm_tree: tuple[pathlib.Path, dict[str, str]]) -> None:
    tmp, env = slurm_tree
    deadline = time.monotonic() + 60
    node = ""
    while time.monotonic() < deadline:
        node = _scontrol(env, "show", "node", "dgx-h100-0")
        if re.search(r"State=IDLE\b", node):
            break
        time.sleep(0.5)
    log = (tmp / "slurmd.log").read_text() if (tmp / "slurmd.log").exists() else ""
    assert re.search(r"State=IDLE\b", node), f"node never came up:\n{node}\n{log}"
    # The GPUs, by type and count, with their socket (NUMA) affinity.
    assert re.search(r"Gres=gpu:h100:8\(S:0-1\)", node), node
    assert "CfgTRES=cpu=224," in node
    # The switches: one per rack under a root.
    topo = _scontrol(env, "show", "topology")
    assert re.search(r"SwitchName=rack-r0 Level=0 .*Nodes=dgx-h100-0,dgx-h100-1$", topo, re.M), topo
    assert re.search(r"SwitchName=rack-r1 Level=0 .*Nodes=mi300x-0,mi300x-1$", topo, re.M), topo
    assert re.search(r"SwitchName=root Level=1 .*Nodes=dgx-h100-\[0-1\],mi300x-\[0-1\] Switches=rack-r0,rack-r1$", topo, re.M), topo
    # Every node of the cluster, and the MI300X gres, as slurmctld read them.
    mi = _scontrol(env, "show", "node", "mi300x-1")
    assert "Gres=gpu:amd-instinct-mi300x-oam:8" in mi, mi
    # slurmd's view of its gres.conf lines: every GPU, its device file, cores and links.
    gres = subprocess.run(
        ["slurmd", "-G", "-f", env["SLURM_CONF"], "-N", "dgx-h100-0"], capture_output=True, text=True, env=env, timeout=30
    )
    lines = [l for l in (gres.stdout + gres.stderr).splitlines() if "Gres Name=gpu" in l]
    assert len(lines) == 8, gres.stdout + gres.stderr
    assert "File=" + str(tmp / "dev" / "nvidia0") in lines[0]
    assert "Cores=0-111" in lines[0] and "Links=-1,18,18,18,18,18,18,18" in lines[0], lines[0]
    assert "not a valid character or block device" not in log
