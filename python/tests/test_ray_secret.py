"""The transport's cluster secret on a fresh private Ray cluster, as a new user meets it: no
secret file, no ACCEL_* variable, no `register_transport()` call. Workers agree through Ray's KV;
the variable still wins over it; and an AuthError says how secrets are chosen and how to fix a
mismatch. Each scenario runs in a child process with a clean environment and a fresh HOME."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("ray")

SCRIPT = r'''
import json, os, sys
import numpy as np
import ray
from accel import transport as T

@ray.remote(num_cpus=0)
class Producer:
    def make(self):
        return T.put(np.arange(1 << 16, dtype=np.float32))

@ray.remote(num_cpus=0)
class Consumer:
    def total(self, ref):
        try:
            return ["ok", float(T.get(ref, path="tcp").sum())]
        except T.TransportError as e:
            return [type(e).__name__, str(e)]

ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
try:
    mode = sys.argv[1]
    p = Producer.remote()
    env = {"env_vars": {"ACCEL_TRANSPORT_SECRET": "a-secret-of-its-own-0123456789"}} if mode == "variable" else {}
    c = Consumer.options(runtime_env=env).remote()
    ref = ray.get(p.make.remote(), timeout=120)
    result = ray.get(c.total.remote(ref), timeout=120)
    from ray.experimental import internal_kv
    stored = internal_kv._internal_kv_get(b"transport-secret", namespace="accel")
    print(json.dumps({"result": result, "kv": bool(stored)}))
finally:
    ray.shutdown()
'''


def run(mode: str, tmp_path: pathlib.Path) -> dict:
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": os.pathsep.join([str(pathlib.Path(sys.executable).parent), "/usr/bin", "/bin"]),
        "HOME": str(home),
        "RAY_AUTH_MODE": "disabled",
        # The suite's one temp root (conftest.py), so the child's Ray leaves nothing behind.
        **{k: os.environ[k] for k in ("TMPDIR", "RAY_TMPDIR") if k in os.environ},
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (home / ".config" / "accel" / "transport-secret").exists(), "no secret file is needed"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_workers_of_one_cluster_share_a_secret_through_ray_kv(tmp_path: pathlib.Path) -> None:
    got = run("plain", tmp_path)
    assert got["result"] == ["ok", float(sum(range(1 << 16)))], got
    assert got["kv"], "the secret is kept in Ray's KV under accel's namespace"


def test_the_variable_wins_and_a_mismatch_says_how_to_fix_it(tmp_path: pathlib.Path) -> None:
    kind, message = run("variable", tmp_path)["result"]
    assert kind == "AuthError", message
    for words in ("ACCEL_TRANSPORT_SECRET", "ACCEL_TRANSPORT_SECRET_FILE", "Ray's KV", "same file on every node"):
        assert words in message, message
