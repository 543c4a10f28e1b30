#!/usr/bin/env python3
"""Writes the fuzz targets' seed inputs into fuzz/seeds/<target>/ from accel's own test data.

Run from the repository root: python3 fuzz/make_seeds.py. It rewrites the generated seeds
(`seed-*`) and leaves regression inputs (`regression-*`, inputs that once crashed a target) alone.
Sources: test_data/hosts/<machine>/capture.bundle (real and synthetic captures), the Ascend example
plugin run on its capture (examples/plugins/ascend), and `accel discover --sample gb200-nvl72-tray`
(an answer with links and domains); the frames follow crates/transport/src/frame.rs.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SEEDS = ROOT / "fuzz" / "seeds"

# ---------------------------------------------------------------------------------------------
# frame: the first byte picks the reader (bits 0-1) and the frame limit (bits 2+: 0 control,
# 1: 4096, 2: the default max_frame); see fuzz/fuzz_targets/frame.rs.
KIND = {"Hello": 1, "Auth": 2, "AuthOk": 3, "Get": 4, "Ok": 5, "Data": 6, "End": 7, "Free": 8,
        "Freed": 9, "Err": 10, "Received": 11, "Check": 12, "Release": 13, "Latest": 14, "Join": 15}


def frame(kind: str, payload: bytes = b"") -> bytes:
    return struct.pack("<IB", len(payload), KIND[kind]) + payload


def u64(*xs: int) -> bytes:
    return b"".join(struct.pack("<Q", x) for x in xs)


def frame_seeds() -> dict[str, bytes]:
    owner = b"4242-987654-00000000deadbeef"
    control = b"".join([
        frame("Get", u64(1, 4096)),
        frame("Get", u64(1, 4096, 1024, 2048)),
        frame("Free", u64(2)),
        frame("Release", u64(1)),
        frame("Release", u64(1)),
        frame("Latest", b"weights"),
        frame("Latest", b"missing"),
        frame("Join", u64(5, 6) + b"owner-a\n10.0.0.1:7000"),
        frame("Check", u64(5)),
        frame("Received"),
        frame("End"),
    ])
    replies = b"".join([
        frame("Ok", u64(4096)),
        frame("Ok", struct.pack("<I", 0) + u64(0)),
        frame("Ok", struct.pack("<I", 2) + u64(9) + struct.pack("<I", 0) + b"owner-b\n10.0.0.2:7000"),
        # A relay with the digests of a 100-byte buffer in 64-byte pieces (crates/transport/src/relay.rs).
        frame("Ok", struct.pack("<I", 1) + u64(9) + struct.pack("<I", 2) + u64(100, 64) + bytes(range(64))
              + b"owner-c\n10.0.0.3:7000"),
        frame("Ok", u64(3) + b'{"tensors": []}'),
        frame("Freed", b"\x01"),
        frame("Err", b"\x01buffer is not published"),
        frame("Err", b"\x02wrong cluster secret"),
    ])
    data = frame("Data", bytes(range(256)) * 4) + frame("Data", b"tail") + frame("End")
    handshake = frame("Hello", bytes(range(32)) + owner) + frame("AuthOk", bytes(32))
    sealed_record = struct.pack("<I", 16 + 5) + bytes(21)
    return {
        "seed-control": b"\x00" + control,
        "seed-replies": b"\x00" + replies,
        "seed-data-4096": b"\x04" + data,
        "seed-data-default": b"\x08" + data,
        "seed-oversize": b"\x00" + struct.pack("<IB", 1 << 20, KIND["Data"]),
        "seed-handshake": b"\x01" + handshake,
        "seed-server-handshake": b"\x01" + frame("Auth", bytes(64)),
        "seed-secure-raw": b"\x02" + sealed_record + struct.pack("<I", 0xFFFFFFFF),
        "seed-secure-sealed": b"\x03\x05" + control,
        "seed-secure-sealed-data": b"\x07\x00" + data,
    }


# ---------------------------------------------------------------------------------------------
# plugin_answer: a plugin's stdout.
def plugin_seeds() -> dict[str, bytes]:
    plugin = ROOT / "examples/plugins/ascend/accel-plugin-ascend"
    env = dict(os.environ, ACCEL_ROOT=str(ROOT / "examples/plugins/ascend/capture"), ACCEL_PROTOCOL="1")
    out = {}
    for verb in ["discover", "version", "isolate", "health"]:
        stdin = json.dumps({"protocol": 1, "devices": []}).encode()
        r = subprocess.run([sys.executable, str(plugin), verb], input=stdin, env=env, capture_output=True,
                           check=True)
        out[f"seed-ascend-{verb}"] = r.stdout
    accel = next((p for p in [ROOT / "target/debug/accel", ROOT / "target/release/accel"] if p.exists()), None)
    cmd = [str(accel)] if accel else ["cargo", "run", "-q", "-p", "accel-cli", "--"]
    m = json.loads(subprocess.run(cmd + ["discover", "--sample", "gb200-nvl72-tray", "--json"], cwd=ROOT,
                                  capture_output=True, check=True).stdout)
    answer = {"protocol": 1, "accelerators": m["accelerators"][:2], "links": m["links"][:1],
              "domains": m["domains"], "warnings": [{"message": "a warning", "path": "/dev/x"}],
              "attributes": {"fuzz.attr": "1"}}
    out["seed-gb200-links-domains"] = json.dumps(answer).encode()
    out["seed-minimal"] = b'{"protocol": 1, "accelerators": []}'
    out["seed-wrong-protocol"] = b'{"protocol": 2}'
    return out


# ---------------------------------------------------------------------------------------------
# capture: first line a sample's name (the rest overlays its bundle), `disk` (the rest is a whole
# bundle, discovered on disk) or empty (a whole bundle, in memory).
def bundle(name: str) -> bytes:
    return (ROOT / "test_data/hosts" / name / "capture.bundle").read_bytes()


def entries(b: bytes) -> list[tuple[str, str, bytes]]:
    """(kind, path, content or link target) of a bundle, in order."""
    out, pos = [], b.index(b"\n") + 1
    while pos < len(b):
        end = b.index(b"\n", pos) if b"\n" in b[pos:] else len(b)
        line = b[pos:end].decode()
        pos = end + 1
        if not line:
            continue
        kind, path, *rest = line.split(" ", 2)
        if kind == "F":
            n = int(rest[0])
            out.append((kind, path, b[pos:pos + n]))
            pos += n + 1
        else:
            out.append((kind, path, rest[0].encode() if rest else b""))
    return out


def f(path: str, content: bytes) -> bytes:
    return f"F {path} {len(content)}\n".encode() + content + b"\n"


def overlay(sample: str) -> bytes:
    """A few hostile edits of a real sample: garbage, empty and truncated attributes, a bus link
    looping on itself, a link to nowhere over a file, a dangling driver link."""
    es = entries(bundle(sample))
    files = [e for e in es if e[0] == "F"]
    links = [e for e in es if e[0] == "L"]
    pick = lambda suffix: next((e for e in files if e[1].endswith(suffix)), None)  # noqa: E731
    out = [sample.encode() + b"\n"]
    for suffix, content in [("/vendor", b"0xzzzz\n"), ("/numa_node", b"-7\n"), ("/class", b""),
                            ("/local_cpulist", b"0-4294967295\n"), ("/cpulist", b"3-1,,\n"),
                            ("/distance", b"10 20 30\n"), ("/nvml.json", b'{"devices": [{"uuid": '),
                            ("/properties", b"simd_count x\nlocation_id 99999999999999999999\n")]:
        e = pick(suffix)
        if e:
            out.append(f(e[1], content))
    bus = [e for e in links if e[1].startswith("/sys/bus/pci/devices/")]
    if bus:
        out.append(f"L {bus[0][1]} {bus[0][1].rsplit('/', 1)[1]}\n".encode())
    if len(bus) > 1:
        out.append(f"L {bus[1][1]} ../../../devices/nowhere\n".encode())
    if files:
        out.append(f"L {files[-1][1]} /proc/self/environ\n".encode())
    return b"".join(out)


def capture_seeds() -> dict[str, bytes]:
    out = {}
    for small in ["hwloc-dgx-spark-gb10", "hwloc-kvm-pcidomain32"]:
        out[f"seed-memory-{small}"] = b"\n" + bundle(small)
    out["seed-disk-hwloc-dgx-spark-gb10"] = b"disk\n" + bundle("hwloc-dgx-spark-gb10")
    out["seed-disk-hostile"] = b"disk\n" + b"".join([
        b"accel-capture 1\n",
        f("/sys/devices/system/node/node0/cpulist", b"0-3\n"),
        f("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/vendor", b"0x10de\n"),
        f("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/device", b"0x2330\n"),
        f("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/class", b"0x030200\n"),
        b"L /sys/bus/pci/devices/0000:01:00.0 ../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0\n",
        b"L /sys/bus/pci/devices/0000:02:00.0 /sys/bus/pci/devices/0000:02:00.0\n",
        b"L /sys/bus/pci/devices/0000:03:00.0 ../../../../../../../../etc\n",
        b"L /sys/class/net/eth0 /sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0\n",
        b"D /proc/driver/nvidia/gpus\n",
    ])
    for sample in ["dgx-h100", "mi300x", "tpu-v6e", "trn2", "gaudi3", "nvidia-amd-mixed", "mi210-2hive",
                   "rtx-pro-6000-server"]:
        out[f"seed-overlay-{sample}"] = overlay(sample)
    return out


def main() -> None:
    for target, seeds in [("frame", frame_seeds()), ("plugin_answer", plugin_seeds()),
                          ("capture", capture_seeds())]:
        d = SEEDS / target
        d.mkdir(parents=True, exist_ok=True)
        for old in d.glob("seed-*"):
            old.unlink()
        for name, data in seeds.items():
            (d / name).write_bytes(data)
        print(f"{target}: {len(seeds)} seeds")


if __name__ == "__main__":
    main()
