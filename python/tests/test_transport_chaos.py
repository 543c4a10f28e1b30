"""The chaos run at a small count (the benchmark runs 1,000 transfers): random SIGKILLs of
owners and consumers across shared memory, TCP and NIXL end with no wrong bytes, no hangs and
no leaked segments."""

from __future__ import annotations

import sys
from pathlib import Path

from accel import transport as T

sys.path.insert(0, str(Path(__file__).parent))
import transport_chaos  # noqa: E402


def test_chaos_small() -> None:
    T.info()  # the peers share this process's secret
    rep = transport_chaos.run(transfers=60, seed=7)
    d = rep.as_dict()
    assert rep.wrong == 0, d
    assert rep.hangs == 0, d
    assert rep.leaked == 0, d
    assert rep.ok > 0 and set(rep.per_path) == {"shm", "tcp", "nixl"}, d
    # Only the errors a killed peer explains.
    assert set(rep.errors) <= {"OwnerGone", "BufferFreed", "TransportError"}, d
    assert rep.owners_killed + rep.consumers_killed > 0, d
