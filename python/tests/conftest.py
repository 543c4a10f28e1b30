"""Shared fixtures: the repository paths and the captured machines of test_data/hosts."""

from __future__ import annotations

import pathlib
import shutil
import tarfile

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
HOSTS = REPO / "test_data" / "hosts"


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
