"""Every example of the user guide (examples/, docs/guide/) runs and checks its own results:
Python files with this interpreter, shell files with bash and the cargo-built `accel` first on
PATH. Each runs in a fresh temporary directory."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p for p in (REPO / "examples").iterdir() if p.suffix in (".py", ".sh"))


def test_every_guide_chapter_example_exists() -> None:
    guide = "".join(p.read_text() for p in (REPO / "docs" / "guide").glob("*.md"))
    for example in EXAMPLES:
        assert f"examples/{example.name}" in guide, f"{example.name} is in no guide chapter"


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(example: pathlib.Path, accel_bin: pathlib.Path, tmp_path: pathlib.Path) -> None:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(accel_bin.parent), str(pathlib.Path(sys.executable).parent), env.get("PATH", "")])
    env["RAY_AUTH_MODE"] = env.get("RAY_AUTH_MODE", "disabled")
    cmd = [sys.executable, str(example)] if example.suffix == ".py" else ["bash", str(example)]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{example.name} exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
