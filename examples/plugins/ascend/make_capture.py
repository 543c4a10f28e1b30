"""Writes `capture/`, a synthetic Huawei Atlas 800T A2 (8x Ascend 910B) as a sysfs/procfs/dev
tree, with the capture writer of `scripts/make_captures.py`. Facts and sources: README.md."""

from __future__ import annotations

import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "scripts"))

from make_captures import Capture, switch_group  # noqa: E402

ASCEND_910B = 0xD802  # PCI device id the Ascend driver install guide checks with `lspci | grep d802`
PROCESSING_ACCELERATOR = 0x120000


def main() -> None:
    c = Capture("Atlas 800T A2", "Huawei", "atlas-800t-a2")
    # 4x Kunpeng 920 (48 cores each), one NUMA node per socket.
    c.numa(["0-47", "48-95", "96-143", "144-191"], 256)
    n = 0
    for socket in range(4):
        hb = 0x01 + socket * 0x40
        eps = [(0x19E5, ASCEND_910B, PROCESSING_ACCELERATOR, "devdrv_device_driver", None)] * 2
        for _bdf, _sys in switch_group(c, hb, socket, eps):
            c.file(f"/dev/davinci{n}", "")
            n += 1
    c.file("/dev/davinci_manager", "")
    out = os.path.join(HERE, "capture")
    # The real `npu-smi info` recording (README.md) survives a rewrite of the synthetic tree.
    recording = os.path.join(out, "accel", "npu-smi-info.txt")
    kept = open(recording, encoding="utf-8").read() if os.path.exists(recording) else None
    shutil.rmtree(out, ignore_errors=True)
    c.write_tree(out)
    if kept is not None:
        os.makedirs(os.path.dirname(recording), exist_ok=True)
        with open(recording, "w", encoding="utf-8") as f:
            f.write(kept)


if __name__ == "__main__":
    main()
