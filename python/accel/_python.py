"""Running a module of accel's Python package in a child interpreter without the working
directory first on `sys.path` (where a planted `tomllib.py` or `accel/` would run in its place):
`python -m` puts it there, `-P` leaves it out but exists only from Python 3.11. The prelude is
the Rust CLI's too (`crates/cli/src/python.rs`)."""

from __future__ import annotations

import sys

PRELUDE = (
    "import importlib.util, runpy, sys\n"
    "sys.path[:1] = [p for p in sys.path[:1] if p]\n"
    "m = sys.argv.pop(1)\n"
    "try:\n    found = importlib.util.find_spec(m)\nexcept ImportError:\n    found = None\n"
    "if found is None:\n    sys.exit(f'{sys.executable}: No module named {m}')\n"
    "runpy.run_module(m, run_name='__main__', alter_sys=True)\n"
)


def module_argv(module: str, python: str | None = None) -> list[str]:
    """The argv that runs `module` as `python -m` would, without the working directory on
    `sys.path` (arguments follow)."""
    return [python or sys.executable, "-c", PRELUDE, module]
