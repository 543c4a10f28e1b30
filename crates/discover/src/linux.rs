//! The host layer: CPUs and NUMA, the PCI tree from the sysfs symlink chain, NICs and DMI.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use accel_model::{
    CpuSet, HostInfo, Machine, Nic, NumaNode, PciAddr, PciClass, PciId, PciLink, PciNode, PciNodeKind, Warning,
};

use crate::Host;

/// Reads everything but accelerators: host identity, NUMA nodes, the PCI tree and NICs.
pub fn read_platform(host: &Host) -> Machine {
    let mut warnings = Vec::new();
    let info = read_host_info(host, &mut warnings);
    let mut machine = Machine::new(info);
    machine.numa_nodes = read_numa(host, &mut warnings);
    machine.pci = read_pci(host, &machine.numa_nodes, &mut warnings);
    machine.nics = read_nics(host, &machine.pci, &mut warnings);
    machine.warnings = warnings;
    machine
}

fn read_host_info(host: &Host, warnings: &mut Vec<Warning>) -> HostInfo {
    let dmi = |name: &str, warnings: &mut Vec<Warning>| {
        host.read_attr(&host.path(&format!("/sys/class/dmi/id/{name}")), "dmi", warnings).filter(|v| !v.is_empty())
    };
    HostInfo {
        hostname: host.read_attr(&host.path("/proc/sys/kernel/hostname"), "host", warnings).filter(|v| !v.is_empty()),
        product_name: dmi("product_name", warnings),
        sys_vendor: dmi("sys_vendor", warnings),
    }
}

/// The online CPUs where the kernel wrote no `/sys/devices/system/cpu/online` (before 2.6.26):
/// every `cpu<N>` directory whose `online` file does not say 0 (the boot CPU has none).
fn online_from_cpu_dirs(host: &Host, warnings: &mut Vec<Warning>) -> Option<CpuSet> {
    let dir = host.path("/sys/devices/system/cpu");
    let cpus: Vec<u32> = host
        .list_dir(&dir, "numa", warnings)
        .iter()
        .filter_map(|n| n.strip_prefix("cpu")?.parse::<u32>().ok())
        .filter(|n| host.read_attr(&dir.join(format!("cpu{n}/online")), "numa", warnings).as_deref() != Some("0"))
        .collect();
    (!cpus.is_empty()).then(|| CpuSet::new(cpus))
}

/// NUMA nodes from `/sys/devices/system/node/node<N>`, each with its online CPUs. A kernel
/// without NUMA gets one node holding every online CPU.
pub fn read_numa(host: &Host, warnings: &mut Vec<Warning>) -> Vec<NumaNode> {
    const SRC: &str = "numa";
    let online = host
        .parse_attr(&host.path("/sys/devices/system/cpu/online"), SRC, warnings, |t| CpuSet::parse_list(t).ok())
        .or_else(|| online_from_cpu_dirs(host, warnings));
    let dir = host.path("/sys/devices/system/node");
    let mut ids: Vec<u32> =
        host.list_dir(&dir, SRC, warnings).iter().filter_map(|n| n.strip_prefix("node")?.parse().ok()).collect();
    ids.sort_unstable();
    let mut nodes = Vec::new();
    for &id in &ids {
        let node_dir = dir.join(format!("node{id}"));
        // Kernels before 2.6.26 wrote only the `cpumap` mask (hwloc's oldest test captures).
        let cpus = host
            .parse_attr(&node_dir.join("cpulist"), SRC, warnings, |t| CpuSet::parse_list(t).ok())
            .or_else(|| host.parse_attr(&node_dir.join("cpumap"), SRC, warnings, |t| CpuSet::parse_mask(t).ok()))
            .map(|cpus| match &online {
                // Offline CPUs run nothing; hwloc leaves them out too.
                Some(online) => cpus.intersection(online),
                None => cpus,
            })
            .unwrap_or_default();
        let memory_bytes = host.parse_attr(&node_dir.join("meminfo"), SRC, warnings, parse_meminfo_total);
        let distances = host
            .parse_attr(&node_dir.join("distance"), SRC, warnings, |t| {
                t.split_whitespace().map(|v| v.parse::<u32>().ok()).collect::<Option<Vec<u32>>>()
            })
            .map(|values| {
                if values.len() != ids.len() {
                    warnings.push(host.warning(
                        SRC,
                        &node_dir.join("distance"),
                        format!("{} distances for {} nodes; ignored", values.len(), ids.len()),
                    ));
                    return BTreeMap::new();
                }
                ids.iter().copied().zip(values).collect()
            })
            .unwrap_or_default();
        nodes.push(NumaNode::new(id, cpus, memory_bytes, distances));
    }
    // A CPU in two nodes: the firmware's NUMA description is inconsistent (hwloc merges such
    // nodes). The kernel's ids stay, since devices name them; the warning says so.
    let mut owner: BTreeMap<u32, u32> = BTreeMap::new();
    let mut shared: BTreeSet<u32> = BTreeSet::new();
    for n in &nodes {
        for &cpu in n.cpus.cpus() {
            if let Some(first) = owner.insert(cpu, n.id) {
                shared.insert(first);
                shared.insert(n.id);
            }
        }
    }
    if !shared.is_empty() {
        let ids: Vec<String> = shared.iter().map(u32::to_string).collect();
        warnings.push(Warning {
            source: SRC.into(),
            path: Some("/sys/devices/system/node".into()),
            message: format!(
                "NUMA nodes {} share CPUs: the firmware's NUMA description is inconsistent; node ids kept as the \
                 kernel names them",
                ids.join(", ")
            ),
        });
    }
    if nodes.is_empty() {
        let cpus = online.unwrap_or_default();
        let memory_bytes = host.parse_attr(&host.path("/proc/meminfo"), SRC, warnings, parse_meminfo_total);
        nodes.push(NumaNode::new(0, cpus, memory_bytes, BTreeMap::new()));
    }
    nodes
}

/// `MemTotal` in bytes from a meminfo file (`Node 0 MemTotal: 47925628 kB` or `MemTotal: ... kB`).
pub fn parse_meminfo_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.contains("MemTotal:"))?;
    let rest = line.split("MemTotal:").nth(1)?;
    let mut parts = rest.split_whitespace();
    let value: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") | None => value.checked_mul(1024),
        _ => None,
    }
}

/// Where a PCI function sits: the host bridge and the BDF directories from the root port down.
#[derive(Debug)]
struct PciPath {
    host_bridge: String,
    /// `(id, directory)` for each function on the way, the device itself last.
    chain: Vec<(String, PathBuf)>,
}

/// The PCI tree, parents before children and siblings in address order.
pub fn read_pci(host: &Host, numa: &[NumaNode], warnings: &mut Vec<Warning>) -> Vec<PciNode> {
    const SRC: &str = "pci";
    let bus_dir = host.path("/sys/bus/pci/devices");
    let mut nodes: BTreeMap<String, PciNode> = BTreeMap::new();
    let mut dirs: BTreeMap<String, PathBuf> = BTreeMap::new();
    for name in host.list_dir(&bus_dir, SRC, warnings) {
        let entry = bus_dir.join(&name);
        let Ok(addr) = name.parse::<PciAddr>() else {
            warnings.push(host.warning(SRC, &entry, "not a PCI address; skipped".into()));
            continue;
        };
        let path = match host.resolve_link(&entry) {
            Some(target) => pci_path(host, &target, addr),
            // Captures (and some containers) hold plain directories: the tree is unknown, so each
            // function hangs off the host bridge of its own root bus, as hwloc does.
            None => PciPath { host_bridge: addr.root_bus_name(), chain: vec![(name.clone(), entry.clone())] },
        };
        nodes
            .entry(path.host_bridge.clone())
            .or_insert_with(|| PciNode::new(path.host_bridge.clone(), PciNodeKind::HostBridge, None));
        let mut parent = path.host_bridge.clone();
        for (id, dir) in path.chain {
            if !nodes.contains_key(&id) {
                nodes.insert(id.clone(), PciNode::new(id.clone(), PciNodeKind::Endpoint, Some(parent.clone())));
                dirs.insert(id.clone(), dir);
            }
            parent = id;
        }
    }
    for (id, dir) in &dirs {
        let node = nodes.get_mut(id).expect("every dir has a node");
        read_pci_attrs(host, dir, node, numa, warnings);
    }
    // A function with children is a bridge whatever its class file says (or lacks).
    let parents: BTreeSet<String> = nodes.values().filter_map(|n| n.parent.clone()).collect();
    for node in nodes.values_mut() {
        if node.kind == PciNodeKind::Endpoint
            && (parents.contains(&node.id) || node.class.is_some_and(PciClass::is_bridge))
        {
            node.kind = PciNodeKind::Bridge;
        }
    }
    order_tree(nodes)
}

/// Splits a resolved `/sys/devices/...` path into the host bridge and the BDF chain.
fn pci_path(host: &Host, target: &Path, addr: PciAddr) -> PciPath {
    let mut host_bridge = None;
    let mut chain = Vec::new();
    let mut dir = PathBuf::new();
    for component in target.components() {
        dir.push(component);
        let Some(part) = component.as_os_str().to_str() else { continue };
        if let Ok(a) = part.parse::<PciAddr>() {
            if part.len() >= 12 {
                chain.push((a.to_string(), dir.clone()));
                continue;
            }
        }
        if chain.is_empty() && is_host_bridge_name(part) {
            host_bridge = Some(part.to_owned());
        }
    }
    if chain.is_empty() {
        chain.push((addr.to_string(), host.path(&format!("/sys/bus/pci/devices/{addr}"))));
    }
    PciPath { host_bridge: host_bridge.unwrap_or_else(|| addr.root_bus_name()), chain }
}

fn is_host_bridge_name(part: &str) -> bool {
    part.strip_prefix("pci").and_then(|rest| rest.split_once(':')).is_some_and(|(d, b)| {
        !d.is_empty()
            && d.len() <= 8
            && b.len() == 2
            && u32::from_str_radix(d, 16).is_ok()
            && u8::from_str_radix(b, 16).is_ok()
    })
}

/// The attributes read for every PCI function, in one pass over its directory.
const PCI_ATTRS: [&str; 7] = [
    "uevent",
    "current_link_speed",
    "current_link_width",
    "max_link_speed",
    "max_link_width",
    "local_cpulist",
    "numa_node",
];

fn read_pci_attrs(host: &Host, dir: &Path, node: &mut PciNode, numa: &[NumaNode], warnings: &mut Vec<Warning>) {
    const SRC: &str = "pci";
    let [uevent, cur_speed, cur_width, max_speed, max_width, local_cpulist, numa_node]: [Option<String>; 7] =
        host.read_attrs(dir, &PCI_ATTRS, SRC, warnings).try_into().expect("one result per name");
    // `uevent` carries ids, class and driver in one read; captures that lack it (or hold a
    // mangled one) fall back to the individual attribute files.
    match uevent.as_deref().and_then(parse_pci_uevent) {
        Some(u) => {
            node.vendor = Some(u.vendor);
            node.device = Some(u.device);
            node.subsystem_vendor = u.subsystem.map(|s| s.0);
            node.subsystem_device = u.subsystem.map(|s| s.1);
            node.class = Some(u.class);
            node.driver = u.driver;
        }
        None => {
            let id = |name: &str, w: &mut Vec<Warning>| host.parse_attr(&dir.join(name), SRC, w, PciId::parse);
            node.vendor = id("vendor", warnings);
            node.device = id("device", warnings);
            node.subsystem_vendor = id("subsystem_vendor", warnings);
            node.subsystem_device = id("subsystem_device", warnings);
            node.class = host.parse_attr(&dir.join("class"), SRC, warnings, PciClass::parse);
        }
    }
    if node.driver.is_none() {
        node.driver = host
            .resolve_link(&dir.join("driver"))
            .and_then(|p| p.file_name().and_then(|n| n.to_str()).map(str::to_owned));
    }
    node.link = pci_link(host, dir, "current", cur_speed, cur_width, warnings);
    node.max_link = pci_link(host, dir, "max", max_speed, max_width, warnings);
    node.local_cpus = host
        .parse_text(&dir.join("local_cpulist"), local_cpulist, SRC, warnings, |t| CpuSet::parse_list(t).ok())
        .or_else(|| host.parse_attr(&dir.join("local_cpus"), SRC, warnings, |t| CpuSet::parse_mask(t).ok()));
    let declared = host.parse_text(&dir.join("numa_node"), numa_node, SRC, warnings, |t| t.parse::<i64>().ok());
    node.numa_node = locality(declared, node.local_cpus.as_ref(), numa);
    if let Some(n) = declared.filter(|&n| n >= 0) {
        if node.numa_node != Some(n as u32) {
            warnings.push(host.warning(SRC, &dir.join("numa_node"), format!("names node {n}, which does not exist")));
        }
    }
}

/// What a PCI function's `uevent` says of it.
#[derive(Debug, PartialEq, Eq)]
pub struct PciUevent {
    pub vendor: PciId,
    pub device: PciId,
    pub subsystem: Option<(PciId, PciId)>,
    pub class: PciClass,
    pub driver: Option<String>,
}

/// Parses a PCI `uevent` (`PCI_ID=10DE:2330`, `PCI_CLASS=30200`, `PCI_SUBSYS_ID=...`, `DRIVER=...`).
/// `None` unless both ids and the class are there and well formed.
pub fn parse_pci_uevent(text: &str) -> Option<PciUevent> {
    let mut ids = None;
    let mut subsystem = None;
    let mut class = None;
    let mut driver = None;
    let pair = |v: &str| {
        let (a, b) = v.split_once(':')?;
        Some((PciId::parse(a)?, PciId::parse(b)?))
    };
    for line in text.lines() {
        match line.split_once('=') {
            Some(("PCI_ID", v)) => ids = Some(pair(v)?),
            Some(("PCI_SUBSYS_ID", v)) => subsystem = pair(v),
            Some(("PCI_CLASS", v)) => class = Some(PciClass::parse(v)?),
            Some(("DRIVER", v)) if !v.is_empty() => driver = Some(v.to_owned()),
            _ => {}
        }
    }
    let (vendor, device) = ids?;
    Some(PciUevent { vendor, device, subsystem, class: class?, driver })
}

/// The NUMA node of a PCI function: the kernel's `numa_node` when it names a real node; else
/// the one node whose CPUs `local_cpus` covers (what hwloc uses); else the only node; else unknown.
fn locality(declared: Option<i64>, local_cpus: Option<&CpuSet>, numa: &[NumaNode]) -> Option<u32> {
    if let Some(n) = declared.filter(|&n| n >= 0).and_then(|n| u32::try_from(n).ok()) {
        if numa.iter().any(|node| node.id == n) {
            return Some(n);
        }
    }
    if let Some(cpus) = local_cpus.filter(|c| !c.is_empty()) {
        let touched: Vec<u32> = numa.iter().filter(|n| n.cpus.intersects(cpus)).map(|n| n.id).collect();
        if let [only] = touched.as_slice() {
            return Some(*only);
        }
        return None;
    }
    match numa {
        [only] => Some(only.id),
        _ => None,
    }
}

/// A link from its speed and width texts. An unknown speed (`Unknown`, as links that are down
/// report) is no link, silently; a garbage width is a warning.
fn pci_link(
    host: &Host,
    dir: &Path,
    which: &str,
    speed: Option<String>,
    width: Option<String>,
    warnings: &mut Vec<Warning>,
) -> Option<PciLink> {
    let gts = PciLink::parse_speed(&speed?)?;
    let width =
        host.parse_text(&dir.join(format!("{which}_link_width")), width, "pci", warnings, |t| t.parse::<u32>().ok())?;
    (width > 0).then_some(PciLink { gts, width })
}

fn order_tree(mut nodes: BTreeMap<String, PciNode>) -> Vec<PciNode> {
    let mut children: BTreeMap<Option<String>, Vec<String>> = BTreeMap::new();
    for node in nodes.values() {
        children.entry(node.parent.clone()).or_default().push(node.id.clone());
    }
    for list in children.values_mut() {
        list.sort_by_key(|id| (id.parse::<PciAddr>().ok(), id.clone()));
    }
    let mut out = Vec::with_capacity(nodes.len());
    let mut stack: Vec<String> = children.get(&None).cloned().unwrap_or_default();
    stack.reverse();
    while let Some(id) = stack.pop() {
        if let Some(kids) = children.get(&Some(id.clone())) {
            stack.extend(kids.iter().rev().cloned());
        }
        if let Some(node) = nodes.remove(&id) {
            out.push(node);
        }
    }
    out
}

/// NICs: PCI network functions, with their netdev and RDMA device names where bound.
pub fn read_nics(host: &Host, pci: &[PciNode], warnings: &mut Vec<Warning>) -> Vec<Nic> {
    const SRC: &str = "nic";
    #[derive(Default)]
    struct Found {
        netdev: Option<String>,
        rdma: Option<String>,
        speed_mbps: Option<u64>,
    }
    let mut found: BTreeMap<PciAddr, Found> = BTreeMap::new();
    let net_dir = host.path("/sys/class/net");
    for name in host.list_dir(&net_dir, SRC, warnings) {
        let entry = net_dir.join(&name);
        let Some(addr) = host.resolve_link(&entry).and_then(|p| last_pci_addr(&p)) else { continue };
        let speed = host
            .read_attr(&entry.join("speed"), SRC, warnings)
            .and_then(|t| t.parse::<i64>().ok())
            .filter(|&s| s > 0)
            .map(|s| s as u64);
        let slot = found.entry(addr).or_default();
        if slot.netdev.is_none() {
            slot.netdev = Some(name);
            slot.speed_mbps = slot.speed_mbps.or(speed);
        }
    }
    let ib_dir = host.path("/sys/class/infiniband");
    for name in host.list_dir(&ib_dir, SRC, warnings) {
        let entry = ib_dir.join(&name);
        let resolved = host.resolve_link(&entry.join("device")).or_else(|| host.resolve_link(&entry));
        let Some(addr) = resolved.and_then(|p| last_pci_addr(&p)) else { continue };
        let rate = host.parse_attr(&entry.join("ports/1/rate"), SRC, warnings, parse_ib_rate);
        let slot = found.entry(addr).or_default();
        if slot.rdma.is_none() {
            slot.rdma = Some(name);
            slot.speed_mbps = rate.or(slot.speed_mbps);
        }
    }
    for node in pci {
        if let (Some(addr), Some(class)) = (node.address, node.class) {
            if class.is_network() && node.kind == PciNodeKind::Endpoint {
                found.entry(addr).or_default();
            }
        }
    }
    found
        .into_iter()
        .map(|(addr, f)| {
            let node = pci.iter().find(|n| n.address == Some(addr));
            let ib = node.and_then(|n| n.class).is_some_and(PciClass::is_infiniband);
            Nic {
                name: f.rdma.clone().or_else(|| f.netdev.clone()).unwrap_or_else(|| addr.to_string()),
                rdma: f.rdma.is_some() || ib,
                netdev: f.netdev,
                rdma_device: f.rdma,
                pci: Some(addr),
                speed_mbps: f.speed_mbps,
                numa_node: node.and_then(|n| n.numa_node),
            }
        })
        .collect()
}

/// The last PCI address in a resolved sysfs path (the function a class device hangs off).
fn last_pci_addr(path: &Path) -> Option<PciAddr> {
    path.components()
        .rev()
        .filter_map(|c| c.as_os_str().to_str())
        .filter(|s| s.len() >= 12)
        .filter_map(|s| s.parse::<PciAddr>().ok())
        .next()
}

/// `100 Gb/sec (4X EDR)` → 100000 Mb/s.
pub fn parse_ib_rate(text: &str) -> Option<u64> {
    let mut parts = text.split_whitespace();
    let value: f64 = parts.next()?.parse().ok()?;
    if !(value.is_finite() && value > 0.0 && value < 1e6) || parts.next()? != "Gb/sec" {
        return None;
    }
    Some((value * 1000.0).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn small_parsers() {
        assert_eq!(
            parse_meminfo_total("Node 0 MemTotal:       47925628 kB\nNode 0 MemFree: 1 kB"),
            Some(47925628 * 1024)
        );
        assert_eq!(parse_meminfo_total("MemTotal: x kB"), None);
        assert_eq!(parse_ib_rate("100 Gb/sec (4X EDR)"), Some(100_000));
        assert_eq!(parse_ib_rate("2.5 Gb/sec (1X SDR)"), Some(2_500));
        assert_eq!(parse_ib_rate("fast"), None);
        assert!(is_host_bridge_name("pci0000:17"));
        assert!(is_host_bridge_name("pci10000:00"));
        assert!(!is_host_bridge_name("pci_bus"));
    }

    #[test]
    fn uevents() {
        let u =
            parse_pci_uevent("DRIVER=ve_drv\nPCI_CLASS=B4000\nPCI_ID=1BCF:001C\nPCI_SUBSYS_ID=1BCF:0000\n").unwrap();
        assert_eq!(u.vendor, PciId(0x1bcf));
        assert_eq!(u.class, PciClass(0x0b4000));
        assert_eq!(u.subsystem, Some((PciId(0x1bcf), PciId(0))));
        assert_eq!(u.driver.as_deref(), Some("ve_drv"));
        assert_eq!(parse_pci_uevent("PCI_CLASS=30200\n"), None);
        assert_eq!(parse_pci_uevent("PCI_ID=zz:1\nPCI_CLASS=30200\n"), None);
    }

    #[test]
    fn locality_rules() {
        let node = |id, cpus: &str| NumaNode::new(id, CpuSet::parse_list(cpus).unwrap(), None, BTreeMap::new());
        let numa = vec![node(0, "0-7"), node(1, "8-15")];
        let cpus = |s: &str| CpuSet::parse_list(s).unwrap();
        assert_eq!(locality(Some(1), None, &numa), Some(1));
        assert_eq!(locality(Some(-1), Some(&cpus("8-15")), &numa), Some(1));
        assert_eq!(locality(Some(-1), Some(&cpus("0-15")), &numa), None);
        assert_eq!(locality(Some(7), None, &numa), None);
        assert_eq!(locality(Some(-1), None, &numa[..1]), Some(0));
    }

    proptest! {
        #[test]
        fn parsers_never_panic(text in ".{0,60}") {
            let _ = parse_meminfo_total(&text);
            let _ = parse_ib_rate(&text);
            let _ = parse_pci_uevent(&text);
            let _ = is_host_bridge_name(&text);
            let _ = last_pci_addr(Path::new(&text));
        }
    }
}
