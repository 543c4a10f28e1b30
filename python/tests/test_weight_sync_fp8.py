"""FP8 in flight (`accel.weights`): bf16 and f32 trainer shards quantised at the source to E4M3
and E5M2, with one scale per tensor or per 128x128 block, resharded on the way, and every byte
and every scale checked against an independent reference (ml_dtypes' float8 types, numpy's f32
arithmetic) on adversarial values: subnormals, overflow saturating to the largest finite value,
NaN of either sign, infinities, ties to even. Also: `Landed.nbytes` and `Plan.bytes` agree on an
unaligned layout, and the mistakes FP8 can make are refused by name."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from accel import weights as W

FORMATS = {"f8e4m3": ml_dtypes.float8_e4m3fn, "f8e5m2": ml_dtypes.float8_e5m2}


def adversarial(shape: tuple[int, int], fmt: str, seed: int) -> np.ndarray:
    """f32 values that stress the conversion: normal values over many magnitudes, values that
    land on subnormals and on exact ties once scaled, NaN of both signs, infinities, and in
    every 128x128 block one element exactly at the format's max (so that block's scale is 1 and
    the ties are ties)."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * np.exp2(rng.integers(-20, 20, shape))).astype(np.float32)
    fmax = float(ml_dtypes.finfo(FORMATS[fmt]).max)
    specials = np.array(
        [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0625, 1.1875, -1.0625, 2.0**-10, 3 * 2.0**-10, 2.0**-17,
         2.0**-16 * 1.5, fmax * 0.999, -fmax, 1e-30, 2.0**-9, 2.0**-8 + 2.0**-11],
        dtype=np.float32,
    )
    flat = x.reshape(-1)
    idx = rng.choice(flat.size, size=min(flat.size // 3, 4000), replace=False)
    flat[idx] = specials[rng.integers(0, specials.size, idx.size)]
    for r in range(0, shape[0], 128):
        for c in range(0, shape[1], 128):
            if (r // 128 + c // 128) % 2 == 0:  # half the blocks: scale exactly 1, exact ties
                blk = x[r : r + 128, c : c + 128]
                np.clip(blk, -fmax, fmax, out=blk)
                blk[0, 0] = fmax
    return x


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """f32 values to bf16 bits, rounding to nearest even (NaN stays NaN), with ml_dtypes."""
    return x.astype(ml_dtypes.bfloat16).view(np.uint16)


def reference(x: np.ndarray, fmt: str, scale: str) -> tuple[np.ndarray, np.ndarray]:
    """The FP8 bytes and scales of the whole tensor ``x`` (f32), computed here with numpy and
    ml_dtypes: scale = (largest finite |x| of the group) / max in f32 (1 where that is 0),
    q = float8(clip(x / scale, -max, max))."""
    f8 = FORMATS[fmt]
    fmax = np.float32(ml_dtypes.finfo(f8).max)

    def scale_of(group: np.ndarray) -> np.float32:
        finite = np.abs(group[np.isfinite(group)])
        amax = np.float32(finite.max()) if finite.size else np.float32(0)
        s = np.float32(amax / fmax)
        return s if (s > 0 and np.isfinite(s)) else np.float32(1)

    if scale == "tensor":
        grid = np.array(scale_of(x), dtype=np.float32).reshape(())
        scaled = x / grid
    else:
        rows, cols = -(-x.shape[0] // 128), -(-x.shape[1] // 128)
        grid = np.array([[scale_of(x[r * 128 : r * 128 + 128, c * 128 : c * 128 + 128]) for c in range(cols)] for r in range(rows)], np.float32)
        per = np.repeat(np.repeat(grid, 128, axis=0), 128, axis=1)[: x.shape[0], : x.shape[1]]
        scaled = x / per
    with np.errstate(invalid="ignore"):
        q = np.clip(scaled, -fmax, fmax).astype(f8).view(np.uint8)
    return q, grid


def run(src: W.Layout, dst: W.Layout, shards: list[dict[str, np.ndarray]]) -> tuple[W.Plan, list[dict[str, np.ndarray]], int]:
    """Plans, publishes every source rank's shards, lands and commits on every destination
    rank (all in this process); returns each destination rank's arrays and the bytes landed."""
    p = W.plan(src, dst)
    senders = [W.Sender(p.for_source(r)) for r in range(len(src.ranks))]
    ships = [s.publish(1, shards[r]) for r, s in enumerate(senders)]
    out, landed = [], 0
    for d in range(len(dst.ranks)):
        rc = W.Receiver(p.for_destination(d))
        got = rc.receive(ships)
        landed += got.nbytes
        assert got.read_bytes >= got.nbytes
        rc.commit(1)
        with rc.read() as (_, arrays):
            out.append({n: a.copy() for n, a in arrays.items()})
        rc.close()
    for s in senders:
        s.close()
    return p, out, landed


@pytest.mark.parametrize("fmt", ["f8e4m3", "f8e5m2"])
@pytest.mark.parametrize("scale", ["tensor", "block"])
@pytest.mark.parametrize("src_dtype", ["bf16", "f32"])
def test_fp8_in_flight_is_byte_exact_against_ml_dtypes(fmt: str, scale: str, src_dtype: str) -> None:
    shape = (384, 320)  # 3 x 3 blocks, the last column of blocks 64 wide
    x = adversarial(shape, fmt, seed=hash((fmt, scale, src_dtype)) % 1000)
    if src_dtype == "bf16":
        held = bf16_bits(x)
        x = (held.astype(np.uint32) << 16).view(np.float32)  # what the source really holds
    else:
        held = x
    # Source: a per-tensor scale needs the whole tensor on each source rank (2 replicas); block
    # scales allow rows split at a block boundary (3 ranks of 128 rows).
    if scale == "tensor":
        src = W.Layout.sharded({"w": (shape, src_dtype)}, ranks=2, dim=None, replicas=2)
    else:
        src = W.Layout.sharded({"w": (shape, src_dtype)}, ranks=3, dim=0)
    # Destination: 4 ranks by columns (80 wide: cuts through blocks), 2 replicas of 2.
    dst = W.Layout.sharded({"w": (shape, src_dtype)}, ranks=4, dim=1, replicas=2).with_dtypes(fmt, scale=scale)
    dst = dst.on(["h0", "h0", "h1", "h1"])
    shards = [{"w": held[tuple(slice(lo, hi) for lo, hi in src.ranks[r]["w"])]} for r in range(len(src.ranks))]
    p, out, landed = run(src, dst, shards)
    want_q, want_grid = reference(x, fmt, scale)
    sname = W.scale_name("w", scale)
    for d, arrays in enumerate(out):
        box = dst.ranks[d]["w"]
        sl = tuple(slice(lo, hi) for lo, hi in box)
        assert arrays["w"].dtype == np.uint8
        np.testing.assert_array_equal(arrays["w"], want_q[sl], err_msg=f"rank {d}: FP8 bytes")
        grid = arrays[sname]
        if scale == "tensor":
            assert grid.shape == () and grid == want_grid
        else:
            gs = tuple(slice(lo, hi) for lo, hi in W.scale_box(box, "block"))
            np.testing.assert_array_equal(grid, want_grid[gs], err_msg=f"rank {d}: scales")
    # Half the bytes of bf16 on the wire (a quarter of f32), plus the scales.
    assert landed == p.bytes
    assert p.bytes < sum(dst.nbytes(d) for d in range(4)) + 4 * 4 * 9


def test_the_reference_check_can_fail() -> None:
    # A conversion that truncates instead of rounding to nearest even differs on ties: the
    # comparison above would catch it.
    x = np.array([1.0625, 1.1875, 3 * 2.0**-10], np.float32)
    rne = x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    truncated = (x.view(np.uint32) >> 20).astype(np.uint8)  # not FP8 at all: plainly different
    assert not np.array_equal(rne, truncated)
    q, _ = reference(np.array([[448.0, 1.0625]], np.float32), "f8e4m3", "tensor")
    assert q.tolist() == [[0x7E, 0x38]]  # 448 is the max; the tie goes to 1.0, the even one


def test_bytes_landed_agree_with_the_plan_on_an_unaligned_layout() -> None:
    # Odd shapes: every piece ends off a 64-byte boundary, so buffers carry padding between
    # pieces. Landed.nbytes (pieces) adds up to Plan.bytes; read_bytes (buffers) is more.
    tensors = {"a": ((7, 5), "f32"), "b": ((13,), "bf16"), "c": ((3, 3, 3), "f32")}
    src = W.Layout.sharded(tensors, ranks=2, dim=0)
    dst = W.Layout.sharded(tensors, ranks=3, dim={"a": 1, "b": 0, "c": 2})
    rng = np.random.default_rng(9)
    g = {"a": rng.standard_normal((7, 5)).astype(np.float32), "b": rng.integers(0, 2**16, 13).astype(np.uint16),
         "c": rng.standard_normal((3, 3, 3)).astype(np.float32)}
    shards = [{n: g[n][tuple(slice(lo, hi) for lo, hi in b)] for n, b in src.ranks[r].items()} for r in range(2)]
    p = W.plan(src, dst)
    senders = [W.Sender(p.for_source(r)) for r in range(2)]
    ships = [s.publish(1, shards[r]) for r, s in enumerate(senders)]
    nbytes = read = 0
    for d in range(3):
        rc = W.Receiver(p.for_destination(d))
        landed = rc.receive(ships)
        nbytes, read = nbytes + landed.nbytes, read + landed.read_bytes
        rc.close()
    for s in senders:
        s.close()
    held = sum(dst.nbytes(d) for d in range(3))
    assert nbytes == p.bytes == held  # no conversion: exactly the bytes the destinations hold
    assert read > p.bytes  # the padding is real, and counted apart


def test_fp8_mistakes_are_refused_by_name() -> None:
    shape = (256, 256)
    whole = W.Layout.sharded({"w": (shape, "bf16")}, ranks=2, dim=0)  # rows split at 128
    # A per-tensor scale with the tensor split across sources: no source knows the amax.
    with pytest.raises(W.LayoutError, match='"w".*per-tensor FP8 scale needs the whole tensor'):
        W.plan(whole, W.Layout.sharded({"w": (shape, "bf16")}, ranks=1).with_dtypes("f8e4m3", scale="tensor"))
    # Block scales with a source box that cuts a block (rows split at 85, 170).
    cut = W.Layout.sharded({"w": (shape, "bf16")}, ranks=3, dim=0)
    with pytest.raises(W.LayoutError, match="128x128 block on one source rank"):
        W.plan(cut, W.Layout.sharded({"w": (shape, "bf16")}, ranks=1).with_dtypes("f8e4m3", scale="block"))
    # FP8 without a scale; a scale on a non-FP8 tensor; an unknown scale; FP8 back to bf16.
    with pytest.raises(W.LayoutError, match="needs a scale"):
        W.plan(whole, W.Layout.sharded({"w": (shape, "bf16")}, ranks=1).with_dtypes("f8e4m3"))
    with pytest.raises(W.LayoutError, match="a scale is for FP8"):
        W.plan(whole, W.Layout({"w": (shape, "bf16", "block")}, [{"w": ((0, 256), (0, 256))}]))
    with pytest.raises(W.LayoutError, match="scale 'row'"):
        W.Layout({"w": (shape, "f8e4m3", "row")}, [{}])
    f8src = W.Layout.sharded({"w": (shape, "f8e4m3")}, ranks=1)
    with pytest.raises(W.LayoutError, match="cannot convert f8e4m3 to bf16"):
        W.plan(f8src, W.Layout.sharded({"w": (shape, "bf16")}, ranks=1))


def test_the_fabric_model_replays_a_plan_over_a_described_fleet() -> None:
    # Two trainer hosts to four inference hosts: every inference host receives a quarter, the
    # two trainer hosts send half each; at 8 Gbit/s (1 GB/s) the floor is the busiest of those.
    t = {"w": ((1024, 1024), "f32")}
    p = W.plan(W.Layout.sharded(t, ranks=2, dim=0).on(["t0", "t1"]), W.Layout.sharded(t, ranks=4, dim=1).on(["i0", "i1", "i2", "i3"]))
    got = p.predict({"nics": 1, "nic_gbit": 8, "efficiency": 0.8, "setup_s": 0.01})
    assert got["floor_s"] == pytest.approx(2 * 2**20 / 1e9) and got["bottleneck"].startswith("NICs out of t")
    assert got["seconds"] == pytest.approx(got["floor_s"] / 0.8 + 0.01)
    assert got["nic_bytes"] == p.bytes
    with pytest.raises(W.LayoutError, match="invalid fleet"):
        p.predict({"nics": 1})
    # Quantising at the source: the conversion must be described, and it adds to the links.
    q = W.plan(W.Layout.sharded({"w": ((1024, 1024), "bf16")}, ranks=2, dim=0).on(["t0", "t1"]),
               W.Layout.sharded({"w": ((1024, 1024), "bf16")}, ranks=2, dim=0).on(["i0", "i1"]).with_dtypes("f8e4m3", scale="block"))
    with pytest.raises(W.LayoutError, match="describe the conversion"):
        q.predict({"nics": 1, "nic_gbit": 8})
    with pytest.raises(W.LayoutError, match="must be positive"):
        q.predict({"nics": 1, "nic_gbit": 8, "convert": {"scales_gbyte": 0, "quantize_gbyte": 1, "threads": 1}})
    got = q.predict({"nics": 1, "nic_gbit": 8, "convert": {"scales_gbyte": 1, "quantize_gbyte": 1, "threads": 1}})
    assert got["convert_bytes"] == 4 << 20 and got["convert_s"] == pytest.approx(2 * 2**20 / 1e9)
    assert got["seconds"] == pytest.approx(got["links_s"] + got["convert_s"])
    # Copying the buffers of tensors not quantised: counted where a copy rate is given.
    assert p.predict({"nics": 1, "nic_gbit": 8})["copy_bytes"] == p.bytes
    copied = p.predict({"nics": 1, "nic_gbit": 8, "convert": {"copy_gbyte": 0.5, "threads": 2}})
    assert copied["convert_s"] == pytest.approx(p.bytes / 2 / 0.5e9) and copied["seconds"] == pytest.approx(copied["links_s"] + copied["convert_s"])
    # The hosts' CPU: every byte over a NIC costs both ends' work; where the six hosts are one
    # machine's namespaces with little CPU, that pool bounds the sync (and names itself).
    hosts = [["t0", "t1", "i0", "i1", "i2", "i3"]]
    cpu = p.predict({"nics": 1, "nic_gbit": 8, "cpu": {"transfer_gbyte": 0.01, "cores": 0.5, "shared": hosts}})
    assert cpu["cpu_s"] == pytest.approx(p.bytes / 0.01e9 / 0.5) and cpu["seconds"] == pytest.approx(cpu["cpu_s"])
    assert cpu["cpu_pool"] == "CPU of the machine of t0, t1, i0, i1, i2, i3" and cpu["cpu_s"] > cpu["links_s"]
    roomy = p.predict({"nics": 1, "nic_gbit": 8, "cpu": {"transfer_gbyte": 10, "cores": 8}})
    assert roomy["seconds"] == pytest.approx(roomy["links_s"]) and roomy["cpu_s"] < roomy["links_s"]
    with pytest.raises(W.LayoutError, match="cpu: transfer_gbyte and cores must be positive"):
        p.predict({"nics": 1, "nic_gbit": 8, "cpu": {"transfer_gbyte": 1, "cores": -1}})
