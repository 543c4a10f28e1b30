"""`accel lab repro RUN`: what differs between a stored run's environment fingerprint and this
machine's (through the Rust CLI's `accel env --json` and `accel env diff`), and the exact
commands for the checks that did not pass, which are run here to show they reproduce the
failure. A run without a stored suite, an unknown run and a missing accel binary are one-line
errors with exit 2. (`--on-node`, through Ray, is in test_lab_run.py.)"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from accel.lab import RESULTS_SCHEMA, fingerprint_hash, open_store, parse_suite
from accel.lab._suite import suite_json

PY = sys.executable
SUITE = f"""
[suite]
name = "nightly"
version = "4"

[[check]]
name = "ok"
kind = "test"
command = ["true"]
timeout_s = 10

[[check]]
name = "bad"
kind = "test"
command = [{json.dumps(PY)}, "-c", "import os, sys; open(os.path.join(os.environ['ACCEL_LAB_OUT'], 'marker'), 'w').write(os.environ['ACCEL_LAB_COMMIT'] + ' ' + os.environ['MODE']); sys.exit(3)"]
timeout_s = 10
env = {{ MODE = "strict mode" }}
"""


def _env(accel_bin: pathlib.Path, sample: str = "dgx-h100") -> dict[str, Any]:
    out = subprocess.run([str(accel_bin), "env", "--json", "--sample", sample], capture_output=True, text=True, check=True, timeout=60)
    doc: dict[str, Any] = json.loads(out.stdout)
    return doc


def _store_run(db: str, env: dict[str, Any], *, suite_doc: bool = True) -> str:
    h = fingerprint_hash(env)
    run: dict[str, Any] = {"suite": "nightly", "suite_version": "4", "commit": "c42"}
    if suite_doc:
        run["suite_doc"] = suite_json(parse_suite(SUITE))
    doc = {
        "schema": RESULTS_SCHEMA,
        "run": run,
        "fingerprints": {h: env},
        "results": [
            {"check": "ok", "node": "n1", "verdict": "pass", "env_hash": h, "started_at": 1.0, "ended_at": 2.0},
            {"check": "bad", "node": "n1", "verdict": "fail", "env_hash": h, "started_at": 1.0, "ended_at": 2.0},
        ],
    }
    with open_store(db) as store:
        return store.ingest(doc)


def _repro(accel_bin: pathlib.Path | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ACCEL_BIN"}
    env["PATH"] = "/usr/bin:/bin"  # no `accel` on it (the venv has a console script of that name)
    if accel_bin is not None:
        env["ACCEL_BIN"] = str(accel_bin)
    return subprocess.run([PY, "-m", "accel.lab", "repro", *args], capture_output=True, text=True, timeout=120, env=env)


def test_repro_names_what_differs_and_its_commands_reproduce_the_failure(accel_bin: pathlib.Path, tmp_path: pathlib.Path) -> None:
    db = str(tmp_path / "lab.db")
    then = _env(accel_bin)
    then["fields"]["accel.version"] = {"value": "0.0.1-old", "source": "accel build"}
    run_id = _store_run(db, then)
    out = _repro(accel_bin, run_id, "--db", db, "--sample", "dgx-h100")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert f"run {run_id}: suite nightly 4 at commit c42" in text
    assert "-> this machine: differs" in text and "accel.version: 0.0.1-old ->" in text
    assert "git checkout c42" in text and "# bad (fail on 'n1')" in text and "# ok" not in text
    [command] = [line for line in text.splitlines() if line.startswith("d=$(mktemp -d)")]
    ran = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60, cwd=tmp_path, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert "exit status 3;" in ran.stdout
    out_dir = ran.stdout.strip().split("results in ")[1]
    assert pathlib.Path(out_dir, "marker").read_text() == "c42 strict mode"
    every = _repro(accel_bin, run_id, "--db", db, "--sample", "dgx-h100", "--all")
    assert "# ok (pass on 'n1')" in every.stdout


def test_the_same_environment_is_said_to_be_the_same(accel_bin: pathlib.Path, tmp_path: pathlib.Path) -> None:
    db = str(tmp_path / "lab.db")
    run_id = _store_run(db, _env(accel_bin, "mi300x"))
    out = _repro(accel_bin, run_id, "--db", db, "--sample", "mi300x")
    assert out.returncode == 0 and "-> this machine: the same" in out.stdout
    other = _repro(accel_bin, run_id, "--db", db, "--sample", "dgx-h100")
    assert "differs" in other.stdout


@pytest.mark.parametrize("case", ["unknown run", "no suite"])
def test_repro_errors_are_one_line(accel_bin: pathlib.Path, tmp_path: pathlib.Path, case: str) -> None:
    db = str(tmp_path / "lab.db")
    if case == "unknown run":
        _store_run(db, _env(accel_bin))
        out = _repro(accel_bin, "ff" * 16, "--db", db, "--sample", "dgx-h100")
        message = "no run"
    elif case == "no suite":
        run_id = _store_run(db, _env(accel_bin), suite_doc=False)
        out = _repro(accel_bin, run_id, "--db", db, "--sample", "dgx-h100")
        message = "has no stored suite"
    assert out.returncode == 2 and message in out.stderr and out.stderr.count("\n") == 1, out.stderr


def test_repro_runs_no_accel_binary(accel_bin: pathlib.Path, tmp_path: pathlib.Path) -> None:
    # The fingerprints are taken and compared in process (the rules `accel env` uses), so the
    # lab, which `accel lab` runs, never runs `accel` back: no binary on PATH or in ACCEL_BIN.
    db = str(tmp_path / "lab.db")
    run_id = _store_run(db, _env(accel_bin, "mi300x"))
    out = _repro(None, run_id, "--db", db, "--sample", "mi300x")
    assert out.returncode == 0 and "-> this machine: the same" in out.stdout, out.stderr
