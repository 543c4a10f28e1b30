"""The weight sync's device path on one NVIDIA GPU (run by scripts/device-check-weight-sync.sh).

Two processes on one GPU: a trainer process holds a bf16 model in device memory (cuMemAlloc
through the CUDA driver: no torch needed), an inference process lands it resharded (each of
the trainer's tensors cut in two by columns; the inference process is rank 0 of 2) into its
own device memory, twice: bf16 to bf16 (device to device: the trainer packs its buffers in
device memory, the receiver maps them by CUDA IPC and copies device to device) and bf16 to FP8
E4M3 with 128x128 block scales (quantised on the trainer's host: no device kernel is built, and
the report says so per piece). For each it prints the route of every piece, GB/s against a
cuMemcpyDtoD of the same bytes in the same run (the floor), and compares every byte with the
host path's result for the same weights. Exit status 0 when every byte matched.

    python scripts/weight_sync_device_check.py [--mib 1024]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

from accel import _device  # noqa: E402
from accel import weights as W  # noqa: E402


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManaged(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_new = ctypes.pythonapi.PyCapsule_New
_new.restype, _new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
CODES = {"bf16": (4, 16), "u8": (1, 8), "f8e4m3": (10, 8), "f32": (2, 32)}


class CudaArray:
    """Device memory exported through DLPack (kDLCUDA), as torch or cupy would export it."""

    def __init__(self, gpu: _device.Cuda, shape: tuple[int, ...], dtype: str, device: int = 0) -> None:
        self.gpu, self.shape_t, self.dtype = gpu, shape, dtype
        self.nbytes = int(np.prod(shape)) * CODES[dtype][1] // 8
        self.ptr = gpu.alloc(self.nbytes)
        self.dims = (ctypes.c_int64 * len(shape))(*shape)
        code, bits = CODES[dtype]
        self.m = _DLManaged()
        self.m.dl_tensor = _DLTensor(self.ptr, _DLDevice(2, device), len(shape), _DLDataType(code, bits, 1), self.dims, None, 0)

    def __dlpack__(self, **_: Any) -> Any:
        return _new(ctypes.addressof(self.m), b"dltensor", None)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 0)

    def upload(self, host: np.ndarray) -> None:
        self.gpu.copy2d(self.ptr, self.nbytes, True, host.ctypes.data, self.nbytes, False, self.nbytes, 1)

    def download(self) -> np.ndarray:
        out = np.empty(self.nbytes, np.uint8)
        self.gpu.copy2d(out.ctypes.data, self.nbytes, False, self.ptr, self.nbytes, True, self.nbytes, 1)
        return out


def layouts(mib: int, fp8: bool) -> tuple[W.Layout, W.Layout]:
    cols = 8192
    rows = 4096
    count = max(1, (mib << 20) // (rows * cols * 2))
    tensors = {f"w{k}": ((rows, cols), "bf16") for k in range(count)}
    src = W.Layout.sharded(tensors, ranks=1)
    dst = W.Layout.sharded(tensors, ranks=2, dim=1)
    return src, (dst.with_dtypes("f8e4m3", scale="block") if fp8 else dst)


def weights(src: W.Layout) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(36)
    return {n: (rng.standard_normal(s).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16) for n, (s, _) in src.tensors.items()}


def places(src: W.Layout, dst: W.Layout, owner: str) -> tuple[list[_device.Where], list[_device.Where]]:
    import accel

    machine = None
    try:
        import json

        machine = json.dumps(accel.discover())
    except Exception as e:  # noqa: BLE001  (the route then knows less: said in its detail)
        print(f"discovery failed ({e}): routes from locality alone", file=sys.stderr)
    host = W.host()
    return [_device.Where(owner, host, 0, machine)], [_device.Where(f"{owner}-r{d}", host, 0, machine) for d in range(2)]


def trainer(mib: int) -> None:
    gpu = _device.cuda()
    assert gpu is not None, _device.cuda_unavailable()
    gpu.bind(0)
    out = []
    for fp8 in (False, True):
        src, dst = layouts(mib, fp8)
        p = W.plan(src, dst).with_places(*places(src, dst, "trainer"), nixl=False, cuda_ipc=True)
        host = weights(src)
        dev = {n: CudaArray(gpu, a.shape, "bf16") for n, a in host.items()}
        for n, a in host.items():
            dev[n].upload(a)
        sender = W.Sender(p.for_source(0))
        t = time.perf_counter()
        ship = sender.publish(1, dev)
        out.append((ship, time.perf_counter() - t, dict(sender.staged)))
        globals().setdefault("_keep", []).append((sender, dev))
    sys.stdout.buffer.write(pickle.dumps(out) + b"\n--end--\n")
    sys.stdout.flush()
    sys.stdin.readline()


def consumer(mib: int, shipped: list) -> int:
    gpu = _device.cuda()
    assert gpu is not None, _device.cuda_unavailable()
    gpu.bind(0)
    bad = 0
    for fp8, (ship, pack_s, staged) in zip((False, True), shipped):
        src, dst = layouts(mib, fp8)
        p = W.plan(src, dst).with_places(*places(src, dst, "trainer"), nixl=False, cuda_ipc=True)
        part = p.for_destination(0)
        targets = {}
        for n, b in part.boxes.items():
            targets[n] = CudaArray(gpu, tuple(hi - lo for lo, hi in b), "u8" if fp8 else "bf16")
        for n, q in part.quant.items():
            targets[part.scale_names[n]] = CudaArray(gpu, tuple(hi - lo for lo, hi in W.scale_box(part.boxes[n], q.scale)), "f32")
        rc = W.Receiver(part, targets=[targets])
        t = time.perf_counter()
        landed = rc.receive([ship])
        took = time.perf_counter() - t
        # The floor: the same bytes copied device to device in this process.
        a, b = gpu.alloc(landed.nbytes), gpu.alloc(landed.nbytes)
        gpu.copy2d(b, landed.nbytes, True, a, landed.nbytes, True, landed.nbytes, 1)
        t = time.perf_counter()
        gpu.copy2d(b, landed.nbytes, True, a, landed.nbytes, True, landed.nbytes, 1)
        gpu.synchronize()
        floor = time.perf_counter() - t
        # Every byte against the host path's result for the same weights.
        hp = W.plan(src, dst)
        hs = W.Sender(hp.for_source(0))
        hr = W.Receiver(hp.for_destination(0))
        hr.receive([hs.publish(1, weights(src))])
        hr.commit(1)
        with hr.read() as (_, want):
            for n, arr in targets.items():
                got = arr.download()
                if not np.array_equal(got, np.ascontiguousarray(want[n]).view(np.uint8).reshape(-1)):
                    bad += 1
                    print(f"MISMATCH in {n}", flush=True)
        routes = {(r.path, r.reason, r.staged, r.why) for r in landed.routes}
        kind = "bf16 -> FP8 E4M3 (block scales)" if fp8 else "bf16 -> bf16"
        print(f"{kind}: {landed.nbytes / 2**20:.0f} MiB landed in {took * 1e3:.1f} ms = {landed.nbytes / took / 1e9:.2f} GB/s; "
              f"cuMemcpyDtoD of the same bytes {landed.nbytes / floor / 1e9:.2f} GB/s ({floor / took:.2f}x of it); "
              f"packing {pack_s * 1e3:.1f} ms; staged buffers: {staged or 'none'}", flush=True)
        for r in sorted(routes):
            print(f"  route: {r}", flush=True)
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=1024, help="model size in MiB (default 1024)")
    ap.add_argument("--role", default="")
    args = ap.parse_args()
    if args.role == "trainer":
        trainer(args.mib)
        return 0
    why = _device.cuda_unavailable()
    if why:
        print(f"no GPU path to check: {why}", file=sys.stderr)
        return 3
    proc = subprocess.Popen([sys.executable, __file__, "--role", "trainer", "--mib", str(args.mib)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdin is not None
    raw = b""
    while not raw.endswith(b"\n--end--\n"):
        chunk = proc.stdout.readline()
        if not chunk:
            print("the trainer process ended early", file=sys.stderr)
            return 1
        raw += chunk
    shipped = pickle.loads(raw[: -len(b"\n--end--\n")])
    try:
        bad = consumer(args.mib, shipped)
    finally:
        proc.stdin.write(b"\n")
        proc.stdin.flush()
        proc.wait(60)
    print("every byte matched" if bad == 0 else f"{bad} tensor(s) differ", flush=True)
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    os.environ.setdefault("ACCEL_TRANSPORT_PATH", "auto")
    raise SystemExit(main())
