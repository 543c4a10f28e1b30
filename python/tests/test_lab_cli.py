"""`python -m accel.lab` (and `accel lab`, the Rust binary exec'ing it) as a user meets it:
`validate`, `submit` (a results document from outside Ray; a bad one is refused whole with its
place named, and nothing is stored), `analyze` (failures, a regression with its commit range,
flaky and stale entries, each naming its owner; exit 1 on findings, 0 on a clean store), and
one-line errors with exit 2 for bad input."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time
from typing import Any

import numpy as np

from accel.lab import RESULTS_SCHEMA, fingerprint_hash, open_store

PY = sys.executable
ENV = {"fingerprint_version": 1, "fields": {"driver": {"value": "550.1", "source": "test"}}}
GOOD_SUITE = '[suite]\nname = "s"\nversion = "1"\n\n[[check]]\nname = "c"\nkind = "test"\ncommand = ["true"]\ntimeout_s = 5\n'


def lab(*args: str, cwd: pathlib.Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "accel.lab", *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def doc(results: list[dict[str, Any]], *, commit: str = "c1", created: float | None = None, suite: str = "nightly") -> dict[str, Any]:
    h = fingerprint_hash(ENV)
    for r in results:
        r.setdefault("env_hash", h)
        r.setdefault("node", "node-1")
        r.setdefault("vendor", "nvidia")
        r.setdefault("family", "hopper")
        r.setdefault("sku", "nvidia-h100-sxm")
        r.setdefault("kind", "test")
        now = created or time.time()
        r.setdefault("started_at", now - 10)
        r.setdefault("ended_at", now - 5)
    return {"schema": RESULTS_SCHEMA, "run": {"suite": suite, "suite_version": "1", "commit": commit, "created_at": created or time.time()}, "fingerprints": {h: ENV}, "results": results}


def test_validate_names_the_mistake(tmp_path: pathlib.Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text(GOOD_SUITE)
    ok = lab("validate", str(good))
    assert ok.returncode == 0 and "suite s 1, 1 checks" in ok.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text(GOOD_SUITE.replace("timeout_s", "timeout"))
    no = lab("validate", str(bad))
    assert no.returncode == 2
    assert no.stderr.strip() == f"accel lab: error: {bad}: check 'c': unknown key 'timeout'; did you mean 'timeout_s'?"


def test_submit_stores_a_document_and_refuses_a_bad_one_whole(tmp_path: pathlib.Path) -> None:
    db = str(tmp_path / "lab.db")
    good = tmp_path / "good.json"
    good.write_text(json.dumps(doc([{"check": "a", "verdict": "pass"}, {"check": "b", "verdict": "fail", "log": "boom"}])))
    ok = lab("submit", str(good), "--db", db)
    assert ok.returncode == 0, ok.stderr
    assert "(2 results)" in ok.stdout
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc([{"check": "a", "verdict": "pass"}, {"check": "b", "verdict": "green"}])))
    no = lab("submit", str(bad), "--db", db)
    assert no.returncode == 2 and "results[1].verdict" in no.stderr and "nothing of this file was stored" in no.stderr
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    assert lab("submit", str(junk), "--db", db).returncode == 2
    assert lab("submit", str(good), "--db", "mysql://x/y").returncode == 2
    with open_store(db) as store:
        assert (store.count("runs"), store.count("results")) == (1, 2)


def test_analyze_names_owners_and_exits_by_its_findings(tmp_path: pathlib.Path) -> None:
    db = str(tmp_path / "lab.db")
    owners = tmp_path / "owners.toml"
    owners.write_text('default = "admins"\n[skus]\n"nvidia-h100-sxm" = "h100-team"\n"nvidia-b200" = "b200-team"\n')
    suite = tmp_path / "nightly.toml"
    suite.write_text('[suite]\nname = "nightly"\nversion = "1"\n\n[[check]]\nname = "bw"\nkind = "benchmark"\ncommand = ["true"]\ntimeout_s = 5\nbetter = "higher"\n')
    rng = np.random.default_rng(0)
    now = time.time()
    with open_store(db) as store:
        for i in range(20):
            value = (100.0 if i < 12 else 80.0) + float(rng.normal(0, 1))  # bandwidth drops 20% at c12
            store.ingest(doc([{"check": "bw", "kind": "benchmark", "verdict": "pass", "series": {"busbw": value}}], commit=f"c{i:02d}", created=now - 3600 + i))
        store.ingest(doc([{"check": "t", "verdict": "pass"}, {"check": "t", "verdict": "fail", "message": "once", "started_at": now - 8}], commit="c19"))
    text = lab("analyze", "--db", db, "--owners", str(owners), "--suite", str(suite))
    assert text.returncode == 1, text.stderr
    out = text.stdout
    assert "regression: nightly/bw busbw on nvidia-h100-sxm" in out and "commits c11..c12" in out and "owner: h100-team" in out
    assert "nightly/t at c19: 1 pass, 1 fail" in out
    assert "failures (1):" in out and "nightly/t on nvidia-h100-sxm (node-1): fail at c19; owner: h100-team" in out
    assert "sku nvidia-b200: last pass never; owner: b200-team" in out
    js = lab("analyze", "--db", db, "--owners", str(owners), "--suite", str(suite), "--json")
    report = json.loads(js.stdout)
    assert [(r["last_good"], r["first_bad"], r["regression"]) for r in report["regressions"]] == [("c11", "c12", True)]
    # Without the suite the direction is unknown ("lower" is better): the drop is an improvement.
    plain = json.loads(lab("analyze", "--db", db, "--json").stdout)
    assert [r["regression"] for r in plain["regressions"]] == [False]
    clean = str(tmp_path / "clean.db")
    with open_store(clean) as store:
        store.ingest(doc([{"check": "t", "verdict": "pass"}]))
    assert lab("analyze", "--db", clean).returncode == 0
    broken = tmp_path / "broken-owners.toml"
    broken.write_text("[sku]\n")
    no = lab("analyze", "--db", clean, "--owners", str(broken))
    assert no.returncode == 2 and "did you mean 'skus'" in no.stderr


def test_the_accel_binary_passes_everything_to_the_lab(accel_bin: pathlib.Path, tmp_path: pathlib.Path) -> None:
    env = {**os.environ, "ACCEL_PYTHON": PY}
    helped = subprocess.run([str(accel_bin), "lab", "--help"], capture_output=True, text=True, timeout=60, env=env)
    assert helped.returncode == 0 and "usage: accel lab" in helped.stdout and "analyze" in helped.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text(GOOD_SUITE.replace('kind = "test"', 'kind = "tset"'))
    no = subprocess.run([str(accel_bin), "lab", "validate", str(bad)], capture_output=True, text=True, timeout=60, env=env)
    assert no.returncode == 2 and "did you mean 'test'" in no.stderr
    missing = subprocess.run([str(accel_bin), "lab", "validate", str(bad)], capture_output=True, text=True, timeout=60, env={**env, "ACCEL_PYTHON": str(tmp_path / "no-python")})
    assert missing.returncode == 2 and "set ACCEL_PYTHON" in missing.stderr


def test_run_without_a_reachable_cluster_is_one_line_not_a_hang(tmp_path: pathlib.Path) -> None:
    import socket

    suite = tmp_path / "s.toml"
    suite.write_text(GOOD_SUITE)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    start = time.monotonic()
    out = lab("run", str(suite), "--db", str(tmp_path / "lab.db"), "--address", f"127.0.0.1:{port}")
    assert out.returncode == 2 and f"cannot connect to the Ray cluster at 127.0.0.1:{port}" in out.stderr
    assert out.stderr.count("\n") == 1 and time.monotonic() - start < 30
