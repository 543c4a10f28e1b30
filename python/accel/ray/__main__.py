"""`python -m accel.ray start [--node-name NAME] [--sample NAME] [--agent] [--dry-run] [ray start args...]`:
starts a Ray node (with this interpreter's Ray) carrying the resources and labels accel
discovered on this machine, and with `--agent` the node agent and its sidecar.
`python -m accel.ray stop [--temp-dir DIR] [ray stop args...]` stops all of it.
`python -m accel.ray sidecar ...` is the agent's Ray sidecar (see `accel.ray._agent`)."""

from __future__ import annotations

import sys

from ._start import main

if __name__ == "__main__":
    if sys.argv[1:2] == ["sidecar"]:
        from ._agent import main as sidecar_main

        sys.exit(sidecar_main(sys.argv[2:]))
    sys.exit(main(sys.argv[1:]))
