"""How Ray starts a planned bundle's worker process (`runtime_env["py_executable"]` is
`python -m accel.ray._worker`): pin the process to the bundle's CPUs (`accel.ray._affinity`),
then run Ray's worker script with its arguments in place."""

from __future__ import annotations

import runpy
import sys

from ._affinity import pin

if __name__ == "__main__":
    pin()
    if len(sys.argv) < 2:
        sys.exit("usage: python -m accel.ray._worker SCRIPT [ARGS...] (Ray starts bundle workers this way)")
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
