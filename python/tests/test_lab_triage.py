"""The lab telling failures apart, on a real local multi-node Ray 2.60 cluster
(`ray.cluster_utils.Cluster`) of lab nodes backed by the MI300X capture (each node's own copy,
which discovery reads for its device health before and after every check), over twelve commits
of a real git repository that the suite's setup command checks each commit out of:

- a bad device: at one commit a check degrades a GPU's PCIe link on its node mid-run and fails;
  the failure is `hardware` (the verdict after the check, with its reason), the device is
  quarantined with the node's owner named, later runs hide it through its visibility variable,
  and `accel lab release` ends it;
- a flaky check: it fails once and passes when run again; the pass is recorded flaky;
- an infrastructure failure: a check killed at its timeout;
- a real regression at a known commit: a test fails and a benchmark slows from commit 7 on, on
  every node of the SKU (`code`, the other node's failure as evidence); the change point and
  the noise band flag the benchmark, and `accel lab bisect` names commit 7 through Ray;
- a ticket per (check, SKU): the bad device's check opens one that the next clean run closes;
- all of it on the pages, served by the node agent and read in headless chromium."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

import accel  # noqa: E402
import accel.ray as aray  # noqa: E402
from accel.lab import load_suite, open_store  # noqa: E402
from accel.lab._run import publish_lab, run_suite  # noqa: E402
from labsite import Agent, browse  # noqa: E402

PY = sys.executable
REPO = pathlib.Path(__file__).resolve().parents[2]
BUNDLE = REPO / "test_data" / "hosts" / "mi300x" / "capture.bundle"
BAD_DEVICE = "amd-0000:05:00.0"  # the GPU whose link the planted check degrades
LINK = "0000:05:00.0/current_link_width 3\n16\n"
OWNERS = {"mi-a": "alice@example.org", "mi-b": "bob@example.org"}
REGRESSED_AT = 7
BREAK_AT = 9
FLAKE_AT = 5
HANG_AT = 3


def _git(repo: pathlib.Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env, timeout=60).stdout.strip()


def _commits(repo: pathlib.Path) -> list[str]:
    """Twelve commits; from the seventh on, the code is slower and its unit test fails."""
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    out = []
    for i in range(12):
        (repo / "speed.txt").write_text("140\n" if i >= REGRESSED_AT else "100\n")
        (repo / "unit_ok.txt").write_text("no\n" if i >= REGRESSED_AT else "yes\n")
        (repo / "version.txt").write_text(f"{i}\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"commit {i}")
        out.append(_git(repo, "rev-parse", "HEAD"))
    return out


SUITE = """
[suite]
name = "nightly"
version = "1"
setup = ["sh", "-c", "git -C \\"$REPO\\" archive \\"$ACCEL_LAB_COMMIT\\" | tar -x"]

[[check]]
name = "bench"
kind = "benchmark"
command = [{py}, "-c", "import json, random; print(json.dumps({{'series': {{'lat_us': float(open('speed.txt').read()) + random.uniform(-1, 1)}}}}))"]
timeout_s = 60
better = "lower"
env = {{ REPO = {repo} }}

[[check]]
name = "unit"
kind = "test"
command = ["sh", "-c", "test \\"$(cat unit_ok.txt)\\" = yes"]
timeout_s = 60
env = {{ REPO = {repo} }}

[[check]]
name = "flaky"
kind = "test"
command = [{py}, "-c", {flaky}]
timeout_s = 60
reruns = 1
labels = {{ "accel.io/node" = "mi-b" }}
env = {{ REPO = {repo}, SHARED = {shared} }}

[[check]]
name = "io"
kind = "test"
command = ["sh", "-c", "if [ \\"$(cat version.txt)\\" = {hang} ]; then sleep 60; fi"]
timeout_s = 3
retries = 0
labels = {{ "accel.io/node" = "mi-b" }}
env = {{ REPO = {repo} }}

[[check]]
name = "device"
kind = "test"
command = [{py}, "-c", {device}]
timeout_s = 60
labels = {{ "accel.io/node" = "mi-a" }}
env = {{ REPO = {repo}, SHARED = {shared} }}
"""

# Fails the first time at FLAKE_AT on its node, passes when run again.
FLAKY = f"import os, sys; v = open('version.txt').read().strip(); m = os.path.join(os.environ['SHARED'], 'flaked'); first = v == '{FLAKE_AT}' and not os.path.exists(m); open(m, 'a').close() if first else None; sys.exit(1 if first else 0)"
# When the test says so, degrades GPU 0's PCIe link in this node's capture (a device going bad
# while the check runs) and fails; always writes down which devices it was given.
DEVICE = (
    "import os, sys; s = os.environ['SHARED']; node = os.environ['ACCEL_LAB_NODE']; "
    "open(os.path.join(s, 'visible-' + open('version.txt').read().strip()), 'w').write(os.environ.get('HIP_VISIBLE_DEVICES', 'all')); "
    "brk = os.path.join(s, 'break-' + node); b = os.path.join(s, node + '.bundle'); "
    f"sys.exit(0) if not os.path.exists(brk) else None; os.unlink(brk); t = open(b).read(); open(b, 'w').write(t.replace({LINK!r}, {LINK.replace(' 3', ' 2').replace('16', '4')!r}, 1)); sys.exit(1)"
)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, accel_bin: pathlib.Path) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("triage")
    shared = tmp / "shared"
    shared.mkdir()
    commits = _commits(tmp / "repo")
    suite_file = tmp / "nightly.toml"
    suite_file.write_text(SUITE.format(py=json.dumps(PY), repo=json.dumps(str(tmp / "repo")), shared=json.dumps(str(shared)), flaky=json.dumps(FLAKY), device=json.dumps(DEVICE), hang=HANG_AT))
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        for name in OWNERS:
            bundle = shared / f"{name}.bundle"
            shutil.copy(BUNDLE, bundle)
            spec = aray.node_spec(accel.discover(bundle), name)
            c.add_node(num_cpus=1, num_gpus=spec["num_gpus"], resources=spec["resources"], labels=spec["labels"])
        c.wait_for_nodes()
        ray.init(address=c.address, log_to_driver=False)
        for name, owner in OWNERS.items():
            bundle = shared / f"{name}.bundle"
            aray.publish_machine(name, accel.discover(bundle))
            env = json.loads(subprocess.run([str(accel_bin), "env", "--json", "--root", str(bundle)], capture_output=True, text=True, check=True, timeout=60).stdout)
            publish_lab(name, "lab-test", owner, env, {"root": str(bundle)})
        yield {"tmp": tmp, "shared": shared, "commits": commits, "suite": suite_file, "db": str(tmp / "lab.db"), "address": c.address}
    finally:
        ray.shutdown()
        c.shutdown()


def _analyze(db: str, *extra: str) -> dict[str, Any]:
    out = subprocess.run([PY, "-m", "accel.lab", "analyze", "--db", db, "--json", *extra], capture_output=True, text=True, timeout=300)
    assert out.returncode in (0, 1), out.stderr
    doc: dict[str, Any] = json.loads(out.stdout)
    return doc


@pytest.fixture(scope="module")
def nightly(lab: dict[str, Any]) -> dict[str, Any]:
    """Twelve nightly runs, one per commit; the device breaks at BREAK_AT. Returns the ticket
    states seen right after BREAK_AT and at the end."""
    suite = load_suite(lab["suite"])
    seen: dict[str, Any] = {}
    with open_store(lab["db"]) as store:
        for i, commit in enumerate(lab["commits"]):
            if i == BREAK_AT:
                (lab["shared"] / "break-mi-a").touch()
            run_suite(suite, store, commit=commit, lab="lab-test", command="accel lab run nightly.toml")
            if i == BREAK_AT:
                seen["after_break"] = _analyze(lab["db"])
    seen["end"] = _analyze(lab["db"], "--suite", str(lab["suite"]))
    return seen


def _results(db: str) -> list[dict[str, Any]]:
    with open_store(db) as store:
        return store.results()


def test_a_device_that_turns_bad_mid_run_is_hardware_and_quarantined_with_its_owner(lab: dict[str, Any], nightly: dict[str, Any]) -> None:
    results = _results(lab["db"])
    [broke] = [r for r in results if r["check_name"] == "device" and r["verdict"] == "fail"]
    assert broke["commit_sha"] == lab["commits"][BREAK_AT] and broke["failure_class"] == "hardware"
    ev = broke["evidence"]
    assert ev["health_before"] == [] and ev["health_after"] == [{"id": BAD_DEVICE, "state": "unhealthy", "reasons": ["PCIe link x4 of x16"]}]
    assert ev["devices"] == [BAD_DEVICE] and "device health after the check" in ev["why"]
    [q] = nightly["end"]["quarantine"]
    assert (q["node"], q["device"], q["owner"]) == ("mi-a", BAD_DEVICE, "alice@example.org") and "PCIe link x4 of x16" in q["reason"]
    # Later runs on that node hide the quarantined device through its visibility variable.
    assert (lab["shared"] / f"visible-{BREAK_AT - 1}").read_text() == "all"
    assert (lab["shared"] / f"visible-{BREAK_AT + 1}").read_text() == "1,2,3,4,5,6,7"
    # The node's other checks after the break are not blamed on the quarantined device.
    later = [r for r in results if r["node"] == "mi-a" and r["check_name"] == "unit" and r["commit_sha"] == lab["commits"][BREAK_AT + 1]]
    assert [r["failure_class"] for r in later] == ["code"], later


def test_the_flaky_check_passes_on_its_rerun_and_is_recorded_flaky(lab: dict[str, Any], nightly: dict[str, Any]) -> None:
    at = lab["commits"][FLAKE_AT]
    rs = [r for r in _results(lab["db"]) if r["check_name"] == "flaky" and r["commit_sha"] == at]
    assert [(r["verdict"], r["attempt"], r["flaky"]) for r in rs] == [("fail", 1, False), ("pass", 2, True)]
    assert rs[0]["evidence"]["reran_to_pass"] is True
    [flaky] = [f for f in nightly["end"]["flaky"] if f["check"] == "flaky"]
    assert flaky["commit"] == at and flaky["nodes"] == ["mi-b"]


def test_failures_are_classified_with_their_evidence_and_counted(lab: dict[str, Any], nightly: dict[str, Any]) -> None:
    results = _results(lab["db"])
    [hang] = [r for r in results if r["check_name"] == "io" and r["verdict"] == "infra"]
    assert hang["failure_class"] == "infrastructure" and "timeout" in hang["evidence"]["why"] and hang["evidence"]["timed_out"]
    unit = [r for r in results if r["check_name"] == "unit" and r["verdict"] == "fail"]
    assert {r["commit_sha"] for r in unit} == set(lab["commits"][REGRESSED_AT:])
    assert all(r["failure_class"] == "code" for r in unit)
    first = [r for r in unit if r["commit_sha"] == lab["commits"][REGRESSED_AT]]
    assert {r["node"]: r["evidence"]["same_sku"]["fail"] for r in first} == {"mi-a": ["mi-b"], "mi-b": ["mi-a"]}
    classes = nightly["end"]["classes"]
    # 5 regressed commits x 2 nodes, the flaky first attempt: code; the hang; the device.
    assert classes["counts"] == {"hardware": 1, "infrastructure": 1, "code": 11, "unclassified": 0}, classes


def test_a_ticket_opens_with_the_bad_device_and_closes_on_the_next_clean_run(lab: dict[str, Any], nightly: dict[str, Any]) -> None:
    def device(doc: dict[str, Any]) -> dict[str, Any]:
        [t] = [t for t in doc["tickets"] if t["check"] == "device"]
        return t

    opened = device(nightly["after_break"])
    assert (opened["state"], opened["sku"], opened["streak_start_commit"]) == ("open", "amd-mi300x", lab["commits"][BREAK_AT])
    closed = device(nightly["end"])
    assert closed["id"] == opened["id"] and closed["state"] == "closed" and closed["closed_commit"] == lab["commits"][BREAK_AT + 1]
    assert closed["flips"] == 2 and closed["last_success"] is not None
    [unit] = [t for t in nightly["end"]["tickets"] if t["check"] == "unit"]
    assert unit["state"] == "open" and unit["streak_start_commit"] == lab["commits"][REGRESSED_AT] and unit["failures"] == 5


def test_the_regression_is_flagged_by_change_point_and_noise_band(lab: dict[str, Any], nightly: dict[str, Any]) -> None:
    [change] = [c for c in nightly["end"]["regressions"] if c["series"] == "lat_us" and c["regression"]]
    assert (change["last_good"], change["first_bad"]) == (lab["commits"][REGRESSED_AT - 1], lab["commits"][REGRESSED_AT])
    bands = [t for t in nightly["end"]["trends"] if t["series"] == "lat_us"]
    assert {t["node"] for t in bands} == {"mi-a", "mi-b"}
    assert all(t["median"] is not None and t["spread"] > 0 for t in bands)


@pytest.fixture(scope="module")
def bisected(lab: dict[str, Any], nightly: dict[str, Any]) -> dict[str, Any]:
    c = lab["commits"]
    out = subprocess.run(
        [PY, "-m", "accel.lab", "bisect", "unit", "--good", c[0], "--bad", c[-1], "--suite", str(lab["suite"]), "--db", lab["db"], "--repo", str(lab["tmp"] / "repo"), "--address", lab["address"]],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr + out.stdout
    with open_store(lab["db"]) as store:
        [b] = store.bisects()
        steps = [r for r in store.runs(limit=1000) if r["source"] == "bisect"]
    return {"stdout": out.stdout, "bisect": b, "steps": steps}


def test_bisect_names_the_commit_through_ray_and_stores_every_step(lab: dict[str, Any], bisected: dict[str, Any]) -> None:
    c = lab["commits"]
    b = bisected["bisect"]
    assert b["first_bad"] == c[REGRESSED_AT] and b["evidence"]["last_good"] == c[REGRESSED_AT - 1]
    assert f"first bad commit: {c[REGRESSED_AT]}" in bisected["stdout"]
    assert b["evidence"]["peers"] and b["evidence"]["peers_agree"] is True
    assert len(bisected["steps"]) == len(b["evidence"]["steps"]) >= 3
    assert {s["commit_sha"] for s in bisected["steps"]} <= set(c)
    # A bisect's steps (past commits) leave the checks' state alone.
    assert [t["state"] for t in _analyze(lab["db"])["tickets"] if t["check"] == "unit"] == ["open"]


def test_all_of_it_on_the_pages_in_chromium_then_the_owner_releases_the_device(lab: dict[str, Any], nightly: dict[str, Any], bisected: dict[str, Any]) -> None:
    out_dir = lab["tmp"] / "pages"
    done = subprocess.run([PY, "-m", "accel.lab", "pages", "--db", lab["db"], "--out", str(out_dir), "--suite", str(lab["suite"])], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    agent = Agent(out_dir)

    async def visit(dt: Any, load: Any) -> dict[str, Any]:
        await load("/lab/")
        rows = "[...document.querySelectorAll('#{} tr')].slice(1).map(r => r.textContent)"
        facts = {name: await dt.evaluate(rows.format(name)) for name in ("quarantine", "tickets", "classes", "failures", "regressions", "bisects", "flaky")}
        facts["bands"] = await dt.evaluate("document.querySelectorAll('#trends rect.band').length")
        facts["scripts"] = await dt.evaluate("document.querySelectorAll('script').length")
        return facts

    try:
        facts = asyncio.run(browse(agent.url, visit))
    finally:
        agent.stop()
    c = lab["commits"]
    assert [e for e in facts["errors"] if "favicon.ico" not in e] == []
    assert any("mi-a" in r and BAD_DEVICE in r and "alice@example.org" in r and f"accel lab release mi-a/{BAD_DEVICE}" in r for r in facts["quarantine"]), facts["quarantine"]
    assert any("nightly/device" in r and "closed" in r for r in facts["tickets"]) and any("nightly/unit" in r and "open" in r for r in facts["tickets"]), facts["tickets"]
    assert any(r.startswith("hardware1") for r in facts["classes"]) and any(r.startswith("infrastructure1") for r in facts["classes"]), facts["classes"]
    assert any("nightly/unit" in r and "code" in r for r in facts["failures"]), facts["failures"]
    assert any("lat_us" in r and f"{c[REGRESSED_AT - 1]}..{c[REGRESSED_AT]}" in r for r in facts["regressions"]), facts["regressions"]
    assert any("nightly/unit" in r and c[REGRESSED_AT] in r for r in facts["bisects"]), facts["bisects"]
    assert any("nightly/flaky" in r for r in facts["flaky"])
    assert facts["bands"] >= 2 and facts["scripts"] == 0
    # The owner releases the device: no quarantine left, and the next run sees every device.
    released = subprocess.run([PY, "-m", "accel.lab", "release", f"mi-a/{BAD_DEVICE}", "--db", lab["db"], "--by", "alice@example.org"], capture_output=True, text=True, timeout=60)
    assert released.returncode == 0 and "released" in released.stdout, released.stderr
    assert _analyze(lab["db"])["quarantine"] == []
    again = subprocess.run([PY, "-m", "accel.lab", "release", f"mi-a/{BAD_DEVICE}", "--db", lab["db"]], capture_output=True, text=True, timeout=60)
    assert again.returncode == 1 and "not quarantined" in again.stdout
