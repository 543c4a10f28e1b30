"""Every message that tells a user to run something names a command that exists: each
`accel ...` and `python -m accel.ray ...` command written in the sources (Rust and Python,
messages and the help they print) resolves to a real (sub)command whose --help lists every
flag named; every `pip install` names this project's wheel or a pinned dependency, never the
unrelated PyPI package `accel`; every `bash scripts/...` names a script that exists. A Python
without the accel package gets one line saying what to install."""

from __future__ import annotations

import functools
import os
import pathlib
import re
import subprocess
import sys
import tomllib

import pytest

from accel._errors import INSTALL_ACCEL, INSTALL_RAY

REPO = pathlib.Path(__file__).resolve().parents[2]
SOURCES = sorted([*REPO.glob("crates/*/src/**/*.rs"), *REPO.glob("python/accel/**/*.py")])
# Where users read install commands besides the sources.
DOCS = sorted([REPO / "README.md", REPO / "llms.txt", *REPO.glob("docs/**/*.md"), *REPO.glob("examples/**/*.md")])
PY = sys.executable


def _commands(pattern: str) -> dict[str, str]:
    """Each backticked command matching `pattern` in the sources, with where it was seen."""
    found: dict[str, str] = {}
    for path in SOURCES:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for text in re.findall(r"`([^`]+)`", line):
                text = text.replace("{PROG}", "python -m accel.ray").replace("${PROG}", "python -m accel.ray")
                if re.match(pattern, text):
                    found.setdefault(text, f"{path.relative_to(REPO)}:{n}")
    return found


def _words(command: str, skip: int) -> list[str]:
    """The words of a command after its program, up to the first placeholder or shell syntax."""
    out = []
    for word in command.split()[skip:]:
        if word in ("|", ">", "<", "&&", ";") or word.startswith(("<", "[", "{", "$", "'", '"')):
            break
        out.append(word)
    return out


@functools.cache
def _help(program: tuple[str, ...]) -> str | None:
    """The --help of `program`, or None when it is no command."""
    env = {**os.environ, "ACCEL_PYTHON": PY}  # `accel lab` runs this Python, which has accel
    done = subprocess.run([*program, "--help"], capture_output=True, text=True, timeout=120, env=env)
    return done.stdout if done.returncode == 0 else None


def _check(base: tuple[str, ...], words: list[str], where: str, command: str) -> None:
    program = base
    subcommands = [w for w in words if not w.startswith("-")]
    # The longest run of leading words that are (sub)commands; the rest are arguments.
    for word in words:
        if word.startswith("-") or _help((*program, word)) is None:
            break
        program = (*program, word)
    assert program != base or not subcommands, f"{where}: `{command}` names no command"
    text = _help(program)
    assert text is not None, f"{where}: `{command}`: `{' '.join(program)} --help` fails"
    for flag in (w.split("=")[0] for w in words if w.startswith("--")):
        assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text), f"{where}: `{command}`: {' '.join(program)} has no {flag}"


@pytest.mark.parametrize("command, where", sorted(_commands(r"accel [a-z-]").items()))
def test_every_accel_command_a_message_names_exists(command: str, where: str, accel_bin: pathlib.Path) -> None:
    _check((str(accel_bin),), _words(command, 1), where, command)


@pytest.mark.parametrize("command, where", sorted(_commands(r"python -m accel\.ray [a-z]").items()))
def test_every_accel_ray_command_a_message_names_exists(command: str, where: str) -> None:
    words = _words(command, 3)
    if words and words[0] == "sidecar":  # started by `start --agent`, not by users; help needs Ray
        return
    _check((PY, "-m", "accel.ray"), words, where, command)


def test_a_hint_check_fails_on_a_command_that_does_not_exist(accel_bin: pathlib.Path) -> None:
    with pytest.raises(AssertionError, match="names no command"):
        _check((str(accel_bin),), ["ray-start"], "here", "accel ray-start")
    with pytest.raises(AssertionError, match="has no --clique"):
        _check((str(accel_bin),), ["cluster", "--clique"], "here", "accel cluster --clique")
    with pytest.raises(AssertionError, match="has no --ray-only"):
        _check((PY, "-m", "accel.ray"), ["stop", "--ray-only"], "here", "python -m accel.ray stop --ray-only")


def _pip_installs() -> list[tuple[str, str]]:
    out = []
    for path in [*SOURCES, *DOCS, *REPO.glob("scripts/*.sh")]:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for m in re.finditer(r"pip install ([^`\n]*)", line):
                # "not `pip install accel`" and "never pip install accel" warn against it.
                if not re.search(r"\b(not|never)\s*`?$", line[: m.start()]):
                    out.append((m.group(1).strip(), f"{path.relative_to(REPO)}:{n}"))
    return out


def test_every_install_hint_names_this_projects_wheel_or_a_pinned_dependency() -> None:
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["ray"]
    assert f"'{extra[0]}'" in INSTALL_RAY, "the Ray hint pins what the wheel's [ray] extra pins"
    assert "dist/accel-*.whl" in INSTALL_ACCEL and (REPO / "scripts" / "wheel.sh").is_file()
    assert "dist/" in (REPO / "scripts" / "wheel.sh").read_text(), "wheel.sh builds into dist/"
    installs = _pip_installs()
    assert len(installs) > 5
    for spec, where in installs:
        # The unrelated PyPI package: `pip install accel`, `accel[ray]`, or its quoted forms.
        assert not re.match(r"""['"]?accel(\[|['"\s]|$)""", spec), f"{where}: pip install {spec}"
        if re.match(r"['\"]?ray\b", spec):
            assert spec.startswith(f"'{extra[0]}'") or spec.startswith(f'"{extra[0]}"'), f"{where}: Ray unpinned: {spec}"


@pytest.mark.parametrize("script", sorted({m for p in SOURCES for m in re.findall(r"bash (scripts/[\w.-]+\.sh)", p.read_text())}))
def test_every_script_a_message_names_exists(script: str) -> None:
    assert (REPO / script).is_file(), script


def test_accel_lab_without_the_python_package_says_what_to_install(accel_bin: pathlib.Path) -> None:
    python = "/usr/bin/python3"
    if not pathlib.Path(python).exists() or subprocess.run([python, "-c", "import accel"], capture_output=True).returncode == 0:
        pytest.skip("needs a Python without accel")
    done = subprocess.run([str(accel_bin), "lab", "--help"], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "ACCEL_PYTHON": python})
    assert done.returncode == 2 and done.stdout == "", done
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr and "ModuleNotFoundError" not in done.stderr
    assert "dist/accel-*.whl" in done.stderr and "not `pip install accel`" in done.stderr, done.stderr
