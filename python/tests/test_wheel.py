"""The wheel (scripts/wheel.sh) installs and runs without Rust: a fresh virtualenv, PATH without
cargo, then the `accel` console script, `import accel` and `python -m accel.ray start`. It is one
abi3 wheel for CPython >= 3.9 on glibc >= 2.17: its tag and symbol versions say so, and it runs on
Debian 11 (Python 3.9, glibc 2.31) in a chroot that debootstrap makes once under target/.
scripts/test.sh builds the wheel and sets ACCEL_REQUIRE_WHEEL=1, which turns a skip into a failure."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import ssl
import subprocess
import sys
import venv
import zipfile

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
REQUIRED = os.environ.get("ACCEL_REQUIRE_WHEEL") == "1"
# The oldest glibc the wheel supports (scripts/wheel.sh's BASELINE).
BASELINE = (2, 17)
# Debian 11: Python 3.9 and glibc 2.31, older than the build's Python and glibc. Reused when present.
DEBIAN11 = REPO / "target" / "py39-root"


def _unavailable(why: str) -> None:
    if REQUIRED:
        pytest.fail(why)
    pytest.skip(why)


def _wheel() -> pathlib.Path:
    wheels = sorted((REPO / "dist").glob("accel-*.whl"))
    if not wheels:
        _unavailable("no wheel in dist/: run scripts/wheel.sh")
    return wheels[-1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, dict[str, str]]:
    wheel = _wheel()
    assert "manylinux" in wheel.name, wheel.name
    home = tmp_path_factory.mktemp("wheel")
    env_dir = home / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_dir = env_dir / "bin"
    # PATH without any directory that holds cargo or rustc.
    kept = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not any(
        (pathlib.Path(d) / tool).exists() for tool in ("cargo", "rustc"))]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CARGO", "RUSTUP", "VIRTUAL_ENV"))}
    env["PATH"] = os.pathsep.join([str(bin_dir), *kept])
    assert shutil.which("cargo", path=env["PATH"]) is None
    subprocess.run([bin_dir / "python", "-m", "pip", "install", "-q", wheel], check=True, env=env, cwd=home)
    return home, env


def _run(installed: tuple[pathlib.Path, dict[str, str]], *cmd: str) -> str:
    home, env = installed
    done = subprocess.run(list(cmd), capture_output=True, text=True, env=env, cwd=home, timeout=120)
    assert done.returncode == 0, f"{cmd}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_accel_is_a_console_script(installed: tuple[pathlib.Path, dict[str, str]]) -> None:
    home, env = installed
    script = shutil.which("accel", path=env["PATH"])
    assert script and pathlib.Path(script).parent == home / "venv" / "bin", script
    assert "accel._cli" in pathlib.Path(script).read_text()
    version = _run(installed, "accel", "--version")
    assert version.startswith("accel 0.") and "(git " in version and "features: nvml" in version, version
    assert _run(installed, "accel", "topo").strip()
    assert "GPU7" in _run(installed, "accel", "topo", "--sample", "dgx-h100")
    assert "kind: ResourceSlice" in _run(installed, "accel", "export", "dra", "--sample", "dgx-h100")


def test_import_and_ray_start(installed: tuple[pathlib.Path, dict[str, str]]) -> None:
    home, _ = installed
    py = str(home / "venv" / "bin" / "python")
    out = _run(installed, py, "-c", "import accel; print(accel.__file__); print(len(accel.discover()['numa_nodes']))")
    assert str(home / "venv") in out.splitlines()[0], out
    assert "usage: python -m accel.ray" in _run(installed, py, "-m", "accel.ray", "start", "--help")
    cmd = _run(installed, py, "-m", "accel.ray", "start", "--sample", "dgx-h100", "--dry-run", "--head")
    assert cmd.startswith("ray start --num-gpus=8") and "--head" in cmd, cmd


def test_one_abi3_wheel_for_python39_on_glibc_2_17(tmp_path: pathlib.Path) -> None:
    wheel = _wheel()
    *_, python, abi, platform = wheel.name[: -len(".whl")].split("-")
    assert (python, abi) == ("cp39", "abi3"), wheel.name
    assert "manylinux_2_17_" in platform or "manylinux2014_" in platform, wheel.name
    with zipfile.ZipFile(wheel) as z:
        binaries = [n for n in z.namelist() if n.endswith(".abi3.so") or n.endswith("/_bin/accel")]
        assert sorted(pathlib.PurePath(n).name for n in binaries) == ["_native.abi3.so", "accel"], z.namelist()
        z.extractall(tmp_path, binaries)
    if shutil.which("objdump") is None:
        _unavailable("objdump (binutils) is not installed: cannot read the glibc symbol versions")
    for n in binaries:
        symbols = subprocess.run(["objdump", "-T", str(tmp_path / n)], capture_output=True, text=True, check=True).stdout
        versions = {tuple(int(x) for x in v.split(".")) for v in re.findall(r"GLIBC_([0-9.]+[0-9])", symbols)}
        assert versions and max(versions) <= BASELINE, f"{n} needs glibc {max(versions)}, past {BASELINE}"


def _debian11() -> pathlib.Path:
    """The Debian 11 root (made by debootstrap on first use: a few minutes and ~300 MB)."""
    if (DEBIAN11 / "usr" / "lib" / "python3.9" / "venv").is_dir():
        return DEBIAN11
    if os.geteuid() != 0 or shutil.which("debootstrap") is None or shutil.which("unshare") is None:
        _unavailable("making the Debian 11 root needs root, debootstrap and unshare")
    partial = DEBIAN11.with_name(DEBIAN11.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    subprocess.run(
        ["debootstrap", "--variant=minbase", "--include=python3,python3-venv", "bullseye", str(partial),
         "http://deb.debian.org/debian"],
        check=True, capture_output=True, timeout=1800,
    )
    partial.rename(DEBIAN11)
    return DEBIAN11


# Runs inside the Debian 11 root, with the wheel in /opt/dist: a fresh venv, the wheel (numpy
# from PyPI), the CLI, then discovery and a zero-copy transport round trip on Python 3.9.
IN_DEBIAN11 = r"""
set -eu
rm -rf /opt/venv
python3 -m venv /opt/venv
/opt/venv/bin/python -m pip install -q --disable-pip-version-check /opt/dist/*.whl
accel --version
accel topo --sample dgx-h100
python - <<'PY'
import sys
import numpy as np
import accel
from accel import transport

assert sys.version_info[:2] == (3, 9), sys.version
assert accel.__file__.startswith("/opt/venv/"), accel.__file__
assert len(accel.sample("dgx-h100")["accelerators"]) == 8
import compileall, os
assert compileall.compile_dir(os.path.dirname(accel.__file__), quiet=1), "a module is not Python 3.9 syntax"
assert accel.discover()["numa_nodes"]
a = transport.empty((64, 64), np.float32)
a[:] = 1.5
ref = transport.put(a)  # in place: a is the published buffer
local = transport.get(ref, path="local")
shm = transport.get(ref, path="shm")
tcp = transport.get(ref, path="tcp")
assert local.__array_interface__["data"][0] == a.__array_interface__["data"][0], "local is not zero-copy"
a[0, 0] = 7.0  # the owner writes; both mappings see it: no copy was made
assert local[0, 0] == 7.0 and shm[0, 0] == 7.0 and tcp[0, 0] == 1.5
for view in (local, shm):
    assert not view.flags.writeable
    try:
        view.flags.writeable = True
    except ValueError:
        pass
    else:
        raise AssertionError("a read-only mapping became writable")
mine = transport.get(ref, path="shm", writable=True)
mine[1, 1] = 3.0  # a private copy-on-write mapping
assert a[1, 1] == 1.5 and float(np.asarray(transport.get(transport.put(np.arange(5.0)))).sum()) == 10.0
assert transport.free(ref)
print("py39 transport ok")
PY
"""


def test_wheel_on_python39_and_glibc_2_31() -> None:
    wheel = _wheel()
    if shutil.which("unshare") is None or os.geteuid() != 0:
        _unavailable("the Debian 11 chroot needs root and unshare")
    root = _debian11()
    dist = root / "opt" / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    dist.mkdir(parents=True)
    shutil.copy(wheel, dist)
    # pip reaches PyPI for numpy as this host does: its resolver, its CA bundle (a proxy that
    # re-signs TLS is trusted only there), its index settings.
    shutil.copy("/etc/resolv.conf", root / "etc" / "resolv.conf")
    host_ca = os.environ.get("PIP_CERT") or ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt"
    shutil.copy(host_ca, root / "etc" / "ssl" / "host-ca.crt")
    # A private mount namespace: /proc, /sys, /dev/shm and /tmp of the root vanish with it.
    mounts = " && ".join(f"mount -t {fs} {fs} {root / d}" for fs, d in (("proc", "proc"), ("sysfs", "sys"), ("tmpfs", "dev/shm"), ("tmpfs", "tmp")))
    env = {"PATH": "/opt/venv/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
    env["PIP_CERT"] = "/etc/ssl/host-ca.crt"
    passed = ("http_proxy", "https_proxy", "no_proxy", "pip_index_url", "pip_extra_index_url", "pip_default_timeout")
    env.update({k: v for k, v in os.environ.items() if k.lower() in passed})
    (root / "dev" / "shm").mkdir(exist_ok=True)
    done = subprocess.run(
        ["unshare", "--mount", "--fork", "sh", "-c", f'{mounts} && exec chroot "$0" /bin/sh -c "$1"', str(root), IN_DEBIAN11],
        capture_output=True, text=True, env=env, timeout=900,
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert done.stdout.startswith("accel 0."), done.stdout
    assert "GPU7" in done.stdout and "py39 transport ok" in done.stdout, done.stdout
