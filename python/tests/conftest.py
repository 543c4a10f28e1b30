"""Shared fixtures: the repository paths and the captured machines of test_data/hosts; and one
temp root for the whole run, removed at its end, so that a run leaves nothing in /tmp."""

from __future__ import annotations

import os
import pathlib
import shutil
import tarfile
import tempfile
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
HOSTS = REPO / "test_data" / "hosts"

# Everything this run writes to a temp dir lands under one root: pytest's basetemp (tmp_path),
# Ray's session dirs (RAY_TMPDIR: the clusters of the Ray tests, the examples' ray.init), and
# whatever this process and its children put in TMPDIR (tempfile, chromium's profile and files,
# the accel binary's std::env::temp_dir). The root's name stays short: Ray's unix sockets sit
# under <root>/ray/session_<date>_<pid>/sockets/, and a socket path is limited to 107 bytes.
_TEMP_VARS = ("TMPDIR", "RAY_TMPDIR")
_saved: dict[str, str | None] = {}
_root: list[pathlib.Path] = []


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    root = pathlib.Path(tempfile.mkdtemp(prefix="pytest-accel-"))
    _root.append(root)
    for var in _TEMP_VARS:
        _saved[var] = os.environ.get(var)
        os.environ[var] = str(root)
    tempfile.tempdir = None  # tempfile.gettempdir() reads TMPDIR again


def pytest_unconfigure(config: pytest.Config) -> None:
    for var, value in _saved.items():
        if value is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = value
    tempfile.tempdir = None
    for root in _root:
        # Processes a test stopped (Ray's raylets, log monitors) may still be writing as they
        # exit: try again for a few seconds.
        for _ in range(20):
            shutil.rmtree(root, ignore_errors=True)
            if not root.exists():
                break
            time.sleep(0.5)
    _root.clear()


def _extract(name: str, dest: pathlib.Path) -> pathlib.Path:
    archive = next((HOSTS / name).glob("capture.tar.*"))
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="fully_trusted")
    return next(p for p in [dest, *dest.iterdir()] if (p / "sys").is_dir())


@pytest.fixture(scope="session")
def capture(tmp_path_factory):
    """capture(name) -> the extracted root of test_data/hosts/<name>."""
    cache: dict[str, pathlib.Path] = {}

    def get(name: str) -> pathlib.Path:
        if name not in cache:
            cache[name] = _extract(name, tmp_path_factory.mktemp(name))
        return cache[name]

    return get


@pytest.fixture(scope="session")
def accel_bin() -> pathlib.Path:
    """The accel CLI built by cargo (scripts/test.sh builds it first)."""
    path = REPO / "target" / "debug" / "accel"
    if not path.exists():
        found = shutil.which("accel")
        assert found, "build the CLI first: cargo build -p accel-cli"
        return pathlib.Path(found)
    return path
