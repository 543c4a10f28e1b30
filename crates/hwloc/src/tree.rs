//! Writes what an hwloc XML says as the sysfs and procfs files accel's host layer reads (a
//! [`MemTree`]): the PCI tree nested by bridge with ids, class and locality; NUMA nodes with
//! their CPUs, memory and distances; netdevs and RDMA devices under their PCI functions; DMI
//! strings and the hostname. Everything else the XML recorded about OS devices goes into the
//! generic [`accel_discover::osdevs`] file. Nothing is invented: a fact the XML lacks (a link's
//! lane width, a driver) is not written.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use accel_discover::fs::MemTree;
use accel_discover::osdevs::{
    valid_name, FunctionOsDevs, Matrix, MatrixObject, NumaRecord, OsDev, OsDevFile, OSDEVS_FORMAT, OSDEVS_PATH,
};
use accel_model::CpuSet;

use crate::xml::{Pci, Topology};

/// What the import wrote, for its one-line report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub cpus: usize,
    pub numa_nodes: usize,
    pub pci_functions: usize,
    pub netdevs: usize,
    pub rdma_devices: usize,
    pub osdevs: usize,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} CPUs, {} NUMA nodes, {} PCI functions, {} netdevs, {} RDMA devices, {} OS devices",
            self.cpus, self.numa_nodes, self.pci_functions, self.netdevs, self.rdma_devices, self.osdevs
        )
    }
}

/// hwloc's DMI infos and the `/sys/class/dmi/id` files hwloc read them from.
const DMI: &[(&str, &str)] = &[
    ("DMIProductName", "product_name"),
    ("DMIProductVersion", "product_version"),
    ("DMIBoardVendor", "board_vendor"),
    ("DMIBoardName", "board_name"),
    ("DMIBoardVersion", "board_version"),
    ("DMIBoardAssetTag", "board_asset_tag"),
    ("DMIChassisVendor", "chassis_vendor"),
    ("DMIChassisType", "chassis_type"),
    ("DMIChassisVersion", "chassis_version"),
    ("DMIChassisAssetTag", "chassis_asset_tag"),
    ("DMIBIOSVendor", "bios_vendor"),
    ("DMIBIOSVersion", "bios_version"),
    ("DMIBIOSDate", "bios_date"),
    ("DMISysVendor", "sys_vendor"),
];

/// Builds the tree. Warnings name what was left out.
pub fn build(topo: &Topology, warnings: &mut Vec<String>) -> (MemTree, Summary) {
    let mut t = MemTree::new();
    let mut summary = Summary::default();

    for (info, file) in DMI {
        if let Some(v) = topo.infos.get(*info) {
            t.add_file(format!("/sys/class/dmi/id/{file}"), format!("{v}\n"));
        }
    }
    if let Some(h) = topo.infos.get("HostName").filter(|h| !h.is_empty()) {
        t.add_file("/proc/sys/kernel/hostname", format!("{h}\n"));
    }

    // CPUs and NUMA nodes.
    let online = CpuSet::new(topo.pus.iter().copied().collect());
    summary.cpus = online.len();
    if !online.is_empty() {
        t.add_file("/sys/devices/system/cpu/online", format!("{online}\n"));
    }
    let own = node_cpus(topo, &online, warnings);
    summary.numa_nodes = topo.numa.len();
    if !topo.numa.is_empty() {
        let ids = CpuSet::new(topo.numa.keys().copied().collect());
        t.add_file("/sys/devices/system/node/online", format!("{ids}\n"));
    }
    let rows = distance_rows(topo, warnings);
    let mut total_kb = 0u64;
    for (id, node) in &topo.numa {
        let dir = format!("/sys/devices/system/node/node{id}");
        let cpus = own.get(id).cloned().unwrap_or_default();
        t.add_file(format!("{dir}/cpulist"), format!("{cpus}\n"));
        if let Some(bytes) = node.memory {
            let kb = bytes / 1024;
            total_kb = total_kb.saturating_add(kb);
            t.add_file(format!("{dir}/meminfo"), format!("Node {id} MemTotal:       {kb} kB\n"));
        }
        if let Some(row) = rows.get(id) {
            t.add_file(format!("{dir}/distance"), format!("{row}\n"));
        }
    }
    if total_kb > 0 {
        t.add_file("/proc/meminfo", format!("MemTotal:       {total_kb} kB\n"));
    }

    // The PCI tree.
    let cpu_nodes: BTreeSet<u32> = own.iter().filter(|(_, c)| !c.is_empty()).map(|(id, _)| *id).collect();
    let mut names = BTreeSet::new();
    let mut functions = Vec::new();
    let mut sorted: Vec<&Pci> = topo.pci.iter().collect();
    sorted.sort_by_key(|p| p.addr);
    for p in &topo.pci {
        let dir = pci_dir(p);
        t.add_file(format!("{dir}/vendor"), format!("0x{:04x}\n", p.vendor));
        t.add_file(format!("{dir}/device"), format!("0x{:04x}\n", p.device));
        if p.subsystem != (0, 0) {
            t.add_file(format!("{dir}/subsystem_vendor"), format!("0x{:04x}\n", p.subsystem.0));
            t.add_file(format!("{dir}/subsystem_device"), format!("0x{:04x}\n", p.subsystem.1));
        }
        t.add_file(format!("{dir}/class"), format!("0x{:04x}{:02x}\n", p.class, p.prog_if.unwrap_or(0)));
        if let Some(r) = p.revision {
            t.add_file(format!("{dir}/revision"), format!("0x{r:02x}\n"));
        }
        if let Some(cpus) = &p.local_cpus {
            t.add_file(format!("{dir}/local_cpulist"), format!("{cpus}\n"));
        }
        // The node the kernel would name: the one CPU-bearing node of the locality, else -1.
        let near: Vec<u32> = p
            .nodeset
            .as_ref()
            .map(|s| s.cpus().iter().copied().filter(|n| cpu_nodes.contains(n)).collect())
            .unwrap_or_default();
        let numa_node = match near.as_slice() {
            [only] => i64::from(*only),
            _ => -1,
        };
        t.add_file(format!("{dir}/numa_node"), format!("{numa_node}\n"));
        t.add_link(format!("/sys/bus/pci/devices/{}", p.addr), format!("../../../{}", under_sys(&dir)));
        summary.pci_functions += 1;

        for d in &p.osdevs {
            summary.osdevs += 1;
            if !d.is("network") && !d.is("openfabrics") {
                continue;
            }
            if !valid_name(&d.name) {
                warnings.push(format!("{}: OS device name {:?} is not a usable file name; left out", p.addr, d.name));
                continue;
            }
            let class = if d.is("openfabrics") { "infiniband" } else { "net" };
            if !names.insert((class, d.name.clone())) {
                warnings.push(format!("{}: {class} device {} named twice; the second left out", p.addr, d.name));
                continue;
            }
            let dev_dir = format!("{dir}/{class}/{}", d.name);
            t.add_dir(dev_dir.clone());
            t.add_link(format!("/sys/class/{class}/{}", d.name), format!("../../{}", under_sys(&dev_dir)));
            t.add_link(format!("{dev_dir}/device"), format!("../../../{}", p.addr));
            if class == "net" {
                summary.netdevs += 1;
                if let Some(a) = d.infos.get("Address") {
                    t.add_file(format!("{dev_dir}/address"), format!("{a}\n"));
                }
            } else {
                summary.rdma_devices += 1;
                rdma_files(&mut t, &dev_dir, &d.infos);
            }
        }
    }
    for p in sorted {
        if p.infos.is_empty() && p.link_gbps.is_none() && p.osdevs.is_empty() {
            continue;
        }
        functions.push(FunctionOsDevs {
            pci: p.addr.to_string(),
            infos: p.infos.clone(),
            link_gbps: p.link_gbps,
            osdevs: p.osdevs.iter().map(osdev_record).collect(),
        });
    }
    let file = OsDevFile {
        format: OSDEVS_FORMAT.into(),
        source: format!("hwloc XML {}", crate::xml::clean(&topo.version, 20)),
        machine: topo.infos.clone(),
        functions,
        other: topo.other_osdevs.iter().map(osdev_record).collect(),
        matrices: topo.matrices.iter().map(matrix_record).collect(),
        links: Vec::new(),
        numa: topo
            .numa
            .iter()
            .filter(|(_, n)| n.subtype.is_some() || !n.infos.is_empty())
            .map(|(id, n)| NumaRecord { node: *id, subtype: n.subtype.clone(), infos: n.infos.clone() })
            .collect(),
    };
    summary.osdevs += file.other.len();
    let mut json = serde_json::to_vec_pretty(&file).unwrap_or_default();
    json.push(b'\n');
    t.add_file(OSDEVS_PATH, json);
    (t, summary)
}

/// A distance matrix as the generic file records it.
fn matrix_record(m: &crate::xml::Matrix) -> Matrix {
    Matrix {
        name: m.name.clone(),
        kind: m.kind,
        objects: m
            .objects
            .iter()
            .map(|o| MatrixObject {
                kind: o.kind.clone(),
                pci: o.pci.map(|a| a.to_string()),
                name: o.name.clone(),
                os_index: o.os_index,
            })
            .collect(),
        values: m.values.clone(),
    }
}

/// An OS device as the generic file records it.
fn osdev_record(d: &crate::xml::OsDevice) -> OsDev {
    OsDev {
        name: crate::xml::clean(&d.name, 256),
        types: d.types.iter().map(|s| (*s).to_owned()).collect(),
        subtype: d.subtype.clone(),
        infos: d.infos.clone(),
    }
}

/// `/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0`.
fn pci_dir(p: &Pci) -> String {
    let mut dir = format!("/sys/devices/{}", p.host_bridge);
    for a in p.parents.iter().chain(std::iter::once(&p.addr)) {
        let _ = write!(dir, "/{a}");
    }
    dir
}

/// A `/sys/...` path without its `/sys/`, for links made relative to a directory two or three
/// levels below `/sys`.
fn under_sys(path: &str) -> &str {
    path.strip_prefix("/sys/").unwrap_or(path)
}

/// The RDMA device's files from hwloc's infos: `NodeGUID`, `SysImageGUID`, and per port
/// `Port<N>State` (the number the kernel's `state` file starts with), `Port<N>LID`,
/// `Port<N>LMC`, `Port<N>LinkLayer`, `Port<N>GID<k>`.
fn rdma_files(t: &mut MemTree, dir: &str, infos: &BTreeMap<String, String>) {
    for (k, v) in infos {
        match k.as_str() {
            "NodeGUID" => t.add_file(format!("{dir}/node_guid"), format!("{v}\n")),
            "SysImageGUID" => t.add_file(format!("{dir}/sys_image_guid"), format!("{v}\n")),
            _ => {}
        }
        let Some(rest) = k.strip_prefix("Port") else { continue };
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        let Ok(port) = rest[..digits].parse::<u8>() else { continue };
        let port_dir = format!("{dir}/ports/{port}");
        match &rest[digits..] {
            "State" => {
                let name = match v.trim() {
                    "0" => "NOP",
                    "1" => "DOWN",
                    "2" => "INIT",
                    "3" => "ARMED",
                    "4" => "ACTIVE",
                    "5" => "ACTIVE_DEFER",
                    _ => continue,
                };
                t.add_file(format!("{port_dir}/state"), format!("{}: {name}\n", v.trim()));
            }
            "LID" => t.add_file(format!("{port_dir}/lid"), format!("{v}\n")),
            "LMC" => t.add_file(format!("{port_dir}/lid_mask_count"), format!("{v}\n")),
            "LinkLayer" => t.add_file(format!("{port_dir}/link_layer"), format!("{v}\n")),
            gid => {
                if let Some(index) = gid.strip_prefix("GID").and_then(|i| i.parse::<u8>().ok()) {
                    t.add_file(format!("{port_dir}/gids/{index}"), format!("{v}\n"));
                }
            }
        }
    }
}

/// Each NUMA node's own CPUs, as the kernel's `cpulist` gives them. hwloc gives every node the
/// cpuset of the object it is attached to, so a memory-only node shares its neighbour's: each
/// online CPU goes to the node with no subtype (`GPUMemory`, `HBM`... mark memory-only nodes)
/// and the smallest cpuset that holds it, the lowest id on a tie.
fn node_cpus(topo: &Topology, online: &CpuSet, warnings: &mut Vec<String>) -> BTreeMap<u32, CpuSet> {
    let mut order: Vec<(bool, usize, u32)> =
        topo.numa.iter().map(|(id, n)| (n.subtype.is_some(), n.locality.len(), *id)).collect();
    order.sort_unstable();
    let mut owner: BTreeMap<u32, u32> = BTreeMap::new();
    for (_, _, id) in &order {
        for &cpu in topo.numa[id].locality.cpus() {
            if online.cpus().binary_search(&cpu).is_ok() {
                owner.entry(cpu).or_insert(*id);
            }
        }
    }
    let mut out: BTreeMap<u32, Vec<u32>> = topo.numa.keys().map(|id| (*id, Vec::new())).collect();
    for (cpu, id) in &owner {
        out.entry(*id).or_default().push(*cpu);
    }
    let homeless = online.len() - owner.len();
    if homeless > 0 && !topo.numa.is_empty() {
        warnings.push(format!("{homeless} CPUs are in no NUMA node's cpuset"));
    }
    for (id, node) in &topo.numa {
        if node.subtype.is_none() && !node.locality.is_empty() && out[id].is_empty() {
            warnings.push(format!(
                "NUMA node {id} has no subtype but shares all its CPUs with a smaller or lower-numbered node; \
                 written as memory-only"
            ));
        }
    }
    out.into_iter().map(|(id, cpus)| (id, CpuSet::new(cpus))).collect()
}

/// Each node's `distance` line, in node id order, when the XML's matrix covers every node and
/// its values fit the kernel's format.
fn distance_rows(topo: &Topology, warnings: &mut Vec<String>) -> BTreeMap<u32, String> {
    let Some((ids, values)) = &topo.distances else { return BTreeMap::new() };
    let nodes: Vec<u32> = topo.numa.keys().copied().collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted != nodes {
        warnings.push("the NUMA distance matrix does not cover exactly the NUMA nodes; left out".into());
        return BTreeMap::new();
    }
    if values.iter().any(|&v| v > u64::from(u32::MAX)) {
        warnings.push("NUMA distances too large for the kernel's format; left out".into());
        return BTreeMap::new();
    }
    let n = ids.len();
    let pos: BTreeMap<u32, usize> = ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
    nodes
        .iter()
        .map(|a| {
            let row: Vec<String> = nodes.iter().map(|b| values[pos[a] * n + pos[b]].to_string()).collect();
            (*a, row.join(" "))
        })
        .collect()
}
