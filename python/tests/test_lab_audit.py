"""The lab audit's findings about stored data (issue 37), replayed: a planted run (an
environment key that injects a command, a multi-line command, a node name with a trailing
newline) is refused on submit, and planted straight into the store (by an older accel, or by
anyone who can write the database) it stays data for `repro` (no command from it, every part of
every printed line quoted) and for `--on-node` (which runs only a suite file the operator
names); validators match whole strings; deep JSON is a clear error; and no Python we start puts
the working directory first on `sys.path`. The HTTP findings are test_http_attacks.py's, the
database URL's test_lab_store.py's, the page's test_lab_pages.py's."""

from __future__ import annotations

import json
import os
import pathlib
import shlex
import subprocess
import sys
from typing import Any

import pytest

from accel.lab import RESULTS_SCHEMA, DocumentError, open_store, parse_suite
from accel.lab._repro import check_command
from accel.lab._suite import Check, suite_json

PY = sys.executable
ACCEL = pathlib.Path(__file__).resolve().parents[2] / "target" / "debug" / "accel"
INJECTED_KEY = "X=1 $(touch PWNED) Y"
SUITE = '[suite]\nname = "s"\nversion = "1"\n\n[[check]]\nname = "c"\nkind = "test"\ncommand = ["false"]\ntimeout_s = 5\nenv = { MODE = "x" }\n'


def _doc(**run: Any) -> dict[str, Any]:
    result = {"check": "c", "node": "n1", "verdict": "fail", "started_at": 1.0, "ended_at": 2.0}
    return {"schema": RESULTS_SCHEMA, "run": {"suite": "s", "suite_version": "1", "commit": "c1", **run}, "results": [result]}


def _planted_suite_doc() -> str:
    doc = json.loads(suite_json(parse_suite(SUITE)))
    doc["check"][0]["env"] = {INJECTED_KEY: "v"}
    return json.dumps(doc)


def lab(*args: str, cwd: pathlib.Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "accel.lab", *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


@pytest.mark.parametrize(
    ("planted", "where"),
    [
        ({"run": {"suite_doc": "PLANTED"}}, "run.suite_doc"),
        ({"run": {"command": "accel lab run s.toml\ntouch PWNED"}}, "run.command"),
        ({"result": {"node": "n1\n"}}, "results[0].node"),
        ({"run": {"suite": "s\n"}}, "run.suite"),
        ({"run": {"commit": "c1\n"}}, "run.commit"),
        ({"result": {"check": "c\n"}}, "results[0].check"),
        ({"result": {"env_hash": "ab" * 16 + "\n"}}, "results[0].env_hash"),
        ({"run": {"selectors": {"accel.io/node": "n1\n"}}}, "run.selectors"),
    ],
)
def test_a_planted_run_is_refused_on_submit_with_its_place(tmp_path: pathlib.Path, planted: dict[str, Any], where: str) -> None:
    doc = _doc()
    if "run" in planted:
        doc["run"].update({k: (_planted_suite_doc() if v == "PLANTED" else v) for k, v in planted["run"].items()})
    else:
        doc["results"][0].update(planted["result"])
    (tmp_path / "planted.json").write_text(json.dumps(doc))
    out = lab("submit", str(tmp_path / "planted.json"), "--db", str(tmp_path / "lab.db"), cwd=tmp_path)
    assert out.returncode == 2 and where in out.stderr and "nothing of this file was stored" in out.stderr, out.stderr
    assert out.stderr.count("\n") == 1


def _plant(db: pathlib.Path) -> str:
    """A run whose stored suite and command were written around the checks (an older accel,
    or a hand on the database)."""
    with open_store(db) as store:
        run_id = store.ingest(_doc(suite_doc=suite_json(parse_suite(SUITE)), command="accel lab run s.toml"))
        store._execute("UPDATE runs SET suite_doc = ?, command = ? WHERE id = ?", (_planted_suite_doc(), "accel lab run s.toml\ntouch PWNED", run_id))
        store._execute("UPDATE results SET node = ? WHERE run_id = ?", ("n1\n", run_id))
    return run_id


def test_repro_gives_no_command_from_a_planted_suite(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "lab.db"
    run_id = _plant(db)
    env = {**os.environ, "ACCEL_BIN": str(ACCEL)}
    out = lab("repro", run_id, "--db", str(db), "--sample", "mi300x", cwd=tmp_path, env=env)
    assert out.returncode == 2 and "the stored suite" in out.stderr and "env" in out.stderr, out.stderr + out.stdout
    assert "PWNED" not in out.stdout and not (tmp_path / "PWNED").exists()
    # --on-node runs a suite file's checks, never the stored ones: without one it refuses before
    # it connects anywhere.
    out = lab("repro", run_id, "--db", str(db), "--on-node", "--address", "127.0.0.1:1", cwd=tmp_path, env=env)
    assert out.returncode == 2 and "--suite FILE" in out.stderr


def test_every_part_of_a_printed_line_is_quoted(tmp_path: pathlib.Path) -> None:
    """`check_command` with hostile keys, values and arguments (a `Check` made around the
    suite's rules): run as printed, it sets them literally and runs nothing else."""
    hostile = Check(
        name="c",
        kind="test",
        command=("sh", "-c", 'printf "%s|%s" "$MODE" "$1" > "$ACCEL_LAB_OUT/seen"', "x", "$(touch PWNED2)"),
        timeout_s=10,
        env=((INJECTED_KEY, "v"), ("MODE", "'; touch PWNED3; '")),
    )
    line = check_command(hostile, "c1; touch PWNED4")
    ran = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=30, cwd=tmp_path, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert not any(p.name.startswith("PWNED") for p in tmp_path.rglob("*")), ran.stdout + ran.stderr
    assert shlex.quote(f"{INJECTED_KEY}=v") in line
    out_dir = pathlib.Path(ran.stdout.strip().split("results in ")[1])
    assert (out_dir / "seen").read_text() == "'; touch PWNED3; '|$(touch PWNED2)"


def test_a_stored_suite_is_read_through_the_suite_rules(tmp_path: pathlib.Path) -> None:
    bad = json.loads(suite_json(parse_suite(SUITE)))
    bad["check"][0]["timeout_s"] = -1
    with open_store(tmp_path / "lab.db") as store:
        with pytest.raises(DocumentError, match="timeout_s"):
            store.ingest(_doc(suite_doc=json.dumps(bad)))
        other = json.loads(suite_json(parse_suite(SUITE.replace('name = "s"', 'name = "other"'))))
        with pytest.raises(DocumentError, match="not the run's"):
            store.ingest(_doc(suite_doc=json.dumps(other)))
        assert store.count("runs") == 0


def test_deep_json_is_one_clear_line(tmp_path: pathlib.Path) -> None:
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    out = lab("submit", str(tmp_path / "deep.json"), "--db", str(tmp_path / "lab.db"), cwd=tmp_path)
    assert out.returncode == 2 and "nested too deeply" in out.stderr and out.stderr.count("\n") == 1, out.stderr[-500:]
    (tmp_path / "deep.json").write_text(json.dumps({**_doc(), "fingerprints": {"x": json.loads("[" * 50 + "]" * 50)}}))
    out = lab("submit", str(tmp_path / "deep.json"), "--db", str(tmp_path / "lab.db"), cwd=tmp_path)
    assert out.returncode == 2 and "fingerprint" in out.stderr


def test_no_python_we_start_runs_a_module_planted_in_the_working_directory(tmp_path: pathlib.Path) -> None:
    """`python3 -m` puts the working directory first on `sys.path`: a `tomllib.py` there ran in
    the place of the standard library's when `accel lab` started the lab."""
    (tmp_path / "tomllib.py").write_text("import pathlib; pathlib.Path('PWNED').touch()\nraise SystemExit('planted')\n")
    (tmp_path / "s.toml").write_text(SUITE)
    env = {**os.environ, "ACCEL_PYTHON": PY}
    out = subprocess.run([str(ACCEL), "lab", "validate", "s.toml"], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    assert not (tmp_path / "PWNED").exists()
    out = subprocess.run([str(ACCEL), "cluster", "build", "--from-ray", "--address", "127.0.0.1:1"], capture_output=True, text=True, timeout=180, cwd=tmp_path, env=env)
    assert not (tmp_path / "PWNED").exists()
    from accel._python import module_argv

    out = subprocess.run([*module_argv("accel.lab"), "validate", "s.toml"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0 and not (tmp_path / "PWNED").exists(), out.stderr
    missing = subprocess.run([*module_argv("accel.no_such_module")], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert missing.returncode == 1 and missing.stderr.strip().endswith("No module named accel.no_such_module")
