"""Lab suites: a valid file parses into its checks; every rule of the validator is shown
refusing the input that breaks it, with a message naming the place (and the nearest key for a
misspelt one); and `interpret` turns exit statuses, JUnit XML, JSON results and benchmark
series into verdicts, never `pass` for output that is missing or broken."""

from __future__ import annotations

import json
import os
import pathlib

import pytest

from accel.lab import Check, SuiteError, interpret, load_suite, parse_suite

GOOD = """
[suite]
name = "collectives"
version = 3
description = "allreduce and friends"

[[check]]
name = "allreduce"
kind = "benchmark"
command = ["python3", "bench.py", "--size", "64M"]
timeout_s = 600
labels = { "accel.io/accelerator-type" = "H100" }
better = { busbw_gbps = "higher", "*" = "lower" }

[[check]]
name = "unit"
kind = "test"
command = ["pytest", "-q"]
timeout_s = 30.5
results = "junit"
retries = 0
env = { NCCL_DEBUG = "WARN" }
"""


def test_a_valid_suite_parses_into_its_checks() -> None:
    suite = parse_suite(GOOD, "good.toml")
    assert (suite.name, suite.version, suite.description) == ("collectives", "3", "allreduce and friends")
    bench, unit = suite.checks
    assert bench.kind == "benchmark" and bench.command == ("python3", "bench.py", "--size", "64M")
    assert bench.labels == (("accel.io/accelerator-type", "H100"),)
    assert bench.direction("busbw_gbps") == "higher" and bench.direction("latency_us") == "lower"
    assert bench.retries == 1 and bench.results == "exit"
    assert unit.timeout_s == 30.5 and unit.results == "junit" and unit.retries == 0
    assert unit.env == (("NCCL_DEBUG", "WARN"),)
    assert suite.check("unit") is unit
    with pytest.raises(SuiteError, match="did you mean 'unit'"):
        suite.check("unti")


def test_a_suite_file_is_read_and_a_non_file_refused(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(GOOD)
    assert load_suite(path).name == "collectives"
    with pytest.raises(SuiteError, match="cannot open"):
        load_suite(tmp_path / "missing.toml")
    with pytest.raises(SuiteError, match="not a regular file"):
        load_suite(tmp_path)
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    with pytest.raises(SuiteError, match="not a regular file"):
        load_suite(fifo)  # opened without blocking, refused
    big = tmp_path / "big.toml"
    big.write_text(GOOD + "#" * (1 << 20))
    with pytest.raises(SuiteError, match="larger than"):
        load_suite(big)


def _check(**over: object) -> str:
    fields: dict[str, object] = {"name": '"c"', "kind": '"test"', "command": '["true"]', "timeout_s": "5"}
    fields.update(over)
    body = "\n".join(f"{k} = {v}" for k, v in fields.items() if v is not None)
    return f'[suite]\nname = "s"\nversion = "1"\n\n[[check]]\n{body}\n'


BROKEN = [
    ("not toml [", "not valid TOML"),
    ('[suite]\nname = "s"\nversion = "1"\n', r"at least one \[\[check\]\]"),
    ('[[check]]\nname = "c"\n', r"missing \[suite\]"),
    ('[suite]\nname = "s"\n[[check]]\nname="c"\nkind="test"\ncommand=["x"]\ntimeout_s=1\n', "missing key 'version'"),
    ('[suite]\nname = "s"\nversion = "1"\nnmae = "x"\n[[check]]\nname="c"\n', "unknown key 'nmae'; did you mean 'name'"),
    ('[suit]\nname = "s"\n', "unknown key 'suit'; did you mean 'suite'"),
    ('[suite]\nname = "bad name"\nversion = "1"\n', "not a valid name"),
    (_check(timout_s="5"), "unknown key 'timout_s'; did you mean 'timeout_s'"),
    (_check(kind='"tset"'), "kind 'tset' is not one of test, benchmark; did you mean 'test'"),
    (_check(command="[]"), "command must be a non-empty array"),
    (_check(command='"true"'), "command must be a non-empty array"),
    (_check(command='[""]'), r"command\[0\]"),
    (_check(timeout_s="0"), "timeout_s must be"),
    (_check(timeout_s="-1"), "timeout_s must be"),
    (_check(timeout_s="1e9"), "timeout_s must be"),
    (_check(timeout_s="true"), "timeout_s must be"),
    (_check(timeout_s=None), "missing key 'timeout_s'"),
    (_check(labels='{ "accel.io/accelerator-type" = 3 }'), "must be a string"),
    (_check(labels='{ "bad key!" = "x" }'), "not a valid Ray label key"),
    (_check(labels='{ "accel.io/x" = "has space" }'), "not a valid Ray label value"),
    (_check(kind='"benchmark"', better='"faster"'), "must be 'higher' or 'lower'"),
    (_check(better='"higher"'), "better applies to benchmarks only"),
    (_check(results='"xml"'), "results 'xml' is not one of exit, junit, json"),
    (_check(kind='"benchmark"', results='"junit"'), "results applies to tests only"),
    (_check(retries="9"), "retries must be an integer from 0 to 5"),
    (_check(env='{ "ACCEL_LAB_OUT" = "/x" }'), "set by the lab itself"),
    (_check(env='{ "1BAD" = "x" }'), "not a valid variable name"),
    (_check(name='"c"') + '\n[[check]]\nname = "c"\nkind = "test"\ncommand = ["x"]\ntimeout_s = 1\n', "two checks are called 'c'"),
]


@pytest.mark.parametrize(("text", "message"), BROKEN, ids=[f"{i}-{m.split()[0]}" for i, (_, m) in enumerate(BROKEN)])
def test_each_broken_suite_is_refused_with_a_clear_message(text: str, message: str) -> None:
    with pytest.raises(SuiteError, match=message) as err:
        parse_suite(text, "broken.toml")
    assert str(err.value).startswith("broken.toml")


def test_a_misspelt_key_carries_its_suggestion() -> None:
    with pytest.raises(SuiteError) as err:
        parse_suite(_check(lables="{}"), "s.toml")
    assert err.value.suggestion == "labels"
    assert "check 'c'" in str(err.value)


TEST = Check(name="t", kind="test", command=("x",), timeout_s=1)


def test_exit_status_decides_a_plain_test(tmp_path: pathlib.Path) -> None:
    assert [o.verdict for o in interpret(TEST, 0, str(tmp_path), "")] == ["pass"]
    [failed] = interpret(TEST, 3, str(tmp_path), "")
    assert failed.verdict == "fail" and "exit status 3" in failed.message


def test_junit_cases_become_verdicts(tmp_path: pathlib.Path) -> None:
    check = Check(name="t", kind="test", command=("x",), timeout_s=1, results="junit")
    (tmp_path / "r.xml").write_text(
        '<testsuites><testsuite name="s">'
        '<testcase classname="m" name="ok"/>'
        '<testcase classname="m" name="bad"><failure message="assert 1 == 2"/></testcase>'
        '<testcase classname="m" name="skipped"><skipped/></testcase>'
        '<testcase classname="m" name="boom"><error message="oops"/></testcase>'
        "</testsuite></testsuites>"
    )
    got = {o.case: (o.verdict, o.message) for o in interpret(check, 1, str(tmp_path), "")}
    assert got == {"m.ok": ("pass", ""), "m.bad": ("fail", "assert 1 == 2"), "m.skipped": ("skip", ""), "m.boom": ("error", "oops")}


def test_missing_or_broken_results_are_errors_never_passes(tmp_path: pathlib.Path) -> None:
    junit = Check(name="t", kind="test", command=("x",), timeout_s=1, results="junit")
    js = Check(name="t", kind="test", command=("x",), timeout_s=1, results="json")
    [o] = interpret(junit, 0, str(tmp_path), "")
    assert o.verdict == "error" and "no *.xml" in o.message
    (tmp_path / "r.xml").write_text("<testsuite><testcase")
    [o] = interpret(junit, 0, str(tmp_path), "")
    assert o.verdict == "error" and "not valid JUnit XML" in o.message
    [o] = interpret(js, 0, str(tmp_path), "")
    assert o.verdict == "error"
    (tmp_path / "results.json").write_text(json.dumps({"tests": [{"name": "a", "verdict": "passed"}]}))
    [o] = interpret(js, 0, str(tmp_path), "")
    assert o.verdict == "error" and "'passed'" in o.message
    (tmp_path / "results.json").write_text(json.dumps({"tests": []}))
    [o] = interpret(js, 0, str(tmp_path), "")
    assert o.verdict == "error" and "name no test" in o.message


def test_json_results_and_a_failing_exit_with_all_passed(tmp_path: pathlib.Path) -> None:
    js = Check(name="t", kind="test", command=("x",), timeout_s=1, results="json")
    (tmp_path / "results.json").write_text(json.dumps({"tests": [{"name": "a", "verdict": "pass"}, {"name": "b", "verdict": "skip"}]}))
    assert [(o.case, o.verdict) for o in interpret(js, 0, str(tmp_path), "")] == [("a", "pass"), ("b", "skip")]
    # Every case passed, but the command failed: the check fails as a whole.
    outs = interpret(js, 2, str(tmp_path), "")
    assert [(o.case, o.verdict) for o in outs] == [("a", "pass"), ("b", "skip"), ("", "fail")]


def test_benchmark_series_from_a_file_or_the_last_line(tmp_path: pathlib.Path) -> None:
    bench = Check(name="b", kind="benchmark", command=("x",), timeout_s=1)
    [o] = interpret(bench, 0, str(tmp_path), 'warming up\n{"series": {"busbw": 180.5, "lat_us": 12}}\n')
    assert o.verdict == "pass" and o.series == (("busbw", 180.5), ("lat_us", 12.0))
    (tmp_path / "series.json").write_text('{"series": {"x": 1}}')
    [o] = interpret(bench, 0, str(tmp_path), "ignored")
    assert o.series == (("x", 1.0),)
    [o] = interpret(bench, 1, str(tmp_path), "")
    assert o.verdict == "fail"


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("", "no output"),
        ("not json", "benchmark output"),
        ('{"values": {}}', "expected a JSON object"),
        ('{"series": {}}', "no series"),
        ('{"series": {"x": "fast"}}', "not a finite number"),
        ('{"series": {"x": NaN}}', "not a finite number"),
        ('{"series": {"bad name": 1}}', "not a valid name"),
    ],
)
def test_broken_benchmark_output_is_an_error(tmp_path: pathlib.Path, doc: str, message: str) -> None:
    bench = Check(name="b", kind="benchmark", command=("x",), timeout_s=1)
    [o] = interpret(bench, 0, str(tmp_path), doc)
    assert o.verdict == "error" and message in o.message
