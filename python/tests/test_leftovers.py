"""scripts/leftovers.sh, which scripts/test.sh runs around the whole test run: `check` fails,
naming each entry and its size, when something is left in a watched temp dir since the
`snapshot`, and passes when nothing is. ACCEL_LEFTOVER_DIRS points it at the test's own dirs."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "leftovers.sh"


def leftovers(verb: str, snapshot: pathlib.Path, dirs: list[pathlib.Path]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ACCEL_LEFTOVER_DIRS": " ".join(str(d) for d in dirs)}
    return subprocess.run(["bash", SCRIPT, verb, snapshot], env=env, capture_output=True, text=True, timeout=60)


def test_check_fails_on_what_is_left_and_passes_once_it_is_gone(tmp_path: pathlib.Path) -> None:
    tmp, shm = tmp_path / "tmp", tmp_path / "shm"
    tmp.mkdir()
    shm.mkdir()
    (tmp / "there before").write_text("x")
    snap = tmp / "leftovers.snapshot"  # in a watched dir itself: never reported
    assert leftovers("snapshot", snap, [tmp, shm]).returncode == 0

    clean = leftovers("check", snap, [tmp, shm])
    assert clean.returncode == 0, clean.stderr
    assert "none" in clean.stdout

    (tmp / "session dir").mkdir()
    (tmp / "session dir" / "log").write_bytes(b"\0" * 64 * 1024)
    (shm / "accel-segment").write_bytes(b"\0" * 10)
    left = leftovers("check", snap, [tmp, shm])
    assert left.returncode == 1, left
    lines = [line.split(None, 1) for line in left.stderr.splitlines()[1:]]
    # Exactly the two new entries: not what was there before, not the snapshot file.
    assert [path for _, path in lines] == [str(shm / "accel-segment"), str(tmp / "session dir")], left.stderr
    assert all(re.fullmatch(r"[0-9.]+[KMGT]?", size) for size, _ in lines), left.stderr  # du -h

    (shm / "accel-segment").unlink()
    (tmp / "session dir" / "log").unlink()
    (tmp / "session dir").rmdir()
    again = leftovers("check", snap, [tmp, shm])
    assert again.returncode == 0, again.stderr


def test_usage_and_a_missing_snapshot_are_errors(tmp_path: pathlib.Path) -> None:
    missing = leftovers("check", tmp_path / "none", [tmp_path])
    assert missing.returncode == 2 and "no snapshot" in missing.stderr
    assert leftovers("compare", tmp_path / "none", [tmp_path]).returncode == 2
