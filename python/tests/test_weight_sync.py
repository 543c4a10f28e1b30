"""Weight sync without Ray (`accel.weights`): layouts (slices, DTensor placements), the plan,
senders and receivers in this process and in other processes over TCP, dtype conversion,
double buffering, versions, a source that dies, metrics; and every mistake refused by name."""

from __future__ import annotations

import base64
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from accel import transport as T
from accel import weights as W

TENSORS = {"w": ((64, 48), "f32"), "b": ((48,), "bf16"), "e": ((10, 6, 4), "f32")}


def globals_at(version: int) -> dict[str, np.ndarray]:
    """Fresh weights for a version: every element depends on it."""
    rng = np.random.default_rng(version)
    return {
        "w": rng.standard_normal((64, 48)).astype(np.float32),
        "b": (rng.standard_normal(48).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16),
        "e": rng.standard_normal((10, 6, 4)).astype(np.float32),
    }


def local(layout: W.Layout, rank: int, g: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {n: g[n][tuple(slice(lo, hi) for lo, hi in box)] for n, box in layout.ranks[rank].items()}


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def layouts():
    src = W.Layout.sharded(TENSORS, ranks=4, dim={"w": 0, "b": 0, "e": 1}, replicas=2)
    dst = W.Layout.sharded(TENSORS, ranks=3, dim={"w": 1, "b": None, "e": 2}).with_dtypes({"w": "f16", "b": "f32"})
    return src, dst


def setup(d: int, **kw):
    """The default layouts' plan, 4 senders and the receiver of destination rank `d`."""
    src, dst = layouts()
    p = W.plan(src, dst)
    return src, dst, p, [W.Sender(p.for_source(r)) for r in range(4)], W.Receiver(p.for_destination(d), **kw)


def ship(senders, src: W.Layout, version: int) -> list:
    g = globals_at(version)
    return [s.publish(version, local(src, r, g)) for r, s in enumerate(senders)]


def expected(dst: W.Layout, d: int, g: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    want = local(dst, d, {"w": g["w"].astype(np.float16), "b": bf16_to_f32(g["b"]), "e": g["e"]})
    return {n: a for n, a in want.items() if a.size}


def test_a_resharded_state_arrives_byte_for_byte_with_dtypes_converted():
    src, dst = layouts()
    p = W.plan(src.on(["a", "a", "b", "b"]), dst.on(["a", "c", "c"]))
    assert W.plan(src.on(["a", "a", "b", "b"]), dst.on(["a", "c", "c"])) is p  # planned once
    senders = [W.Sender(p.for_source(r)) for r in range(4)]
    receivers = [W.Receiver(p.for_destination(d)) for d in range(3)]
    for version in (1, 2, 3):
        g = globals_at(version)
        ships = [s.publish(version, local(src, r, g)) for r, s in enumerate(senders)]
        for d, rc in enumerate(receivers):
            landed = rc.receive(ships)
            assert landed.version == version and landed.nbytes > 0
            rc.commit(version)
            with rc.read() as (seen, arrays):
                assert seen == version
                want = expected(dst, d, g)
                assert set(arrays) == set(want)
                for n in want:
                    assert arrays[n].dtype == want[n].dtype
                    np.testing.assert_array_equal(arrays[n], want[n])
    # Rank 0 shares host a with replicas 0 and 1: it reads only them, never across a link.
    assert {s for s, _, _ in p.for_destination(0).fetches} <= {0, 1}
    assert "a" not in p.links["in"]
    for s in senders:
        s.close()


def test_double_buffering_serves_the_old_version_until_the_switch():
    src, dst, p, senders, rc = setup(1)
    g1 = globals_at(1)
    rc.receive(ship(senders, src, 1))
    rc.commit(1)
    with rc.read() as (version, arrays):
        # A receive lands version 2 while this reader holds version 1...
        g2 = globals_at(2)
        rc.receive(ship(senders, src, 2))
        assert version == 1 and rc.version == 1
        np.testing.assert_array_equal(arrays["w"], expected(dst, 1, g1)["w"])
        # ...and the switch is instant: it needs no reader to finish.
        assert rc.commit(2) < 0.05
    with rc.read() as (version, arrays):
        assert version == 2
        np.testing.assert_array_equal(arrays["w"], expected(dst, 1, g2)["w"])
    # A third version would overwrite the set a reader holds: it waits for that reader.
    ships = ship(senders, src, 3)
    with rc.read():
        with rc.read():
            pass
        rc.receive(ships)  # lands in the set no one reads
    rc.commit(3)
    holder = rc.read()
    holder.__enter__()  # a reader holds version 3; version 4 must land in version 2's set
    ships4 = ship(senders, src, 4)
    done = threading.Event()
    threading.Thread(target=lambda: (rc.receive(ships4), done.set()), daemon=True).start()
    assert done.wait(30)
    rc.commit(4)
    ships5 = ship(senders, src, 5)
    late = threading.Event()
    threading.Thread(target=lambda: (rc.receive(ships5), late.set()), daemon=True).start()
    assert not late.wait(0.5)  # version 3's set is still read
    holder.__exit__(None, None, None)
    assert late.wait(30)


def test_a_switch_is_undone_while_the_old_version_is_whole():
    src, dst, p, senders, rc = setup(2)
    for version in (1, 2):
        rc.receive(ship(senders, src, version))
        rc.commit(version)
    assert rc.rollback(2) and rc.version == 1
    with rc.read() as (version, arrays):
        assert version == 1
        np.testing.assert_array_equal(arrays["w"], expected(dst, 2, globals_at(1))["w"])
    assert not rc.rollback(2)  # nothing left to undo
    rc.receive(ship(senders, src, 3))
    rc.commit(3)
    rc.receive(ship(senders, src, 4))  # overwrites version 3's old set: no undo past it
    assert not rc.rollback(3)
    assert not W.Receiver(p.for_destination(2), double_buffer=False).rollback(1)


def test_one_buffer_pauses_readers_for_the_whole_receive():
    src, dst, p, senders, rc = setup(0, double_buffer=False)
    rc.receive(ship(senders, src, 1))
    time.sleep(0.2)
    assert rc.commit(1) >= 0.2  # readers waited from the start of the receive
    assert rc.nbytes * 2 == W.Receiver(p.for_destination(0)).nbytes


def test_a_receivers_target_sets_are_resident_from_the_start() -> None:
    # Both sets are zeroed and touched when the receiver is made, so no step pays their first
    # touch (np.zeros alone maps pages lazily: resident memory would not grow until a receive).
    def resident() -> int:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    t = {"w": ((4096, 4096), "f32")}  # 64 MiB a set
    p = W.plan(W.Layout.sharded(t, ranks=1), W.Layout.sharded(t, ranks=1))
    before = resident()
    rc = W.Receiver(p.for_destination(0))
    assert rc.nbytes == 128 << 20 and resident() - before >= 120 << 20
    with rc.read() as (_, arrays):
        assert not arrays["w"].any()


def test_shipments_must_be_one_version_of_this_plan():
    src, dst, p, senders, rc = setup(0)
    g = globals_at(1)
    ships = ship(senders, src, 1)
    mixed = ships[:3] + [senders[3].publish(2, local(src, 3, g))]
    with pytest.raises(W.WeightSyncError, match="versions \\[1, 2\\]"):
        rc.receive(mixed)
    with pytest.raises(W.WeightSyncError, match="no shipment from source rank"):
        rc.receive(ships[:1])
    other = W.plan(src, dst.with_dtypes("f32"))
    with pytest.raises(W.WeightSyncError, match="another plan"):
        W.Receiver(other.for_destination(0)).receive(ships)
    with pytest.raises(W.WeightSyncError, match="has not landed"):
        rc.commit(1)
    with pytest.raises(ValueError, match="was given"):
        senders[0].publish(3, {n: a.T.copy() if a.ndim > 1 else a for n, a in local(src, 0, g).items()})
    assert rc.version is None


def test_layout_mistakes_name_the_tensor_and_rank():
    full = {"w": ((4, 4), "bf16")}
    ok = W.Layout(full, [{"w": ((0, 4), (0, 4))}])
    with pytest.raises(W.LayoutError, match="rank 0 needs 8 element"):
        W.plan(W.Layout(full, [{"w": ((0, 2), (0, 4))}]), ok)
    with pytest.raises(W.LayoutError, match="overlapping boxes"):
        W.plan(W.Layout(full, [{"w": ((0, 3),)}, {"w": ((2, 4),)}]), ok)
    with pytest.raises(W.LayoutError, match="cannot convert bf16 to i8"):
        W.plan(ok, ok.with_dtypes("i8"))
    with pytest.raises(W.LayoutError, match="not inside 0:4"):
        W.plan(ok, W.Layout(full, [{"w": ((0, 5),)}]))
    with pytest.raises(W.LayoutError, match="shape"):
        W.plan(ok, W.Layout({"w": ((4, 5), "bf16")}, [{"w": ()}]))
    with pytest.raises(W.LayoutError, match="not among the tensors"):
        W.Layout(full, [{"v": ()}])
    with pytest.raises(W.LayoutError, match="unknown dtype"):
        W.Layout({"w": ((4,), "complex64")}, [{}])
    with pytest.raises(W.LayoutError, match="step"):
        W.Layout(full, [{"w": (slice(0, 4, 2),)}])
    with pytest.raises(W.LayoutError, match="no such tensor"):
        W.plan(ok, W.Layout({"v": ((4, 4), "bf16")}, [{"v": ()}]))


def test_layout_arguments_name_the_valid_range_and_the_nearest_name():
    # accel's own error (also a ValueError), never a bare IndexError or a silently ignored typo.
    model = {"w1": ((64, 256), "f32"), "w2": ((256, 16), "f32")}
    with pytest.raises(W.LayoutError, match=r"dim 5 is out of range \(valid: 0 to 1, or -2 to -1 from the end\)"):
        W.Layout.sharded(model, ranks=4, dim=5)
    with pytest.raises(ValueError, match="'w1' has 2 dimension"):
        W.Layout.sharded(model, ranks=4, dim={"w1": -3})
    assert W.Layout.sharded(model, ranks=4, dim=-1).ranks[1]["w1"] == ((0, 64), (64, 128))
    with pytest.raises(W.LayoutError, match=r"dim names 'w3'.*did you mean 'w1'\?.*tensors: w1, w2"):
        W.Layout.sharded(model, ranks=4, dim={"w3": 1})
    with pytest.raises(W.LayoutError, match=r"unknown dtype 'f61'; did you mean 'f16'\?"):
        W.Layout.sharded(model, ranks=2).with_dtypes("f61")
    with pytest.raises(W.LayoutError, match=r"with_dtypes names 'W1'.*; did you mean 'w1'\?"):
        W.Layout.sharded(model, ranks=2).with_dtypes({"W1": "f16"})
    with pytest.raises(W.LayoutError, match=r"placements names 'w'.*; did you mean"):
        W.Layout.from_placements(model, (2,), {"w": ["S(0)"]})
    with pytest.raises(W.LayoutError, match="must be an integer"):
        W.Layout.sharded(model, ranks=2, dim="rows")  # type: ignore[arg-type]


def test_placements_follow_dtensor_chunking():
    t = {"w": ((10, 6), "f32"), "v": ((5,), "f32")}
    # A 2x2 mesh: w sharded on dim 0 by mesh dim 0, then dim 1 by mesh dim 1; v split on both.
    lay = W.Layout.from_placements(t, (2, 2), {"w": ["S(0)", "S(1)"], "v": ["S(0)", "S(0)"]})
    assert [r["w"] for r in lay.ranks] == [((0, 5), (0, 3)), ((0, 5), (3, 6)), ((5, 10), (0, 3)), ((5, 10), (3, 6))]
    # torch.chunk(5 elements, 2) = 3 + 2; each again in two: 2 + 1, 1 + 1.
    assert [r["v"] for r in lay.ranks] == [((0, 2),), ((2, 3),), ((3, 4),), ((4, 5),)]
    # Uneven: 10 rows in 4 chunks of 3 (torch.chunk), the last one 1; replication keeps whole.
    lay = W.Layout.from_placements(t, [4], {"w": ["S(0)"], "v": ["R"]})
    assert [r["w"][0] for r in lay.ranks] == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert all(r["v"] == ((0, 5),) for r in lay.ranks)
    with pytest.raises(W.LayoutError, match="not S\\(d\\) or R"):
        W.Layout.from_placements(t, [2], {"w": ["P(sum)"]})
    with pytest.raises(W.LayoutError, match="does not have"):
        W.Layout.from_placements(t, [2], {"v": ["S(1)"]})


def test_dtensor_attributes_give_the_same_layout():
    # The attributes DTensor exposes (torch is optional here): shape, dtype, device_mesh.mesh,
    # placements with is_shard()/is_replicate() and .dim.
    def placement(dim=None):
        return SimpleNamespace(is_shard=lambda: dim is not None, is_replicate=lambda: dim is None, dim=dim)

    mesh = SimpleNamespace(mesh=np.array([[0, 1], [2, 3]]))
    state = {
        "w": SimpleNamespace(shape=(10, 6), dtype="torch.bfloat16", device_mesh=mesh, placements=[placement(0), placement(1)]),
        "v": SimpleNamespace(shape=(5,), dtype="torch.float32", device_mesh=mesh, placements=[placement(), placement(0)]),
    }
    lay = W.Layout.from_dtensor(state)
    same = W.Layout.from_placements({"w": ((10, 6), "bf16"), "v": ((5,), "f32")}, (2, 2), {"w": ["S(0)", "S(1)"], "v": ["R", "S(0)"]})
    assert lay.to_json() == same.to_json()
    state["v"].placements = [placement(), SimpleNamespace(is_shard=lambda: False, is_replicate=lambda: False)]
    with pytest.raises(W.LayoutError, match="cannot be synced"):
        W.Layout.from_dtensor(state)
    _StridedShard = type("_StridedShard", (), {"is_shard": lambda self: True, "dim": 0})
    state["v"].placements = [placement(), _StridedShard()]
    with pytest.raises(W.LayoutError, match="strided shard"):
        W.Layout.from_dtensor(state)
    with pytest.raises(W.LayoutError, match="not a DTensor"):
        W.Layout.from_dtensor({"x": np.zeros(3)})


def test_large_pieces_convert_in_row_chunks(monkeypatch):
    monkeypatch.setattr(W, "_CHUNK", 7)  # pieces of 10-element rows, converted 1 row at a time
    src, dst, p, senders, rc = setup(1)
    rc.receive(ship(senders, src, 1))
    rc.commit(1)
    with rc.read() as (_, arrays):
        for n, want in expected(dst, 1, globals_at(1)).items():
            np.testing.assert_array_equal(arrays[n], want)


def test_bf16_conversion_rounds_to_nearest_even_and_keeps_specials():
    values = np.array([1.0, -2.5, 3.140625, np.inf, -np.inf, np.nan, 1.0 + 2**-8, 1.0 + 3 * 2**-8, 65504.0], np.float32)
    t = {"x": ((values.size,), "f32")}
    src = W.Layout(t, [{"x": ((0, values.size),)}])
    p = W.plan(src, src.with_dtypes("bf16"))
    rc = W.Receiver(p.for_destination(0))
    rc.receive([W.Sender(p.for_source(0)).publish(1, {"x": values})])
    rc.commit(1)
    with rc.read() as (_, arrays):
        back = bf16_to_f32(arrays["x"])
    # 1 + 2^-8 is a tie between 1 and 1 + 2^-7: even (1.0) wins; 1 + 3*2^-8 goes up to 1 + 2^-6.
    np.testing.assert_array_equal(back[[0, 1, 2, 3, 4, 6, 7]], [1.0, -2.5, 3.140625, np.inf, -np.inf, 1.0, 1.0 + 2**-6])
    assert np.isnan(back[5]) and back[8] == 65536.0
    # bf16 to f16 and f32 to f16: numpy's own rounding.
    p2 = W.plan(src.with_dtypes("bf16"), src.with_dtypes("f16"))
    rc2 = W.Receiver(p2.for_destination(0))
    rc2.receive([W.Sender(p2.for_source(0)).publish(1, {"x": arrays["x"].copy()})])
    rc2.commit(1)
    with rc2.read() as (_, halves):
        np.testing.assert_array_equal(halves["x"][:5], back[:5].astype(np.float16))


PEER = """
import base64, os, pickle, sys, time
import numpy as np
from accel import weights as W
part, version, tensors = pickle.loads(base64.b64decode(sys.argv[1]))
s = W.Sender(part)
ship = s.publish(version, tensors)
sys.stdout.write(base64.b64encode(pickle.dumps(ship)).decode() + "\\n"); sys.stdout.flush()
sys.stdin.readline()
"""


def _peer_source(part, version, tensors):
    blob = base64.b64encode(pickle.dumps((part, version, tensors))).decode()
    proc = subprocess.Popen([sys.executable, "-c", PEER, blob], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line, "the source process exited"
    return proc, pickle.loads(base64.b64decode(line))


@pytest.mark.parametrize("path", ["tcp", "shm"])
def test_sources_in_other_processes_and_one_that_dies(path, monkeypatch):
    monkeypatch.setenv("ACCEL_TRANSPORT_PATH", path)
    src, dst = layouts()
    p = W.plan(src, dst)
    rc = W.Receiver(p.for_destination(2))
    g = globals_at(7)
    peers = [_peer_source(p.for_source(r), 7, local(src, r, g)) for r in range(4)]
    try:
        rc.receive([ship for _, ship in peers])
        rc.commit(7)
        with rc.read() as (version, arrays):
            assert version == 7
            np.testing.assert_array_equal(arrays["w"], expected(dst, 2, g)["w"])
        # Version 8: a source rank this destination reads from dies between publishing and the
        # receive.
        victim = p.for_destination(2).fetches[0][0]
        ships = []
        for r in range(4):
            proc, ship = _peer_source(p.for_source(r), 8, local(src, r, globals_at(8)))
            peers.append((proc, ship))
            ships.append(ship)
        dying = peers[4 + victim][0]
        dying.send_signal(signal.SIGKILL)
        dying.wait(30)
        with pytest.raises(W.WeightSyncError) as err:
            rc.receive(ships)
        assert (err.value.source, err.value.version) == (victim, 8)
        assert f"source rank {victim} failed mid-sync (OwnerGone" in str(err.value)
        assert "keeps serving version 7" in str(err.value)
        with pytest.raises(W.WeightSyncError, match="has not landed"):
            rc.commit(8)
        with rc.read() as (version, arrays):
            assert version == 7
            np.testing.assert_array_equal(arrays["w"], expected(dst, 2, g)["w"])
        assert W.stats()["steps"].get("receive/failed", 0) >= 1
    finally:
        for proc, _ in peers:
            if proc.poll() is None:
                proc.stdin.close()
                proc.wait(30)
        T.sweep()


def test_metrics_are_in_the_transport_exposition():
    src, dst, p, senders, rc = setup(0)
    rc.receive(ship(senders, src, 1))
    rc.commit(1)
    text = T.prometheus()
    for series in (
        'accel_weight_sync_steps_total{role="receive",outcome="ok"}',
        'accel_weight_sync_bytes_total{role="send"}',
        'accel_weight_sync_last_seconds{role="receive",phase="pause"}',
        "accel_weight_sync_link_gbps{peer=",
    ):
        assert series in text, series
    assert W.stats()["last_bytes"]["receive"] == sum(x.nbytes for _, _, b in p.for_destination(0).fetches for x in b.pieces)


def test_plans_are_cached_across_processes(tmp_path):
    # A plan saved in a cache directory is loaded by another process, not planned again; a
    # damaged file is planned again and replaced; a file for another pair is refused.
    src, dst = layouts()
    code = (
        "import sys, time; sys.path.insert(0, %r); from test_weight_sync import layouts; from accel import weights as W; "
        "s, d = layouts(); p = W.plan(s, d, cache=%r); print(p.id, p.bytes, p.templates, p.pieces)"
    ) % (os.path.dirname(__file__), str(tmp_path))
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    (saved,) = list(tmp_path.iterdir())
    mtime = saved.stat().st_mtime_ns
    assert saved.stat().st_mode & 0o077 == 0
    second = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert first == second and saved.stat().st_mtime_ns == mtime  # read, not rewritten
    p = W.plan(src, dst)
    loaded = W.Plan.from_bytes(src, dst, saved.read_bytes())
    assert loaded.id == p.id and loaded.bytes == p.bytes and loaded.for_destination(1) == p.for_destination(1)
    with pytest.raises(W.LayoutError, match="another pair"):
        W.Plan.from_bytes(src.on(["x"] * 4), dst, saved.read_bytes())
    with pytest.raises(W.LayoutError, match="cached plan"):
        W.Plan.from_bytes(src, dst, saved.read_bytes()[:-7])
    saved.write_bytes(saved.read_bytes()[:100])
    third = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert third == first and len(saved.read_bytes()) > 100  # planned again, file replaced
