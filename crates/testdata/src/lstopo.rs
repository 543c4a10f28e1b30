//! Reading hwloc's own XML (`lstopo --of xml`), the oracle the hwloc cross-checks compare
//! discovery with: one PCI object's ids, host bridge, bridge chain and NUMA locality.

use std::collections::BTreeSet;

use accel_model::CpuSet;

/// What lstopo says about one PCI function or bridge.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LstopoPci {
    /// `[vendor:device]` and the 16-bit class from `pci_type`.
    pub ids: (u16, u16, u16),
    /// Host bridge as `(domain, first bus)`.
    pub host: (u32, u8),
    /// Bridges above the function, root port first.
    pub bridges: Vec<String>,
    /// The NUMA nodes of the nearest ancestor with a nodeset.
    pub numa: BTreeSet<u32>,
}

impl LstopoPci {
    /// The host bridge as accel names it: `pci0000:17`.
    pub fn host_name(&self) -> String {
        format!("pci{:04x}:{:02x}", self.host.0, self.host.1)
    }
}

/// Reads a `PCIDev` or `Bridge` object that has a `pci_busid` (panics on what lstopo never
/// writes: this is test code reading lstopo's output).
pub fn pci_object(node: roxmltree::Node<'_, '_>) -> LstopoPci {
    let mut entry = LstopoPci::default();
    let pci_type = node.attribute("pci_type").unwrap();
    let class = u16::from_str_radix(&pci_type[..4], 16).unwrap();
    let ids = &pci_type[pci_type.find('[').unwrap() + 1..pci_type.find(']').unwrap()];
    let (v, d) = ids.split_once(':').unwrap();
    entry.ids = (u16::from_str_radix(v, 16).unwrap(), u16::from_str_radix(d, 16).unwrap(), class);
    for anc in node.ancestors().skip(1).filter(|a| a.has_tag_name("object")) {
        if let Some(nodeset) = anc.attribute("nodeset") {
            if entry.numa.is_empty() {
                entry.numa = CpuSet::parse_mask(nodeset).unwrap().cpus().iter().copied().collect();
            }
            continue;
        }
        if anc.attribute("type") != Some("Bridge") {
            continue;
        }
        match anc.attribute("pci_busid") {
            Some(b) => entry.bridges.push(b.to_owned()),
            None => {
                // Host bridge: bridge_pci="0000:[17-1e]".
                let range = anc.attribute("bridge_pci").unwrap();
                let (dom, rest) = range.split_once(':').unwrap();
                entry.host = (u32::from_str_radix(dom, 16).unwrap(), u8::from_str_radix(&rest[1..3], 16).unwrap());
            }
        }
    }
    entry.bridges.reverse();
    entry
}
