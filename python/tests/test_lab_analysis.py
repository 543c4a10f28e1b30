"""The lab's detectors on data made to flake, regress, go stale and cost on purpose, and each
one shown NOT firing on clean or noisy-but-stable data: flaky checks, E-divisive regressions
with their commit range, failures and stale hardware naming their owners, owner and price files
refused with a clear message, and capacity."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from accel.lab._analysis import (
    Owners,
    OwnersError,
    analyze,
    capacity,
    change_point,
    failures,
    flaky,
    parse_owners,
    parse_prices,
    regressions,
    stale,
)

DAY = 86400.0
NOW = 100 * DAY
_ids = itertools.count()

OWNERS = parse_owners(
    """
default = "lab-admins"
[plugins]
nvidia = "nv-team"
[families]
nvidia-hopper = ["hopper-a", "hopper-b"]
[skus]
"H100-SXM5-80GB" = "h100-owner"
"MI300X" = "amd-owner"
"""
)


def result(**kw: Any) -> dict[str, Any]:
    """A stored result (the columns `Store.results` gives), with defaults."""
    i = next(_ids)
    r: dict[str, Any] = {
        "id": f"{i:032x}",
        "run_id": "r0",
        "suite": "s",
        "suite_version": "1",
        "check_name": "c",
        "case_name": "",
        "kind": "test",
        "node": "n1",
        "vendor": "nvidia",
        "family": "nvidia-hopper",
        "sku": "H100-SXM5-80GB",
        "accelerator_type": "H100",
        "commit_sha": "c0",
        "env_hash": "e" * 64,
        "machine_hash": "",
        "verdict": "pass",
        "queued_at": None,
        "started_at": NOW - DAY + i,
        "ended_at": NOW - DAY + i + 1,
        "duration_s": 1.0,
        "attempt": 1,
        "message": "",
        "series": None,
    }
    r.update(kw)
    return r


def series_results(values: list[float], *, per_commit: int = 1, name: str = "lat_us", sku: str = "H100-SXM5-80GB", **kw: Any) -> list[dict[str, Any]]:
    out = []
    for i, v in enumerate(values):
        for j in range(per_commit):
            out.append(result(kind="benchmark", check_name="bench", commit_sha=f"c{i:02d}", series={name: v + j * 0.01}, sku=sku, started_at=1000.0 * i + j, ended_at=1000.0 * i + j + 10, **kw))
    return out


# -- flaky --------------------------------------------------------------------------------


def test_pass_and_fail_at_one_commit_and_environment_is_flaky() -> None:
    rs = [result(verdict="pass", node="n1"), result(verdict="fail", node="n2"), result(verdict="pass", node="n1")]
    [f] = flaky(rs, OWNERS)
    assert (f.check, f.commit, f.passes, f.failures, f.nodes) == ("c", "c0", 2, 1, ("n1", "n2"))
    assert f.owners == ("h100-owner",)


@pytest.mark.parametrize(
    "rs",
    [
        [result(verdict="pass"), result(verdict="pass")],  # clean
        [result(verdict="pass"), result(verdict="fail", commit_sha="c1")],  # a change between commits
        [result(verdict="pass"), result(verdict="fail", env_hash="f" * 64)],  # a different environment
        [result(verdict="pass"), result(verdict="infra"), result(verdict="cancelled"), result(verdict="skip")],  # not the check's verdicts
        [result(verdict="pass"), result(verdict="fail", case_name="other")],  # different cases
        [result(verdict="pass", env_hash=""), result(verdict="fail", env_hash="")],  # no fingerprint: cannot tell
    ],
    ids=["clean", "between-commits", "other-env", "infra", "other-case", "no-fingerprint"],
)
def test_flaky_does_not_fire(rs: list[dict[str, Any]]) -> None:
    assert flaky(rs, OWNERS) == []


# -- regressions --------------------------------------------------------------------------


def _noisy(n: int, level: float, sd: float, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(level + rng.normal(0, sd, n))


def test_a_regression_is_found_with_its_commit_range() -> None:
    values = _noisy(20, 100, 2, 1) + _noisy(8, 120, 2, 2)  # latency up 20% at c20
    [change] = regressions(series_results(values), OWNERS)
    assert (change.last_good, change.first_bad) == ("c19", "c20")
    assert change.regression and change.relative == pytest.approx(0.2, abs=0.03)
    assert change.p_value <= 0.01 and change.owners == ("h100-owner",)
    assert (change.check, change.series, change.sku) == ("bench", "lat_us", "H100-SXM5-80GB")


def test_direction_decides_regression_or_improvement() -> None:
    values = _noisy(15, 100, 2, 3) + _noisy(15, 80, 2, 4)  # the value drops 20% at c15
    [lower] = regressions(series_results(values), OWNERS)
    assert (lower.first_bad, lower.regression) == ("c15", False)  # latency down: an improvement
    [higher] = regressions(series_results(values), OWNERS, direction=lambda s, c, series: "higher")
    assert (higher.first_bad, higher.regression) == ("c15", True)  # throughput down: a regression


def test_two_changes_in_one_series_are_both_found() -> None:
    values = _noisy(12, 100, 1.5, 5) + _noisy(12, 130, 1.5, 6) + _noisy(12, 100, 1.5, 7)
    changes = regressions(series_results(values), OWNERS)
    assert [(c.last_good, c.first_bad, c.regression) for c in changes] == [("c11", "c12", True), ("c23", "c24", False)]


def test_several_results_per_commit_are_one_point_each() -> None:
    values = _noisy(10, 50, 1, 8) + _noisy(6, 60, 1, 9)
    [change] = regressions(series_results(values, per_commit=3), OWNERS)
    assert (change.last_good, change.first_bad) == ("c09", "c10")


def test_each_sku_is_its_own_series() -> None:
    # One SKU is simply slower than another: that is no change point.
    rs = series_results(_noisy(12, 100, 1, 10), sku="A") + series_results(_noisy(12, 200, 1, 11), sku="B")
    assert regressions(rs, OWNERS) == []


@pytest.mark.parametrize("seed", range(12))
def test_noisy_but_stable_series_never_regress(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    values = 100 + rng.normal(0, 4, 40)
    values[rng.choice(np.arange(2, 38, 5), 3, replace=False)] *= 1.6  # a few wild outliers, apart
    assert regressions(series_results(list(values)), OWNERS) == []


def test_a_small_shift_or_a_short_series_is_not_reported() -> None:
    assert regressions(series_results(_noisy(20, 100, 0.2, 12) + _noisy(20, 102, 0.2, 13)), OWNERS) == []  # 2% < 5%
    assert regressions(series_results([100, 100, 100, 150, 150]), OWNERS) == []  # too short to tell
    # A lone outlier at the end is not a change.
    assert regressions(series_results(_noisy(20, 100, 1, 14) + [200.0]), OWNERS) == []


def test_failed_runs_are_not_benchmark_points() -> None:
    rs = series_results(_noisy(20, 100, 1, 15))
    rs += [result(kind="benchmark", check_name="bench", verdict="fail", commit_sha=f"x{i}", series={"lat_us": 500.0}, started_at=1e6 + i) for i in range(10)]
    assert regressions(rs, OWNERS) == []


def test_change_point_statistic_on_its_own() -> None:
    rng = np.random.default_rng(0)
    step = np.concatenate([rng.normal(0, 1, 30), rng.normal(3, 1, 30)])
    found = change_point(step, alpha=0.01, permutations=199, min_size=3, rng=rng)
    assert found is not None and found[0] == 30
    flat = rng.normal(0, 1, 60)
    assert change_point(flat, alpha=0.01, permutations=199, min_size=3, rng=rng) is None


# -- failures and staleness, with owners ---------------------------------------------------


def test_the_latest_failure_names_its_owner_and_a_fixed_one_is_gone() -> None:
    rs = [
        result(check_name="a", verdict="fail", started_at=1),
        result(check_name="a", verdict="pass", started_at=2),  # fixed
        result(check_name="b", verdict="pass", started_at=1, sku="MI300X", vendor="amd", family="amd-cdna3"),
        result(check_name="b", verdict="error", started_at=2, sku="MI300X", vendor="amd", family="amd-cdna3", message="boom"),
        result(check_name="b", verdict="infra", started_at=3, sku="MI300X", vendor="amd", family="amd-cdna3"),  # not the check's verdict
    ]
    [f] = failures(rs, OWNERS)
    assert (f.check, f.sku, f.verdict, f.message, f.owners) == ("b", "MI300X", "error", "boom", ("amd-owner",))
    assert failures(rs[:2], OWNERS) == []


def test_ownership_falls_back_from_sku_to_family_to_plugin_to_default() -> None:
    assert OWNERS.of(sku="H100-SXM5-80GB", family="nvidia-hopper", vendor="nvidia") == ("h100-owner",)
    assert OWNERS.of(sku="H200", family="nvidia-hopper", vendor="nvidia") == ("hopper-a", "hopper-b")
    assert OWNERS.of(sku="B200", family="nvidia-blackwell", vendor="nvidia") == ("nv-team",)
    assert OWNERS.of(sku="X", family="y", vendor="z") == ("lab-admins",)
    assert Owners().of(sku="X") == ()


def test_hardware_without_a_recent_pass_is_stale_with_its_owner() -> None:
    rs = [
        result(sku="H100-SXM5-80GB", verdict="pass", ended_at=NOW - 1 * DAY),
        result(sku="H200", family="nvidia-hopper", verdict="pass", ended_at=NOW - 10 * DAY),  # last pass too old
        result(sku="B200", family="nvidia-blackwell", verdict="fail", ended_at=NOW - 1 * DAY),  # never passed
    ]
    got = {(s.what, s.name): (s.last_pass, s.owners) for s in stale(rs, OWNERS, now=NOW, days=7)}
    assert got == {
        ("sku", "H200"): (NOW - 10 * DAY, ("hopper-a", "hopper-b")),
        ("sku", "B200"): (None, ("nv-team",)),
        ("family", "nvidia-blackwell"): (None, ("nv-team",)),
        ("sku", "MI300X"): (None, ("amd-owner",)),  # in the owners file, never run
    }
    # Everything passed recently and the owners file names nothing else: nothing is stale.
    clean = [result(sku="H100-SXM5-80GB", verdict="pass", ended_at=NOW - DAY)]
    assert stale(clean, Owners(), now=NOW, days=7) == []


# -- owners and prices files ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[sku]\nx = 'a'\n", "unknown key 'sku'; did you mean 'skus'"),
        ("[skus]\nx = []\n", "skus.x: expected a maintainer"),
        ("[skus]\nx = 3\n", "skus.x: expected a maintainer"),
        ("skus = 'a'\n", r"\[skus\] must be a table"),
        ("default = ['']\n", "default: expected a maintainer"),
        ("[skus\n", "not valid TOML"),
    ],
)
def test_a_broken_owners_file_is_refused(text: str, message: str) -> None:
    with pytest.raises(OwnersError, match=message):
        parse_owners(text, "owners.toml")


def test_capacity_counts_node_hours_waits_and_cost() -> None:
    rs = [
        result(sku="A", duration_s=1800.0, queued_at=0.0, started_at=60.0),
        result(sku="A", duration_s=1800.0, queued_at=0.0, started_at=180.0),
        result(sku="B", duration_s=3600.0),
    ]
    prices = parse_prices("[per_node_hour]\nA = 2.5\n")
    got = {c.sku: c for c in capacity(rs, prices)}
    assert got["A"].node_hours == pytest.approx(1.0) and got["A"].cost == pytest.approx(2.5)
    assert (got["A"].queue_wait_mean_s, got["A"].queue_wait_max_s, got["A"].results) == (120.0, 180.0, 2)
    assert got["B"].cost is None and got["B"].queue_wait_mean_s is None
    with pytest.raises(OwnersError, match="did you mean 'per_node_hour'"):
        parse_prices("[per_hour]\nA = 1\n")
    with pytest.raises(OwnersError, match="must be a number"):
        parse_prices("[per_node_hour]\nA = -1\n")


def test_analyze_puts_it_together_as_json() -> None:
    rs = series_results(_noisy(20, 100, 2, 16) + _noisy(8, 125, 2, 17)) + [result(verdict="pass"), result(verdict="fail")]
    report = analyze(rs, OWNERS, now=NOW).to_json()
    assert [r["first_bad"] for r in report["regressions"]] == ["c20"]
    assert len(report["flaky"]) == 1 and report["flaky"][0]["owners"] == ["h100-owner"]
    assert {c["sku"] for c in report["capacity"]} == {"H100-SXM5-80GB"}


def test_only_the_latest_commits_of_a_long_series_are_searched() -> None:
    from accel.lab._analysis import MAX_POINTS

    old = _noisy(50, 100, 1, 20) + _noisy(MAX_POINTS + 50, 150, 1, 21)  # a change long ago: out of the window
    assert regressions(series_results(old), OWNERS) == []
    recent = _noisy(MAX_POINTS, 100, 1, 22) + _noisy(10, 150, 1, 23)
    [change] = regressions(series_results(recent), OWNERS)
    assert change.first_bad == f"c{MAX_POINTS:02d}"
