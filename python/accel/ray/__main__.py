"""`python -m accel.ray start [--node-name NAME] [--sample NAME] [--dry-run] [ray start args...]`:
starts a Ray node carrying the resources and labels accel discovered on this machine."""

from __future__ import annotations

import sys

from ._start import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
