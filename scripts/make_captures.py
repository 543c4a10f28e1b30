#!/usr/bin/env python3
"""Writes the synthetic captured machines in test_data/hosts/<name>/capture.bundle.

Each machine is built from public facts (spec sheets, published `nvidia-smi topo -m` and
`rocm-smi --showtopo` output, vendor sysfs documentation) named in its README. The output is the
`accel-capture 1` bundle format read by crates/discover/src/fs.rs. Reproducible: run
`python3 scripts/make_captures.py` and the files come out byte-identical.
Real captures (mi210-2hive) are read from a KFD tarball given with --kfd-mi210 (the copy of
ROCm/k8s-device-plugin's testdata); without it, the committed bundle is left alone.
"""
import argparse
import json
import os
import tarfile

HOSTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test_data", "hosts")


class Capture:
    def __init__(self, product, vendor="", hostname="node"):
        self.files, self.links, self.dirs = {}, {}, set()
        self.file("/sys/class/dmi/id/product_name", product)
        self.file("/sys/class/dmi/id/sys_vendor", vendor)
        self.file("/proc/sys/kernel/hostname", hostname)
        self.bus = {}

    def file(self, path, text):
        self.files[path] = text if text.endswith("\n") or text == "" else text + "\n"

    def link(self, path, target):
        self.links[path] = target

    def numa(self, cpulists, mem_gib):
        """cpulists: one CPU list string per NUMA node."""
        n = len(cpulists)
        last = max(int(c.split(",")[-1].split("-")[-1]) for c in cpulists)
        self.file("/sys/devices/system/cpu/online", f"0-{last}")
        for i, cpus in enumerate(cpulists):
            d = f"/sys/devices/system/node/node{i}"
            self.file(f"{d}/cpulist", cpus)
            self.file(f"{d}/meminfo", f"Node {i} MemTotal:       {mem_gib * 1024 * 1024} kB")
            self.file(f"{d}/distance", " ".join("10" if j == i else "21" for j in range(n)))
        self.cpus = cpulists

    def pci(self, path, vendor, device, cls, numa, driver=None, subsys=None, speed="32.0 GT/s PCIe", width=16):
        """path: list of BDFs from the root port down, under host bridge of the first one."""
        bdf = path[-1]
        dom, bus = bdf.split(":")[0], path[0].split(":")[1]
        host = f"pci{dom}:{bus}"
        sys = "/sys/devices/" + host + "/" + "/".join(path)
        depth = 3 + len(path)
        self.link(f"/sys/bus/pci/devices/{bdf}", "../../.." + sys[len("/sys"):])
        sub = subsys or (vendor, 0)
        uevent = f"PCI_CLASS={cls:X}\nPCI_ID={vendor:04X}:{device:04X}\nPCI_SUBSYS_ID={sub[0]:04X}:{sub[1]:04X}\nPCI_SLOT_NAME={bdf}\n"
        if driver:
            uevent = f"DRIVER={driver}\n" + uevent
            self.link(f"{sys}/driver", "../" * depth + f"bus/pci/drivers/{driver}")
        self.file(f"{sys}/uevent", uevent)
        self.file(f"{sys}/class", f"0x{cls:06x}")
        self.file(f"{sys}/vendor", f"0x{vendor:04x}")
        self.file(f"{sys}/device", f"0x{device:04x}")
        self.file(f"{sys}/numa_node", str(numa))
        self.file(f"{sys}/local_cpulist", self.cpus[numa])
        for k in ("current", "max"):
            self.file(f"{sys}/{k}_link_speed", speed)
            self.file(f"{sys}/{k}_link_width", str(width))
        return sys

    def bridge(self, path, numa, vendor=0x1000, device=0xC030):
        # Broadcom PEX89xxx switch ports / root ports.
        return self.pci(path, vendor, device, 0x060400, numa, driver="pcieport")

    def chain(self, path, numa):
        for i in range(1, len(path)):
            self.bridge(path[:i], numa)

    def ib_nic(self, path, name, numa, gbps=400):
        sys = self.pci(path, 0x15B3, 0x1021, 0x020700, numa, driver="mlx5_core")  # ConnectX-7
        self.link(f"/sys/class/infiniband/{name}", f"../../devices{sys[len('/sys/devices'):]}/infiniband/{name}")
        self.file(f"{sys}/infiniband/{name}/ports/1/rate", f"{gbps} Gb/sec (4X NDR)")

    def bundle(self):
        entries = []
        for p, t in self.files.items():
            entries.append((p, "F", t.encode()))
        for p, t in self.links.items():
            entries.append((p, "L", t))
        for p in self.dirs:
            entries.append((p, "D", None))
        out = [b"accel-capture 1\n"]
        for p, kind, data in sorted(entries):
            if kind == "F":
                out.append(f"F {p} {len(data)}\n".encode() + data + b"\n")
            elif kind == "L":
                out.append(f"L {p} {data}\n".encode())
            else:
                out.append(f"D {p}\n".encode())
        return b"".join(out)

    def write(self, name, readme):
        d = os.path.join(HOSTS, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "capture.bundle"), "wb") as f:
            f.write(self.bundle())
        with open(os.path.join(d, "README.md"), "w") as f:
            f.write(readme.strip() + "\n")


def nvml_device(i, bdf, name, serial_base, mem, links=(), fabric=None, c2c=None):
    d = {"index": i, "pci_bus_id": "0000" + bdf.upper(), "name": name,
         "uuid": f"GPU-{serial_base:08x}-0000-0000-0000-{i:012x}", "serial": f"{serial_base + i}",
         "memory_bytes": mem, "mig_enabled": False, "nvlinks": list(links)}
    if fabric:
        d["fabric"] = fabric
    if c2c is not None:
        d["c2c_links"] = c2c
    return d


def switch_links(split, switches, version):
    out, n = [], 0
    for count, sw in zip(split, switches):
        for _ in range(count):
            out.append({"link": n, "active": True, "version": version,
                        "remote_pci": ("0000" + sw.upper()) if sw else "", "remote_type": "switch"})
            n += 1
    return out


def hgx(name, product, gpu_dev, gpu_name, mem, nvswitch_dev, split, version, readme, pxb=True):
    """Two-socket HGX/DGX: each GPU on its own root port behind a PCIe switch, its NIC one switch
    further down (PXB, as published `nvidia-smi topo -m` of DGX H100 shows)."""
    c = Capture(product, "NVIDIA", name)
    c.numa(["0-55,112-167", "56-111,168-223"], 1024)
    gpu_buses = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]
    nic_names = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]
    gpus = []
    for i, b in enumerate(gpu_buses):
        numa = 0 if i < 4 else 1
        hb = int(b, 16) - 3
        rp, up, down_gpu, down_nic = f"0000:{hb:02x}:01.0", f"0000:{hb+1:02x}:00.0", f"0000:{hb+2:02x}:00.0", f"0000:{hb+2:02x}:01.0"
        gpu = f"0000:{b}:00.0"
        c.chain([rp, up, down_gpu, gpu], numa)
        c.pci([rp, up, down_gpu, gpu], 0x10DE, gpu_dev, 0x030200, numa, driver="nvidia")
        if pxb:
            nic_up, nic_down, nic = f"0000:{hb+4:02x}:00.0", f"0000:{hb+5:02x}:00.0", f"0000:{hb+6:02x}:00.0"
            c.chain([rp, up, down_nic, nic_up, nic_down, nic], numa)
            c.ib_nic([rp, up, down_nic, nic_up, nic_down, nic], nic_names[i], numa)
        else:
            nic = f"0000:{hb+4:02x}:00.0"
            c.chain([rp, up, down_nic, nic], numa)
            c.ib_nic([rp, up, down_nic, nic], nic_names[i], numa)
        gpus.append(gpu)
    switches = []
    for s in range(len(split)):
        bdf = f"0000:{0x05 + s:02x}:00.0"
        c.pci([f"0000:{0x04 + s:02x}:01.0", bdf][1:], 0x10DE, nvswitch_dev, 0x068000, 0, driver="nvidia-nvswitch")
        switches.append(bdf)
    devices = [nvml_device(i, g, gpu_name, 1650000000, mem, switch_links(split, switches, version)) for i, g in enumerate(gpus)]
    c.file("/accel/nvml.json", json.dumps({"driver_version": "570.124.06", "devices": devices}, indent=1))
    c.write(name, readme)


def kfd_gpu(c, node, bdf, device_id, hive, unique, numa_cpu_node, xgmi_peers, xgmi_bw, drm, simd=1216, mem=None,
            partition=None, weight=15):
    d = f"/sys/class/kfd/kfd/topology/nodes/{node}"
    bus, rest = bdf.split(":")[1], bdf.split(":")[2]
    dev, fn = rest.split(".")
    location = (int(bus, 16) << 8) | (int(dev, 16) << 3) | int(fn)
    props = {"cpu_cores_count": 0, "simd_count": simd, "mem_banks_count": 1, "io_links_count": 1 + len(xgmi_peers),
             "p2p_links_count": 0, "gfx_target_version": 90402, "vendor_id": 4098, "device_id": device_id,
             "location_id": location, "domain": int(bdf.split(":")[0], 16), "drm_render_minor": drm,
             "hive_id": hive, "unique_id": unique, "num_xcc": 8, "local_mem_size": 0}
    c.file(f"{d}/properties", "\n".join(f"{k} {v}" for k, v in props.items()))
    c.file(f"{d}/gpu_id", str(40000 + node))
    c.file(f"{d}/name", "gfx942" if device_id != 0x75A3 else "gfx950")
    if mem:
        c.file(f"{d}/mem_banks/0/properties", f"heap_type 1\nsize_in_bytes {mem}\nflags 0\nwidth 8192\nmem_clk_max 1300")
    links = [(numa_cpu_node, 2, 20, 0)] + [(p, 11, weight, xgmi_bw) for p in xgmi_peers]
    for i, (to, typ, w, bw) in enumerate(links):
        c.file(f"{d}/io_links/{i}/properties",
               f"type {typ}\nversion_major 0\nversion_minor 0\nnode_from {node}\nnode_to {to}\nweight {w}\n"
               f"min_latency 0\nmax_latency 0\nmin_bandwidth {bw}\nmax_bandwidth {bw}\nrecommended_transfer_size 0\n"
               f"recommended_sdma_engine_id_mask 0\nflags 1")


def kfd_cpu(c, node, cores):
    d = f"/sys/class/kfd/kfd/topology/nodes/{node}"
    c.file(f"{d}/properties", f"cpu_cores_count {cores}\nsimd_count 0\nmem_banks_count 1\nio_links_count 0\n"
           f"p2p_links_count 0\nvendor_id 0\ndevice_id 0\nlocation_id 0\ndomain 0\nhive_id 0\nunique_id 0")
    c.file(f"{d}/gpu_id", "0")
    c.file(f"{d}/name", "")


def amd8(name, product, device_id, mem, xgmi_bw, readme, gfx=90402):
    c = Capture(product, "AMD", name)
    c.numa(["0-47,96-143", "48-95,144-191"], 1024)
    kfd_cpu(c, 0, 48)
    kfd_cpu(c, 1, 48)
    buses = ["05", "15", "65", "75", "85", "95", "e5", "f5"]
    nics = ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7"]
    for i, b in enumerate(buses):
        numa = 0 if i < 4 else 1
        hb = int(b, 16) - 4
        rp, up, dg, dn = f"0000:{hb:02x}:01.0", f"0000:{hb+1:02x}:00.0", f"0000:{hb+2:02x}:00.0", f"0000:{hb+2:02x}:01.0"
        gpu = f"0000:{b}:00.0"
        c.chain([rp, up, dg, gpu], numa)
        sys = c.pci([rp, up, dg, gpu], 0x1002, device_id, 0x120000, numa, driver="amdgpu")
        nic = f"0000:{hb+3:02x}:00.0"
        c.chain([rp, up, dn, nic], numa)
        c.ib_nic([rp, up, dn, nic], nics[i], numa)
        c.file(f"{sys}/mem_info_vram_total", str(mem))
        unique = 0x3D5F1A2B00000000 + i
        c.file(f"{sys}/unique_id", f"{unique:x}")
        c.file(f"{sys}/current_compute_partition", "SPX")
        c.file(f"{sys}/current_memory_partition", "NPS1")
        peers = [2 + j for j in range(8) if j != i]
        kfd_gpu(c, 2 + i, gpu, device_id, 0x8A3F5E2D1C0B0A09, unique, numa, peers, xgmi_bw, 128 + i, mem=mem)
    c.file("/sys/class/kfd/kfd/topology/system_properties", "platform_oem 0\nplatform_id 0\nplatform_rev 0")
    c.write(name, readme)


README_HGX = """
# {name} (synthetic)

A synthetic capture generated by `scripts/make_captures.py`; no file here was read from a real
machine. Facts and their public sources:

{facts}

PCIe layout: each GPU sits on its own root port behind a PCIe switch; its ConnectX-7 NIC sits one
switch further down, so GPU↔own NIC is `PXB`, GPU↔other NICs on the socket `NODE`, across sockets
`SYS` — as in the published `nvidia-smi topo -m` of a DGX H100 in vllm-project/vllm#13855. Bus
numbers follow that DGX layout. NVLink is recorded as NVML would report it (`/accel/nvml.json`):
every GPU's links go to the NVSwitch chips, so every GPU pair is `NV18`.

Licence: generated data, Apache-2.0 like the rest of the repository.
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kfd-mi210", help="topo-mi210-xgmi-pcie.tar.gz (ROCm/k8s-device-plugin testdata)")
    args = ap.parse_args()
    hgx("dgx-h100", "DGXH100", 0x2330, "NVIDIA H100 80GB HBM3", 85520809984, 0x22A3, [5, 4, 4, 5], 4,
        README_HGX.format(name="DGX H100", facts="""
- 8× H100 SXM5 80GB (10de:2330, pci.ids), 18 NVLink 4 links each, 900 GB/s:
  https://www.nvidia.com/en-us/data-center/dgx-h100/ and the DGX H100 user guide
  (https://docs.nvidia.com/dgx/dgxh100-user-guide/introduction-to-dgxh100.html): 4 NVSwitch chips,
  2× Xeon Platinum 8480C (56 cores each), 8× ConnectX-7 single-port 400 Gb/s for the compute fabric.
- NVSwitch (10de:22a3, class 0x0680): pci.ids; links split 5/4/4/5 over the 4 chips (DGX H100
  system topology diagram in the user guide).
- CPU affinity 0-55,112-167 and 56-111,168-223: vllm-project/vllm#13855."""))
    hgx("hgx-b200", "HGX B200", 0x2901, "NVIDIA B200", 191514411008, 0x2901 - 0x2901 + 0x2A3F if False else 0x22A3,
        [9, 9], 5, README_HGX.format(name="HGX B200", facts="""
- 8× B200 (10de:2901, pci.ids), 18 NVLink 5 links each, 1.8 TB/s; 2 NVLink switch chips on the
  baseboard: https://www.nvidia.com/en-us/data-center/hgx/ and the DGX B200 user guide
  (https://docs.nvidia.com/dgx/dgxb200-user-guide/introduction-to-dgxb200.html).
- `NV18` between every GPU pair: published `nvidia-smi topo -m` of B200 nodes
  (vllm-project/vllm#31594, sgl-project/sglang#9064).
- The NVSwitch PCI id is written as 10de:22a3 for want of a public B200-era id; the PCIe layout is
  assumed to be the DGX H100 one."""))
    # GB200 NVL72 compute tray: 2 Grace + 4 B200 (GB200 superchips x2), NVLink to the switch trays.
    c = Capture("p6e-gb200.36xlarge", "Amazon EC2", "gb200-tray")
    c.numa(["0-71", "72-143"], 480)
    gpus = ["0008:01:00.0", "0009:01:00.0", "0018:01:00.0", "0019:01:00.0"]
    nics = ["0006:01:00.0", "0007:01:00.0", "0016:01:00.0", "0017:01:00.0"]
    for i, g in enumerate(gpus):
        numa = 0 if i < 2 else 1
        rp = g.split(":")[0] + ":00:00.0"
        c.bridge([rp], numa, vendor=0x10DE, device=0x22B2)
        c.pci([rp, g], 0x10DE, 0x2941, 0x030200, numa, driver="nvidia", speed="32.0 GT/s PCIe")
        nrp = nics[i].split(":")[0] + ":00:00.0"
        c.bridge([nrp], numa, vendor=0x10DE, device=0x22B2)
        c.ib_nic([nrp, nics[i]], f"mlx5_{i}", numa)
    fabric = {"cluster_uuid": "5f6a7b8c-1d2e-4f30-9a1b-2c3d4e5f6071", "clique_id": 32766, "state": 3, "status": 0}
    devices = [nvml_device(i, g, "NVIDIA GB200", 0x1652000000, 199715979264,
                           switch_links([18], [None], 5), fabric=fabric, c2c=1) for i, g in enumerate(gpus)]
    c.file("/accel/nvml.json", json.dumps({"driver_version": "570.133.20", "devices": devices}, indent=1))
    c.write("gb200-nvl72-tray", """
# GB200 NVL72 compute tray (synthetic)

Generated by `scripts/make_captures.py`. One compute tray of a GB200 NVL72 rack: two GB200
superchips, i.e. 2 Grace CPUs (72 cores each) and 4 B200-class GPUs (10de:2941), 4 ConnectX-7.
Sources:

- https://www.nvidia.com/en-us/data-center/gb200-nvl72/ (72 GPUs, 18 compute trays, NVLink 5,
  1.8 TB/s per GPU through the NVLink switch trays);
- GPU id 10de:2941 and PCI domains per GPU (0008, 0009, 0018, 0019 style, one root port each) as in
  the p6e-gb200 hwloc topology in aws/aws-ofi-nccl `tests/unit/fixtures/topology/p6e-gb200`;
- fabric info (`clusterUuid`, `cliqueId`, state COMPLETED, status success) in the shape NCCL and
  GPU Feature Discovery read it (research notes §1.3; leptonai/gpud#1106 shows clique ids in the
  thousands). The UUID here is made up.

The NVLink switches are in other trays, so NVML reports remote type switch with no local PCI
address: all four GPUs reach each other over 18 switched links (`NV18`), and the clique domain
names the tray's four GPUs. Licence: generated data, Apache-2.0.
""")
    # RTX PRO 6000 Blackwell server: 8 PCIe GPUs, two per switch, one NIC per switch.
    c = Capture("SYS-422GL-NR", "Supermicro", "rtxpro")
    c.numa(["0-63", "64-127"], 768)
    devices = []
    for s in range(4):
        numa = 0 if s < 2 else 1
        hb = 0x10 + s * 0x30 + (0x40 if numa else 0)
        rp, up = f"0000:{hb:02x}:01.0", f"0000:{hb+1:02x}:00.0"
        for k in range(2):
            down, gpu = f"0000:{hb+2:02x}:0{k}.0", f"0000:{hb+3+k:02x}:00.0"
            c.chain([rp, up, down, gpu], numa)
            c.pci([rp, up, down, gpu], 0x10DE, 0x2BB5, 0x030200, numa, driver="nvidia", speed="32.0 GT/s PCIe")
            devices.append(nvml_device(len(devices), gpu, "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                                       0x1654000000, 102641025024))
        down, nic = f"0000:{hb+2:02x}:02.0", f"0000:{hb+5:02x}:00.0"
        c.chain([rp, up, down, nic], numa)
        c.ib_nic([rp, up, down, nic], f"mlx5_{s}", numa)
    c.file("/accel/nvml.json", json.dumps({"driver_version": "575.57.08", "devices": devices}, indent=1))
    c.write("rtx-pro-6000-server", """
# RTX PRO 6000 Blackwell server (synthetic)

Generated by `scripts/make_captures.py`. An 8-GPU PCIe server: 8× RTX PRO 6000 Blackwell Server
Edition (10de:2bb5, pci.ids; 96 GB GDDR7, no NVLink:
https://www.nvidia.com/en-us/data-center/rtx-pro-6000-blackwell-server-edition/), two GPUs and one
ConnectX-7 behind each of four PCIe switches, two switches per socket (the usual layout of 8-GPU
PCIe servers such as the Supermicro SYS-422GL-NR listed on NVIDIA's qualified-systems page).
GPU pairs on one switch are `PIX`, GPUs on the same socket `NODE`, across sockets `SYS`.
Licence: generated data, Apache-2.0.
""")
    amd8("mi300x", "G593-ZX1-AAX1", 0x74A1, 206141652992, 64000, """
# 8× MI300X (synthetic)

Generated by `scripts/make_captures.py`. An 8-GPU MI300X platform (OAM, one xGMI hive, every GPU
linked to every other: 7 xGMI links of 64 GB/s per GPU):

- MI300X 1002:74a1, 192 GB HBM3, gfx942: https://rocm.docs.amd.com/en/latest/reference/gpu-arch-specs.html
  and pci.ids; xGMI all-to-all on the MI300X platform:
  https://rocm.docs.amd.com/en/latest/how-to/system-optimization/mi300x.html
- KFD topology layout (properties keys, io_links type 11 = xGMI weight 15, type 2 = PCIe to the
  CPU node weight 20) follows the real captures in ROCm/k8s-device-plugin `testdata/`
  (Apache-2.0), which `rocm-smi --showtopo` reads.
- amdgpu per-device files (`mem_info_vram_total`, `unique_id`, `current_compute_partition`,
  `current_memory_partition`) from the amdgpu sysfs documentation.

Licence: generated data, Apache-2.0.
""")
    amd8("mi355x", "AS-8126GS-TNMR", 0x75A3, 309220868096, 153600, """
# 8× MI355X (synthetic)

Generated by `scripts/make_captures.py`, same layout as `mi300x`: 8× MI355X (1002:75a3,
288 GB HBM3E, gfx950; https://rocm.docs.amd.com/en/latest/reference/gpu-arch-specs.html,
https://www.amd.com/en/products/accelerators/instinct/mi350/mi355x.html: 7 xGMI links of
153.6 GB/s, 1075.2 GB/s per GPU) in one xGMI hive. Licence: generated data, Apache-2.0.
""")
    if args.kfd_mi210:
        c = Capture("", "", "mi210")
        c.files.clear()
        with tarfile.open(args.kfd_mi210) as t:
            for m in sorted(t.getmembers(), key=lambda m: m.name):
                if m.isfile():
                    rel = m.name.split("/", 1)[1]
                    c.file("/sys/class/kfd/kfd/topology/" + rel, t.extractfile(m).read().decode())
        c.write("mi210-2hive", """
# 8× MI210 in two xGMI hives (real KFD capture)

The KFD topology (`/sys/class/kfd/kfd/topology/nodes`) of a real machine with 2 CPU sockets and
8 MI210 (1002:740f) in two xGMI hives of four, copied verbatim from ROCm/k8s-device-plugin
`testdata/topo-mi210-xgmi-pcie.tar.gz` at commit ed7646843003e8f0b6a0630346f01bb4d1ecff2e
(Apache-2.0, see LICENSE-Apache-2.0 beside this file). Converted to a bundle by
`scripts/make_captures.py --kfd-mi210 <tarball>`. It holds no PCI tree: PCI addresses come from
KFD `location_id`, NUMA nodes from the io_link to the CPU node.
""")


if __name__ == "__main__":
    main()
