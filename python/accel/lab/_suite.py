"""Lab suites: a named, versioned TOML file of checks, validated before anything runs.

    [suite]
    name = "collectives"          # letters, digits, `.`, `_`, `-`
    version = "3"                 # any non-empty string; results record it
    description = "..."           # optional
    setup = ["sh", "-c", "git clone -q $REPO . && git checkout -q $ACCEL_LAB_COMMIT"]
                                  # optional argv run before each check, in its directory

    [[check]]
    name = "allreduce-8"
    kind = "benchmark"            # or "test"
    command = ["python3", "bench.py", "--size", "64M"]   # argv, no shell
    timeout_s = 600
    labels = { "accel.io/accelerator-type" = "H100" }    # Ray node labels it needs
    better = "higher"             # benchmark: which way is good (or a table per series)
    results = "exit"              # test: "exit" (status), "junit" or "json" (in $ACCEL_LAB_OUT)
    retries = 1                   # infra retries (timeouts, lost nodes), 0..5
    reruns = 0                    # runs again after a fail, 0..3; a pass then is flaky
    env = { NCCL_DEBUG = "WARN" } # extra environment

A benchmark writes `{"series": {"name": number, ...}}` to `$ACCEL_LAB_OUT/series.json` (or as
the last line of its standard output). A "junit" test writes `*.xml` (JUnit XML) into
`$ACCEL_LAB_OUT`; a "json" test writes `results.json`:
`{"tests": [{"name": ..., "verdict": "pass"|"fail"|"skip"|"error", "message": ...}]}`.
`interpret` turns a finished command into verdicts by these rules. Every mistake in a suite is
one `SuiteError` naming the file, the check and the key, with the nearest known key name.

A suite stored with a run (`suite_json`) is read back through the same rules
(`suite_from_json`): stored data never skips validation. Every pattern is a full match."""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import re
import stat
import tomllib
import xml.etree.ElementTree as ET
from typing import Any

# Bounds: a suite is a small hand-written file; these keep a mistaken one from doing harm.
MAX_SUITE_BYTES = 1 << 20
MAX_CHECKS = 1000
MAX_TIMEOUT_S = 24 * 3600.0
MAX_RETRIES = 5
MAX_RESULT_FILE_BYTES = 16 << 20
MAX_RERUNS = 3
MAX_ARG_CHARS = 4096
# Patterns are used with `fullmatch` only (a `$` anchor would let a trailing newline through).
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# A Ray label key: an optional DNS prefix and a name, as Kubernetes labels.
LABEL_KEY_RE = re.compile(r"([a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
LABEL_VALUE_RE = re.compile(r"([A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?")
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")

KINDS = ("test", "benchmark")
RESULT_FORMATS = ("exit", "junit", "json")
DIRECTIONS = ("higher", "lower")
VERDICTS = ("pass", "fail", "error", "infra", "skip", "cancelled")

_SUITE_KEYS = ("name", "version", "description", "setup")
_CHECK_KEYS = ("name", "kind", "command", "timeout_s", "labels", "better", "results", "retries", "reruns", "env", "description")
_TOP_KEYS = ("suite", "check")


class SuiteError(ValueError):
    """A suite file that cannot be used: `where` names the file and the place in it,
    `suggestion` the nearest known key name (or None)."""

    def __init__(self, message: str, *, where: str = "", suggestion: str | None = None):
        super().__init__(f"{where}: {message}" if where else message)
        self.where = where
        self.suggestion = suggestion


@dataclasses.dataclass(frozen=True)
class Check:
    """One check of a suite (see the module's documentation for each field)."""

    name: str
    kind: str
    command: tuple[str, ...]
    timeout_s: float
    labels: tuple[tuple[str, str], ...] = ()
    better: tuple[tuple[str, str], ...] = ()  # ("*", dir) is the default for every series
    results: str = "exit"
    retries: int = 1
    env: tuple[tuple[str, str], ...] = ()
    description: str = ""
    reruns: int = 0
    setup: tuple[str, ...] = ()  # the suite's setup command, run before this check

    def direction(self, series: str) -> str:
        """Which way is good for `series` ("higher" or "lower"; "lower" when unsaid)."""
        table = dict(self.better)
        return table.get(series, table.get("*", "lower"))


@dataclasses.dataclass(frozen=True)
class Suite:
    """A validated suite: its name, version and checks in file order."""

    name: str
    version: str
    checks: tuple[Check, ...]
    description: str = ""
    setup: tuple[str, ...] = ()

    def check(self, name: str) -> Check:
        """The check called `name`; `SuiteError` with the nearest name otherwise."""
        for c in self.checks:
            if c.name == name:
                return c
        names = [c.name for c in self.checks]
        near = difflib.get_close_matches(name, names, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise SuiteError(f"no check {name!r} in suite {self.name!r}{hint}", suggestion=near[0] if near else None)


def _unknown_keys(table: dict[str, Any], known: tuple[str, ...], where: str) -> None:
    for key in table:
        if key not in known:
            near = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
            hint = f"; did you mean {near[0]!r}?" if near else f" (known: {', '.join(known)})"
            raise SuiteError(f"unknown key {key!r}{hint}", where=where, suggestion=near[0] if near else None)


def _string(value: Any, key: str, where: str, *, pattern: re.Pattern[str] | None = None, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise SuiteError(f"{key} must be a string, not {type(value).__name__}", where=where)
    if not value and not allow_empty:
        raise SuiteError(f"{key} must not be empty", where=where)
    if pattern is not None and not pattern.fullmatch(value):
        raise SuiteError(f"{key} {value!r} is not a valid name (letters, digits, '.', '_', '-'; at most 128)", where=where)
    return value


def _str_table(value: Any, key: str, where: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise SuiteError(f"{key} must be a table of strings, not {type(value).__name__}", where=where)
    out: dict[str, str] = {}
    for k, v in value.items():
        if not isinstance(v, str):
            raise SuiteError(f"{key}.{k} must be a string, not {type(v).__name__}", where=where)
        out[k] = v
    return out


def _check(raw: Any, index: int, source: str) -> Check:
    where = f"{source}: check[{index}]"
    if not isinstance(raw, dict):
        raise SuiteError("a check must be a table ([[check]])", where=where)
    name = raw.get("name")
    if name is None:
        raise SuiteError("missing key 'name'", where=where)
    name = _string(name, "name", where, pattern=NAME_RE)
    where = f"{source}: check {name!r}"
    _unknown_keys(raw, _CHECK_KEYS, where)
    for required in ("kind", "command", "timeout_s"):
        if required not in raw:
            raise SuiteError(f"missing key {required!r}", where=where)
    kind = _string(raw["kind"], "kind", where)
    if kind not in KINDS:
        near = difflib.get_close_matches(kind, KINDS, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise SuiteError(f"kind {kind!r} is not one of {', '.join(KINDS)}{hint}", where=where, suggestion=near[0] if near else None)
    command = _argv(raw["command"], "command", where)
    timeout = raw["timeout_s"]
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or not 0 < timeout <= MAX_TIMEOUT_S:
        raise SuiteError(f"timeout_s must be a number of seconds above 0 and at most {MAX_TIMEOUT_S:g}", where=where)
    labels = _str_table(raw.get("labels", {}), "labels", where)
    for k, v in labels.items():
        if not LABEL_KEY_RE.fullmatch(k):
            raise SuiteError(f"label key {k!r} is not a valid Ray label key", where=where)
        if not LABEL_VALUE_RE.fullmatch(v):
            raise SuiteError(f"label value {v!r} of {k!r} is not a valid Ray label value", where=where)
    better_raw = raw.get("better", "lower")
    if isinstance(better_raw, str):
        better = {"*": better_raw}
    else:
        better = _str_table(better_raw, "better", where)
    for series, direction in better.items():
        if direction not in DIRECTIONS:
            raise SuiteError(f"better{'' if series == '*' else '.' + series} must be 'higher' or 'lower', not {direction!r}", where=where)
    if "better" in raw and kind != "benchmark":
        raise SuiteError("better applies to benchmarks only", where=where)
    results = _string(raw.get("results", "exit"), "results", where)
    if results not in RESULT_FORMATS:
        raise SuiteError(f"results {results!r} is not one of {', '.join(RESULT_FORMATS)}", where=where)
    if "results" in raw and kind != "test":
        raise SuiteError("results applies to tests only (a benchmark writes series.json)", where=where)
    retries = raw.get("retries", 1)
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= MAX_RETRIES:
        raise SuiteError(f"retries must be an integer from 0 to {MAX_RETRIES}", where=where)
    reruns = raw.get("reruns", 0)
    if isinstance(reruns, bool) or not isinstance(reruns, int) or not 0 <= reruns <= MAX_RERUNS:
        raise SuiteError(f"reruns must be an integer from 0 to {MAX_RERUNS}", where=where)
    env = _str_table(raw.get("env", {}), "env", where)
    for k, v in env.items():
        if not ENV_NAME_RE.fullmatch(k) or "\0" in v or len(v) > MAX_ARG_CHARS:
            raise SuiteError(f"env {k!r:.80} is not a valid variable name and value", where=where)
        if k.startswith("ACCEL_LAB_"):
            raise SuiteError(f"env {k!r}: ACCEL_LAB_* variables are set by the lab itself", where=where)
    description = _string(raw.get("description", ""), "description", where, allow_empty=True)
    return Check(
        name=name,
        kind=kind,
        command=tuple(command),
        timeout_s=float(timeout),
        labels=tuple(sorted(labels.items())),
        better=tuple(sorted(better.items())) if kind == "benchmark" else (),
        results=results,
        retries=retries,
        env=tuple(sorted(env.items())),
        description=description,
        reruns=reruns,
    )


def _argv(value: Any, key: str, where: str) -> tuple[str, ...]:
    """A command: a non-empty array of strings without NUL, the program not empty."""
    if not isinstance(value, list) or not value or not all(isinstance(a, str) for a in value):
        raise SuiteError(f"{key} must be a non-empty array of strings (argv; no shell)", where=where)
    if not value[0]:
        raise SuiteError(f"{key}[0] (the program) must not be empty", where=where)
    if any("\0" in a or len(a) > MAX_ARG_CHARS for a in value) or len(value) > 1024:
        raise SuiteError(f"{key} must not hold a NUL character, an argument over {MAX_ARG_CHARS} characters or over 1024 arguments", where=where)
    return tuple(value)


def parse_suite(text: str, source: str = "<suite>") -> Suite:
    """A suite from its TOML text; `SuiteError` (naming `source`) for any mistake."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SuiteError(f"not valid TOML: {e}", where=source) from None
    return suite_from_doc(doc, source)


def suite_from_doc(doc: Any, source: str) -> Suite:
    """A suite from its document (TOML's shape: `suite` and `check`), every rule applied."""
    if not isinstance(doc, dict):
        raise SuiteError("a suite is a table of [suite] and [[check]]", where=source)
    _unknown_keys(doc, _TOP_KEYS, source)
    head = doc.get("suite")
    if not isinstance(head, dict):
        raise SuiteError("missing [suite] table (name and version)", where=source)
    _unknown_keys(head, _SUITE_KEYS, f"{source}: [suite]")
    for required in ("name", "version"):
        if required not in head:
            raise SuiteError(f"missing key {required!r}", where=f"{source}: [suite]")
    name = _string(head["name"], "name", f"{source}: [suite]", pattern=NAME_RE)
    version = head["version"]
    if isinstance(version, int) and not isinstance(version, bool):
        version = str(version)
    version = _string(version, "version", f"{source}: [suite]")
    if len(version) > 64:
        raise SuiteError("version is longer than 64 characters", where=f"{source}: [suite]")
    description = _string(head.get("description", ""), "description", f"{source}: [suite]", allow_empty=True)
    setup = _argv(head["setup"], "setup", f"{source}: [suite]") if "setup" in head else ()
    raw_checks = doc.get("check", [])
    if not isinstance(raw_checks, list) or not raw_checks:
        raise SuiteError("a suite needs at least one [[check]]", where=source)
    if len(raw_checks) > MAX_CHECKS:
        raise SuiteError(f"{len(raw_checks)} checks; at most {MAX_CHECKS}", where=source)
    checks = [dataclasses.replace(_check(raw, i, source), setup=setup) for i, raw in enumerate(raw_checks)]
    seen: set[str] = set()
    for c in checks:
        if c.name in seen:
            raise SuiteError(f"two checks are called {c.name!r}", where=source)
        seen.add(c.name)
    return Suite(name=name, version=version, checks=tuple(checks), description=description, setup=setup)


def load_suite(path: str | os.PathLike[str]) -> Suite:
    """A suite from a file (at most 1 MiB, regular); `SuiteError` for any mistake."""
    source = os.fspath(path)
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise SuiteError(f"cannot open: {e.strerror}", where=source) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SuiteError("not a regular file", where=source)
        data = os.read(fd, MAX_SUITE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_SUITE_BYTES:
        raise SuiteError(f"larger than {MAX_SUITE_BYTES} bytes", where=source)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SuiteError("not UTF-8 text", where=source) from None
    return parse_suite(text, source)


def check_doc(check: Check) -> dict[str, Any]:
    """A check as its suite file's table (what `suite_json` stores and a task receives)."""
    doc: dict[str, Any] = {"name": check.name, "kind": check.kind, "command": list(check.command), "timeout_s": check.timeout_s}
    if check.labels:
        doc["labels"] = dict(check.labels)
    if check.kind == "benchmark":
        doc["better"] = dict(check.better)
    else:
        doc["results"] = check.results
    doc.update(retries=check.retries, reruns=check.reruns, env=dict(check.env), description=check.description)
    return doc


def check_from_doc(doc: Any, setup: tuple[str, ...] = (), source: str = "<check>") -> Check:
    """`check_doc`'s table back as a `Check`, through every rule of a suite file."""
    c = _check(doc, 0, source)
    return dataclasses.replace(c, setup=_argv(list(setup), "setup", source) if setup else ())


def suite_json(suite: Suite) -> str:
    """The suite as JSON text in its file's shape (stored with each run, so `repro` can run its
    checks again); `suite_from_json` reads it back through every rule."""
    head: dict[str, Any] = {"name": suite.name, "version": suite.version, "description": suite.description}
    if suite.setup:
        head["setup"] = list(suite.setup)
    return json.dumps({"suite": head, "check": [check_doc(c) for c in suite.checks]}, sort_keys=True)


def _legacy(doc: Any) -> Any:
    """A suite stored by an older accel (`{"name", "version", "checks": [fields]}`) in the
    file's shape, so it meets the same rules."""
    if not isinstance(doc, dict) or "checks" not in doc or "suite" in doc:
        return doc
    checks = []
    for c in doc["checks"] if isinstance(doc["checks"], list) else []:
        if not isinstance(c, dict):
            checks.append(c)
            continue
        c = {k: v for k, v in c.items() if k in _CHECK_KEYS}
        for key in ("labels", "better", "env"):
            if isinstance(c.get(key), list):
                c[key] = {p[0]: p[1] for p in c[key] if isinstance(p, list) and len(p) == 2}
        if c.get("kind") == "benchmark":
            c.pop("results", None)
        else:
            c.pop("better", None)
        checks.append(c)
    return {"suite": {k: doc[k] for k in ("name", "version", "description") if k in doc}, "check": checks}


def suite_from_json(text: str, source: str = "the stored suite") -> Suite:
    """A stored suite (`suite_json`'s text) back as a `Suite`, through every rule of a suite
    file; `SuiteError` when it is not one."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise SuiteError(f"not JSON: {e}", where=source) from None
    return suite_from_doc(_legacy(doc), source)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one finished command amounts to: one verdict per case ("" is the check as a whole),
    a message, and a benchmark's series."""

    verdict: str
    case: str = ""
    message: str = ""
    series: tuple[tuple[str, float], ...] = ()


def _read_small(path: str) -> str:
    with open(path, "rb") as f:
        data = f.read(MAX_RESULT_FILE_BYTES + 1)
    if len(data) > MAX_RESULT_FILE_BYTES:
        raise ValueError(f"{os.path.basename(path)} is larger than {MAX_RESULT_FILE_BYTES} bytes")
    return data.decode("utf-8", "replace")


def parse_series(doc: Any) -> dict[str, float]:
    """`{"series": {name: number}}` -> the series; `ValueError` naming what is wrong."""
    if not isinstance(doc, dict) or not isinstance(doc.get("series"), dict):
        raise ValueError('expected a JSON object {"series": {"name": number, ...}}')
    out: dict[str, float] = {}
    for name, value in doc["series"].items():
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            raise ValueError(f"series name {name!r} is not a valid name")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"series {name!r}: {value!r} is not a finite number")
        out[name] = float(value)
    if not out:
        raise ValueError("no series in the document")
    return out


def parse_junit(text: str) -> list[Outcome]:
    """JUnit XML (`<testsuites>` or `<testsuite>`) -> one outcome per `<testcase>`."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise ValueError(f"not valid JUnit XML: {e}") from None
    out: list[Outcome] = []
    for case in root.iter("testcase"):
        name = ".".join(p for p in (case.get("classname"), case.get("name")) if p) or "unnamed"
        verdict, message = "pass", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                verdict = {"failure": "fail", "error": "error", "skipped": "skip"}[child.tag]
                message = (child.get("message") or child.text or "").strip()[:500]
                break
        out.append(Outcome(verdict=verdict, case=name, message=message))
    return out


def parse_json_results(doc: Any) -> list[Outcome]:
    """`{"tests": [{"name", "verdict", "message"?}]}` -> one outcome per test."""
    if not isinstance(doc, dict) or not isinstance(doc.get("tests"), list):
        raise ValueError('expected a JSON object {"tests": [{"name": ..., "verdict": ...}, ...]}')
    out: list[Outcome] = []
    for i, t in enumerate(doc["tests"]):
        if not isinstance(t, dict) or not isinstance(t.get("name"), str) or not t["name"]:
            raise ValueError(f"tests[{i}] needs a non-empty string name")
        verdict = t.get("verdict")
        if verdict not in ("pass", "fail", "skip", "error"):
            raise ValueError(f"tests[{i}] ({t['name']}): verdict {verdict!r} is not pass, fail, skip or error")
        message = t.get("message", "")
        out.append(Outcome(verdict=verdict, case=t["name"][:200], message=str(message)[:500]))
    return out


def interpret(check: Check, returncode: int, out_dir: str, stdout: str) -> list[Outcome]:
    """The verdicts of a command that ran to its end (timeouts and lost nodes are the
    runner's: infra). Results the check was meant to write but did not, or wrote broken, are
    `error`, never `pass`."""
    if check.kind == "benchmark":
        if returncode != 0:
            return [Outcome("fail", message=f"exit status {returncode}")]
        path = os.path.join(out_dir, "series.json")
        try:
            if os.path.exists(path):
                doc = json.loads(_read_small(path))
            else:
                lines = [ln for ln in stdout.strip().splitlines() if ln.strip()]
                if not lines:
                    raise ValueError("no series.json in $ACCEL_LAB_OUT and no output")
                doc = json.loads(lines[-1])
            series = parse_series(doc)
        except (ValueError, OSError, RecursionError) as e:
            return [Outcome("error", message=f"benchmark output: {e}")]
        return [Outcome("pass", series=tuple(sorted(series.items())))]
    if check.results == "exit":
        return [Outcome("pass" if returncode == 0 else "fail", message="" if returncode == 0 else f"exit status {returncode}")]
    try:
        if check.results == "junit":
            files = sorted(f for f in os.listdir(out_dir) if f.endswith(".xml"))
            if not files:
                raise ValueError("no *.xml in $ACCEL_LAB_OUT")
            outcomes = [o for f in files for o in parse_junit(_read_small(os.path.join(out_dir, f)))]
        else:
            outcomes = parse_json_results(json.loads(_read_small(os.path.join(out_dir, "results.json"))))
    except (ValueError, OSError, RecursionError) as e:
        return [Outcome("error", message=f"{check.results} results: {e}; exit status {returncode}")]
    if not outcomes:
        return [Outcome("error", message=f"{check.results} results name no test; exit status {returncode}")]
    if returncode != 0 and all(o.verdict in ("pass", "skip") for o in outcomes):
        outcomes.append(Outcome("fail", message=f"every test passed but the command exited with status {returncode}"))
    return outcomes
