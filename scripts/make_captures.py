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
import subprocess
import tarfile

HOSTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test_data", "hosts")


class Capture:
    def __init__(self, product, vendor="", hostname="node"):
        """product: the DMI product name, or None for none (a synthetic sample of a cloud
        instance must not claim an instance type there)."""
        self.files, self.links, self.dirs = {}, {}, set()
        if product is not None:
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

    def write_tree(self, root):
        """Writes the capture as a directory tree (files and symlinks) under `root`."""
        for p, text in sorted(self.files.items()):
            dest = os.path.join(root, p.lstrip("/"))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "w") as f:
                f.write(text)
        for p, target in sorted(self.links.items()):
            dest = os.path.join(root, p.lstrip("/"))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if os.path.lexists(dest):
                os.remove(dest)
            os.symlink(target, dest)
        for p in sorted(self.dirs):
            os.makedirs(os.path.join(root, p.lstrip("/")), exist_ok=True)

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


def nvidia_proc(c, devices):
    """/proc/driver/nvidia/gpus/<bdf>/information for each NVML device, in the driver's format
    (NVIDIA/open-gpu-kernel-modules kernel-open/nvidia/nv-procfs.c, nv_procfs_read_gpu_info).
    Device Minor follows PCI order here: these samples are synthetic."""
    for minor, d in enumerate(sorted(devices, key=lambda d: d["pci_bus_id"].lower())):
        bdf = d["pci_bus_id"][4:].lower()
        c.file(f"/proc/driver/nvidia/gpus/{bdf}/information", "".join([
            f"Model: \t\t {d['name']}\n", f"GPU UUID: \t {d['uuid']}\n", "Bus Type: \t PCIe\n",
            f"Bus Location: \t {bdf}\n", f"Device Minor: \t {minor}\n", "GPU Excluded:\t No\n"]))


def switch_links(split, switches, version):
    out, n = [], 0
    for count, sw in zip(split, switches):
        for _ in range(count):
            out.append({"link": n, "active": True, "version": version,
                        "remote_pci": ("0000" + sw.upper()) if sw else "", "remote_type": "switch"})
            n += 1
    return out


def hgx(name, product, gpu_dev, gpu_name, mem, nvswitch_dev, split, version, readme, pxb=True, mig=None,
        storage_nics=False):
    """Two-socket HGX/DGX: each GPU on its own root port behind a PCIe switch, its NIC one switch
    further down (PXB, as published `nvidia-smi topo -m` of DGX H100 shows).
    mig: {gpu index: [(profile, memory bytes, gpu instance id), ...]} for GPUs in MIG mode.
    storage_nics: the DGX H100's two dual-port ConnectX-7 (storage and in-band management, one per
    socket, each port an RDMA device: mlx5_1/mlx5_2 and mlx5_7/mlx5_8, as the DGX BasePOD
    reference architecture and the published `nvidia-smi topo -m` show)."""
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
    if storage_nics:
        for numa, bus, names in ((0, 0x40, ("mlx5_1", "mlx5_2")), (1, 0xc0, ("mlx5_7", "mlx5_8"))):
            rp = f"0000:{bus:02x}:01.0"
            for fn, nic_name in enumerate(names):
                nic = f"0000:{bus + 1:02x}:00.{fn}"
                c.chain([rp, nic], numa)
                c.ib_nic([rp, nic], nic_name, numa)
    switches = []
    for s in range(len(split)):
        bdf = f"0000:{0x05 + s:02x}:00.0"
        c.pci([f"0000:{0x04 + s:02x}:01.0", bdf][1:], 0x10DE, nvswitch_dev, 0x068000, 0, driver="nvidia-nvswitch")
        switches.append(bdf)
    devices = [nvml_device(i, g, gpu_name, 1650000000, mem, switch_links(split, switches, version)) for i, g in enumerate(gpus)]
    for i, instances in (mig or {}).items():
        devices[i]["mig_enabled"] = True
        devices[i]["mig_devices"] = [
            {"index": k, "uuid": f"MIG-{0x51a0 + i:08x}-{k:04x}-5{k:03x}-8000-{0x1650000000 + 16 * i + k:012x}",
             "name": f"{gpu_name} MIG {profile}", "memory_bytes": mbytes, "gpu_instance_id": gi, "compute_instance_id": 0}
            for k, (profile, mbytes, gi) in enumerate(instances)]
    c.file("/accel/nvml.json", json.dumps({"driver_version": "570.124.06", "devices": devices}, indent=1))
    nvidia_proc(c, devices)
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
# {name} ({kind})

A capture generated by `scripts/make_captures.py`; no file here was read from a real machine.
{kind_note}Facts and their public sources:

{facts}

PCIe layout: each GPU sits on its own root port behind a PCIe switch; its ConnectX-7 NIC sits one
switch further down, so GPU↔own NIC is `PXB`, GPU↔other NICs on the socket `NODE`, across sockets
`SYS` — as in the published `nvidia-smi topo -m` of a DGX H100 in vllm-project/vllm#13855. Bus
numbers follow that DGX layout. NVLink is recorded as NVML would report it (`/accel/nvml.json`):
every GPU's links go to the NVSwitch chips, so every GPU pair is `NV18`.

Licence: generated data, Apache-2.0 like the rest of the repository.
"""


README_MIG = """
# DGX H100 with MIG (synthetic, test-only)

A synthetic capture generated by `scripts/make_captures.py`; no file here was read from a real
machine. It is `dgx-h100` (same PCI tree, NICs and NVSwitch links; see that README for their
sources) with MIG mode enabled on two GPUs, recorded as NVML reports MIG devices in
`/accel/nvml.json` (`mig_enabled`, `mig_devices`: slot index, `MIG-` UUID, device name, memory,
GPU and compute instance ids):

- GPU0 (`0000:18:00.0`) split into 7x `1g.10gb`, GPU1 (`0000:2a:00.0`) into 2x `3g.40gb`; the
  other six GPUs have MIG disabled. The H100 profiles and their instance counts (1g.10gb: 1/8 of
  memory, 7 instances; 3g.40gb: 4/8 of memory, 2 instances) are from NVIDIA's MIG user guide,
  https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html
- Memory per MIG device (9.75 GiB for 1g.10gb, 39.50 GiB for 3g.40gb), the GPU instance profile
  ids and "P2P: No" are as `nvidia-smi mig -lgip` prints them on an H100 80GB HBM3 (published in
  https://jbarrow.ai/field_notes/nvidia-mig/). MIG devices have no GPU-to-GPU P2P (NVLink or
  PCIe): MIG user guide, "Application Considerations".
- The MIG device name `NVIDIA H100 80GB HBM3 MIG 1g.10gb` follows `nvidia-smi -L`
  (`MIG 1g.10gb Device 0: (UUID: MIG-...)`); UUIDs and GPU instance ids are made up.

Not embedded in the binary (it would add a sample to every listing); read by
`crates/discover/tests/samples.rs` only. Licence: generated data, Apache-2.0 like the rest of
the repository.
"""


def switch_group(c, hb, numa, endpoints):
    """One PCIe switch under root port `hb:01.0`; endpoints: (vendor, device, class, driver, nic_name)."""
    rp, up = f"0000:{hb:02x}:01.0", f"0000:{hb+1:02x}:00.0"
    out = []
    for k, (vendor, device, cls, driver, nic) in enumerate(endpoints):
        down, dev = f"0000:{hb+2:02x}:{k:02x}.0", f"0000:{hb+3+k:02x}:00.0"
        c.chain([rp, up, down, dev], numa)
        if nic:
            c.ib_nic([rp, up, down, dev], nic, numa)
        else:
            out.append((dev, c.pci([rp, up, down, dev], vendor, device, cls, numa, driver=driver)))
    return out


def tpu_v6e():
    c = Capture("Google Compute Engine", "Google", "t1v-n-6e8")
    c.numa(["0-89", "90-179"], 720)
    for i in range(8):
        numa = 0 if i < 4 else 1
        hb = 0x00 + i * 0x10 + (0x80 if numa else 0)
        rp, chip = f"0000:{hb:02x}:04.0", f"0000:{hb + 1:02x}:00.0"
        c.bridge([rp], numa)
        sys = c.pci([rp, chip], 0x1AE0, 0x006F, 0x120000, numa, driver="vfio-pci", speed="16.0 GT/s PCIe")
        # The chip's VFIO group is its IOMMU group (/dev/vfio/<group>), linked both ways as the
        # kernel does; in PCI order here.
        c.link(f"{sys}/iommu_group", "../" * 4 + f"kernel/iommu_groups/{i}")
        c.link(f"/sys/kernel/iommu_groups/{i}/devices/{chip}", "../../../.." + sys[len("/sys"):])
        c.file(f"/dev/vfio/{i}", "")
    c.file("/accel/gce/zone", "projects/123456789012/zones/us-east5-b")
    c.file("/accel/gce/tpu-env", "\n".join([
        "ACCELERATOR_TYPE: 'v6e-8'", "CHIPS_PER_HOST_BOUNDS: '2,4,1'", "HOST_BOUNDS: '1,1,1'",
        "NODE_ID: 'demo-v6e-8'", "TOPOLOGY: '2x4'", "TPU_PROCESS_BOUNDS: '1,1,1'", "TYPE: 'V6E'",
        "WORKER_ID: '0'", "WRAP: 'false,false,false'", "ZONE: 'us-east5-b'"]))
    c.write("tpu-v6e", """
# TPU v6e-8 host (synthetic)

Generated by `scripts/make_captures.py`. One Cloud TPU v6e (Trillium) VM with 8 chips in a 2x4
topology (`v6e-8`, a single host):

- 8 chips, 32 GB HBM each, 2D ICI links to each neighbour:
  https://cloud.google.com/tpu/docs/v6e (v6e-8: 8 chips, topology 2x4, one host).
- PCI vendor 0x1ae0, device 0x006f for v6e and `/dev/vfio/<n>` device nodes: Google's tpu-info
  (AI-Hypercomputer/cloud-accelerator-diagnostics, `tpu_info/device.py`).
- `tpu-env` metadata attribute in the shape of the real v4 one in shared fixtures
  (`KEY: 'value'` lines: ACCELERATOR_TYPE, TOPOLOGY, CHIPS_PER_HOST_BOUNDS, WORKER_ID, NODE_ID,
  ZONE), recorded under `/accel/gce/` as `accel capture` writes it; values here are invented.

ICI links are derived from chip coordinates (x fastest over CHIPS_PER_HOST_BOUNDS 2,4,1).
Licence: generated data, Apache-2.0.
""")


def trn2():
    # No DMI product name: a synthetic sample claims no cloud instance type.
    c = Capture(None, "Amazon EC2", "trn2")
    c.numa(["0-47,96-143", "48-95,144-191"], 1024)
    for g in range(8):
        numa = 0 if g < 4 else 1
        hb = 0x10 + g * 0x10
        devs = [(0x1D0F, 0x7364, 0x088000, "neuron", None), (0x1D0F, 0x7364, 0x088000, "neuron", None),
                (0x1D0F, 0xEFA3, 0x020000, "efa", f"rdmap{hb + 5}s0"), (0x1D0F, 0xEFA3, 0x020000, "efa", f"rdmap{hb + 6}s0")]
        rp, up = f"0000:{hb:02x}:01.0", f"0000:{hb+1:02x}:00.0"
        for k, (vendor, device, cls, driver, nic) in enumerate(devs):
            down, dev = f"0000:{hb+2:02x}:{k:02x}.0", f"0000:{hb+3+k:02x}:00.0"
            c.chain([rp, up, down, dev], numa)
            if nic:
                sys = c.pci([rp, up, down, dev], vendor, device, cls, numa, driver=driver)
                c.link(f"/sys/class/infiniband/{nic}", f"../../devices{sys[len('/sys/devices'):]}/infiniband/{nic}")
                c.file(f"{sys}/infiniband/{nic}/ports/1/rate", "200 Gb/sec (4X HDR)")
            else:
                c.pci([rp, up, down, dev], vendor, device, cls, numa, driver=driver)
    for i in range(16):
        r, col = divmod(i, 4)
        peers = sorted({((r + 1) % 4) * 4 + col, ((r + 3) % 4) * 4 + col, r * 4 + (col + 1) % 4, r * 4 + (col + 3) % 4})
        d = f"/sys/devices/virtual/neuron_device/neuron{i}"
        c.file(f"{d}/core_count", "8")
        c.file(f"{d}/connected_devices", ", ".join(map(str, peers)))
        # What the driver writes for a Trn2 device (aws-neuron-driver 2.24.7: neuron_sysfs_metrics.c
        # nsysfsmetric_get_neuron_architecture, "ND" + v3/neuron_dhal_v3.c's suffixes); the
        # device's id N is the name neuron<N>, which sysfs links to no PCI function.
        c.file(f"{d}/info/architecture/arch_type", "NDv3")
        c.file(f"{d}/info/architecture/device_name", "Trainium2")
        c.file(f"{d}/info/architecture/instance_type", "Trn2")
    c.file("/accel/imds/availability-zone", "us-east-2b")
    c.write("trn2", """
# Trainium2 host with 16 devices (synthetic)

Generated by `scripts/make_captures.py`, after the published trn2.48xlarge specification; it is
no real instance and claims none (no DMI product name):

- 16 Trainium2 devices (PCI 1d0f:7364, pci.ids), 8 NeuronCores and 96 GiB each, joined by
  NeuronLink in a 4x4 2D torus (each device has 4 neighbours), 16 EFA v3 interfaces:
  https://aws.amazon.com/ec2/instance-types/trn2/ and the Neuron docs
  (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/arch/neuron-hardware/trn2-arch.html).
- Neuron sysfs layout (`neuron<N>/core_count`, `connected_devices`,
  `info/architecture/{arch_type,device_name,instance_type}`): the Neuron Sysfs User Guide
  (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/tools/neuron-sys-tools/neuron-sysfs-user-guide.html);
  the architecture values as aws-neuron-driver 2.24.7 writes them for Trn2 (`NDv3`, `Trainium2`,
  `Trn2`). Device ids N are the `neuron<N>` names, in PCI order here; the driver links no
  `neuron<N>` to its PCI function, so discovery pairs them in PCI order and says so.
- PCIe grouping (two devices and two EFA per switch) is assumed, not published.
- The availability zone is recorded as IMDS would return it (`/accel/imds/availability-zone`).

Licence: generated data, Apache-2.0.
""")


def gaudi3(name="gaudi3", device=0x1060, dtype="GAUDI3", modules=tuple(range(8)), readme=None):
    c = Capture("PowerEdge XE9680", "Dell Inc.", name)
    c.numa(["0-63,128-191", "64-127,192-255"], 1024)
    n = 0
    for g in range(4):
        numa = 0 if g < 2 else 1
        hb = 0x10 + g * 0x20 + (0x40 if numa else 0)
        eps = [(0x1DA3, device, 0x120000, "habanalabs", None), (0x1DA3, device, 0x120000, "habanalabs", None)]
        if g in (0, 2):
            eps.append((0, 0, 0, None, f"mlx5_{g // 2}"))
        for bdf, sys in switch_group(c, hb, numa, eps):
            acc = f"{sys}/accel/accel{n}"
            c.link(f"/sys/class/accel/accel{n}", "../../devices" + acc[len("/sys/devices"):])
            c.link(f"{acc}/device", "../../../" + bdf)
            c.file(f"{sys}/device_type", dtype)
            c.file(f"{sys}/module_id", str(modules[n]))
            c.file(f"{sys}/pci_addr", bdf)
            n += 1
    c.write(name, readme or """
# 8× Gaudi 3 server (synthetic)

Generated by `scripts/make_captures.py`:

- 8 Intel Gaudi 3 OAM accelerators (PCI 1da3:1060, habanalabs driver), 128 GB HBM2e each, 24
  integrated 200 GbE RoCE ports of which 21 form the all-to-all scale-up inside the server
  (3 per peer): https://www.intel.com/content/www/us/en/products/details/processors/ai-accelerators/gaudi.html
  and the Gaudi 3 white paper.
- habanalabs sysfs (`/sys/class/accel/accel<N>/device/{device_type,module_id,pci_addr}`):
  Documentation/ABI/testing/sysfs-driver-habanalabs in Linux, and the patch "accel/habanalabs:
  expose module id through sysfs" (2023).
- PCIe grouping (two Gaudi per switch, two ConnectX-7 front-end NICs) is assumed.

Licence: generated data, Apache-2.0.
""")


# OAM slot (module id) of each Gaudi in PCI bus order: the order HL-SMI's `index` follows differs
# from `module_id`, the number HABANA_VISIBLE_MODULES takes.
GAUDI2_MODULES = (3, 1, 0, 2, 7, 5, 4, 6)
README_GAUDI2 = """
# 8× Gaudi 2 server whose module ids differ from PCI order (synthetic, test-only)

Generated by `scripts/make_captures.py` with the layout of `gaudi3`:

- 8 Intel Gaudi 2 (PCI 1da3:1020, pci.ids; habanalabs driver), 96 GB HBM2e and 21 scale-up RoCE
  ports each: https://www.intel.com/content/www/us/en/products/details/processors/ai-accelerators/gaudi.html
- `module_id` is the OAM slot, which need not follow PCI bus order; HABANA_VISIBLE_MODULES takes
  module ids (Intel Gaudi docs, "Multiple Workloads on a Single Docker" and `hl-smi -Q
  index,module_id,bus_id`: https://docs.habana.ai/en/latest/Management_and_Monitoring/Embedded_System_Tools_Guide/System_Management_Interface_Tool.html).
  The mapping here (3,1,0,2,7,5,4,6 in bus order) is made up to exercise that rule.
- habanalabs sysfs (`/sys/class/accel/accel<N>/device/{device_type,module_id,pci_addr}`): as in
  `gaudi3`.

Licence: generated data, Apache-2.0.
"""


def mixed():
    c = Capture("SYS-421GE-TNRT", "Supermicro", "mixed")
    c.numa(["0-31", "32-63"], 512)
    nv = switch_group(c, 0x10, 0, [(0x10DE, 0x26B9, 0x030200, "nvidia", None), (0x10DE, 0x26B9, 0x030200, "nvidia", None),
                                   (0, 0, 0, None, "mlx5_0")])
    amd = switch_group(c, 0x80, 1, [(0x1002, 0x740F, 0x038000, "amdgpu", None), (0x1002, 0x740F, 0x038000, "amdgpu", None),
                                    (0, 0, 0, None, "mlx5_1")])
    devices = [nvml_device(i, bdf, "NVIDIA L40S", 0x1655000000, 48305799168) for i, (bdf, _) in enumerate(nv)]
    c.file("/accel/nvml.json", json.dumps({"driver_version": "570.124.06", "devices": devices}, indent=1))
    nvidia_proc(c, devices)
    kfd_cpu(c, 0, 32)
    kfd_cpu(c, 1, 32)
    for i, (bdf, sys) in enumerate(amd):
        c.file(f"{sys}/mem_info_vram_total", str(68702699520))
        kfd_gpu(c, 2 + i, bdf, 0x740F, 0x51A2B3C4D5E6F708, 0x7E5D000000000000 + i, 1, [3 - i], 50000, 128 + i,
                simd=416)
    c.write("nvidia-amd-mixed", """
# Two vendors on one node (synthetic)

Generated by `scripts/make_captures.py`: two NVIDIA L40S (10de:26b9, 48 GB GDDR6, no NVLink:
https://www.nvidia.com/en-us/data-center/l40s/) behind one PCIe switch on socket 0, and two AMD
Instinct MI210 (1002:740f, 64 GB HBM2e, https://www.amd.com/en/products/accelerators/instinct/mi200/mi210.html)
joined by an Infinity Fabric (xGMI) bridge behind a switch on socket 1, each pair with one
ConnectX-7. The KFD files follow the real MI210 capture (`mi210-2hive`). Such mixed nodes are
unusual but legal; the point is that both plugins report together and indices count per vendor.
Licence: generated data, Apache-2.0.
""")

def kfd_capture(tarball, hostname, strip):
    """A capture holding only a KFD topology tree, from a tarball of it (the first `strip` path
    components of each member are dropped)."""
    c = Capture("", "", hostname)
    c.files.clear()
    with tarfile.open(tarball) as t:
        for m in sorted(t.getmembers(), key=lambda m: m.name):
            if m.isfile():
                rel = m.name.split("/", strip)[strip]
                c.file("/sys/class/kfd/kfd/topology/" + rel, t.extractfile(m).read().decode())
    return c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kfd-mi210", help="topo-mi210-xgmi-pcie.tar.gz (ROCm/k8s-device-plugin testdata)")
    ap.add_argument("--kfd-mi300-cpx", help="topo-mi300-cpx.tar.gz (ROCm/k8s-device-plugin testdata)")
    args = ap.parse_args()
    hgx("dgx-h100", "DGXH100", 0x2330, "NVIDIA H100 80GB HBM3", 85520809984, 0x22A3, [5, 4, 4, 5], 4,
        storage_nics=True, readme=README_HGX.format(name="DGX H100", kind="derived", kind_note="""It is `derived`:
every fact below is traced to a public artifact of a DGX H100 in `provenance.toml` and checked by
`crates/cli/tests/provenance.rs`; the PCI addresses, UUIDs, serials and the driver version are
placeholders no check reads.
""", facts="""
- 8× H100 SXM5 80GB (10de:2330, pci.ids), 18 NVLink 4 links each, 900 GB/s:
  https://www.nvidia.com/en-us/data-center/dgx-h100/ and the DGX H100 user guide
  (https://docs.nvidia.com/dgx/dgxh100-user-guide/introduction-to-dgxh100.html): 4 NVSwitch chips,
  2× Xeon Platinum 8480C (56 cores each), 8× ConnectX-7 single-port 400 Gb/s for the compute fabric.
- NVSwitch (10de:22a3, class 0x0680): pci.ids; links split 5/4/4/5 over the 4 chips (DGX H100
  system topology diagram in the user guide).
- CPU affinity 0-55,112-167 and 56-111,168-223: vllm-project/vllm#13855.
- The listing's GPU rows are transcribed in `nvidia-smi-topo-m.txt`; provenance.toml traces them
  and `crates/cli/tests/provenance.rs` compares `accel topo --json` with them (GPU block, CPU and
  NUMA affinity, every NIC column). It shows 12 NICs: the 8 compute ports (single-port
  ConnectX-7, paired with GPU0-7 as the user guide's Network Modules table pairs mlx5_0, 3, 4,
  5, 6, 9, 10, 11) and the two dual-port ConnectX-7 for storage and in-band management
  (mlx5_1/2 on socket 0, mlx5_7/8 on socket 1), as the DGX BasePOD reference architecture
  lists them."""))
    # Test-only: the same DGX H100 with MIG mode on GPU0 (7x 1g.10gb) and GPU1 (2x 3g.40gb).
    gib = 1 << 30
    hgx("dgx-h100-mig", "DGXH100", 0x2330, "NVIDIA H100 80GB HBM3", 85520809984, 0x22A3, [5, 4, 4, 5], 4,
        README_MIG, storage_nics=True, mig={0: [("1g.10gb", int(9.75 * gib), 7 + k) for k in range(7)],
                         1: [("3g.40gb", int(39.5 * gib), 1 + k) for k in range(2)]})
    hgx("hgx-b200", "HGX B200", 0x2901, "NVIDIA B200", 191514411008, 0x2901 - 0x2901 + 0x2A3F if False else 0x22A3,
        [9, 9], 5, README_HGX.format(name="HGX B200", kind="synthetic", kind_note="", facts="""
- 8× B200 (10de:2901, pci.ids), 18 NVLink 5 links each, 1.8 TB/s; 2 NVLink switch chips on the
  baseboard: https://www.nvidia.com/en-us/data-center/hgx/ and the DGX B200 user guide
  (https://docs.nvidia.com/dgx/dgxb200-user-guide/introduction-to-dgxb200.html).
- `NV18` between every GPU pair: published `nvidia-smi topo -m` of B200 nodes
  (vllm-project/vllm#31594, sgl-project/sglang#9064).
- The NVSwitch PCI id is written as 10de:22a3 for want of a public B200-era id; the PCIe layout is
  assumed to be the DGX H100 one."""))
    # GB200 NVL72 compute tray: 2 Grace + 4 B200 (GB200 superchips x2), NVLink to the switch trays.
    # No DMI product name: a synthetic sample claims no cloud instance type.
    c = Capture(None, "Amazon EC2", "gb200-tray")
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
    nvidia_proc(c, devices)
    # Recorded NVML readings for the agent (real values, provenance in the README below).
    with open(os.path.join(HOSTS, "gb200-nvl72-tray", "nvml-metrics.json")) as f:
        c.file("/accel/nvml-metrics.json", f.read())
    c.write("gb200-nvl72-tray", """
# GB200 NVL72 compute tray (synthetic)

Generated by `scripts/make_captures.py`. One compute tray of a GB200 NVL72 rack: two GB200
superchips, i.e. 2 Grace CPUs (72 cores each) and 4 B200-class GPUs (10de:2941), 4 ConnectX-7.
It is no real machine or cloud instance and claims none (no DMI product name). Sources:

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

## Recorded readings: `/accel/nvml-metrics.json` (from `nvml-metrics.json` beside this file)

The NVIDIA family's `metrics` replays them (`accel agent --sample gb200-nvl72-tray`); the
values are real readings from public sources, the devices they are placed on are this sample's
own (its PCI addresses and UUIDs).


- Device values (utilisation 0 %, FB memory used 2 MiB of 81559 MiB, power draw 72.02 W, GPU
  temperature 33 C, SM clock 345 MHz, memory clock 2619 MHz, volatile ECC 0/0) are those of a
  real, idle NVIDIA H100 80GB HBM3 (driver 545.23.08) in `nvidia-smi -a` as published in
  PrincetonUniversity/gpu_programming_intro (the "What is a GPU?" README, node della-j11g1,
  2024-02-23). They are an H100's, not a GB200's: no public GB200 `nvidia-smi -q` was found.
  The memory total is not a reading but the device's own size, so it is this sample's (its
  `/accel/nvml.json`: 186 GiB), as `accel topo` and the exports show it
  (`crates/agent/tests/readings.rs` checks that the readings agree with the model).
- NVLink data counters of links 0-7 (`nvidia-smi nvlink -i 0 -gt d`, KiB) are those of a real
  NVIDIA H800 (GPU-34bf77d1-...), from a public nvidia-smi tutorial that shows the counters idle
  and during LLaMA-13B training (source it cites: https://www.inte.net/news/270918.html). GPUs 0
  and 1 carry the training counters, GPUs 2 and 3 the idle ones. The tray's GPUs have 18 links
  (NV18), and all 18 are listed; only the 8 recorded ones carry counters.
- NVLink error counters and XIDs were not in those outputs and are absent (no series).
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
    nvidia_proc(c, devices)
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
    amd8("mi355x", "AS-8126GS-TNMR", 0x75A3, 309220868096, 76800, """
# 8× MI355X (synthetic)

Generated by `scripts/make_captures.py`, same layout as `mi300x`: 8× MI355X (1002:75a3,
288 GB HBM3E, gfx950; https://rocm.docs.amd.com/en/latest/reference/gpu-arch-specs.html,
https://www.amd.com/en/products/accelerators/instinct/mi350/mi355x.html: 7 xGMI links of
153.6 GB/s, 1075.2 GB/s per GPU) in one xGMI hive. Licence: generated data, Apache-2.0.
""")
    tpu_v6e()
    trn2()
    gaudi3()
    gaudi3("gaudi2-modules", 0x1020, "GAUDI2", GAUDI2_MODULES, README_GAUDI2)
    mixed()
    if args.kfd_mi210:
        c = kfd_capture(args.kfd_mi210, "mi210", strip=1)
        c.write("mi210-2hive", """
# 8× MI210 in two xGMI hives (real KFD capture)

The KFD topology (`/sys/class/kfd/kfd/topology/nodes`) of a real machine with 2 CPU sockets and
8 MI210 (1002:740f) in two xGMI hives of four, copied verbatim from ROCm/k8s-device-plugin
`testdata/topo-mi210-xgmi-pcie.tar.gz` at commit ed7646843003e8f0b6a0630346f01bb4d1ecff2e
(Apache-2.0, see LICENSE-Apache-2.0 beside this file). Converted to a bundle by
`scripts/make_captures.py --kfd-mi210 <tarball>`. It holds no PCI tree: PCI addresses come from
KFD `location_id`, NUMA nodes from the io_link to the CPU node.
""")
    if args.kfd_mi300_cpx:
        c = kfd_capture(args.kfd_mi300_cpx, "mi300x-cpx", strip=2)
        c.write("mi300x-cpx", """
# 8× MI300X in CPX mode (real KFD capture)

The KFD topology of a real machine with 2 CPU sockets and 8 MI300X (1002:74a1) in CPX compute
partition mode: each GPU appears as 8 KFD nodes sharing `unique_id` (one GPU shows only 7, so
there are 63 GPU nodes, 2-64), with the
partition number in the low bits of `location_id`; xGMI io_links inside a package have weight 13,
between packages weight 41 and bandwidth 0. Copied verbatim from ROCm/k8s-device-plugin
`testdata/topo-mi300-cpx.tar.gz` at commit ed7646843003e8f0b6a0630346f01bb4d1ecff2e
(Apache-2.0, see LICENSE-Apache-2.0 beside this file); converted by
`scripts/make_captures.py --kfd-mi300-cpx <tarball>`. Too large to embed in the binary (1.1 MB
as a bundle), it is kept gzipped as a test-only capture (crates/discover/tests/samples.rs).
""")
        bundle = os.path.join(HOSTS, "mi300x-cpx", "capture.bundle")
        subprocess.run(["gzip", "-9nf", bundle], check=True)


if __name__ == "__main__":
    main()
