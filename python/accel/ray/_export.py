"""`python -m accel.ray cluster-json [--address ADDR]`: prints, as one cluster document
(docs/placement.md), the machines `python -m accel.ray start` published in a running Ray
cluster, each with its `accel.io/*` Ray labels as planner labels. `accel cluster build
--from-ray` runs it (the Rust binary does not speak Ray's protocol); its output is also a
cluster file of its own for `accel plan`.

Ray is imported inside the function, so `python -m accel.ray` works without Ray. Bad input or
a missing Ray exits 2 with one line on stderr; nothing but the document goes to stdout."""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
from typing import Any

from .._errors import INSTALL_RAY

PROG = "python -m accel.ray cluster-json"


def _error(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


# How long to wait for a TCP connection to the GCS before calling the address dead: Ray's own
# client retries a dead address for minutes.
CONNECT_TIMEOUT_S = 5.0


def unreachable(address: str) -> str | None:
    """Why `address` (`HOST:PORT` of Ray's GCS) cannot be a running cluster, or None. `auto`,
    `local` and `ray://` addresses are left to Ray."""
    if address in ("auto", "local") or "://" in address:
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        return f"--address {address!r} is not HOST:PORT"
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as e:
        return f"cannot reach Ray at {address}: {e.strerror or e}"
    return None


def read_cluster(address: str) -> dict[str, Any]:
    """Connects to the Ray cluster at `address` as a driver, reads the published machines
    (`accel.ray.cluster_from_ray`) and disconnects."""
    import ray

    from ._placement import cluster_from_ray

    ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False, configure_logging=False)
    try:
        return cluster_from_ray()
    finally:
        ray.shutdown()


def main(argv: list[str]) -> int:
    """`python -m accel.ray cluster-json [--address ADDR]`."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=__doc__,
        epilog="Exit status:\n  0  success\n  2  invalid input, no Ray, or no cluster at the address",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--address", default="auto", help="the Ray cluster (GCS HOST:PORT); default: Ray's 'auto'")
    args = parser.parse_args(argv)
    if not args.address.strip():
        return _error("--address is empty")
    try:
        import ray  # noqa: F401
    except ImportError:
        return _error(f"Ray is not installed in {sys.executable} ({INSTALL_RAY})")
    why = unreachable(args.address)
    if why:
        return _error(why)
    # Ray's driver start-up may print to fd 1 (its own or its C++ core's): keep stdout for the
    # document alone by pointing fd 1 at stderr until the document is ready.
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        try:
            cluster = read_cluster(args.address)
        except Exception as e:  # one line for whatever Ray raises, never a traceback
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            return _error(f"cannot read the Ray cluster at {args.address}: {first}")
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
    finally:
        os.close(saved)
    sys.stdout.write(json.dumps(cluster, sort_keys=True) + "\n")
    sys.stdout.flush()
    return 0
