"""Every rule has one home, in Rust, and Python asks it (issue 38's table): label values, device
resources, a bundle's Ray resources and environment, CPU lists, secret-named variables, the
transport's paths and `ACCEL_SKU_DIR`.

Each rule is exercised through Python on adversarial inputs and compared with what Rust gives
by another road (the `accel` binary, the node spec, the planner's answer). Each Python face is
also checked to delegate: with the native function swapped for a recording stand-in, the face
returns the stand-in's answer, so a face that re-implemented the rule in Python fails here. A
real Ray cluster shows a bundle's environment coming from the target node's stored machine while
the driver has a different plugin of the same name on its search path."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any, Callable

import numpy as np
import pytest

import accel
import accel.ray as aray
from accel import _native
from accel import transport as T
from accel.lab import _run
from accel.ray import _affinity

REPO = pathlib.Path(__file__).resolve().parents[2]
ACCEL = REPO / "target" / "debug" / "accel"
EXAMPLE = REPO / "examples" / "plugins" / "ascend"

# Names no sanitiser should keep as they are: empty, only separators, too long, non-ASCII, spaces.
ADVERSARIAL = ["", "---", "..", "a" * 80, "ñode-1", "node one", "-x-", "x.y_z", "日本", "a/b:c", "_lead", "trail."]


def _machine_with_vendor(vendor: str) -> dict[str, Any]:
    m = aray.allow_unknown_health(accel.sample("mi300x"))
    for a in m["accelerators"]:
        a["vendor"] = vendor
    return m


# --- label values and device resources (accel_discover::labels) -------------------------------


@pytest.mark.parametrize("text", ADVERSARIAL)
def test_label_value_is_rusts(text: str) -> None:
    # Rust names the node in its `accel.io/node` label with the same rule.
    spec = aray.node_spec(accel.sample("mi300x"), text)
    assert aray.label_value(text) == spec["labels"][_native.NODE_LABEL]
    got = aray.label_value(text)
    assert len(got) <= 63 and (not got or (got[0].isascii() and got[0].isalnum() and got[-1].isalnum()))


def test_an_empty_label_value_stays_empty() -> None:
    # The two copies disagreed here: Python said "unknown" where Rust says "".
    assert aray.label_value("") == "" and aray.label_value("---") == ""


@pytest.mark.parametrize("vendor", ["nvidia", "pci-10de", "Vendor.X", "a b", "x-y.z", "ÿ"])
def test_device_resource_is_the_node_specs(vendor: str) -> None:
    m = _machine_with_vendor(vendor)
    spec = aray.node_spec(m, "n0")
    names = {aray.device_resource(a["vendor"], a["index"]) for a in m["accelerators"]}
    assert names and names <= set(spec["resources"]), (names, spec["resources"])


# --- a bundle's Ray resources and environment (accel_discover::bundle) ------------------------


def test_bundle_resources_and_env_come_from_the_plan() -> None:
    # A Neuron device is 8 NeuronCores of Ray's `neuron_cores`: the resource in its units.
    planner = accel.Planner(accel.cluster({"trn2": 1, "gb200-nvl72-tray": 1}))
    got = planner.plan_for_ray({"bundles": [{"count": 2, "vendor": ["aws"]}, {"count": 2, "same_numa": True}]})
    placement, ray_bundles = got["placement"], got["ray"]
    trn2, tray = ray_bundles
    core = accel.sample("trn2")["accelerators"][0]["vocabulary"]
    assert trn2["resources"][core["ray_resource"]] == 2 * core["ray_units"]
    assert trn2["selector"] == {_native.NODE_LABEL: "trn2-0"}
    assert sorted(trn2["device_resources"]) == sorted(
        aray.device_resource(d["vendor"], d["index"]) for d in placement["bundles"][0]["devices"]
    )
    # The tray's two GPUs of one NUMA node are tied between two NICs: one each.
    assert tray["env"]["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1" and tray["env"]["UCX_NET_DEVICES"] == "mlx5_0:1,mlx5_1:1"
    assert tray["env"]["ACCEL_CPUS"] == "0-71"


def test_plan_for_ray_matches_accel_plan_json(tmp_path: pathlib.Path) -> None:
    cluster = accel.cluster({"gb200-nvl72-tray": 2, "dgx-h100": 1})
    request = {"bundles": [{"count": 1}] * 6 + [{"count": 3}]}
    (tmp_path / "c.json").write_text(json.dumps(cluster))
    (tmp_path / "r.json").write_text(json.dumps(request))
    out = subprocess.run(
        [str(ACCEL), "plan", "--cluster", str(tmp_path / "c.json"), "--request", str(tmp_path / "r.json"), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    cli = json.loads(out.stdout)
    py = accel.Planner(cluster).plan_for_ray(request)
    assert [b["env"] for b in cli["bundles"]] == [rb["env"] for rb in py["ray"]]
    assert [b["devices"] for b in cli["bundles"]] == [b["devices"] for b in py["placement"]["bundles"]]


# --- CPU lists (accel_model::CpuSet) ---------------------------------------------------------


@pytest.mark.parametrize(
    "text, cpus",
    [("0-3,8", {0, 1, 2, 3, 8}), (" 1-2 , 5 ", {1, 2, 5}), ("", set()), ("7", {7}), (",,3,", {3})],
)
def test_cpulists_are_read_by_rust(text: str, cpus: set[int]) -> None:
    assert set(_native.parse_cpulist(text)) == cpus


@pytest.mark.parametrize("text", ["3-1", "a", "1-", "-2", "99999999", "0x3"])
def test_a_malformed_cpulist_leaves_affinity_alone(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError):
        _native.parse_cpulist(text)
    before = os.sched_getaffinity(0)
    monkeypatch.setenv(_affinity.CPUS_VAR, text)
    _affinity.pin()
    assert os.sched_getaffinity(0) == before


# --- secret-named variables (accel_discover::fingerprint::is_secret_name) --------------------


@pytest.mark.parametrize(
    "name, secret",
    [
        ("HF_TOKEN", True),
        ("ucx_password", True),
        ("MONKEY", True),  # the rule is a substring match: KEY
        ("X_CREDENTIALS", True),
        ("db_passwd", True),
        ("NCCL_DEBUG", False),
        ("", False),
        ("TOKE", False),
    ],
)
def test_secret_names_follow_the_fingerprints_rule(name: str, secret: bool, tmp_path: pathlib.Path) -> None:
    assert _run.is_secret_name(name) is secret


def test_env_redacts_exactly_what_python_calls_secret() -> None:
    # `accel env` (Rust) records allow-listed variables (NCCL_*) and redacts the secret-named
    # ones; the lab's filter (Python) must call exactly those secret.
    names = ["NCCL_IB_KEY", "NCCL_DEBUG", "NCCL_TOKENIZER", "NCCL_MONKEY", "NCCL_PASSWD_X", "NCCL_ALGO", "NCCL_credential"]
    env = dict(os.environ, **{n: "hunter22" for n in names})
    out = subprocess.run([str(ACCEL), "env", "--json", "--no-network"], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    fields = json.loads(out.stdout)["fields"]
    for n in names:
        assert fields[f"env.{n}"]["value"] in ("hunter22", "<redacted>"), n
        assert (fields[f"env.{n}"]["value"] == "<redacted>") is _run.is_secret_name(n), n


# --- the transport's paths (accel_transport::Path) ------------------------------------------


def test_transport_paths_are_rusts() -> None:
    assert T.PATHS == tuple(_native.TRANSPORT_PATHS)
    assert {"local", "shm", "tcp", "nixl", "cuda_ipc"} == set(T.PATHS)
    ref = T.put(np.arange(4.0))
    try:
        with pytest.raises(ValueError, match="cuda_ipc"):
            T.get(ref, path="bogus")  # the error lists Rust's paths
        with pytest.raises(accel.TransportError, match="not available"):
            T.get(ref, path="cuda_ipc")  # a path this build has no backend for
    finally:
        T.free(ref)


def test_a_get_crosses_the_ffi_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 38's measure: a `get` on the local, shm and TCP paths is one native call (after the
    transport has started)."""
    ref = T.put(np.arange(1000.0), readers=0)
    leased = T.put(np.arange(10.0), readers=3)
    T.info()
    calls: list[str] = []
    for name in dir(_native):
        fn = getattr(_native, name)
        if name.startswith("transport_") and callable(fn):

            def counted(*a: Any, _fn: Callable[..., Any] = fn, _name: str = name, **k: Any) -> Any:
                calls.append(_name)
                return _fn(*a, **k)

            monkeypatch.setattr(_native, name, counted)
    try:
        for path in ("local", "shm", "tcp"):
            calls.clear()
            assert float(T.get(ref, path=path).sum()) == 499500.0
            assert calls == ["transport_get"], (path, calls)
        calls.clear()
        T.get(leased, path="tcp")  # the lease's release is in the same call
        assert calls == ["transport_get"]
    finally:
        monkeypatch.undo()
        T.free(ref)
        T.free(leased)


# --- ACCEL_SKU_DIR (accel_discover::sku_dir) --------------------------------------------------


def test_sku_dir_is_read_where_the_binary_reads_it(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCEL_SKU_DIR", str(tmp_path / "missing"))
    with pytest.raises(accel.DiscoveryError, match="missing"):
        accel.discover(root=EXAMPLE / "capture")
    out = subprocess.run([str(ACCEL), "discover", "--root", str(EXAMPLE / "capture"), "--json"], capture_output=True)
    assert out.returncode != 0 and b"missing" in out.stderr
    monkeypatch.setenv("ACCEL_SKU_DIR", "")  # empty is unset, on both sides
    assert accel.discover(root=EXAMPLE / "capture")["accelerators"] is not None


# --- each face delegates ----------------------------------------------------------------------


class Sentinel(str):
    """What a swapped native function returns: a face that re-derives the rule cannot return it."""


FACES: list[tuple[str, Callable[[], Any], Any]] = [
    ("label_value", lambda: aray.label_value("a b"), Sentinel("L")),
    ("device_resource", lambda: aray.device_resource("nvidia", 1), Sentinel("R")),
    ("is_secret_name", lambda: _run.is_secret_name("X_TOKEN"), "S"),
    ("visibility_env", lambda: aray.visibility_env(accel.sample("mi300x"), []), {"V": "1"}),
]


@pytest.mark.parametrize("name, face, answer", FACES, ids=[f[0] for f in FACES])
def test_each_face_asks_rust(name: str, face: Callable[[], Any], answer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []

    def stand_in(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return answer

    monkeypatch.setattr(_native, name, stand_in)
    assert face() == answer and calls, f"accel's Python face for {name} did not ask accel._native"


def test_cpulist_face_asks_rust(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    before = os.sched_getaffinity(0)

    def stand_in(text: str) -> list[int]:
        seen.append(text)
        return sorted(before)

    monkeypatch.setattr(_native, "parse_cpulist", stand_in)
    monkeypatch.setenv(_affinity.CPUS_VAR, "not-a-list")
    _affinity.pin()  # Python alone would have skipped the malformed text
    assert seen == ["not-a-list"] and os.sched_getaffinity(0) == before


def test_no_rule_is_spelled_in_python() -> None:
    """The rules' tell-tale literals appear in no Python code of the package (docstrings and
    comments aside): a re-implementation would have to spell them."""
    import ast

    tells = ["accel_dev_", "CREDENTIAL", "PASSWD", "ACCEL_SKU_DIR", "ACCEL_CPUS", "NCCL_IB_HCA", "UCX_NET_DEVICES"]
    found = []
    for path in sorted((REPO / "python" / "accel").rglob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = {
            id(n.body[0].value)
            for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
            and n.body
            and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                found += [f"{path.name}: {t}" for t in tells if t in node.value]
    assert not found, found


# --- the environment comes from the target node's facts, on a real Ray cluster ----------------

DRIVER_PLUGIN = """#!{python}
\"\"\"A different accel-plugin-ascend, on the driver only: it answers every isolate with its own
value and leaves a mark each time it runs.\"\"\"
import json, sys
open({mark!r}, "a").write(" ".join(sys.argv[1:]) + "\\n")
verb = sys.argv[1] if len(sys.argv) > 1 else ""
if verb == "version":
    print(json.dumps({{"protocol": 1, "name": "ascend", "version": "9.9", "verbs": ["version", "isolate"]}}))
elif verb == "isolate":
    print(json.dumps({{"protocol": 1, "env": {{"ASCEND_RT_VISIBLE_DEVICES": "from-the-driver"}}}}))
else:
    sys.exit(3)
"""


def test_bundle_env_is_the_target_nodes_not_the_drivers_plugin(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    # The node: discovered with the example Ascend plugin, which stores each NPU's isolation value.
    monkeypatch.setenv("ACCEL_PLUGIN_DIR", str(EXAMPLE))
    machine = accel.discover(root=EXAMPLE / "capture")
    npus = {a["id"]: a for a in machine["accelerators"] if a["plugin"] == "ascend"}
    assert len(npus) == 8
    # Made distinct from the driver plugin's and from the index, so the source shows.
    for a in machine["accelerators"]:
        if a["plugin"] == "ascend":
            a["vocabulary"]["isolation"] = [f"npu{a['index']}"]
    spec = aray.node_spec(machine, "atlas-0")

    # The driver: a different plugin of the same name first on its search path.
    bindir = tmp_path / "bin"
    bindir.mkdir(mode=0o755)
    mark = tmp_path / "ran"
    plugin = bindir / "accel-plugin-ascend"
    plugin.write_text(DRIVER_PLUGIN.format(python=sys.executable, mark=str(mark)))
    plugin.chmod(0o755)
    monkeypatch.setenv("ACCEL_PLUGIN_DIR", str(bindir))
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")

    @ray.remote(num_cpus=0)
    class Probe:
        def env(self) -> dict[str, str | None]:
            return {k: os.environ.get(k) for k in ("ASCEND_RT_VISIBLE_DEVICES", "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES")}

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        c.add_node(num_cpus=1, resources=spec["resources"], labels=spec["labels"])
        c.wait_for_nodes()
        ray.init(address=c.address, log_to_driver=False)
        aray.publish_machine("atlas-0", machine)
        apg = aray.placement_group({"bundles": [{"count": 2, "same_numa": True}, {"count": 1}]})
        try:
            for i in range(apg.bundle_count):
                want = ",".join(npus[d["id"]]["vocabulary"]["isolation"][0] for d in apg.devices(i))
                assert apg.env(i)["ASCEND_RT_VISIBLE_DEVICES"] == want
                actor = Probe.options(**apg.options(i)).remote()
                seen = ray.get(actor.env.remote(), timeout=120)
                ray.kill(actor)
                assert seen == {"ASCEND_RT_VISIBLE_DEVICES": want, "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES": "1"}
        finally:
            apg.remove()
    finally:
        ray.shutdown()
        c.shutdown()
    assert not mark.exists(), f"the driver's plugin ran: {mark.read_text()}"
