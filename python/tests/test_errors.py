"""accel's error taxonomy: a mistake is `InvalidRequest` (with the field and, for a typo, the
nearest known name), a valid request the cluster cannot meet is `Infeasible` (with the failed
constraint and the nearest alternative), transport mistakes are `TransportError`s, and the CLI
gives the same suggestions with exit 2. No internal exception leaks."""

from __future__ import annotations

import json
import subprocess

import pytest

import accel
from accel import transport


@pytest.fixture(scope="module")
def dgx():
    return accel.cluster({"dgx-h100": 1})


def test_the_taxonomy_has_two_kinds_of_placement_error():
    assert issubclass(accel.InvalidRequest, accel.PlacementError) and issubclass(accel.InvalidRequest, ValueError)
    assert issubclass(accel.Infeasible, accel.PlacementError) and not issubclass(accel.Infeasible, ValueError)
    assert issubclass(accel.PlacementError, accel.AccelError)
    for e in (accel.PoolExhausted, accel.OwnerGone, accel.BufferFreed, accel.AuthError, accel.InvalidArgument):
        assert issubclass(e, accel.TransportError) and issubclass(e, accel.AccelError)


@pytest.mark.parametrize(
    "request_, field, suggestion",
    [
        ({"bundles": [{"count": 2, "vendor": ["nvidai"]}]}, "vendor", "nvidia"),
        ({"bundles": [{"count": 2, "family": ["hoper"]}]}, "family", "hopper"),
        ({"bundles": [{"count": 2}], "same": "rakc"}, "domain", "rack"),
        ({"bundles": [{"count": 2, "conectivity": "scale-up"}]}, "request", "connectivity"),
        ({"bundles": [{"count": 0}]}, "request", None),
    ],
)
def test_a_mistake_is_invalid_with_its_field_and_suggestion(dgx, request_, field, suggestion):
    with pytest.raises(accel.InvalidRequest) as err:
        accel.plan(dgx, request_)
    assert err.value.field == field, err.value
    assert err.value.suggestion == suggestion, err.value
    if suggestion:
        assert suggestion in str(err.value)


def test_a_full_cluster_is_infeasible_with_the_constraint_and_nearest(dgx):
    with pytest.raises(accel.Infeasible) as err:
        accel.plan(dgx, {"bundles": [{"count": 9}]})
    assert err.value.constraint == "count" and err.value.nearest.startswith("count 8"), err.value
    # A vendor the registry knows but this cluster lacks is a shortage, not a typo.
    with pytest.raises(accel.Infeasible) as err:
        accel.plan(dgx, {"bundles": [{"count": 2, "vendor": ["amd"]}]})
    assert err.value.constraint == "capability"
    # The guide's pattern works on every placement error.
    try:
        accel.plan(dgx, {"bundles": [{"count": 9}]})
    except accel.PlacementError as e:
        assert getattr(e, "constraint", None) == "count"


def test_unknown_samples_clusters_and_files_are_invalid(tmp_path):
    with pytest.raises(accel.InvalidRequest) as err:
        accel.cluster({"nope": 1})
    assert err.value.field == "sample" and err.value.value == "nope" and "dgx-h100" in str(err.value)
    with pytest.raises(accel.InvalidRequest) as err:
        accel.sample("dgx-h10")
    assert err.value.suggestion == "dgx-h100"
    with pytest.raises(accel.InvalidRequest, match="no request file"):
        accel.load_request(str(tmp_path / "missing.yaml"))
    with pytest.raises(accel.InvalidRequest, match="a request is a mapping"):
        accel.load_request("just words")
    with pytest.raises(accel.InvalidRequest) as err:
        accel.Planner({"nodes": "x"})
    assert err.value.field == "cluster"
    with pytest.raises(accel.InvalidRequest) as err:
        accel.Planner(accel.cluster({"dgx-h100": 1})).free_devices("dgx-h100-9")
    assert err.value.field == "node"


def test_transport_mistakes_are_transport_errors():
    with pytest.raises(accel.InvalidArgument, match="not list"):
        transport.put([1, 2, 3])
    with pytest.raises(accel.TransportError):
        transport.put(b"x", path="carrier-pigeon")
    with pytest.raises(TypeError):  # still a TypeError for code that catches that
        transport.put({"a": 1})


def test_the_cli_gives_the_same_suggestions_with_exit_2(tmp_path, accel_bin):
    def _cli(*args):
        return subprocess.run([accel_bin, *args], capture_output=True, text=True, timeout=60)

    cluster = tmp_path / "c.json"
    cluster.write_text(json.dumps(accel.cluster({"dgx-h100": 1})))
    cases = {
        '{"bundles": [{"count": 2, "vendor": ["nvidai"]}]}': 'did you mean "nvidia"?',
        '{"bundles": [{"count": 2}], "same": "rakc"}': 'did you mean "rack"?',
        '{"bundles": [{"count": 2, "conectivity": "scale-up"}]}': "did you mean `connectivity`",
    }
    for text, hint in cases.items():
        req = tmp_path / "r.json"
        req.write_text(text)
        done = _cli("plan", "--cluster", str(cluster), "--request", str(req))
        assert done.returncode == 2 and hint in done.stderr, (text, done.returncode, done.stderr)
    req.write_text('{"bundles": [{"count": 9}]}')
    assert _cli("plan", "--cluster", str(cluster), "--request", str(req)).returncode == 1
    done = _cli("labels", "--sample", "dgx-h100", "--labels-file", str(tmp_path / "typo.txt"))
    assert done.returncode == 2 and "typo.txt" in done.stderr


def test_a_bundle_index_out_of_range_names_the_valid_range(dgx):
    from accel.ray import AccelPlacementGroup

    placement = accel.plan(dgx, {"bundles": [{"count": 2}, {"count": 2}]})
    apg = AccelPlacementGroup(None, placement, {})  # no Ray needed to ask for a bundle
    for bad in (2, -1, "0"):
        with pytest.raises(accel.InvalidRequest, match=r"bundles are 0 to 1") as e:
            apg.devices(bad)
        assert e.value.field == "bundle"
    with pytest.raises(accel.InvalidRequest, match=r"no bundle 5"):
        apg.options(5)
    assert [d["label"] for d in apg.devices(1)] and apg.node(0)
