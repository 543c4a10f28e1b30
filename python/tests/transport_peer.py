"""A peer process for the transport tests: an owner that publishes buffers, or a consumer
that gets one reference. Talks to the test through base64 pickles on stdout, one per line."""

from __future__ import annotations

import base64
import os
import pickle
import sys
import time

import numpy as np

from accel import transport as T


def out(obj) -> None:
    sys.stdout.write(base64.b64encode(pickle.dumps(obj)).decode() + "\n")
    sys.stdout.flush()


def main() -> None:
    role = sys.argv[1]
    if role == "owner":
        count, size = int(sys.argv[2]), int(sys.argv[3])
        fill = sys.argv[4].encode() if len(sys.argv) > 4 else b""  # a text pattern instead of i
        path = sys.argv[5] if len(sys.argv) > 5 else None  # put(..., path=...) (e.g. nixl)
        T.info()  # starting a transport sweeps the orphans of exited owners
        refs = []
        for i in range(count):
            buf = T.empty((size,), np.uint8)
            if fill:
                buf[:] = np.frombuffer((fill * (size // len(fill) + 1))[:size], np.uint8)
            else:
                buf[:] = i % 251
            refs.append(T.put(buf, path=path))
        out(refs)
        for line in sys.stdin:  # commands until "exit" or end of input
            cmd = line.strip()
            if cmd == "exit":
                break
            if cmd == "stats":
                out(T.stats())
            if cmd == "prometheus":
                out(T.prometheus())
            if cmd == "fork":  # a child that outlives this owner (os.fork: it inherits every fd)
                child = os.fork()
                if child == 0:
                    time.sleep(60)
                    os._exit(0)
                out(child)
            if cmd.startswith("free "):
                out(T.free(refs[int(cmd.split()[1])]))
            if cmd == "put":
                try:
                    out(T.put(np.ones(int(sys.argv[3]), np.uint8)))
                except T.TransportError as e:
                    out((type(e).__name__, str(e)))
    elif role == "relay-get":  # get with relay=True, answer, then stay up (a relay) until told
        ref = pickle.loads(base64.b64decode(sys.argv[2]))
        try:
            a = T.get(ref, path="tcp", relay=True)
            out(("ok", int(a.astype(np.int64).sum()), a.flags.writeable, T.stats()["served"]["tcp"]["bytes"]))
        except T.TransportError as e:
            out((type(e).__name__, str(e)))
        sys.stdin.readline()
        out(T.stats()["served"]["tcp"]["bytes"])
    elif role == "get":
        ref = pickle.loads(base64.b64decode(sys.argv[2]))
        try:
            a = T.get(ref, path=sys.argv[3])
            out(("ok", int(a.astype(np.int64).sum()), a.shape))
        except T.TransportError as e:
            out((type(e).__name__, str(e)))


if __name__ == "__main__":
    main()
