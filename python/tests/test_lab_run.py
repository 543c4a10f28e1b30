"""`accel lab run` on a real local multi-node Ray 2.60 cluster (`ray.cluster_utils.Cluster`)
whose two lab nodes present sample machines (an H100 and an MI300X node, their labels from
`accel.ray.node_spec`, their machines and `accel env` fingerprints published as
`accel.ray start --lab` does). Suites here pass, fail, flake, hang and regress on purpose:
checks land only on nodes whose labels match, each in its own working directory; a hang is an
infra failure, retried, with its whole process group killed; a cancel stops a running check;
results land in SQLite and in a real PostgreSQL, and the analysis finds the flake and the
regression with its commit range."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

import accel  # noqa: E402
import accel.lab  # noqa: E402
import accel.ray as aray  # noqa: E402
from accel.lab import load_suite, open_store  # noqa: E402
from accel.lab._analysis import flaky, regressions  # noqa: E402
from accel.lab._run import cancel_run, lab_nodes, plan_jobs, publish_lab, run_suite  # noqa: E402
from test_lab_store import fresh_pg_database, postgres  # noqa: E402,F401 (the server fixture)

PY = sys.executable
NODES = {"h100": "dgx-h100", "mi300x": "mi300x"}
SECRET = "tok-" + os.urandom(8).hex()
_CLUSTER: list[Any] = []  # the module's Cluster, for the test that loses a node


@pytest.fixture(scope="module")
def cluster(accel_bin: pathlib.Path) -> Iterator[dict[str, dict[str, str]]]:
    """Head (no lab labels) + two lab nodes; their labels by name."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ["LAB_TEST_TOKEN"] = SECRET  # in every worker's environment: never a check's
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    labels = {}
    try:
        for name, sample in NODES.items():
            spec = aray.node_spec(accel.sample(sample), name)
            c.add_node(num_cpus=1, num_gpus=spec["num_gpus"], resources=spec["resources"], labels=spec["labels"])
            labels[name] = spec["labels"]
        c.wait_for_nodes()
        _CLUSTER.append(c)
        ray.init(address=c.address, log_to_driver=False)
        for name, sample in NODES.items():
            aray.publish_machine(name, accel.sample(sample))
            env = json.loads(subprocess.run([str(accel_bin), "env", "--json", "--sample", sample], capture_output=True, text=True, check=True, timeout=60).stdout)
            publish_lab(name, "lab-test", f"{name}-owner", env)
        yield labels
    finally:
        _CLUSTER.clear()
        ray.shutdown()
        c.shutdown()
        os.environ.pop("LAB_TEST_TOKEN", None)


def _suite(tmp_path: pathlib.Path, body: str, name: str = "s") -> Any:
    path = tmp_path / f"{name}.toml"
    path.write_text(f'[suite]\nname = "{name}"\nversion = "1"\n\n{body}')
    return load_suite(path)


def _check(name: str, code: str, *, timeout: float = 60, extra: str = "") -> str:
    return f"[[check]]\nname = \"{name}\"\nkind = \"test\"\ncommand = [{json.dumps(PY)}, \"-c\", {json.dumps(code)}]\ntimeout_s = {timeout}\n{extra}\n"


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except OSError:
        return False


def test_checks_land_on_matching_nodes_with_their_verdicts(cluster: dict[str, dict[str, str]], tmp_path: pathlib.Path) -> None:
    h100_type = cluster["h100"]["accel.io/accelerator-type"]
    shared = tmp_path / "seen"
    shared.mkdir()
    record = f"import os; open(os.path.join({str(shared)!r}, os.environ['ACCEL_LAB_CHECK'] + '-' + os.environ['ACCEL_LAB_NODE']), 'w').write(os.getcwd())"
    body = (
        _check("everywhere", record)
        + _check("h100-only", record, extra=f'labels = {{ "accel.io/accelerator-type" = "{h100_type}" }}')
        + _check("broken", "import sys; print('assert 1 == 2'); sys.exit(3)")
        + _check("nowhere", "pass", extra='labels = { "accel.io/accelerator-type" = "NO-SUCH-TYPE" }')
        + _check(
            "junit",
            "import os; open(os.path.join(os.environ['ACCEL_LAB_OUT'], 'r.xml'), 'w').write("
            "'<testsuite><testcase classname=\"k\" name=\"a\"/><testcase classname=\"k\" name=\"b\"><failure message=\"no\"/></testcase></testsuite>')",
            extra='results = "junit"',
        )
    )
    suite = _suite(tmp_path, body)
    with open_store(tmp_path / "lab.db") as store:
        summary = run_suite(suite, store, commit="c1", lab="lab-test")
        got = {(r["check_name"], r["case_name"], r["node"]): r for r in store.results(run_id=summary.run_id, with_logs=True)}
        run = store.run(summary.run_id)
    assert run is not None and run["state"] == "done" and summary.state == "done"
    assert {k: r["verdict"] for k, r in got.items()} == {
        ("everywhere", "", "h100"): "pass",
        ("everywhere", "", "mi300x"): "pass",
        ("h100-only", "", "h100"): "pass",
        ("broken", "", "h100"): "fail",
        ("broken", "", "mi300x"): "fail",
        ("nowhere", "", "-"): "skip",
        ("junit", "k.a", "h100"): "pass",
        ("junit", "k.b", "h100"): "fail",
        ("junit", "k.a", "mi300x"): "pass",
        ("junit", "k.b", "mi300x"): "fail",
    }
    assert sorted(os.listdir(shared)) == ["everywhere-h100", "everywhere-mi300x", "h100-only-h100"]
    # Each check ran in its own working directory, removed afterwards.
    dirs = {(shared / f).read_text() for f in os.listdir(shared)}
    assert len(dirs) == 3 and not any(os.path.exists(d) for d in dirs)
    broken = got[("broken", "", "h100")]
    assert "assert 1 == 2" in broken["log"] and "exit status 3" in broken["message"]
    h = got[("everywhere", "", "h100")]
    assert (h["sku"], h["vendor"], h["accelerator_type"]) == ("nvidia-h100-sxm", "nvidia", h100_type)
    assert h["env_hash"] and h["machine_hash"] and h["commit_sha"] == "c1"
    assert got[("everywhere", "", "mi300x")]["env_hash"] != h["env_hash"]  # another machine, another fingerprint
    assert "NO-SUCH-TYPE" in got[("nowhere", "", "-")]["message"]


def test_secrets_never_reach_a_check_or_its_log(cluster: dict[str, dict[str, str]], tmp_path: pathlib.Path) -> None:
    # The check sees no secret-named variable; what it digs out of its parent (the Ray worker,
    # whose environment has one) is redacted in the stored log.
    code = "import os; print('mine:', os.environ.get('LAB_TEST_TOKEN')); print('parent:', open('/proc/%d/environ' % os.getppid(), 'rb').read().replace(bytes(1), b' ').decode())"
    suite = _suite(tmp_path, _check("dig", code, extra='labels = { "accel.io/node" = "h100" }'))
    with open_store(tmp_path / "lab.db") as store:
        summary = run_suite(suite, store, commit="c1")
        [r] = store.results(run_id=summary.run_id, with_logs=True)
    assert r["verdict"] == "pass"
    assert "mine: None" in r["log"] and "LAB_TEST_TOKEN=<redacted>" in r["log"]
    assert SECRET not in r["log"]


def test_selectors_and_one_per_pick_nodes(cluster: dict[str, dict[str, str]], tmp_path: pathlib.Path) -> None:
    suite = _suite(tmp_path, _check("a", "pass"))
    nodes = lab_nodes()
    assert set(nodes) == {"h100", "mi300x"}
    jobs, _ = plan_jobs(suite, nodes, {"accel.io/node": "mi300x"}, None)
    assert [j.node for j in jobs] == ["mi300x"]
    jobs, _ = plan_jobs(suite, nodes, {}, "accel.io/accelerator-type")
    assert sorted(j.node for j in jobs) == ["h100", "mi300x"]  # two types: one node each
    jobs, _ = plan_jobs(suite, nodes, {}, "accel.io/vendors")
    assert len({nodes[j.node].labels["accel.io/vendors"] for j in jobs}) == len(jobs)
    jobs, unmatched = plan_jobs(suite, nodes, {"accel.io/node": "gone"}, None)
    assert jobs == [] and "accel.io/node=gone" in unmatched[0][1]


def test_a_hang_is_an_infra_failure_retried_with_its_group_killed(cluster: dict[str, dict[str, str]], tmp_path: pathlib.Path) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    # The command starts a grandchild in its group and waits: both must die at the timeout.
    code = (
        "import os, subprocess, sys, time; "
        f"p = subprocess.Popen(['sleep', '300']); open(os.path.join({str(pids)!r}, str(p.pid)), 'w').close(); "
        "time.sleep(300)"
    )
    suite = _suite(tmp_path, _check("hang", code, timeout=2, extra='retries = 1\nlabels = { "accel.io/node" = "h100" }'))
    with open_store(tmp_path / "lab.db") as store:
        summary = run_suite(suite, store, commit="c1")
        rs = store.results(run_id=summary.run_id, with_logs=True)
    assert [(r["verdict"], r["attempt"]) for r in rs] == [("infra", 1), ("infra", 2)]
    assert all("timed out after 2 s" in r["message"] for r in rs)
    assert summary.counts == {"infra": 2}
    started = [int(p) for p in os.listdir(pids)]
    assert len(started) == 2
    deadline = time.monotonic() + 10
    while any(_pid_alive(p) for p in started) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_pid_alive(p) for p in started)


def test_a_cancel_stops_a_running_check_and_records_the_rest(cluster: dict[str, dict[str, str]], tmp_path: pathlib.Path) -> None:
    marker = tmp_path / "started"
    code = f"import os, time; open({str(marker)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
    body = _check("long", code, timeout=300, extra='labels = { "accel.io/node" = "h100" }') + _check("later", "pass", extra='labels = { "accel.io/node" = "h100" }')
    suite = _suite(tmp_path, body)
    db = tmp_path / "lab.db"
    run_id = "ab" * 16
    out: dict[str, Any] = {}
    with open_store(db) as store:
        t = threading.Thread(target=lambda: out.update(summary=run_suite(suite, store, commit="c1", run_id=run_id)))
        t.start()
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists()
        time.sleep(0.3)
        pid = int(marker.read_text())
        with open_store(db) as other:  # as `accel lab cancel RUN` does, from another process
            assert cancel_run(other, run_id)
            assert not cancel_run(other, "cd" * 16)
        t.join(timeout=120)
        assert not t.is_alive()
        rs = {r["check_name"]: r["verdict"] for r in store.results(run_id=run_id)}
        run = store.run(run_id)
    assert out["summary"].state == "cancelled" and run is not None and run["state"] == "cancelled"
    assert rs == {"long": "cancelled", "later": "cancelled"}
    deadline = time.monotonic() + 20
    while _pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _pid_alive(pid)


FLAKE_AND_BENCH = """
[[check]]
name = "flaky"
kind = "test"
command = [{py}, "-c", "import os, sys; p = os.path.join({shared!r}, os.environ['ACCEL_LAB_NODE']); n = len(os.listdir(p)) if os.path.isdir(p) else 0; os.makedirs(p, exist_ok=True); open(os.path.join(p, str(n)), 'w').close(); sys.exit(n % 2)"]
timeout_s = 60
labels = {{ "accel.io/node" = "h100" }}

[[check]]
name = "bench"
kind = "benchmark"
command = [{py}, "-c", "import os, json, random; c = int(os.environ['ACCEL_LAB_COMMIT'][1:]); print(json.dumps({{'series': {{'lat_us': (130 if c >= 8 else 100) + random.uniform(-2, 2)}}}}))"]
timeout_s = 60
labels = {{ "accel.io/node" = "h100" }}
better = "lower"
"""


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_flakes_and_regressions_through_ray_land_in_the_store(cluster: dict[str, dict[str, str]], tmp_path: pathlib.Path, backend: str, request: pytest.FixtureRequest) -> None:
    shared = tmp_path / "flake"
    suite = _suite(tmp_path, FLAKE_AND_BENCH.format(py=json.dumps(PY), shared=str(shared)))
    url = str(tmp_path / "lab.db") if backend == "sqlite" else fresh_pg_database(request.getfixturevalue("postgres"))
    with open_store(url) as store:
        for i in range(12):
            run_suite(suite, store, commit=f"c{i:02d}")
            if i == 0:
                run_suite(suite, store, commit="c00")  # the flaky check fails the second time
        results = store.results()
        assert store.count("runs") == 13
    found = flaky(results)
    assert [(f.check, f.commit, f.passes, f.failures) for f in found] == [("flaky", "c00", 1, 1)]
    [change] = regressions(results)
    assert (change.check, change.series, change.last_good, change.first_bad, change.regression) == ("bench", "lat_us", "c07", "c08", True)


def test_the_cli_runs_a_suite_and_exits_by_its_verdicts(cluster: dict[str, dict[str, str]], tmp_path: pathlib.Path) -> None:
    address = ray.get_runtime_context().gcs_address
    good = tmp_path / "good.toml"
    good.write_text('[suite]\nname = "g"\nversion = "1"\n\n' + _check("ok", "pass"))
    bad = tmp_path / "bad.toml"
    bad.write_text('[suite]\nname = "b"\nversion = "1"\n\n' + _check("no", "raise SystemExit(1)"))
    db = str(tmp_path / "lab.db")
    env = dict(os.environ)

    def lab(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([PY, "-m", "accel.lab", *args], capture_output=True, text=True, timeout=180, env=env)

    ok = lab("run", str(good), "--db", db, "--address", address, "--commit", "c1", "--select", "accel.io/node=h100")
    assert ok.returncode == 0, ok.stderr
    assert "pass      ok on h100" in ok.stdout and "1 pass" in ok.stdout
    no = lab("run", str(bad), "--db", db, "--address", address, "--commit", "c1")
    assert no.returncode == 1 and "fail      no on mi300x" in no.stdout
    typo = tmp_path / "typo.toml"
    typo.write_text('[suite]\nname = "t"\nversion = "1"\n\n[[check]]\nname = "x"\nkind = "test"\ncommand = ["true"]\ntimeout = 5\n')
    broken = lab("run", str(typo), "--db", db, "--address", address)
    assert broken.returncode == 2 and "did you mean 'timeout_s'" in broken.stderr and broken.stderr.count("\n") == 1
    sel = lab("run", str(good), "--db", db, "--address", address, "--select", "novalue")
    assert sel.returncode == 2 and "expected LABEL=VALUE" in sel.stderr


def test_repro_on_node_runs_the_failures_again_where_they_failed(cluster: dict[str, dict[str, str]], tmp_path: pathlib.Path) -> None:
    code = "import os, sys; sys.exit(1 if os.environ['ACCEL_LAB_NODE'] == 'mi300x' else 0)"
    suite = _suite(tmp_path, _check("amd-breaks", code) + _check("fine", "pass"))
    db = str(tmp_path / "lab.db")
    with open_store(db) as store:
        first = run_suite(suite, store, commit="c5")
    assert first.counts == {"pass": 3, "fail": 1}
    address = ray.get_runtime_context().gcs_address
    out = subprocess.run([PY, "-m", "accel.lab", "repro", first.run_id, "--db", db, "--on-node", "--suite", str(tmp_path / "s.toml"), "--address", address], capture_output=True, text=True, timeout=180)
    assert out.returncode == 1, out.stderr  # it still fails there
    assert out.stdout.count("repro run ") == 1 and "1 fail" in out.stdout
    with open_store(db) as store:
        [again] = [r for r in store.runs() if r["source"] == "repro"]
        rs = store.results(run_id=again["id"])
    assert (again["commit_sha"], again["selectors"]) == ("c5", {"accel.io/node": "mi300x"})
    assert [(r["check_name"], r["node"], r["verdict"]) for r in rs] == [("amd-breaks", "mi300x", "fail")]


def test_start_with_lab_publishes_the_lab_owner_and_fingerprint(cluster: dict[str, dict[str, str]], accel_bin: pathlib.Path) -> None:
    import argparse

    from accel.lab._run import LAB_KV_PREFIX, _kv_json
    from accel.ray._start import _publish_lab

    _publish_lab(argparse.Namespace(sample="mi300x", root=None, lab="lab-b", owner="ops@example.org"), "not-a-live-node")
    doc = _kv_json(LAB_KV_PREFIX + "not-a-live-node")
    assert doc is not None and (doc["lab"], doc["owner"]) == ("lab-b", "ops@example.org")
    assert doc["env"]["fields"]["accel.version"]["value"] and doc["env_hash"] == accel.lab.fingerprint_hash(doc["env"])
    # --owner alone is refused before anything starts; --lab is accepted by a dry run.
    bad = subprocess.run([PY, "-m", "accel.ray", "start", "--sample", "mi300x", "--owner", "x"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--owner needs --lab" in bad.stderr
    dry = subprocess.run([PY, "-m", "accel.ray", "start", "--sample", "mi300x", "--lab", "l", "--dry-run"], capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0 and dry.stdout.startswith("ray start")


def test_a_lost_node_is_an_infra_failure_and_not_retried_elsewhere(cluster: dict[str, dict[str, str]], tmp_path: pathlib.Path) -> None:
    c = _CLUSTER[0]
    spec = aray.node_spec(accel.sample("dgx-h100"), "doomed")
    node = c.add_node(num_cpus=1, num_gpus=spec["num_gpus"], resources=spec["resources"], labels=spec["labels"])
    c.wait_for_nodes()
    aray.publish_machine("doomed", accel.sample("dgx-h100"))
    marker = tmp_path / "started"
    # Sleeps until its parent (the Ray worker) is gone, so nothing outlives the node.
    code = f"import os, time; p = os.getppid(); open({str(marker)!r}, 'w').close(); [time.sleep(0.1) for _ in iter(lambda: os.getppid() == p, False)]"
    suite = _suite(tmp_path, _check("long", code, timeout=300, extra='retries = 2\nlabels = { "accel.io/node" = "doomed" }'))
    out: dict[str, Any] = {}
    with open_store(tmp_path / "lab.db") as store:
        t = threading.Thread(target=lambda: out.update(summary=run_suite(suite, store, commit="c1")))
        t.start()
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists()
        c.remove_node(node)
        t.join(timeout=180)
        assert not t.is_alive()
        rs = store.results(run_id=out["summary"].run_id)
    assert [(r["check_name"], r["node"], r["verdict"], r["attempt"]) for r in rs] == [("long", "doomed", "infra", 1)]
    # Ray's error for the task, or the driver seeing the node gone first: either names it.
    assert "Error" in rs[0]["message"] or "node doomed was lost" in rs[0]["message"], rs[0]["message"]
    assert "doomed" not in lab_nodes()


def test_ctrl_c_cancels_the_run_and_kills_the_running_check(cluster: dict[str, dict[str, str]], tmp_path: pathlib.Path) -> None:
    import signal

    marker = tmp_path / "started"
    suite = tmp_path / "long.toml"
    suite.write_text('[suite]\nname = "long"\nversion = "1"\n\n' + _check("long", f"import os, time; open({str(marker)!r}, 'w').write(str(os.getpid())); time.sleep(120)", timeout=300, extra='labels = { "accel.io/node" = "mi300x" }'))
    db = str(tmp_path / "lab.db")
    address = ray.get_runtime_context().gcs_address
    proc = subprocess.Popen([PY, "-m", "accel.lab", "run", str(suite), "--db", db, "--address", address, "--commit", "c1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists()
        time.sleep(0.3)
        pid = int(marker.read_text())
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 130 and "cancelled (Ctrl-C)" in err, err
    with open_store(db) as store:
        [run] = store.runs()
        assert run["state"] == "cancelled"
        assert [r["verdict"] for r in store.results(run_id=run["id"])] == ["cancelled"]
    deadline = time.monotonic() + 20
    while _pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _pid_alive(pid)
