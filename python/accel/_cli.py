"""The `accel` console script of the wheel: runs the accel binary shipped inside this package
(`accel/_bin/accel`, put there by scripts/wheel.sh), so `pip install` needs no Rust."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def binary() -> Path | None:
    """The bundled `accel` executable, or None in a build without one (`maturin develop`)."""
    path = Path(__file__).resolve().parent / "_bin" / "accel"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def main() -> int:
    exe = binary()
    if exe is None:
        print(
            "accel: this install has no bundled accel binary (a development build); build the wheel "
            "with scripts/wheel.sh, or run `cargo run -p accel-cli --`",
            file=sys.stderr,
        )
        return 2
    # `accel lab` and `accel cluster build --from-ray` run Python with the accel package: this one.
    os.environ.setdefault("ACCEL_PYTHON", sys.executable)
    # Replace this process: signals, exit status and the terminal go straight to the binary.
    os.execv(exe, [str(exe), *sys.argv[1:]])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
