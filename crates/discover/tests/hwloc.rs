//! Cross-check against hwloc: on every captured machine, `lstopo` (run with `HWLOC_FSROOT` on the
//! same tree) and accel must agree on the NUMA nodes, on the NUMA locality of every PCI function,
//! and on the grouping of functions under host bridges and PCIe switches. Where accel
//! deliberately differs, the difference is listed in `DELIBERATE` and documented in docs/hwloc.md.
//! Only the real `capture.tar.*` trees take part; the `capture.bundle` samples (synthetic, or
//! written by `accel capture`) hold just the files accel reads, which lstopo cannot use (see
//! test_data/hosts/README.md).

use accel_testdata::lstopo::LstopoPci;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use accel_discover::{default_plugins, discover, Host};
use accel_model::{CpuSet, Machine, PciNodeKind, SkuRegistry};

/// PCI functions accel reports and hwloc does not, per capture (see docs/hwloc.md):
/// - a bridge in the sysfs path of a device but missing from `/sys/bus/pci/devices`, the only
///   list hwloc enumerates: accel builds the tree from the symlink chain itself;
/// - functions in 32-bit PCI domains (VMD, Hyper-V), which hwloc ignores unless it was built
///   with `--enable-32bits-pci-domain` (Debian's is not).
const DELIBERATE: &[(&str, &[&str])] =
    &[("hwloc-2p8co2t-8ve", &["0000:5f:03.0"]), ("hwloc-kvm-pcidomain32", &["10000:00:00.0", "10000:00:04.0"])];

#[derive(Debug, Default)]
struct Hwloc {
    numa: BTreeMap<u32, CpuSet>,
    pci: BTreeMap<String, LstopoPci>,
}

fn lstopo(root: &Path) -> Hwloc {
    let out = Command::new("lstopo")
        .args(["--of", "xml", "--whole-io", "-"])
        .env("HWLOC_FSROOT", root)
        .env("HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES", "1")
        .output()
        .expect("lstopo is needed for this test: install Debian's hwloc package (the README's test command does)");
    assert!(out.status.success(), "lstopo failed: {}", String::from_utf8_lossy(&out.stderr));
    let xml = String::from_utf8(out.stdout).unwrap();
    let options = roxmltree::ParsingOptions { allow_dtd: true, ..Default::default() };
    let doc = roxmltree::Document::parse_with_options(&xml, options).expect("lstopo writes valid XML");
    let mut hw = Hwloc::default();
    for node in doc.descendants().filter(|n| n.has_tag_name("object")) {
        match node.attribute("type") {
            Some("NUMANode") => {
                let id: u32 = node.attribute("os_index").unwrap().parse().unwrap();
                hw.numa.insert(id, CpuSet::parse_mask(node.attribute("cpuset").unwrap()).unwrap());
            }
            Some("PCIDev") | Some("Bridge") if node.attribute("pci_busid").is_some() => {
                let busid = node.attribute("pci_busid").unwrap().to_owned();
                let entry = accel_testdata::lstopo::pci_object(node);
                hw.pci.insert(busid, entry);
            }
            _ => {}
        }
    }
    hw
}

fn accel(root: &Path) -> Machine {
    discover(&Host::new(root, SkuRegistry::builtin()), &default_plugins())
}

/// The bridges above a function in accel's tree, root port first, and its host bridge.
fn chain(machine: &Machine, id: &str) -> (String, Vec<String>) {
    let mut bridges = Vec::new();
    let mut cursor = machine.pci_node(id).and_then(|n| n.parent.clone());
    while let Some(parent) = cursor {
        let node = machine.pci_node(&parent).unwrap();
        if node.kind == PciNodeKind::HostBridge {
            bridges.reverse();
            return (node.id.clone(), bridges);
        }
        bridges.push(node.id.clone());
        cursor = node.parent.clone();
    }
    panic!("{id} has no host bridge");
}

#[test]
fn accel_agrees_with_lstopo_on_every_capture() {
    let mut compared_functions = 0;
    for host in accel_testdata::hosts() {
        let root = accel_testdata::root(&host);
        let hw = lstopo(&root);
        let machine = accel(&root);
        let deliberate: BTreeSet<String> = DELIBERATE
            .iter()
            .filter(|(h, _)| *h == host)
            .flat_map(|(_, ids)| ids.iter().map(|s| s.to_string()))
            .collect();

        // NUMA nodes: the same ids (memory-only nodes included) and, for nodes with CPUs, the same
        // CPUs. hwloc gives a memory-only node the cpuset of the CPUs it is attached near; accel
        // keeps `cpus` empty there (the node has none) and places it through its device instead.
        let ids: Vec<u32> = machine.numa_nodes.iter().map(|n| n.id).collect();
        assert_eq!(ids, hw.numa.keys().copied().collect::<Vec<_>>(), "{host}: NUMA node ids differ");
        for node in &machine.numa_nodes {
            if !node.cpus.is_empty() {
                assert_eq!(node.cpus, hw.numa[&node.id], "{host}: CPUs of NUMA node {}", node.id);
            }
        }

        // The same PCI functions, except the documented extra bridges.
        let our_ids: BTreeSet<String> =
            machine.pci.iter().filter(|n| n.kind != PciNodeKind::HostBridge).map(|n| n.id.clone()).collect();
        let their_ids: BTreeSet<String> = hw.pci.keys().cloned().collect();
        let extra: BTreeSet<String> = our_ids.difference(&their_ids).cloned().collect();
        assert_eq!(extra, deliberate, "{host}: functions only accel reports");
        assert!(
            their_ids.is_subset(&our_ids),
            "{host}: functions only hwloc reports: {:?}",
            their_ids.difference(&our_ids)
        );

        for (busid, theirs) in &hw.pci {
            let node = machine.pci_node(busid).unwrap();
            compared_functions += 1;
            // Identity: ids and class (hwloc prints 0000 where the capture stripped the files).
            let ids = (
                node.vendor.map_or(0, |v| v.0),
                node.device.map_or(0, |d| d.0),
                node.class.map_or(0, |c| c.base_sub()),
            );
            assert_eq!(ids, theirs.ids, "{host} {busid}: ids/class");
            // Locality: one CPU-bearing NUMA node in hwloc's nodeset means that node; several mean
            // unknown. (hwloc's nodeset also lists GPU memory nodes attached to the same package.)
            let cpu_nodes: Vec<u32> = theirs
                .numa
                .iter()
                .copied()
                .filter(|id| machine.numa_node(*id).is_some_and(|n| !n.cpus.is_empty()))
                .collect();
            let expected = match cpu_nodes.as_slice() {
                [only] => Some(*only),
                _ => None,
            };
            assert_eq!(node.numa_node, expected, "{host} {busid}: NUMA locality (hwloc nodeset {:?})", theirs.numa);
            // Grouping: same host bridge, same switch ports above it.
            let (host_bridge, bridges) = chain(&machine, busid);
            let (dom, bus) = theirs.host;
            assert_eq!(host_bridge, format!("pci{dom:04x}:{bus:02x}"), "{host} {busid}: host bridge");
            let bridges: Vec<String> = bridges.into_iter().filter(|b| !deliberate.contains(b)).collect();
            assert_eq!(bridges, theirs.bridges, "{host} {busid}: bridges above");
        }
    }
    assert!(compared_functions >= 40, "compared only {compared_functions} PCI functions");
}
