"""Transport safety and backends with real peers: NIXL (the nixl-cu12 wheel over UCX), the path
choice on captured GPU machines, DLPack producers, encrypted frames beyond loopback (a packet
capture across two network namespaces), and the lifetime regressions (a forked child of a dead
owner, owners in another pid namespace)."""

from __future__ import annotations

import base64
import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from accel import _buffers, _native, _nixl
from accel import transport as T

PEER = Path(__file__).with_name("transport_peer.py")
SHM = Path(T.shm_dir())
T.info()  # starts this process's transport: its cluster secret is the one the peers inherit


def pidns() -> int:
    return int(os.readlink("/proc/self/ns/pid").split("[")[1].rstrip("]"))


def read(proc: subprocess.Popen[str]) -> Any:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, f"peer exited: {proc.stderr.read() if proc.stderr else ''}"
    return pickle.loads(base64.b64decode(line))


class Owner:
    """An owner process (transport_peer.py owner), optionally under a command prefix."""

    def __init__(
        self, count: int = 1, size: int = 1 << 20, fill: str = "", path: str = "auto",
        prefix: list[str] | None = None, env: dict[str, str] | None = None,
    ) -> None:
        cmd = [*(prefix or []), sys.executable, str(PEER), "owner", str(count), str(size), fill, path]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, **(env or {})},
        )
        self.refs: list[T.Ref] = read(self.proc)

    def send(self, cmd: str) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return read(self.proc)

    def exit(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("exit\n")
        self.proc.stdin.flush()
        assert self.proc.wait(20) == 0

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def get_in_peer(ref: T.Ref, path: str, prefix: list[str] | None = None, env: dict[str, str] | None = None) -> Any:
    arg = base64.b64encode(pickle.dumps(ref)).decode()
    res = subprocess.run(
        [*(prefix or []), sys.executable, str(PEER), "get", arg, path],
        capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=120,
    )
    assert res.returncode == 0, res.stderr
    return pickle.loads(base64.b64decode(res.stdout.strip().splitlines()[-1]))


# ---------------------------------------------------------------------------------------- NIXL


def test_nixl_wheel_is_installed() -> None:
    assert _nixl.available(), "scripts/setup.sh installs nixl-cu12 (--no-deps)"


@pytest.mark.parametrize("ucx_tls", ["", "tcp"])
def test_nixl_moves_data_between_processes(ucx_tls: str) -> None:
    env = {"UCX_TLS": ucx_tls} if ucx_tls else {}
    owner = Owner(count=2, size=3 << 20, path="nixl", env=env)
    try:
        ref = owner.refs[1]
        assert ref.nixl, "put(path='nixl') carries a NIXL ticket"
        assert get_in_peer(ref, "nixl", env=env) == ("ok", 1 * (3 << 20), (3 << 20,))
        # In this process too, with the metrics of the nixl path.
        got = T.get(owner.refs[0], path="nixl")
        assert got.shape == (3 << 20,) and int(got.max()) == 0
        assert T.stats()["paths"]["nixl"]["transfers"] >= 1
        assert 'path="nixl",role="fetch"' in T.prometheus()
        # A freed buffer is never read: the owner confirms after every one-sided read.
        assert owner.send("free 1") is True
        assert get_in_peer(ref, "nixl", env=env)[0] == "BufferFreed"
    finally:
        owner.kill()
    # Its owner killed: OwnerGone, not a hang.
    assert get_in_peer(owner.refs[0], "nixl", env=env)[0] == "OwnerGone"


def test_a_reference_without_a_ticket_cannot_take_nixl() -> None:
    ref = T.put(np.arange(10))
    with pytest.raises(T.TransportError, match="no NIXL ticket"):
        T.get(ref, path="nixl")
    T.free(ref)


# ----------------------------------------------------------------------------------- path choice


def test_path_choice_follows_the_topology_of_captured_gpu_machines() -> None:
    dgx = _native.sample_machine_json("dgx-h100")
    assert dgx is not None
    here = T.info()
    base = T.put(np.zeros(4))
    try:
        other_host = base.replace(owner="1-2-0000000000000003", host="elsewhere", device=0)
        same_host = base.replace(owner="1-2-0000000000000003", host=here["host"], device=0)
        r = T.route(same_host, dst_device=5, machine=dgx, nixl=True)
        assert (r.path, r.reason) == ("nixl", "scale_up_link") and "NV18" in r.detail
        r = T.route(same_host, dst_device=5, machine=dgx, nixl=False, cuda_ipc=True)
        assert (r.path, r.reason) == ("cuda_ipc", "scale_up_link")
        r = T.route(other_host, machine=dgx, nixl=True)
        assert (r.path, r.reason) == ("nixl", "gpudirect_rdma") and "mlx5_0 is PXB" in r.detail
        rtx = _native.sample_machine_json("rtx-pro-6000-server")
        r = T.route(same_host, dst_device=1, machine=rtx, nixl=True, cuda_ipc=True)
        assert (r.path, r.reason) == ("cuda_ipc", "pcie_peer") and "PIX" in r.detail
        # Host memory: locality alone; the reason is on the reference and in the metrics.
        assert base.route == T.Route("local", "same_process", "same process: the owner's own buffer")
        T.get(base)
        assert T.stats()["choices"][("local", "same_process")] >= 1
        assert 'accel_transport_path_choices_total{path="local",reason="same_process"}' in T.prometheus()
    finally:
        T.free(base)


def test_placeholders_cannot_be_selected_and_emit_nothing() -> None:
    ref = T.put(np.ones(3))
    for name in ["rdma", "nccl", "ucx"]:
        with pytest.raises(ValueError):
            T.get(ref, path=name)
    text = T.prometheus()
    for name in ["rdma", "nccl", "ucx"]:
        assert f'path="{name}"' not in text
    T.free(ref)


# ---------------------------------------------------------------------------------------- DLPack


class Producer:
    """A DLPack producer that is not a numpy array (as a cupy or jax array would be)."""

    def __init__(self, arr: np.ndarray, device: tuple[int, int] = (1, 0)) -> None:
        self.arr, self.device = arr, device

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.arr.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device


def test_dlpack_producers_travel_and_results_export_dlpack() -> None:
    src = np.arange(12, dtype=np.float32).reshape(3, 4)
    ref = T.put(Producer(src))
    assert ref.kind == "dlpack"
    for path in ["local", "shm", "tcp"]:
        got = T.get(ref, path=path)
        back = np.from_dlpack(got)  # what torch.from_dlpack / cupy.from_dlpack do with it
        np.testing.assert_array_equal(back, src)
        assert np.shares_memory(back, got), "DLPack hands the same memory on, no copy"
    T.free(ref)
    # Device memory (here: a producer that says CUDA) is refused clearly, not copied wrongly.
    with pytest.raises(T.TransportError, match="device memory"):
        T.put(Producer(src, device=(2, 0)))


# --------------------------------------------------------------------- lifetime regressions


def test_a_forked_child_does_not_keep_a_dead_owners_listener() -> None:
    owner = Owner(count=1, size=1 << 16)
    child = owner.send("fork")
    try:
        owner.kill()
        started = time.monotonic()
        res = get_in_peer(owner.refs[0], "tcp")
        took = time.monotonic() - started
        assert res[0] == "OwnerGone", res
        assert took < 60, "hang guard only"
    finally:
        os.kill(child, signal.SIGKILL)


needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare")


@needs_root
def test_sweeps_leave_owners_of_another_pid_namespace_alone() -> None:
    owner = Owner(count=2, size=1 << 16, prefix=["unshare", "--pid", "--fork", "--mount-proc"])
    try:
        ref = owner.refs[0]
        assert ref.owner.startswith("1-"), "the owner is pid 1 of its namespace"
        theirs = [n for n in os.listdir(SHM) if n.startswith("accel-") and f"-{ref.owner.split('-')[0]}-" in n
                  and not n.startswith(f"accel-{pidns()}-")]
        assert len(theirs) >= 2, os.listdir(SHM)
        T.sweep()
        assert all((SHM / n).exists() for n in theirs), "a sweep removed live segments of another namespace"
        # Another host id (its pid namespace differs): the automatic path is TCP, and it works.
        assert ref.chosen_path == "tcp"
        assert int(T.get(ref).sum()) == 0
    finally:
        owner.exit()
    assert not any((SHM / n).exists() for n in theirs), "the owner unlinks its own segments at exit"


# ------------------------------------------------------------------- encryption beyond loopback

NS = ("accelcapA", "accelcapB")
ADDR = ("10.78.0.1", "10.78.0.2")
MARKER = "ACCEL-PLAINTEXT-MARKER-0123456789-"


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.fixture
def two_hosts() -> Any:
    for ns in NS:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    a, b = NS
    sh("ip", "netns", "add", a)
    sh("ip", "netns", "add", b)
    try:
        sh("ip", "link", "add", "accelcapvA", "type", "veth", "peer", "name", "accelcapvB")
        sh("ip", "link", "set", "accelcapvA", "netns", a)
        sh("ip", "link", "set", "accelcapvB", "netns", b)
        for ns, dev, addr in [(a, "accelcapvA", ADDR[0]), (b, "accelcapvB", ADDR[1])]:
            sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        yield
    finally:
        for ns in NS:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("tcpdump") is None, reason="needs root and tcpdump")
def test_a_capture_beyond_loopback_shows_no_plaintext(two_hosts: None, tmp_path: Path) -> None:
    pcap = tmp_path / "transfer.pcap"
    dump = subprocess.Popen(
        # --immediate-mode: every packet reaches tcpdump at once, not when a kernel ring block
        # fills or times out, so no packet the filter took is still in flight at SIGINT.
        ["ip", "netns", "exec", NS[0], "tcpdump", "-i", "accelcapvA", "--immediate-mode", "-U", "-s", "0", "-B", "131072",
         "-w", str(pcap), "tcp"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert dump.stderr is not None
        line = dump.stderr.readline()
        assert "listening" in line, line
        owner = Owner(
            count=1, size=2 << 20, fill=MARKER, prefix=["ip", "netns", "exec", NS[0]],
            env={"ACCEL_TRANSPORT_BIND": f"{ADDR[0]}:0"},
        )
        try:
            ref = owner.refs[0]
            assert ref.endpoint.startswith(ADDR[0])
            res = get_in_peer(ref, "tcp", prefix=["ip", "netns", "exec", NS[1]])
            want = int(np.frombuffer((MARKER.encode() * ((2 << 20) // len(MARKER) + 1))[: 2 << 20], np.uint8).sum())
            assert res == ("ok", want, (2 << 20,)), res
        finally:
            owner.exit()
        # Let tcpdump write out what the kernel handed it (bounded wait).
        deadline, size = time.monotonic() + 15, -1
        while time.monotonic() < deadline and (pcap.stat().st_size != size or size < 2 << 20):
            size = pcap.stat().st_size
            time.sleep(0.5)
    finally:
        dump.send_signal(signal.SIGINT)
        dump.wait(10)
    assert dump.stderr is not None
    report = dump.stderr.read()
    counts = {m[1]: int(m[0]) for m in re.findall(r"^(\d+) packets? (captured|received by filter|dropped by kernel)", report, re.M)}
    assert counts.get("dropped by kernel") == 0 and counts.get("captured") == counts.get("received by filter"), report
    wire = pcap.read_bytes()
    assert len(wire) > 2 << 20, f"the capture holds the transfer ({len(wire)} bytes)"
    # The handshake is plaintext by design (nonces and the owner id): the capture sees the stream.
    assert ref.owner.encode() in wire
    assert MARKER.encode()[:16] not in wire, "tensor bytes crossed the veth in plain text"


# ------------------------------------------------------------------------------ the secret file


def test_the_secret_comes_from_a_0600_file_not_the_environment(tmp_path: Path) -> None:
    secret_path = tmp_path / "transport-secret"
    env = {k: v for k, v in os.environ.items() if k != T.SECRET_VAR}
    env[T.SECRET_FILE_VAR] = str(secret_path)
    mine = os.environ.get(T.SECRET_VAR) or _buffers._read_secret_file(T.secret_file())  # what this process uses
    assert mine
    secret_path.write_text(mine + "\n")
    secret_path.chmod(0o600)
    ref = T.put(np.arange(1000, dtype=np.int64))
    try:
        res = subprocess.run(
            [sys.executable, str(PEER), "get", base64.b64encode(pickle.dumps(ref)).decode(), "tcp"],
            capture_output=True, text=True, env=env, timeout=60,
        )
        assert pickle.loads(base64.b64decode(res.stdout.strip().splitlines()[-1]))[:2] == ("ok", 499500), res.stderr
        # A file others can read is refused, not used.
        secret_path.chmod(0o644)
        res = subprocess.run(
            [sys.executable, str(PEER), "get", base64.b64encode(pickle.dumps(ref)).decode(), "tcp"],
            capture_output=True, text=True, env=env, timeout=60,
        )
        err = pickle.loads(base64.b64decode(res.stdout.strip().splitlines()[-1]))
        assert err[0] == "TransportError" and "readable by other users" in err[1], err
    finally:
        T.free(ref)
    # ensure_secret_file keeps an existing file and creates a missing one with mode 0600.
    fresh = tmp_path / "sub" / "secret"
    assert T.ensure_secret_file(str(fresh)) == str(fresh)
    assert fresh.stat().st_mode & 0o777 == 0o600 and len(fresh.read_text().strip()) >= 16


# ------------------------------------------------------------- files planted by another local user

STRANGER = 65534  # nobody: the other local user these tests play (chown needs root)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="plays another local user with chown: needs root")


def plant(path: Path, data: bytes) -> None:
    """Creates ``path`` as the other user would: their file, mode 0600."""
    path.write_bytes(data)
    path.chmod(0o600)
    os.chown(path, STRANGER, STRANGER)


@needs_root
def test_a_secret_file_of_another_user_is_refused(tmp_path: Path) -> None:
    # Issue 17: only the mode was checked, so a 0600 file another user planted (with a secret of
    # their choosing) was used as the cluster secret.
    planted = tmp_path / "transport-secret"
    plant(planted, b"the-other-users-own-secret-0123456789\n")
    with pytest.raises(T.TransportError, match=f"belongs to uid {STRANGER}"):
        _buffers._read_secret_file(str(planted))
    with pytest.raises(T.TransportError, match=f"belongs to uid {STRANGER}"):
        T.ensure_secret_file(str(planted))
    assert planted.read_bytes() == b"the-other-users-own-secret-0123456789\n", "ensure_secret_file rewrote it"
    # The file opened is checked, not the name: a link of this user's to it is refused too.
    link = tmp_path / "link"
    link.symlink_to(planted)
    with pytest.raises(T.TransportError, match=f"belongs to uid {STRANGER}"):
        _buffers._read_secret_file(str(link))
    # A process told to take its secret from it does not start with it.
    env = {k: v for k, v in os.environ.items() if k != T.SECRET_VAR}
    env[T.SECRET_FILE_VAR] = str(planted)
    ref = T.put(np.arange(10, dtype=np.int64))
    try:
        res = subprocess.run(
            [sys.executable, str(PEER), "get", base64.b64encode(pickle.dumps(ref)).decode(), "tcp"],
            capture_output=True, text=True, env=env, timeout=60,
        )
        err = pickle.loads(base64.b64decode(res.stdout.strip().splitlines()[-1]))
        assert err[0] == "TransportError" and f"belongs to uid {STRANGER}" in err[1], err
    finally:
        T.free(ref)
        link.unlink()
        planted.unlink()


@needs_root
def test_a_segment_planted_at_a_freed_name_is_refused_and_put_goes_on() -> None:
    # Issue 17: after a free, another local user created a file under the freed segment's name
    # and a stale get() mapped it (returning their bytes instead of raising); and files under the
    # names the owner would take next (its buffer ids counted up) made put() fail.
    ref = T.put(np.arange(1 << 14, dtype=np.int64))
    T.free(ref)
    forged = np.full(1 << 14, 7, dtype=np.int64)
    freed_name = SHM / ref.segment
    plant(freed_name, forged.tobytes())
    prefix = ref.segment[: -len(str(ref.buffer))]
    nexts = [SHM / f"{prefix}{ref.buffer + k}" for k in range(1, 33)] + [SHM / f"{prefix}idle{k}" for k in range(1, 33)]
    try:
        res = get_in_peer(ref, "shm")
        assert res[0] != "ok", f"a stale get returned the planted bytes (sum {res[1]})"
        assert res[0] == "TransportError" and "refused, not read" in res[1], res
        for path in nexts:
            plant(path, b"planted")
        # A new size class (a segment is created) and a pooled one (a segment renamed).
        for n in (3 << 18, 1 << 14):
            new = T.put(np.ones(n, dtype=np.int64))
            try:
                assert get_in_peer(new, "shm")[:2] == ("ok", n)
            finally:
                T.free(new)
        assert all(p.read_bytes() == b"planted" for p in nexts), "a planted file was replaced"
    finally:
        for path in [freed_name, *nexts]:
            path.unlink(missing_ok=True)
