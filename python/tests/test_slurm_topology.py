"""Slurm's own reading of the topology.conf files accel reads: Debian's real slurmctld (22.05,
topology/tree) loads each tree file of crates/plan/tests/data/fabric/, and what `scontrol show
topology` reports, turned into each node's switch per tier, must equal the `.expected` file that
crates/plan/tests/fabric.rs holds accel's own reading (`Fabric::from_slurm_conf`) to. So the two
readers agree through one expectation. Needs root; ACCEL_REQUIRE_SLURM=1 turns a skip into a
failure. (22.05 has no topology/block, so block.conf is checked by the Rust test alone.)"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import signal
import subprocess
import time

import pytest

from test_export_slurm import _free_port, _need, _pid, _wait_for, _wait_gone

DATA = pathlib.Path(__file__).resolve().parents[2] / "crates" / "plan" / "tests" / "data" / "fabric"
TREES = sorted(p.name for p in DATA.glob("*.conf") if "SwitchName=" in p.read_text())


def _scontrol(env: dict[str, str], *args: str) -> str:
    return subprocess.run(["scontrol", *args], check=True, capture_output=True, text=True, env=env, timeout=30).stdout


def _tier(level: int) -> str:
    """Slurm's switch level (0 = leaf) as the tier's short name in the `.expected` files."""
    return ("leaf", "spine", "core")[level] if level < 3 else f"tier{level + 1}"


def _render(topology: str, env: dict[str, str]) -> str:
    """`scontrol show topology` as the `.expected` files write a fabric: the tiers, then each
    node's switch per tier (of several at one tier, the first name in sorted order)."""
    values: dict[str, dict[int, str]] = {}
    levels = 0
    for line in topology.splitlines():
        m = re.search(r"SwitchName=(\S+) Level=(\d+) .*Nodes=(\S+)", line)
        if not m:
            continue
        name, level = m.group(1), int(m.group(2))
        levels = max(levels, level + 1)
        for node in _scontrol(env, "show", "hostnames", m.group(3)).split():
            mine = values.setdefault(node, {})
            mine[level] = min(mine.get(level, name), name)
    out = "tiers: " + " ".join(_tier(l) for l in range(levels)) + "\n"
    for node in sorted(values):
        out += node + "".join(f" {_tier(l)}={v}" for l, v in sorted(values[node].items())) + "\n"
    return out


@pytest.mark.parametrize("conf", TREES)
def test_slurmctld_reads_the_tree_as_accel_does(conf: str, tmp_path: pathlib.Path) -> None:
    _need(all(shutil.which(d) for d in ("slurmctld", "scontrol")), "slurmctld/scontrol not installed")
    _need(os.geteuid() == 0, "slurmctld runs as root here")
    expected = (DATA / conf).with_suffix(".expected").read_text()
    nodes = [line.split()[0] for line in expected.splitlines()[1:]]
    etc, state = tmp_path / "etc", tmp_path / "state"
    etc.mkdir()
    state.mkdir()
    shutil.copy(DATA / conf, etc / "topology.conf")
    node_lines = "".join(f"NodeName={n} NodeAddr=127.0.0.1 CPUs=1 State=UNKNOWN\n" for n in nodes)
    conf_path = etc / "slurm.conf"
    conf_path.write_text(
        f"""ClusterName=accel-topo
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/none
CredType=cred/none
SlurmUser=root
StateSaveLocation={state}
SlurmctldPidFile={tmp_path}/slurmctld.pid
SlurmctldLogFile={tmp_path}/slurmctld.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
TopologyPlugin=topology/tree
{node_lines}PartitionName=all Nodes=ALL Default=YES State=UP
"""
    )
    env = {**os.environ, "SLURM_CONF": str(conf_path)}
    pid_file = tmp_path / "slurmctld.pid"
    try:
        subprocess.run(["slurmctld", "-f", conf_path, "-i"], check=True, env=env, timeout=30)
        _wait_for(pid_file, 30)
        # The pid file comes before the controller answers: ask until it does.
        deadline, topology = time.monotonic() + 30, ""
        while "SwitchName=" not in topology and time.monotonic() < deadline:
            shown = subprocess.run(["scontrol", "show", "topology"], capture_output=True, text=True, env=env, timeout=30)
            topology = shown.stdout
            time.sleep(0 if "SwitchName=" in topology else 0.2)
        got = _render(topology, env)
        log = (tmp_path / "slurmctld.log").read_text()
        assert got == expected, f"slurmctld read {conf} otherwise:\n{topology}\n{log}"
    finally:
        subprocess.run(["scontrol", "shutdown"], env=env, capture_output=True, timeout=30)
        pid = _pid(pid_file)
        if pid and not _wait_gone(pid, 15):
            os.kill(pid, signal.SIGKILL)
            _wait_gone(pid, 5)
