//! The path classifier: how two devices of one machine reach each other, in the classes of
//! `nvidia-smi topo -m` (SELF, a named scale-up link, PIX, PXB, PHB, NODE, SYS), for every vendor.

use std::collections::HashMap;
use std::fmt;

use serde::{Serialize, Serializer};

use crate::{LinkKind, Machine, Name, PciAddr, PciNodeKind};

/// A device the classifier can place: an accelerator or a NIC, by index into the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    Accelerator(usize),
    Nic(usize),
}

/// How two devices are connected, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PathClass {
    /// The same device (`X`).
    SelfPath,
    /// A direct scale-up link, `count` bonded (`NV18`, `XGMI1`, `ICI1`...).
    Link { short: Name, count: u32 },
    /// Through at most one PCIe switch.
    Pix,
    /// Through several PCIe switches, without crossing a host bridge.
    Pxb,
    /// Through a PCIe host bridge (the CPU's root complex).
    Phb,
    /// Across host bridges within one NUMA node.
    Node,
    /// Across the SMP interconnect between NUMA nodes (QPI/UPI, Infinity Fabric), or unknown.
    Sys,
}

impl PathClass {
    /// Lower is closer. Links rank above PCIe, and more bonded links rank higher.
    pub fn rank(self) -> u32 {
        match self {
            PathClass::SelfPath => 0,
            PathClass::Link { count, .. } => 1000 - count.min(999),
            PathClass::Pix => 2000,
            PathClass::Pxb => 3000,
            PathClass::Phb => 4000,
            PathClass::Node => 5000,
            PathClass::Sys => 6000,
        }
    }

    pub fn is_link(self) -> bool {
        matches!(self, PathClass::Link { .. })
    }
}

impl fmt::Display for PathClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            PathClass::SelfPath => "X".to_owned(),
            PathClass::Link { short, count } => format!("{short}{count}"),
            PathClass::Pix => "PIX".to_owned(),
            PathClass::Pxb => "PXB".to_owned(),
            PathClass::Phb => "PHB".to_owned(),
            PathClass::Node => "NODE".to_owned(),
            PathClass::Sys => "SYS".to_owned(),
        };
        // `pad` so that width and alignment flags (`{:>5}`) apply.
        f.pad(&text)
    }
}

impl Serialize for PathClass {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The PCI position of one device: its host bridge and the bridges above it, root port first.
#[derive(Debug, Clone)]
struct Chain {
    host: usize,
    bridges: Vec<usize>,
}

/// Classifies paths on one machine. Built once (it indexes the PCI tree and the links),
/// then answers each pair in time proportional to the PCI depth.
#[derive(Debug)]
pub struct PathClassifier<'m> {
    machine: &'m Machine,
    chains: HashMap<PciAddr, Chain>,
    links: HashMap<(usize, usize), (Name, u32)>,
}

impl<'m> PathClassifier<'m> {
    pub fn new(machine: &'m Machine) -> PathClassifier<'m> {
        let index: HashMap<&str, usize> = machine.pci.iter().enumerate().map(|(i, n)| (n.id.as_str(), i)).collect();
        let mut chains = HashMap::new();
        for node in &machine.pci {
            let Some(addr) = node.address else { continue };
            let mut bridges = Vec::new();
            let mut host = None;
            let mut cursor = node.parent.as_deref();
            // Bounded walk: a malformed tree with a cycle must not hang us.
            for _ in 0..machine.pci.len() {
                let Some(&i) = cursor.and_then(|id| index.get(id)) else { break };
                match machine.pci[i].kind {
                    PciNodeKind::HostBridge => {
                        host = Some(i);
                        break;
                    }
                    _ => bridges.push(i),
                }
                cursor = machine.pci[i].parent.as_deref();
            }
            if let Some(host) = host {
                bridges.reverse();
                chains.insert(addr, Chain { host, bridges });
            }
        }
        let acc_index: HashMap<&str, usize> =
            machine.accelerators.iter().enumerate().map(|(i, a)| (a.id.as_str(), i)).collect();
        let mut shorts: HashMap<LinkKind, Name> = HashMap::new();
        let mut links: HashMap<(usize, usize), (Name, u32)> = HashMap::new();
        for link in &machine.links {
            let (Some(&a), Some(&b)) = (acc_index.get(link.a.as_str()), acc_index.get(link.b.as_str())) else {
                continue;
            };
            let key = (a.min(b), a.max(b));
            let short = *shorts.entry(link.kind).or_insert_with(|| machine.link_kind(link.kind).short);
            let candidate = (short, link.count);
            let better = match links.get(&key) {
                Some(&(_, count)) => link.count > count,
                None => true,
            };
            if better {
                links.insert(key, candidate);
            }
        }
        PathClassifier { machine, chains, links }
    }

    pub fn classify(&self, a: Endpoint, b: Endpoint) -> PathClass {
        if a == b {
            return PathClass::SelfPath;
        }
        if let (Endpoint::Accelerator(x), Endpoint::Accelerator(y)) = (a, b) {
            if let Some(&(short, count)) = self.links.get(&(x.min(y), x.max(y))) {
                return PathClass::Link { short, count };
            }
        }
        let (pci_a, numa_a) = self.locate(a);
        let (pci_b, numa_b) = self.locate(b);
        let same_numa = matches!((numa_a, numa_b), (Some(x), Some(y)) if x == y);
        let chains = pci_a.and_then(|p| self.chains.get(&p)).zip(pci_b.and_then(|p| self.chains.get(&p)));
        let Some((ca, cb)) = chains else {
            return if same_numa { PathClass::Node } else { PathClass::Sys };
        };
        if ca.host != cb.host {
            return if same_numa { PathClass::Node } else { PathClass::Sys };
        }
        let common = ca.bridges.iter().zip(&cb.bridges).take_while(|(x, y)| x == y).count();
        if common == 0 {
            return PathClass::Phb;
        }
        // Bridges below a root port alternate switch upstream and downstream ports, so bridge
        // depth d (root port = 0) belongs to switch (d + 1) / 2. Count the switches crossed.
        let mut switches: Vec<usize> =
            (common - 1..ca.bridges.len()).chain(common - 1..cb.bridges.len()).map(|depth| depth.div_ceil(2)).collect();
        switches.sort_unstable();
        switches.dedup();
        if switches.len() <= 1 {
            PathClass::Pix
        } else {
            PathClass::Pxb
        }
    }

    /// The endpoints of the machine in matrix order: accelerators, then NICs.
    pub fn endpoints(&self) -> Vec<Endpoint> {
        (0..self.machine.accelerators.len())
            .map(Endpoint::Accelerator)
            .chain((0..self.machine.nics.len()).map(Endpoint::Nic))
            .collect()
    }

    /// The full matrix over [`PathClassifier::endpoints`].
    pub fn matrix(&self) -> Vec<Vec<PathClass>> {
        let endpoints = self.endpoints();
        endpoints.iter().map(|&a| endpoints.iter().map(|&b| self.classify(a, b)).collect()).collect()
    }

    fn locate(&self, e: Endpoint) -> (Option<PciAddr>, Option<u32>) {
        match e {
            Endpoint::Accelerator(i) => {
                let acc = &self.machine.accelerators[i];
                (acc.pci, acc.numa_node)
            }
            Endpoint::Nic(i) => {
                let nic = &self.machine.nics[i];
                (nic.pci, nic.numa_node)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Accelerator, HostInfo, Link, Nic, PciNode};

    fn node(id: &str, kind: PciNodeKind, parent: Option<&str>) -> PciNode {
        PciNode::new(id.to_owned(), kind, parent.map(str::to_owned))
    }

    fn acc(pci: &str, numa: u32) -> Accelerator {
        Accelerator {
            id: format!("x-{pci}"),
            index: 0,
            vendor: "x".into(),
            plugin: "test".into(),
            sku: None,
            product: "x".into(),
            family: None,
            architecture: None,
            pci: Some(pci.parse().unwrap()),
            pci_vendor: None,
            pci_device: None,
            numa_node: Some(numa),
            memory_bytes: None,
            memory_numa_node: None,
            uuid: None,
            serial: None,
            partition: None,
            dtypes: Vec::new(),
            vocabulary: Default::default(),
            health: None,
        }
    }

    /// Two host bridges on NUMA 0, one on NUMA 1; a two-level switch under the first.
    fn machine() -> Machine {
        use PciNodeKind::*;
        let mut m = Machine::new(HostInfo::default());
        m.pci = vec![
            node("pci0000:00", HostBridge, None),
            node("0000:00:01.0", Bridge, Some("pci0000:00")),
            node("0000:01:00.0", Bridge, Some("0000:00:01.0")),
            node("0000:02:00.0", Bridge, Some("0000:01:00.0")),
            node("0000:02:01.0", Bridge, Some("0000:01:00.0")),
            node("0000:03:00.0", Endpoint, Some("0000:02:00.0")),
            node("0000:04:00.0", Endpoint, Some("0000:02:01.0")),
            node("0000:05:00.0", Bridge, Some("0000:02:01.0")),
            node("0000:06:00.0", Bridge, Some("0000:05:00.0")),
            node("0000:07:00.0", Endpoint, Some("0000:06:00.0")),
            node("0000:00:02.0", Bridge, Some("pci0000:00")),
            node("0000:08:00.0", Endpoint, Some("0000:00:02.0")),
            node("pci0000:40", HostBridge, None),
            node("0000:40:01.0", Bridge, Some("pci0000:40")),
            node("0000:41:00.0", Endpoint, Some("0000:40:01.0")),
            node("pci0000:80", HostBridge, None),
            node("0000:80:01.0", Bridge, Some("pci0000:80")),
            node("0000:81:00.0", Endpoint, Some("0000:80:01.0")),
        ];
        m.accelerators = vec![
            acc("0000:03:00.0", 0),
            acc("0000:07:00.0", 0),
            acc("0000:08:00.0", 0),
            acc("0000:41:00.0", 0),
            acc("0000:81:00.0", 1),
        ];
        m.nics = vec![Nic {
            name: "mlx5_0".into(),
            netdev: None,
            rdma_device: Some("mlx5_0".into()),
            rdma: true,
            pci: Some("0000:04:00.0".parse().unwrap()),
            speed_mbps: None,
            numa_node: Some(0),
        }];
        m.links = vec![Link::new("x-0000:41:00.0", "x-0000:81:00.0", LinkKind::new("nvlink"), 4, None)];
        m.link_kinds = vec![crate::LinkKindInfo::new(LinkKind::new("nvlink"), "NV", "NVLink")];
        m
    }

    #[test]
    fn classes() {
        let mut m = machine();
        // A kind its plugin did not describe shows in capitals.
        let undescribed = std::mem::take(&mut m.link_kinds);
        assert_eq!(PathClassifier::new(&m).matrix()[3][4].to_string(), "NVLINK4");
        m.link_kinds = undescribed;
        let c = PathClassifier::new(&m);
        let got: Vec<String> =
            c.matrix().iter().map(|row| row.iter().map(|p| format!("{p:>4}")).collect::<Vec<_>>().join(" ")).collect();
        let want = [
            "   X  PXB  PHB NODE  SYS  PIX",
            " PXB    X  PHB NODE  SYS  PXB",
            " PHB  PHB    X NODE  SYS  PHB",
            "NODE NODE NODE    X  NV4 NODE",
            " SYS  SYS  SYS  NV4    X  SYS",
            " PIX  PXB  PHB NODE  SYS    X",
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn unknown_pci_falls_back_to_numa() {
        let mut m = machine();
        m.accelerators[0].pci = None;
        m.accelerators[4].numa_node = None;
        let c = PathClassifier::new(&m);
        assert_eq!(c.classify(Endpoint::Accelerator(0), Endpoint::Accelerator(2)), PathClass::Node);
        assert_eq!(c.classify(Endpoint::Accelerator(0), Endpoint::Accelerator(4)), PathClass::Sys);
    }

    #[test]
    fn cyclic_tree_does_not_hang() {
        let mut m = machine();
        m.pci[1].parent = Some("0000:01:00.0".into());
        let c = PathClassifier::new(&m);
        assert_eq!(c.classify(Endpoint::Accelerator(0), Endpoint::Accelerator(1)), PathClass::Node);
    }
}
