"""The wheel (scripts/wheel.sh) installs and runs without Rust: a fresh virtualenv, PATH without
cargo, then the `accel` console script, `import accel` and `python -m accel.ray start`.
scripts/test.sh builds the wheel and sets ACCEL_REQUIRE_WHEEL=1, which turns a skip into a failure."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import venv

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, dict[str, str]]:
    wheels = sorted((REPO / "dist").glob("accel-*.whl"))
    if not wheels:
        if os.environ.get("ACCEL_REQUIRE_WHEEL") == "1":
            pytest.fail("no wheel in dist/: run scripts/wheel.sh")
        pytest.skip("no wheel in dist/ (scripts/wheel.sh builds it)")
    wheel = wheels[-1]
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
