//! Writes what an NCCL topology file says as the sysfs files accel's host layer reads (a
//! [`MemTree`]): NUMA nodes with their CPUs, the PCI tree with ids, class, link and locality,
//! NICs; and, in the generic OS-device file ([`accel_discover::osdevs`]), each accelerator's
//! runtime record and link elements, for the families to read. Nothing is invented: what the
//! file does not say (a vendor, a class, a driver) is not written, and the one thing the layout
//! needs that NCCL does not record, a host bridge for each PCI tree hanging off a CPU, is named
//! in a warning where it had to be made up.

use std::collections::{BTreeMap, BTreeSet};

use accel_discover::fs::MemTree;
use accel_discover::osdevs::{valid_name, FunctionOsDevs, OsDev, OsDevFile, ToolLink, OSDEVS_FORMAT, OSDEVS_PATH};
use accel_model::{CpuSet, PciAddr};

use crate::xml::{Pci, Topology};

/// What the import wrote, for its one-line report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub numa_nodes: usize,
    pub pci_functions: usize,
    pub accelerators: usize,
    pub nics: usize,
    pub links: usize,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} NUMA nodes, {} PCI functions, {} accelerators, {} NICs, {} link elements",
            self.numa_nodes, self.pci_functions, self.accelerators, self.nics, self.links
        )
    }
}

/// Builds the tree. Warnings name what was left out or made up.
pub fn build(topo: &Topology, warnings: &mut Vec<String>) -> (MemTree, Summary) {
    let mut t = MemTree::new();
    let mut summary = Summary::default();

    // NUMA nodes: one per CPU element with a node number; CPUs from its affinity.
    let mut nodes: BTreeMap<u32, CpuSet> = BTreeMap::new();
    let mut no_affinity = Vec::new();
    for cpu in &topo.cpus {
        let Some(n) = cpu.numa else { continue };
        match &cpu.affinity {
            Some(set) => {
                let merged: Vec<u32> = nodes.get(&n).map(|s| s.cpus().to_vec()).unwrap_or_default();
                nodes.insert(n, CpuSet::new(merged.into_iter().chain(set.cpus().iter().copied()).collect()));
            }
            None => {
                nodes.entry(n).or_default();
                no_affinity.push(n);
            }
        }
    }
    if !no_affinity.is_empty() {
        warnings.push(format!(
            "NUMA nodes {no_affinity:?} have no affinity in the file: their CPUs are unknown (written without a cpulist)"
        ));
    }
    let online = CpuSet::new(nodes.values().flat_map(|s| s.cpus().iter().copied()).collect());
    if !online.is_empty() {
        t.add_file("/sys/devices/system/cpu/online", format!("{online}\n"));
    }
    if !nodes.is_empty() {
        let ids = CpuSet::new(nodes.keys().copied().collect());
        t.add_file("/sys/devices/system/node/online", format!("{ids}\n"));
    }
    for (id, cpus) in &nodes {
        let dir = format!("/sys/devices/system/node/node{id}");
        if no_affinity.contains(id) {
            t.add_dir(dir);
        } else {
            t.add_file(format!("{dir}/cpulist"), format!("{cpus}\n"));
        }
    }
    summary.numa_nodes = nodes.len();

    // One host bridge per PCI tree hanging off a CPU: its top element's root bus, unless another
    // tree took that name (fake switches `ffff:ff:0N.0` all sit on bus ff), then the next free bus
    // number below it in the same domain.
    let mut bridges: BTreeMap<PciAddr, String> = BTreeMap::new();
    let mut taken: BTreeSet<(u32, u8)> = BTreeSet::new();
    let mut made_up = Vec::new();
    for p in topo.pci.iter().filter(|p| p.parents.is_empty()) {
        let mut bus = p.addr.bus;
        while taken.contains(&(p.addr.domain, bus)) && bus > 0 {
            bus -= 1;
        }
        if bus != p.addr.bus {
            made_up.push(format!("{} -> pci{:04x}:{bus:02x}", p.addr, p.addr.domain));
        }
        taken.insert((p.addr.domain, bus));
        bridges.insert(p.addr, format!("pci{:04x}:{bus:02x}", p.addr.domain));
    }
    if !made_up.is_empty() {
        warnings.push(format!(
            "PCI trees share a root bus in the file (NCCL hangs each straight off its CPU and records no host \
             bridge): each got its own host bridge ({})",
            made_up.join(", ")
        ));
    }

    let mut functions = Vec::new();
    let mut links = Vec::new();
    let mut names = BTreeSet::new();
    for p in &topo.pci {
        let top = p.parents.first().copied().unwrap_or(p.addr);
        let mut dir = format!("/sys/devices/{}", bridges[&top]);
        for a in p.parents.iter().chain(std::iter::once(&p.addr)) {
            dir.push('/');
            dir.push_str(&a.to_string());
        }
        let cpu = &topo.cpus[p.cpu];
        pci_files(&mut t, &dir, p, cpu.numa, cpu.affinity.as_ref());
        t.add_link(format!("/sys/bus/pci/devices/{}", p.addr), format!("../../..{}", dir.trim_start_matches("/sys")));
        summary.pci_functions += 1;

        let mut osdevs = Vec::new();
        for (i, gpu) in p.gpus.iter().enumerate() {
            summary.accelerators += 1;
            let index = gpu.get("dev").cloned().unwrap_or_else(|| i.to_string());
            osdevs.push(OsDev {
                name: format!("gpu{index}"),
                types: vec!["gpu".into()],
                subtype: Some("NCCL".into()),
                infos: gpu.clone(),
            });
        }
        for net in &p.nets {
            let Some(name) = net.get("name").filter(|n| valid_name(n)) else {
                warnings.push(format!("line {}: a <net> without a usable name; left out", p.line));
                continue;
            };
            osdevs.push(OsDev {
                name: name.clone(),
                types: vec!["network".into()],
                subtype: Some("NCCL".into()),
                infos: net.clone(),
            });
            if names.insert(name.clone()) {
                summary.nics += 1;
                nic_files(&mut t, &dir, p.addr, name, net);
            }
        }
        for (element, a) in &p.links {
            summary.links += 1;
            let mut rest = a.clone();
            let target = rest.remove("target");
            let count = rest.remove("count").and_then(|c| c.trim().parse::<u32>().ok());
            let target_class = rest.remove("tclass");
            links.push(ToolLink {
                element: element.clone(),
                pci: p.addr.to_string(),
                target,
                count,
                target_class,
                attributes: rest,
            });
        }
        if !osdevs.is_empty() {
            functions.push(FunctionOsDevs { pci: p.addr.to_string(), infos: BTreeMap::new(), link_gbps: None, osdevs });
        }
    }
    // What the file cannot tell is said, never guessed: functions it names without ids.
    let unnamed: Vec<String> = topo
        .pci
        .iter()
        .filter(|p| !p.has_children && (p.vendor.is_none() || p.device.is_none()))
        .map(|p| p.addr.to_string())
        .collect();
    if !unnamed.is_empty() {
        let shown: Vec<&str> = unnamed.iter().take(4).map(String::as_str).collect();
        let more = if unnamed.len() > 4 { format!(" and {} more", unnamed.len() - 4) } else { String::new() };
        warnings.push(format!(
            "{} PCI functions have no vendor or device id in the file ({}{more}): their vendor and SKU are unknown, \
             not guessed",
            unnamed.len(),
            shown.join(", ")
        ));
    }
    functions.sort_by(|a, b| a.pci.cmp(&b.pci));
    let mut machine = BTreeMap::new();
    for (i, cpu) in topo.cpus.iter().enumerate() {
        for (k, v) in &cpu.attributes {
            machine.insert(format!("cpu{i}.{k}"), v.clone());
        }
    }
    let file = OsDevFile {
        format: OSDEVS_FORMAT.into(),
        source: format!("NCCL topology XML {}", crate::xml::clean(&topo.version, 20)),
        machine,
        functions,
        links,
        ..OsDevFile::default()
    };
    let mut json = serde_json::to_vec_pretty(&file).unwrap_or_default();
    json.push(b'\n');
    t.add_file(OSDEVS_PATH, json);
    (t, summary)
}

/// A function's ids, class, link, locality. The link is written as its *maximum*: NCCL reads
/// `max_link_speed`/`max_link_width` (and the upstream port's, keeping the lower).
fn pci_files(t: &mut MemTree, dir: &str, p: &Pci, numa: Option<u32>, affinity: Option<&CpuSet>) {
    if let Some(v) = p.vendor {
        t.add_file(format!("{dir}/vendor"), format!("0x{v:04x}\n"));
    }
    if let Some(d) = p.device {
        t.add_file(format!("{dir}/device"), format!("0x{d:04x}\n"));
    }
    if let Some((sv, sd)) = p.subsystem {
        t.add_file(format!("{dir}/subsystem_vendor"), format!("0x{sv:04x}\n"));
        t.add_file(format!("{dir}/subsystem_device"), format!("0x{sd:04x}\n"));
    }
    if let Some(c) = p.class {
        t.add_file(format!("{dir}/class"), format!("0x{c:06x}\n"));
    } else if p.has_children {
        // A function holding others is a bridge whatever the file says; the host layer sees it.
        t.add_dir(dir.to_owned());
    }
    if let Some(gts) = p.link_gts {
        t.add_file(format!("{dir}/max_link_speed"), format!("{gts} GT/s PCIe\n"));
    }
    if let Some(w) = p.link_width {
        t.add_file(format!("{dir}/max_link_width"), format!("{w}\n"));
    }
    t.add_file(format!("{dir}/numa_node"), format!("{}\n", numa.map_or(-1, i64::from)));
    if let Some(cpus) = affinity.filter(|c| !c.is_empty()) {
        t.add_file(format!("{dir}/local_cpulist"), format!("{cpus}\n"));
    }
}

/// A NIC: an RDMA device where NCCL recorded a port GUID (its verbs devices: InfiniBand, RoCE,
/// EFA), with the port's rate; else a netdev (its socket transport) with its speed.
fn nic_files(t: &mut MemTree, dir: &str, addr: PciAddr, name: &str, net: &BTreeMap<String, String>) {
    let guid = net.get("guid").map(|g| g.trim().trim_start_matches("0x").trim_start_matches('0').to_owned());
    let speed = net.get("speed").and_then(|s| s.trim().parse::<u64>().ok()).filter(|s| *s > 0);
    let rdma = guid.as_deref().is_some_and(|g| !g.is_empty());
    let class = if rdma { "infiniband" } else { "net" };
    let dev_dir = format!("{dir}/{class}/{name}");
    t.add_dir(dev_dir.clone());
    t.add_link(format!("/sys/class/{class}/{name}"), format!("../..{}", dev_dir.trim_start_matches("/sys")));
    t.add_link(format!("{dev_dir}/device"), format!("../../../{addr}"));
    if rdma {
        let port = net.get("port").and_then(|p| p.trim().parse::<u8>().ok()).filter(|p| *p > 0).unwrap_or(1);
        if let Some(g) = net.get("guid") {
            t.add_file(format!("{dev_dir}/node_guid"), format!("{}\n", g.trim()));
        }
        if let Some(mbps) = speed {
            // The kernel writes `400 Gb/sec (4X NDR)`; NCCL keeps the number only.
            t.add_file(format!("{dev_dir}/ports/{port}/rate"), format!("{} Gb/sec\n", mbps as f64 / 1000.0));
        }
    } else if let Some(mbps) = speed {
        t.add_file(format!("{dev_dir}/speed"), format!("{mbps}\n"));
    }
}
