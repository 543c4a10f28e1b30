"""GPU paths of the transport on a machine with NVIDIA GPUs (run by scripts/device-check-gpu-paths.sh).

1. NIXL moves device memory: a producer process allocates VRAM on GPU 0 (the CUDA driver API
   through ctypes: no torch or cupy needed), fills it, registers it with NIXL and hands out a
   ticket; a consumer process allocates VRAM on the last GPU, READs it with NIXL, copies it back
   to the host and checks every byte. It prints which UCX transport NIXL used.
2. The path choice on the live topology: `accel discover --json` on this machine, then
   accel.transport.route for GPU pairs and for GPU -> other node, printed with their reasons.
Exit status 0 when every byte matched; the output is the evidence for docs/hardware.md.
"""

from __future__ import annotations

import ctypes
import json
import os
import pickle
import subprocess
import sys
import time
from typing import Any

N = 64 << 20


def cuda() -> Any:
    lib = ctypes.CDLL("libcuda.so.1")

    def ok(rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what} failed: CUresult {rc}")

    lib.ok = ok
    ok(lib.cuInit(0), "cuInit")
    return lib


def vram(lib: Any, dev_index: int) -> tuple[int, Any]:
    dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    lib.ok(lib.cuDeviceGet(ctypes.byref(dev), dev_index), "cuDeviceGet")
    lib.ok(lib.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
    lib.ok(lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(N)), "cuMemAlloc")
    return ptr.value, ctx


def producer() -> None:
    from nixl_cu12 import nixl_agent, nixl_agent_config

    lib = cuda()
    ptr, _ctx = vram(lib, 0)
    host = (ctypes.c_uint8 * N)()
    for i in range(0, N, 4096):
        host[i] = (i // 4096) % 251
    lib.ok(lib.cuMemcpyHtoD_v2(ctypes.c_uint64(ptr), host, ctypes.c_size_t(N)), "cuMemcpyHtoD")
    agent = nixl_agent("accel-gpu-producer", nixl_agent_config(backends=["UCX"]))
    reg = agent.register_memory([(ptr, N, 0, "")], "VRAM")
    md = agent.get_partial_agent_metadata(reg, True, ["UCX"])
    sys.stdout.buffer.write(pickle.dumps((agent.name, md, ptr)) + b"\n--end--\n")
    sys.stdout.flush()
    sys.stdin.readline()


def consumer(dev_index: int, ticket: tuple[str, bytes, int]) -> int:
    from nixl_cu12 import nixl_agent, nixl_agent_config

    lib = cuda()
    ptr, _ctx = vram(lib, dev_index)
    agent = nixl_agent("accel-gpu-consumer", nixl_agent_config(backends=["UCX"]))
    name = agent.add_remote_agent(ticket[1])
    agent.register_memory([(ptr, N, dev_index, "")], "VRAM")
    local = agent.get_xfer_descs([(ptr, N, dev_index)], "VRAM")
    remote = agent.get_xfer_descs([(ticket[2], N, 0)], "VRAM")
    t0 = time.perf_counter()
    h = agent.initialize_xfer("READ", local, remote, name)
    state = agent.transfer(h)
    while state == "PROC":
        state = agent.check_xfer_state(h)
    took = time.perf_counter() - t0
    print(f"NIXL VRAM READ GPU0 -> GPU{dev_index}: {state}, {N / took / 1e9:.2f} GB/s, backend {agent.query_xfer_backend(h)}")
    host = (ctypes.c_uint8 * N)()
    lib.ok(lib.cuMemcpyDtoH_v2(host, ctypes.c_uint64(ptr), ctypes.c_size_t(N)), "cuMemcpyDtoH")
    bad = sum(1 for i in range(0, N, 4096) if host[i] != (i // 4096) % 251)
    print(f"checked {N // 4096} pages: {bad} wrong")
    return 0 if state == "DONE" and bad == 0 else 1


def routes() -> None:
    accel = os.environ.get("ACCEL", "target/release/accel")
    machine = subprocess.run([accel, "discover", "--json", "--no-network"], capture_output=True, text=True, check=True).stdout
    m = json.loads(machine)
    from accel import transport as T

    base = T.put(b"x")
    gpus = len(m["accelerators"])
    for a, b in [(0, gpus - 1), (0, 0)]:
        ref = T.Ref(**{**base.__dict__, "owner": "1-2-0000000000000003", "device": a})
        r = T.route(ref, dst_device=b, machine=machine, nixl=True, cuda_ipc=True)
        print(f"route GPU{a} -> GPU{b} (same node): {r.path} [{r.reason}] {r.detail}")
    ref = T.Ref(**{**base.__dict__, "owner": "1-2-0000000000000003", "host": "another-node", "device": 0})
    r = T.route(ref, machine=machine, nixl=True)
    print(f"route GPU0 -> another node: {r.path} [{r.reason}] {r.detail}")


def main() -> int:
    if sys.argv[1:] == ["producer"]:
        producer()
        return 0
    lib = cuda()
    count = ctypes.c_int()
    lib.ok(lib.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
    p = subprocess.Popen([sys.executable, __file__, "producer"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert p.stdout is not None and p.stdin is not None
    raw = b""
    while not raw.endswith(b"\n--end--\n"):
        chunk = p.stdout.readline()
        if not chunk:
            raise RuntimeError("the producer exited")
        raw += chunk
    ticket = pickle.loads(raw[: -len(b"\n--end--\n")])
    rc = consumer(count.value - 1, ticket)
    p.stdin.write(b"exit\n")
    p.stdin.flush()
    p.wait(30)
    try:
        routes()
    except Exception as e:  # the route printout is evidence, the byte check the verdict
        print(f"route printout failed: {e}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
