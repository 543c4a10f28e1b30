//! All of hwloc's own Linux test captures (`open-mpi/hwloc` `tests/hwloc/linux/*.tar.bz2`: 38 in
//! `test_data/hwloc-linux/`, the other 4 embedded as samples in `test_data/hosts/hwloc-*`),
//! cross-checked against Debian's `lstopo` reading the same tree (`HWLOC_FSROOT`): the PCI
//! functions, the NUMA node ids and the CPUs of every node that has CPUs. Where accel differs on
//! purpose, the difference is listed below with its reason (docs/hwloc.md); each is asserted, so
//! a difference that goes away is noticed too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use accel_discover::{default_plugins, discover, Host};
use accel_model::{CpuSet, Machine, PciNodeKind, SkuRegistry};

/// Functions accel reports and lstopo does not, per capture:
/// - `0000:00:11.0`: a root port with nothing below it, which hwloc removes;
/// - `0000:5f:03.0`: a bridge on the sysfs path of a device but missing from
///   `/sys/bus/pci/devices`, the only list hwloc enumerates (docs/hwloc.md, difference 1);
/// - `10000:...`: 32-bit PCI domains, which Debian's hwloc ignores (difference 2).
const EXTRA_PCI: &[(&str, &[&str])] = &[
    ("32em64t-2n8c+dax+nvme+mic+dimms", &["0000:00:11.0"]),
    ("hwloc-2p8co2t-8ve", &["0000:5f:03.0"]),
    ("hwloc-kvm-pcidomain32", &["10000:00:00.0", "10000:00:04.0"]),
];

/// NUMA nodes the kernel lists that hwloc merges away: `8em64t-2s2ca2c-buggynuma` reports eight
/// nodes that each hold all 8 CPUs; hwloc merges them into one, accel keeps the kernel's ids
/// (devices name them in `numa_node`) and warns that the nodes share CPUs.
const MERGED_NUMA: &[(&str, &[u32])] = &[("8em64t-2s2ca2c-buggynuma", &[1, 2, 3, 4, 5, 6, 7])];

/// The environment a capture's hwloc test descriptor (`.test`) sets that changes what lstopo
/// reports of NUMA or PCI.
const LSTOPO_ENV: &[(&str, &str, &str)] = &[("fakeheterocpunuma", "HWLOC_DEBUG_ALLOW_OVERLAPPING_NODE_CPUSETS", "1")];

/// What lstopo says about one capture.
#[derive(Debug, Default)]
struct Oracle {
    numa: BTreeMap<u32, CpuSet>,
    pci: BTreeSet<String>,
}

fn lstopo(name: &str, root: &Path) -> Oracle {
    let mut cmd = Command::new("lstopo");
    // `--whole-system`: the whole machine, not the part this process's cgroup may use (accel
    // reads the hardware, not its own allowance).
    cmd.args(["--of", "xml", "--whole-io", "--whole-system", "-"])
        .env("HWLOC_FSROOT", root)
        .env("HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES", "1")
        .env("HWLOC_SHOW_ERRORS", "none");
    for (capture, k, v) in LSTOPO_ENV {
        if *capture == name {
            cmd.env(k, v);
        }
    }
    let out = cmd
        .output()
        .expect("lstopo is needed for this test: install Debian's hwloc package (the README's test command does)");
    assert!(out.status.success(), "{name}: lstopo failed: {}", String::from_utf8_lossy(&out.stderr));
    let xml = String::from_utf8(out.stdout).unwrap();
    let options = roxmltree::ParsingOptions { allow_dtd: true, ..Default::default() };
    let doc = roxmltree::Document::parse_with_options(&xml, options).expect("lstopo writes valid XML");
    let mut o = Oracle::default();
    for node in doc.descendants().filter(|n| n.has_tag_name("object")) {
        match node.attribute("type") {
            Some("NUMANode") => {
                let id: u32 = node.attribute("os_index").unwrap().parse().unwrap();
                o.numa.insert(id, CpuSet::parse_mask(node.attribute("cpuset").unwrap()).unwrap());
            }
            Some("PCIDev") | Some("Bridge") => {
                if let Some(b) = node.attribute("pci_busid") {
                    o.pci.insert(b.to_owned());
                }
            }
            _ => {}
        }
    }
    o
}

/// Every capture: the 38 of `test_data/hwloc-linux` and the 4 embedded samples.
fn captures() -> Vec<(String, std::path::PathBuf)> {
    let mut out: Vec<(String, std::path::PathBuf)> =
        accel_testdata::hwloc_linux().into_iter().map(|n| (n.clone(), accel_testdata::hwloc_linux_root(&n))).collect();
    out.extend(accel_testdata::hosts().into_iter().map(|h| (h.clone(), accel_testdata::root(&h))));
    out
}

/// How accel and lstopo differ on one capture, beyond the listed differences.
fn compare(name: &str, o: &Oracle, m: &Machine) -> Vec<String> {
    let mut errors = Vec::new();
    let ours: BTreeSet<String> =
        m.pci.iter().filter(|n| n.kind != PciNodeKind::HostBridge).map(|n| n.id.clone()).collect();
    let extra: BTreeSet<String> = ours.difference(&o.pci).cloned().collect();
    let expected: BTreeSet<String> =
        EXTRA_PCI.iter().filter(|(c, _)| *c == name).flat_map(|(_, ids)| ids.iter().map(|s| (*s).to_owned())).collect();
    if extra != expected {
        errors.push(format!("functions only accel reports: {extra:?} (expected {expected:?})"));
    }
    let missing: Vec<&String> = o.pci.difference(&ours).collect();
    if !missing.is_empty() {
        errors.push(format!("functions only lstopo reports: {missing:?}"));
    }
    let merged: Vec<u32> = MERGED_NUMA.iter().filter(|(c, _)| *c == name).flat_map(|(_, ids)| ids.to_vec()).collect();
    let ids: Vec<u32> = m.numa_nodes.iter().map(|n| n.id).filter(|id| !merged.contains(id)).collect();
    let theirs: Vec<u32> = o.numa.keys().copied().collect();
    if ids != theirs {
        errors.push(format!("NUMA node ids: accel {ids:?}, lstopo {theirs:?}"));
    }
    // CPUs of every node that has some (hwloc gives a memory-only node its neighbour's CPUs).
    for node in m.numa_nodes.iter().filter(|n| !n.cpus.is_empty() && !merged.contains(&n.id)) {
        match o.numa.get(&node.id) {
            Some(cpus) if *cpus == node.cpus => {}
            other => errors.push(format!("CPUs of node {}: accel {}, lstopo {other:?}", node.id, node.cpus)),
        }
    }
    errors
}

#[test]
fn every_hwloc_linux_capture_agrees_with_lstopo() {
    let all = captures();
    assert_eq!(all.len(), 42, "hwloc's 42 Linux test captures");
    let mut failures = Vec::new();
    let (mut functions, mut nodes) = (0, 0);
    for (name, root) in &all {
        let oracle = lstopo(name, root);
        let m = discover(&Host::new(root, SkuRegistry::builtin()), &default_plugins());
        for e in compare(name, &oracle, &m) {
            failures.push(format!("{name}: {e}"));
        }
        functions += oracle.pci.len();
        nodes += oracle.numa.len();
        if MERGED_NUMA.iter().any(|(c, _)| c == name) {
            assert!(m.warnings.iter().any(|w| w.message.contains("share CPUs")), "{name}: {:#?}", m.warnings);
        }
    }
    assert!(failures.is_empty(), "accel and lstopo disagree:\n{}", failures.join("\n"));
    assert!(functions >= 240 && nodes >= 240, "compared only {functions} PCI functions and {nodes} NUMA nodes");
}

#[test]
fn the_cross_check_fails_on_a_changed_machine() {
    let (name, root) = ("16amd64-8n2c", accel_testdata::hwloc_linux_root("16amd64-8n2c"));
    let oracle = lstopo(name, &root);
    let m = discover(&Host::new(&root, SkuRegistry::builtin()), &default_plugins());
    assert!(compare(name, &oracle, &m).is_empty());
    // A node's CPUs changed, a node dropped, a PCI function added: each is caught.
    let mut changed = m.clone();
    changed.numa_nodes[0].cpus = CpuSet::new(vec![0]);
    assert!(compare(name, &oracle, &changed).iter().any(|e| e.contains("CPUs of node 0")));
    let mut dropped = m.clone();
    dropped.numa_nodes.pop();
    assert!(compare(name, &oracle, &dropped).iter().any(|e| e.contains("NUMA node ids")));
    let mut added = m.clone();
    added.pci.push(accel_model::PciNode::new("0000:99:00.0".into(), PciNodeKind::Endpoint, None));
    assert!(compare(name, &oracle, &added).iter().any(|e| e.contains("only accel")));
}
