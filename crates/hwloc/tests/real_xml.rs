//! Real hwloc XMLs (`test_data/hwloc-xml/`, sources in its README) imported and discovered, and
//! compared with an independent reading of the same XML: Debian's `lstopo`, which parses the
//! file with hwloc itself and writes it back normalised (`lstopo -i FILE --of xml -`). The two
//! must agree on the PCI functions (ids and class), the NUMA nodes and their CPUs, each
//! function's NUMA locality, the bridges above each function, and the PCI function every netdev
//! and RDMA device hangs from. Every check is also shown failing on a broken input.
//!
//! Debian's hwloc 2.9 reads only XML format 2: a 3.0 file is handed to it with its version
//! attribute rewritten to 2.0 (the object tree is the same; only `osdev_type` differs, a bitmask
//! in 3.0, which the oracle decodes itself).

use accel_testdata::lstopo::LstopoPci;
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::Arc;

use accel_discover::fs::MemTree;
use accel_discover::{default_plugins, discover, Host};
use accel_model::{CpuSet, Machine, PciAddr, PciNodeKind, SkuRegistry};

/// Every real XML, by file name.
const XMLS: &[&str] = &[
    "16intel64-manyVFs.xml",
    "24em64t-2n6c2t-pci.xml",
    "32em64t-2n8c2t-pci-wholeio.xml",
    "nvidiaDGX2.xml",
    "power8gpudistances.xml",
    "aws-p4d-24xlarge.xml",
    "aws-p5en-48xlarge.xml",
    "aws-p6-b200-48xlarge.xml",
    "aws-p6-b300-48xlarge.xml",
    "aws-p6e-gb200-36xlarge.xml",
    "dell-xe8640-4xh100.xml",
    "hpe-ex255a-4xmi300a-cpx.xml",
    "hpe-ex255a-4xmi300a-spx.xml",
    "hpe-ex235a-4xmi250x.xml",
];

/// PCI functions that appear twice in an XML (hwloc's own test file was edited by hand; a
/// Linux machine cannot have two): the importer keeps the first and warns.
const DUPLICATES: &[(&str, &str)] = &[("32em64t-2n8c2t-pci-wholeio.xml", "0000:04:00.0")];

fn xml_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../test_data/hwloc-xml")
}

fn read_xml(name: &str) -> Option<Vec<u8>> {
    std::fs::read(xml_dir().join(name)).ok()
}

/// What lstopo says.
#[derive(Debug, Default, Clone)]
struct Oracle {
    numa: BTreeMap<u32, CpuSet>,
    pci: BTreeMap<String, LstopoPci>,
    duplicates: Vec<String>,
    /// netdev or RDMA device name -> the PCI function it hangs from.
    nics: BTreeMap<String, String>,
}

fn lstopo(name: &str, xml: &[u8]) -> Oracle {
    let text = String::from_utf8(xml.to_vec()).unwrap();
    let v3 = text.contains("<topology version=\"3.");
    let input = if v3 { text.replacen("<topology version=\"3.0\"", "<topology version=\"2.0\"", 1) } else { text };
    let dir = accel_testdata::TempDir::new(&format!("hwloc-oracle-{}", name.replace('.', "-")));
    let path = dir.join("in.xml");
    std::fs::write(&path, input).unwrap();
    let out = Command::new("lstopo")
        .args(["-i"])
        .arg(&path)
        .args(["--whole-io", "--of", "xml", "-"])
        .output()
        .expect("lstopo is needed for this test: install Debian's hwloc package (scripts/test.sh does)");
    assert!(out.status.success(), "lstopo failed on {name}: {}", String::from_utf8_lossy(&out.stderr));
    parse_oracle(&String::from_utf8(out.stdout).unwrap(), v3)
}

fn parse_oracle(xml: &str, v3: bool) -> Oracle {
    let options = roxmltree::ParsingOptions { allow_dtd: true, ..Default::default() };
    let doc = roxmltree::Document::parse_with_options(xml, options).expect("lstopo writes valid XML");
    let mut o = Oracle::default();
    // The second of two functions with one address, whose OS devices the importer leaves out.
    let mut second = BTreeSet::new();
    for node in doc.descendants().filter(|n| n.has_tag_name("object")) {
        match node.attribute("type") {
            Some("NUMANode") => {
                let id: u32 = node.attribute("os_index").unwrap().parse().unwrap();
                o.numa.insert(id, CpuSet::parse_mask(node.attribute("cpuset").unwrap()).unwrap());
            }
            Some("OSDev") => {
                let t: u32 = node.attribute("osdev_type").unwrap().parse().unwrap();
                let is_nic = if v3 { t & (16 | 32) != 0 } else { t == 2 || t == 3 };
                let parent = node.ancestors().skip(1).find(|a| a.has_tag_name("object"));
                let parent = parent.filter(|p| is_nic && !second.contains(&p.range().start));
                if let Some(busid) = parent.and_then(|p| p.attribute("pci_busid")) {
                    o.nics.entry(node.attribute("name").unwrap().to_owned()).or_insert(busid.to_owned());
                }
            }
            Some("PCIDev") | Some("Bridge") if node.attribute("pci_busid").is_some() => {
                let busid = node.attribute("pci_busid").unwrap().to_owned();
                let entry = accel_testdata::lstopo::pci_object(node);
                match o.pci.entry(busid) {
                    std::collections::btree_map::Entry::Occupied(seen) => {
                        second.insert(node.range().start);
                        o.duplicates.push(seen.key().clone());
                    }
                    std::collections::btree_map::Entry::Vacant(slot) => {
                        slot.insert(entry);
                    }
                }
            }
            _ => {}
        }
    }
    o
}

/// The imported capture, its host and the machine accel discovers in it.
fn accel(xml: &[u8]) -> (accel_hwloc::Import, Host, Machine) {
    let import = accel_hwloc::import(xml).expect("imports");
    let host = Host::in_memory(Arc::new(import.tree.clone()), SkuRegistry::builtin());
    let machine = discover(&host, &default_plugins());
    (import, host, machine)
}

/// The bridges above a function in accel's tree, root port first, and its host bridge.
fn chain(machine: &Machine, id: &str) -> Option<(String, Vec<String>)> {
    let mut bridges = Vec::new();
    let mut cursor = machine.pci_node(id).and_then(|n| n.parent.clone());
    while let Some(parent) = cursor {
        let node = machine.pci_node(&parent)?;
        if node.kind == PciNodeKind::HostBridge {
            bridges.reverse();
            return Some((node.id.clone(), bridges));
        }
        bridges.push(node.id.clone());
        cursor = node.parent.clone();
    }
    None
}

fn last_pci(path: &std::path::Path) -> Option<String> {
    path.components()
        .rev()
        .filter_map(|c| c.as_os_str().to_str())
        .find_map(|s| s.parse::<PciAddr>().ok().filter(|_| s.len() >= 12))
        .map(|a| a.to_string())
}

/// Every disagreement between accel's machine (and the capture's class devices) and lstopo.
fn compare(o: &Oracle, host: &Host, m: &Machine) -> Vec<String> {
    let mut errors = Vec::new();
    // NUMA nodes: the same ids; each node with CPUs has hwloc's cpuset; every CPU hwloc places
    // in a node is in one of accel's.
    let ids: Vec<u32> = m.numa_nodes.iter().map(|n| n.id).collect();
    if ids != o.numa.keys().copied().collect::<Vec<_>>() {
        errors.push(format!("NUMA node ids: accel {ids:?}, hwloc {:?}", o.numa.keys().collect::<Vec<_>>()));
    }
    for node in &m.numa_nodes {
        if !node.cpus.is_empty() && o.numa.get(&node.id) != Some(&node.cpus) {
            errors.push(format!(
                "CPUs of NUMA node {}: accel {}, hwloc {:?}",
                node.id,
                node.cpus,
                o.numa.get(&node.id)
            ));
        }
    }
    let theirs: BTreeSet<u32> = o.numa.values().flat_map(|c| c.cpus().iter().copied()).collect();
    let ours: BTreeSet<u32> = m.numa_nodes.iter().flat_map(|n| n.cpus.cpus().iter().copied()).collect();
    if theirs != ours {
        errors.push(format!("CPUs in NUMA nodes: accel {} CPUs, hwloc {}", ours.len(), theirs.len()));
    }
    // PCI functions.
    let our_ids: BTreeSet<String> =
        m.pci.iter().filter(|n| n.kind != PciNodeKind::HostBridge).map(|n| n.id.clone()).collect();
    let their_ids: BTreeSet<String> = o.pci.keys().cloned().collect();
    if our_ids != their_ids {
        errors.push(format!(
            "PCI functions: only accel {:?}, only hwloc {:?}",
            our_ids.difference(&their_ids).collect::<Vec<_>>(),
            their_ids.difference(&our_ids).collect::<Vec<_>>()
        ));
    }
    for (busid, t) in &o.pci {
        let Some(node) = m.pci_node(busid) else { continue };
        let ids =
            (node.vendor.map_or(0, |v| v.0), node.device.map_or(0, |d| d.0), node.class.map_or(0, |c| c.base_sub()));
        if ids != t.ids {
            errors.push(format!("{busid}: ids/class accel {ids:x?}, hwloc {:x?}", t.ids));
        }
        let cpu_nodes: Vec<u32> =
            t.numa.iter().copied().filter(|id| m.numa_node(*id).is_some_and(|n| !n.cpus.is_empty())).collect();
        let expected = match cpu_nodes.as_slice() {
            [only] => Some(*only),
            _ => None,
        };
        if node.numa_node != expected {
            errors.push(format!("{busid}: NUMA locality accel {:?}, hwloc nodeset {:?}", node.numa_node, t.numa));
        }
        match chain(m, busid) {
            Some((host_bridge, bridges)) if host_bridge == t.host_name() && bridges == t.bridges => {}
            other => {
                errors.push(format!("{busid}: bridges above: accel {other:?}, hwloc {} {:?}", t.host_name(), t.bridges))
            }
        }
    }
    // NICs: each class device hangs from hwloc's function, and accel's NICs agree.
    for (name, busid) in &o.nics {
        let found = ["net", "infiniband"].iter().find_map(|class| {
            host.resolve_link(&host.path(&format!("/sys/class/{class}/{name}"))).and_then(|p| last_pci(&p))
        });
        if found.as_ref() != Some(busid) {
            errors.push(format!("NIC {name}: accel's capture puts it at {found:?}, hwloc at {busid}"));
        }
    }
    for nic in &m.nics {
        let pci = nic.pci.map(|a| a.to_string());
        for name in nic.netdev.iter().chain(&nic.rdma_device) {
            if o.nics.get(name) != pci.as_ref() {
                errors.push(format!("NIC {name}: accel at {pci:?}, hwloc at {:?}", o.nics.get(name)));
            }
        }
    }
    let with_nic: BTreeSet<&String> = o.nics.values().collect();
    for busid in with_nic {
        if !m.nics.iter().any(|n| n.pci.map(|a| a.to_string()).as_ref() == Some(busid)) {
            errors.push(format!("{busid}: hwloc has a NIC there, accel none"));
        }
    }
    errors
}

#[test]
fn accel_agrees_with_lstopo_on_every_real_xml() {
    let mut functions = 0;
    let mut files = 0;
    for name in XMLS {
        let Some(xml) = read_xml(name) else {
            panic!("test_data/hwloc-xml/{name} is missing");
        };
        files += 1;
        let oracle = lstopo(name, &xml);
        let (import, host, machine) = accel(&xml);
        let dups: Vec<String> = DUPLICATES.iter().filter(|(f, _)| f == name).map(|(_, b)| (*b).to_owned()).collect();
        assert_eq!(oracle.duplicates, dups, "{name}: duplicated PCI functions");
        for d in &dups {
            assert!(import.warnings.iter().any(|w| w.contains(d.as_str())), "{name}: no warning for {d}");
        }
        let errors = compare(&oracle, &host, &machine);
        assert!(errors.is_empty(), "{name}: accel and lstopo disagree:\n{}", errors.join("\n"));
        assert!(!oracle.pci.is_empty() && !oracle.numa.is_empty(), "{name}: the oracle saw nothing");
        functions += oracle.pci.len();
    }
    assert_eq!(files, XMLS.len());
    assert!(functions >= 150, "compared only {functions} PCI functions");
}

/// Facts read off the XMLs by hand, each asserted on accel's result.
#[test]
fn facts_by_hand() {
    let count = |m: &Machine, vendor: u16, device: u16| {
        m.pci.iter().filter(|n| n.vendor.map(|v| v.0) == Some(vendor) && n.device.map(|d| d.0) == Some(device)).count()
    };
    // DGX-2: 16 V100 (10de:1db8), 12 NVSwitch functions (10de:1ac2, one reading 0000:0000).
    let (_, _, m) = accel(&read_xml("nvidiaDGX2.xml").unwrap());
    assert_eq!(count(&m, 0x10de, 0x1db8), 16);
    assert_eq!(m.accelerators.len(), 16);
    assert_eq!(count(&m, 0x10de, 0x1ac2), 11);
    assert_eq!(m.numa_nodes.len(), 2);
    // ProLiant SL390s: the ConnectX-2 at 05:00.0 carries eth2, ib0 and mlx4_0; DMI and hostname.
    let (import, host, m) = accel(&read_xml("24em64t-2n6c2t-pci.xml").unwrap());
    let nic = m.nics.iter().find(|n| n.rdma_device.as_deref() == Some("mlx4_0")).unwrap();
    assert_eq!(nic.pci.unwrap().to_string(), "0000:05:00.0");
    assert_eq!(m.host.product_name.as_deref(), Some("ProLiant SL390s G7"));
    assert_eq!(m.host.sys_vendor.as_deref(), Some("HP"));
    assert_eq!(m.host.hostname.as_deref(), Some("mirage004"));
    assert_eq!(m.numa_nodes[0].distances.get(&1), Some(&20));
    let ib0 = host.resolve_link(&host.path("/sys/class/net/ib0")).unwrap();
    assert!(ib0.to_string_lossy().contains("0000:05:00.0"), "{ib0:?}");
    assert_eq!(import.summary.rdma_devices, 1);
    // POWER8: four P100 (10de:15f9) in domains 0002, 0003, 000a, 000b; CUDA and OpenCL
    // handles recorded for them in the OS-device file.
    let (_, host, mut m) = accel(&read_xml("power8gpudistances.xml").unwrap());
    let gpus: Vec<String> =
        m.pci.iter().filter(|n| n.device.map(|d| d.0) == Some(0x15f9)).map(|n| n.id.clone()).collect();
    assert_eq!(gpus, ["0002:01:00.0", "0003:01:00.0", "000a:01:00.0", "000b:01:00.0"]);
    assert!(accel_discover::osdevs::annotate(&host, &mut m));
    assert_eq!(m.attributes.get("osdev.0002:01:00.0.cuda0.types").map(String::as_str), Some("gpu,coproc"));
    // No link widths invented: hwloc keeps only GB/s.
    assert!(m.pci.iter().all(|n| n.link.is_none()));
    assert_eq!(m.attributes.get("pci.0002:01:00.0.link_gbps").map(String::as_str), Some("15.753846"));
}

/// Real EC2 captures: GPU and EFA counts read off the XMLs.
#[test]
fn cloud_facts_by_hand() {
    let count = |m: &Machine, vendor: u16, device: u16| {
        m.pci.iter().filter(|n| n.vendor.map(|v| v.0) == Some(vendor) && n.device.map(|d| d.0) == Some(device)).count()
    };
    // p5en.48xlarge: 8 H200 (10de:2335) and 16 EFA (1d0f:efa2) behind four PCIe switches, two
    // EFA and two ENA per GPU pair; 4 NVSwitch functions (10de:22a3) on their own switch.
    let (_, _, m) = accel(&read_xml("aws-p5en-48xlarge.xml").unwrap());
    assert_eq!(m.host.product_name.as_deref(), Some("p5en.48xlarge"));
    assert_eq!(count(&m, 0x10de, 0x2335), 8, "H200");
    assert_eq!(count(&m, 0x1d0f, 0xefa2), 16, "EFA");
    assert_eq!(count(&m, 0x10de, 0x22a3), 4, "NVSwitch");
    assert_eq!(m.accelerators.iter().filter(|a| a.pci_vendor.map(|v| v.0) == Some(0x10de)).count(), 8);
    assert_eq!(m.nics.iter().filter(|n| n.rdma_device.is_some()).count(), 16);
    assert_eq!(m.numa_nodes.iter().map(|n| n.cpus.len()).collect::<Vec<_>>(), [96, 96]);
    // Each GPU shares its switch with four EFA: the GPU at 59:00.0 and rdmap85s0 meet at 46:xx.
    let (_, gpu_chain) = chain(&m, "0000:59:00.0").unwrap();
    let (_, efa_chain) = chain(&m, "0000:55:00.0").unwrap();
    assert_eq!(gpu_chain[..2], efa_chain[..2]);
    assert_eq!(gpu_chain[..2], ["0000:44:00.0".to_owned(), "0000:45:00.0".to_owned()]);

    // p6-b200.48xlarge: 8 B200 (10de:2901), 8 EFA (1d0f:efa3) and two ConnectX-7 (15b3:1021)
    // whose netdev and RDMA device share one name.
    let (_, host, m) = accel(&read_xml("aws-p6-b200-48xlarge.xml").unwrap());
    assert_eq!(m.host.product_name.as_deref(), Some("p6-b200.48xlarge"));
    assert_eq!(count(&m, 0x10de, 0x2901), 8, "B200");
    assert_eq!(count(&m, 0x1d0f, 0xefa3), 8, "EFA");
    assert_eq!(count(&m, 0x15b3, 0x1021), 2, "ConnectX-7");
    let cx7 = m.nics.iter().find(|n| n.pci.map(|a| a.to_string()).as_deref() == Some("0000:73:00.0")).unwrap();
    assert_eq!((cx7.netdev.as_deref(), cx7.rdma_device.as_deref()), (Some("ibp115s0f0"), Some("ibp115s0f0")));
    let state = host.read_attr(&host.path("/sys/class/infiniband/ibp116s0f0/ports/1/lid"), "t", &mut Vec::new());
    assert_eq!(state.as_deref(), Some("0x4"));

    // p6-b300.48xlarge: 8 B300 (10de:3182), each alone with two EFA (1d0f:efa3) and an NVMe on
    // its own PCIe switch, four per socket; one ENA; two ConnectX-7 (15b3:1021) on socket 1.
    let (_, _, m) = accel(&read_xml("aws-p6-b300-48xlarge.xml").unwrap());
    assert_eq!(m.host.product_name.as_deref(), Some("p6-b300.48xlarge"));
    assert_eq!(count(&m, 0x10de, 0x3182), 8, "B300");
    assert_eq!(count(&m, 0x1d0f, 0xefa3), 16, "EFA");
    assert_eq!(count(&m, 0x1d0f, 0xec20), 1, "ENA");
    assert_eq!(count(&m, 0x15b3, 0x1021), 2, "ConnectX-7");
    let b300: Vec<_> = m.accelerators.iter().filter(|a| a.pci_device.map(|d| d.0) == Some(0x3182)).collect();
    assert_eq!(b300.len(), 8);
    assert!(b300.iter().all(|a| a.sku.as_deref() == Some("nvidia-b300")), "{b300:?}");
    assert_eq!(b300.iter().filter(|a| a.numa_node == Some(1)).count(), 4);
    assert_eq!(m.nics.iter().filter(|n| n.rdma_device.is_some()).count(), 18);
    assert_eq!(m.numa_nodes.iter().map(|n| n.cpus.len()).collect::<Vec<_>>(), [96, 96]);
    assert_eq!(m.numa_nodes[0].distances.get(&1), Some(&21));
    // The GPU at 58:00.0 and rdmap86s0 (56:00.0) meet under the switch port 4c:00.0.
    let (_, gpu_chain) = chain(&m, "0000:58:00.0").unwrap();
    let (_, efa_chain) = chain(&m, "0000:56:00.0").unwrap();
    assert_eq!(gpu_chain[..2], efa_chain[..2]);
    assert_eq!(gpu_chain[..2], ["0000:4b:00.0".to_owned(), "0000:4c:00.0".to_owned()]);

    // p6e-gb200.36xlarge (aarch64): 4 GB200 (10de:2941), 16 EFA, 9 ENA; two Grace packages of 72
    // single-thread cores, one NUMA node each, two GPUs per package.
    let (_, _, m) = accel(&read_xml("aws-p6e-gb200-36xlarge.xml").unwrap());
    assert_eq!(m.host.product_name.as_deref(), Some("p6e-gb200.36xlarge"));
    assert_eq!(count(&m, 0x10de, 0x2941), 4, "GB200");
    assert_eq!(count(&m, 0x1d0f, 0xefa3), 16, "EFA");
    assert_eq!(count(&m, 0x1d0f, 0xec20), 9, "ENA");
    let gb200: Vec<_> = m.accelerators.iter().filter(|a| a.pci_device.map(|d| d.0) == Some(0x2941)).collect();
    assert_eq!(gb200.len(), 4);
    assert_eq!(gb200.iter().map(|a| a.numa_node).collect::<Vec<_>>(), [Some(0), Some(0), Some(1), Some(1)]);
    assert_eq!(m.nics.iter().filter(|n| n.rdma_device.is_some()).count(), 16);
    assert_eq!(m.numa_nodes.iter().map(|n| n.cpus.len()).collect::<Vec<_>>(), [72, 72]);
    assert_eq!(m.numa_nodes[0].distances.get(&1), Some(&20));

    let (_, _, m) = accel(&read_xml("aws-p4d-24xlarge.xml").unwrap());
    assert_eq!(m.host.product_name.as_deref(), Some("p4d.24xlarge"));
    assert_eq!(count(&m, 0x10de, 0x20b0), 8, "A100");
    assert_eq!(count(&m, 0x1d0f, 0xefa0), 4, "EFA");
    // Two NUMA nodes, 48 CPUs each; each GPU and EFA on its socket's node; four RDMA devices.
    assert_eq!(m.numa_nodes.iter().map(|n| n.cpus.len()).collect::<Vec<_>>(), [48, 48]);
    let gpu = m.pci_node("0000:90:1c.0").unwrap();
    assert_eq!(gpu.numa_node, Some(1));
    assert_eq!(m.nics.iter().filter(|n| n.rdma_device.is_some()).count(), 4);
    assert_eq!(m.numa_nodes[0].distances.get(&1), Some(&21));
}

// ---------------------------------------------------------------------------------------------
// The checks fail on broken input.

/// `xml` without the object element whose opening tag contains `needle` (and what it holds).
fn remove_object(xml: &str, needle: &str) -> String {
    let at = xml.find(needle).expect("needle in the XML");
    let start = xml[..at].rfind("<object").unwrap();
    let mut depth = 0;
    let mut i = start;
    loop {
        let open = xml[i..].find("<object").map(|p| p + i);
        let close = xml[i..].find("</object>").map(|p| p + i);
        match (open, close) {
            (Some(o), Some(c)) if o < c => {
                let end = xml[o..].find('>').unwrap() + o;
                if !xml[..end].ends_with('/') {
                    depth += 1;
                } else if depth == 0 {
                    return format!("{}{}", &xml[..start], &xml[end + 1..]);
                }
                i = end + 1;
            }
            (_, Some(c)) => {
                depth -= 1;
                i = c + "</object>".len();
                if depth == 0 {
                    return format!("{}{}", &xml[..start], &xml[i..]);
                }
            }
            _ => panic!("unbalanced XML"),
        }
    }
}

#[test]
fn every_check_fails_on_broken_input() {
    let name = "24em64t-2n6c2t-pci.xml";
    let xml = String::from_utf8(read_xml(name).unwrap()).unwrap();
    let oracle = lstopo(name, xml.as_bytes());
    let (_, host, good) = accel(xml.as_bytes());
    assert!(compare(&oracle, &host, &good).is_empty());
    let fails = |m: &Machine, host: &Host, what: &str| {
        let errors = compare(&oracle, host, m);
        assert!(errors.iter().any(|e| e.contains(what)), "expected a {what:?} error, got {errors:?}");
    };

    // A PCI function removed from the XML.
    let broken = remove_object(&xml, "pci_busid=\"0000:06:00.0\"");
    let (_, h, m) = accel(broken.as_bytes());
    fails(&m, &h, "PCI functions");
    // Ids changed in the XML.
    let (_, h, m) = accel(xml.replacen("[10de:06d2]", "[10de:06d3]", 1).as_bytes());
    fails(&m, &h, "ids/class");
    // A NIC moved to another function in the XML: eth0 under 04:00.1.
    let moved = xml.replacen("name=\"eth0\"", "name=\"ethX\"", 1).replacen("name=\"eth1\"", "name=\"eth0\"", 1);
    let (_, h, m) = accel(moved.as_bytes());
    fails(&m, &h, "NIC eth0");

    // Machine-level breakage: each comparison on its own.
    let mut m = good.clone();
    m.numa_nodes[0].cpus = CpuSet::parse_list("0-3").unwrap();
    fails(&m, &host, "CPUs of NUMA node 0");
    let mut m = good.clone();
    m.numa_nodes.pop();
    fails(&m, &host, "NUMA node ids");
    let mut m = good.clone();
    let i = m.pci.iter().position(|n| n.id == "0000:06:00.0").unwrap();
    m.pci[i].numa_node = Some(1);
    fails(&m, &host, "NUMA locality");
    let mut m = good.clone();
    m.pci[i].parent = Some("0000:00:01.0".into());
    fails(&m, &host, "bridges above");
    let mut m = good.clone();
    let n = m.nics.iter().position(|n| n.rdma_device.as_deref() == Some("mlx4_0")).unwrap();
    m.nics[n].pci = Some("0000:04:00.0".parse().unwrap());
    fails(&m, &host, "NIC mlx4_0");
    let mut m = good.clone();
    m.nics.retain(|n| n.pci.map(|a| a.to_string()).as_deref() != Some("0000:05:00.0"));
    fails(&m, &host, "hwloc has a NIC there");
    // A capture whose class link points at the wrong function.
    let mut tree: MemTree = accel_hwloc::import(xml.as_bytes()).unwrap().tree;
    tree.add_link("/sys/class/net/eth2", "../../devices/pci0000:00/0000:00:01.0/0000:04:00.0/net/eth2");
    let h = Host::in_memory(Arc::new(tree), SkuRegistry::builtin());
    let m = discover(&h, &default_plugins());
    fails(&m, &h, "NIC eth2");
}
