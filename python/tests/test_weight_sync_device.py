"""The weight sync's device path on a machine without a GPU: DLPack tensors read in place in
every dtype (numpy as a real producer; bf16 and FP8 through a DLPack capsule built the way
torch builds one, since torch is not installed here), the box copies the CUDA engine shares
(against numpy slicing), the route of every piece from captured machines' topology (CUDA IPC,
NIXL over a scale-up link or a close RDMA NIC, or host staging with the reason), targets a
receiver lands into in place, per-piece route reports, and the `load_weights` adapter driven by
a stand-in with vLLM's and SGLang's hook signature. What needs a GPU (CUDA IPC, cuMemcpy2D) is
scripts/device-check-weight-sync.sh's."""

from __future__ import annotations

import ctypes
from collections.abc import Iterable
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from accel import _device, _native
from accel import weights as W

# ---------------------------------------------------------------------------- a DLPack producer


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManaged(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
CODES = {"bf16": (4, 16), "f8e4m3": (10, 8), "f8e5m2": (12, 8), "f32": (2, 32)}


class Producer:
    """A tensor that exports DLPack the way torch does for its ML dtypes (legacy capsule,
    kDLBfloat / kDLFloat8_* codes), over a numpy array this object keeps; ``device_type`` 2
    claims CUDA memory."""

    def __init__(self, arr: np.ndarray, dtype: str, device_type: int = 1) -> None:
        self.arr = np.ascontiguousarray(arr)
        self.shape = (ctypes.c_int64 * arr.ndim)(*arr.shape)
        code, bits = CODES[dtype]
        self.m = _DLManaged()
        self.m.dl_tensor = _DLTensor(self.arr.ctypes.data, _DLDevice(device_type, 0), arr.ndim, _DLDataType(code, bits, 1), self.shape, None, 0)

    def __dlpack__(self, **_: Any) -> Any:
        return _capsule_new(ctypes.addressof(self.m), b"dltensor", None)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (self.m.dl_tensor.device.device_type, 0)


# ------------------------------------------------------------------------------- DLPack reading


def test_numpy_tensors_are_read_in_place_in_every_dtype() -> None:
    for dt, name in [("f8", "f64"), ("f4", "f32"), ("f2", "f16"), ("i8", "i64"), ("i4", "i32"), ("i2", "i16"), ("i1", "i8"), ("u1", "u8"), ("?", "bool")]:
        a = (np.arange(12).reshape(3, 4) % 2).astype(dt)
        t = _device.describe(a)
        assert (t.dtype, t.shape, t.on_host, t.device, t.contiguous) == (name, (3, 4), True, "cpu:0", True)
        assert t.address == a.ctypes.data  # no copy
        view = _device.host_array(t)
        np.testing.assert_array_equal(view, a)
        assert np.shares_memory(view, a)
    s = _device.describe(np.zeros((4, 6), "f4")[:, ::2])
    assert s.strides == (6, 2) and not s.contiguous
    with pytest.raises(TypeError, match="does not export DLPack"):
        _device.describe([1, 2, 3])
    with pytest.raises(ValueError, match="no accel dtype"):
        _device.describe(np.zeros(3, np.complex64))


def test_bf16_and_fp8_come_through_dlpack_without_an_integer_view() -> None:
    x = np.array([[1.5, -2.0], [3.25, np.nan]], np.float32)
    for dtype, ml in [("bf16", ml_dtypes.bfloat16), ("f8e4m3", ml_dtypes.float8_e4m3fn), ("f8e5m2", ml_dtypes.float8_e5m2)]:
        arr = x.astype(ml)
        p = Producer(arr, dtype)
        t = _device.describe(p)
        assert t.dtype == dtype and t.shape == (2, 2) and t.on_host
        np.testing.assert_array_equal(_device.host_array(t), arr.view(_device.STORAGE[dtype]))
    # A trainer rank publishes a bf16 tensor handed over through DLPack: its bits arrive as bf16.
    src = W.Layout.sharded({"w": ((4, 8), "bf16")}, ranks=1)
    dst = W.Layout.sharded({"w": ((4, 8), "bf16")}, ranks=2, dim=1)
    g = np.random.default_rng(1).standard_normal((4, 8)).astype(ml_dtypes.bfloat16)
    p = W.plan(src, dst)
    sender = W.Sender(p.for_source(0))
    ship = sender.publish(1, {"w": Producer(g, "bf16")})
    for d in range(2):
        rc = W.Receiver(p.for_destination(d))
        rc.receive([ship])
        rc.commit(1)
        with rc.read() as (_, arrays):
            np.testing.assert_array_equal(arrays["w"], g.view(np.uint16)[:, 4 * d : 4 * d + 4])
        rc.close()
    # A tensor that says it lives in CUDA memory, on a machine without a CUDA driver: refused by
    # name, never read as if it were host memory.
    if _device.cuda() is None:
        with pytest.raises(W.WeightSyncError, match="device memory, and no CUDA driver"):
            sender.publish(2, {"w": Producer(g, "bf16", device_type=2)})
    # The wrong dtype is refused, not reinterpreted.
    with pytest.raises(ValueError, match="holds \\(4, 8\\) bf16, was given \\(4, 8\\) f32"):
        sender.publish(3, {"w": Producer(np.zeros((4, 8), np.float32), "f32")})
    sender.close()


# ------------------------------------------------------------------------------------ box copies


def test_box_copies_match_numpy_slicing() -> None:
    rng = np.random.default_rng(3)
    engine = _device.HostEngine()
    for case in range(60):
        ndim = int(rng.integers(1, 4))
        shape = tuple(int(n) for n in rng.integers(1, 7, ndim))
        origin = tuple(int(o) for o in rng.integers(0, 5, ndim))
        a = rng.standard_normal(shape).astype(np.float32)
        box = []
        for o, n in zip(origin, shape):
            lo = int(rng.integers(0, n))
            box.append((o + lo, o + int(rng.integers(lo + 1, n + 1))))
        src = _device.Place(a.ctypes.data, shape, origin, 4, False)
        sl = tuple(slice(lo - o, hi - o) for (lo, hi), o in zip(box, origin))
        out = np.zeros(a[sl].size, np.float32)
        assert _device.pack(engine, src, box, out.ctypes.data, False) == out.nbytes
        np.testing.assert_array_equal(out.reshape(a[sl].shape), a[sl], err_msg=f"case {case}")
        back = np.zeros_like(a)
        dst = _device.Place(back.ctypes.data, shape, origin, 4, False)
        _device.unpack(engine, out.ctypes.data, False, box, dst)
        want = np.zeros_like(a)
        want[sl] = a[sl]
        np.testing.assert_array_equal(back, want, err_msg=f"case {case}")
    with pytest.raises(ValueError, match="host memory only"):
        engine.copy2d(0, 1, True, 0, 1, False, 1, 1)


# ------------------------------------------------------------------------------------ the route


def test_every_route_comes_from_the_topology_and_staging_says_why() -> None:
    dgx = _native.sample_machine_json("dgx-h100")
    p4d = _native.sample_machine_json("aws-p4d-24xlarge")
    gpu0 = _device.Where("t0", "node-a", 0, dgx)
    r = _device.route(gpu0, _device.Where("i0", "node-a", 5, dgx), nixl=True, cuda_ipc=True)
    assert (r.path, r.reason, r.staged) == ("nixl", "scale_up_link", False) and "NV18" in r.detail
    r = _device.route(gpu0, _device.Where("i0", "node-a", 5, dgx), nixl=False, cuda_ipc=True)
    assert (r.path, r.reason, r.staged) == ("cuda_ipc", "scale_up_link", False)
    r = _device.route(gpu0, _device.Where("i0", "node-a", 5, dgx), nixl=False, cuda_ipc=False)
    assert (r.path, r.reason, r.staged) == ("shm", "no_device_path", True) and "neither NIXL nor CUDA IPC" in r.staged_why
    # Across nodes: GPUDirect RDMA through NIXL over the NIC at PXB from the GPU...
    r = _device.route(gpu0, _device.Where("i0", "node-b", 3, dgx), nixl=True, cuda_ipc=True)
    assert (r.path, r.reason, r.staged) == ("nixl", "gpudirect_rdma", False) and "PXB" in r.detail
    # ...or TCP through host memory, with the reason, without NIXL or without a close NIC.
    r = _device.route(gpu0, _device.Where("i0", "node-b", 3, dgx), nixl=False, cuda_ipc=True)
    assert (r.path, r.reason, r.staged) == ("tcp", "no_device_path", True) and "NIXL is not available" in r.staged_why
    far = _device.route(_device.Where("t", "a", 0, p4d), _device.Where("i", "b", -1, None), nixl=True, cuda_ipc=True)
    assert (far.path, far.reason, far.staged) == ("tcp", "no_close_rdma_nic", True) and "is PHB from nvidia 0" in far.staged_why
    # Host memory at both ends is no staging at all.
    r = _device.route(_device.Where("t", "a"), _device.Where("i", "a"), nixl=False, cuda_ipc=False)
    assert (r.path, r.staged) == ("shm", False)


def test_parts_carry_their_routes_and_receivers_report_each_piece() -> None:
    tensors = {"w": ((8, 8), "f32"), "b": ((8,), "f32")}
    src = W.Layout.sharded(tensors, ranks=2, dim=0).on(["node-a", "node-a"])
    dst = W.Layout.sharded(tensors, ranks=2, dim={"w": 1, "b": None}).on(["node-a", "node-b"])
    dgx = _native.sample_machine_json("dgx-h100")
    p = W.plan(src, dst).with_places(
        [_device.Where(f"t{r}", "node-a", r, dgx) for r in range(2)],
        [_device.Where("i0", "node-a", 4, dgx), _device.Where("i1", "node-b", 0, dgx)],
        nixl=False,
        cuda_ipc=True,
    )
    part = p.for_source(0)
    assert part.routes and all(len(rs) == len(b.readers) for rs, b in zip(part.routes, part.buffers))
    for d, (path, staged) in enumerate([("cuda_ipc", False), ("tcp", True)]):
        routes = p.for_destination(d).routes
        assert routes and {(r.path, r.staged) for r in routes} == {(path, staged)}, routes
    # The weights are host arrays here, so every buffer packs in host memory; the receiver
    # reports the planned route of each piece.
    g = {"w": np.arange(64, dtype=np.float32).reshape(8, 8), "b": np.arange(8, dtype=np.float32)}
    senders = [W.Sender(p.for_source(r)) for r in range(2)]
    ships = [s.publish(1, {n: g[n][tuple(slice(lo, hi) for lo, hi in b)] for n, b in src.ranks[r].items()}) for r, s in enumerate(senders)]
    rc = W.Receiver(p.for_destination(1))
    landed = rc.receive(ships)
    assert len(landed.routes) == sum(len(b.pieces) for _, _, b in p.for_destination(1).fetches)
    assert {(x.path, x.reason, x.staged) for x in landed.routes} == {("tcp", "no_device_path", True)}
    assert {x.tensor for x in landed.routes} == {"w", "b"} and all("NIXL is not available" in x.why for x in landed.routes)
    rc.close()
    # Without planned places the transport's own choice is reported (same process: local).
    plain = W.plan(W.Layout.sharded(tensors, ranks=1), W.Layout.sharded(tensors, ranks=1))
    s0 = W.Sender(plain.for_source(0))
    rc = W.Receiver(plain.for_destination(0))
    landed = rc.receive([s0.publish(1, g)])
    assert {(x.path, x.reason) for x in landed.routes} == {("local", "same_process")}
    for s in [*senders, s0]:
        s.close()
    rc.close()


def test_a_receiver_lands_in_the_callers_tensors_in_place() -> None:
    tensors = {"w": ((256, 256), "bf16"), "n": ((256,), "bf16")}
    src = W.Layout.sharded(tensors, ranks=2, dim={"w": 0, "n": None}, replicas=1)
    dst = W.Layout.sharded(tensors, ranks=2, dim={"w": 1, "n": None}).with_dtypes({"w": "f8e4m3", "n": "bf16"}, scale="block")
    p = W.plan(src, dst)
    x = np.random.default_rng(5).standard_normal((256, 256)).astype(ml_dtypes.bfloat16).view(np.uint16)
    nv = np.arange(256, dtype=np.uint16)
    senders = [W.Sender(p.for_source(r)) for r in range(2)]
    ships = [s.publish(1, {"w": x[128 * r : 128 * r + 128], "n": nv}) for r, s in enumerate(senders)]
    # Targets: the caller's own tensors (any DLPack producer), two sets for double buffering.
    sets = [{"w": np.zeros((256, 128), np.uint8), "w_scale_inv": np.zeros((2, 1), np.float32), "n": np.zeros(256, np.uint16)} for _ in range(2)]
    rc = W.Receiver(p.for_destination(1), targets=sets)
    rc.receive(ships)
    rc.commit(1)
    plain = W.Receiver(p.for_destination(1))  # the same bytes into its own arrays, for comparison
    plain.receive([s.publish(2, {"w": x[128 * r : 128 * r + 128], "n": nv}) for r, s in enumerate(senders)])
    plain.commit(2)
    with rc.read() as (_, got), plain.read() as (_, want):
        assert got["w"] is sets[1]["w"]  # the caller's tensor, landed in place
        for n in ("w", "w_scale_inv", "n"):
            np.testing.assert_array_equal(got[n], want[n], err_msg=n)
    with pytest.raises(ValueError, match="no target for"):
        W.Receiver(p.for_destination(1), targets=[{"w": sets[0]["w"]}])
    with pytest.raises(ValueError, match="writable, contiguous"):
        W.Receiver(p.for_destination(1), targets=[{**sets[0], "w": np.zeros((128, 256), np.uint8)}])
    for s in senders:
        s.close()
    rc.close()
    plain.close()


# ----------------------------------------------------------------------------- the engine hook


class StandIn:
    """An inference engine's model as far as weight loading goes: vLLM's and SGLang's models
    expose ``load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]``,
    taking whole checkpoint tensors and keeping their own tensor-parallel shard (a column-
    parallel linear narrows dimension 0 by its rank)."""

    def __init__(self, tp_rank: int, tp_size: int) -> None:
        self.rank, self.size = tp_rank, tp_size
        self.params: dict[str, np.ndarray] = {}
        self.dtypes: dict[str, str] = {}

    def load_weights(self, weights: Iterable[tuple[str, Any]]) -> set[str]:
        loaded = set()
        for name, tensor in weights:
            a = np.asarray(tensor)
            if name.endswith("_scale_inv") or a.ndim < 2:
                self.params[name] = a.copy()
            else:
                rows = a.shape[0] // self.size
                self.params[name] = a[rows * self.rank : rows * (self.rank + 1)].copy()  # narrow(0, ...)
            self.dtypes[name] = str(a.dtype)
            loaded.add(name)
        return loaded


def test_a_version_is_handed_to_a_load_weights_hook() -> None:
    tensors = {"qkv": ((256, 128), "bf16"), "norm": ((128,), "bf16")}
    src = W.Layout.sharded(tensors, ranks=1)
    dst = W.Layout.sharded(tensors, ranks=2, dim={"qkv": 0, "norm": None}).with_dtypes({"qkv": "f8e4m3"}, scale="block")
    p = W.plan(src, dst)
    x = np.random.default_rng(8).standard_normal((256, 128)).astype(ml_dtypes.bfloat16)
    norm = np.ones(128, ml_dtypes.bfloat16)
    sender = W.Sender(p.for_source(0))
    ship = sender.publish(4, {"qkv": Producer(x, "bf16"), "norm": Producer(norm, "bf16")})
    for d in range(2):
        rc = W.Receiver(p.for_destination(d))
        rc.receive([ship])
        rc.commit(4)
        engine = StandIn(d, 2)
        version, loaded = rc.hand_to(engine.load_weights, whole=True)
        assert version == 4 and loaded == {"qkv", "norm", "qkv_scale_inv"}
        with rc.read() as (_, arrays):
            np.testing.assert_array_equal(engine.params["qkv"].view(np.uint8), arrays["qkv"])  # its own shard, exactly
            np.testing.assert_array_equal(engine.params["qkv_scale_inv"], arrays["qkv_scale_inv"])
        assert engine.dtypes == {"qkv": "float8_e4m3fn", "norm": "bfloat16", "qkv_scale_inv": "float32"}
        np.testing.assert_array_equal(engine.params["norm"], norm)
        rc.close()
    sender.close()
