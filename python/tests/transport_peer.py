"""A peer process for the transport tests: an owner that publishes buffers, or a consumer
that gets one reference. Talks to the test through base64 pickles on stdout, one per line."""

from __future__ import annotations

import base64
import pickle
import sys

import numpy as np

from accel import transport as T


def out(obj) -> None:
    sys.stdout.write(base64.b64encode(pickle.dumps(obj)).decode() + "\n")
    sys.stdout.flush()


def main() -> None:
    role = sys.argv[1]
    if role == "owner":
        count, size = int(sys.argv[2]), int(sys.argv[3])
        T.info()  # starting a transport sweeps the orphans of exited owners
        refs = []
        for i in range(count):
            buf = T.empty((size,), np.uint8)
            buf[:] = i % 251
            refs.append(T.put(buf))
        out(refs)
        for line in sys.stdin:  # commands until "exit" or end of input
            cmd = line.strip()
            if cmd == "exit":
                break
            if cmd == "stats":
                out(T.stats())
            if cmd == "prometheus":
                out(T.prometheus())
            if cmd == "put":
                try:
                    out(T.put(np.ones(int(sys.argv[3]), np.uint8)))
                except T.TransportError as e:
                    out((type(e).__name__, str(e)))
    elif role == "get":
        ref = pickle.loads(base64.b64decode(sys.argv[2]))
        try:
            a = T.get(ref, path=sys.argv[3])
            out(("ok", int(a.astype(np.int64).sum()), a.shape))
        except T.TransportError as e:
            out((type(e).__name__, str(e)))


if __name__ == "__main__":
    main()
