//! Text renderers: the `accel topo` matrix and PCI tree, the `discover` summary, the SKU table.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use accel_model::{Accelerator, CpuSet, Endpoint, Machine, PathClass, PathClassifier, PciNodeKind, SkuRegistry};
use serde::Serialize;

/// Row and column labels: accelerators by their plugin's label (`GPU0`, `TPU0`, `NRN0`, `HPU0`,
/// `LPU0`, `ACC0`; the names the planner accepts), then `NIC0`...
fn labels(machine: &Machine) -> Vec<String> {
    let mut out = machine.device_labels();
    out.extend((0..machine.nics.len()).map(|i| format!("NIC{i}")));
    out
}

/// The CPUs and NUMA node an endpoint is local to.
fn affinity(machine: &Machine, e: Endpoint) -> (Option<CpuSet>, Option<u32>) {
    let (pci, numa) = match e {
        Endpoint::Accelerator(i) => (machine.accelerators[i].pci, machine.accelerators[i].numa_node),
        Endpoint::Nic(i) => (machine.nics[i].pci, machine.nics[i].numa_node),
    };
    let cpus = pci
        .and_then(|a| machine.pci_device(a))
        .and_then(|n| n.local_cpus.clone())
        .filter(|c| !c.is_empty())
        .or_else(|| numa.and_then(|n| machine.numa_node(n)).map(|n| n.cpus.clone()).filter(|c| !c.is_empty()));
    (cpus, numa)
}

#[derive(Debug, Serialize)]
pub struct MatrixJson {
    pub endpoints: Vec<EndpointJson>,
    pub matrix: Vec<Vec<PathClass>>,
}

#[derive(Debug, Serialize)]
pub struct EndpointJson {
    pub label: String,
    /// Accelerator id, or NIC name.
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pci: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_affinity: Option<CpuSet>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub numa_affinity: Option<u32>,
}

pub fn matrix_json(machine: &Machine) -> MatrixJson {
    let classifier = PathClassifier::new(machine);
    let labels = labels(machine);
    let endpoints = classifier
        .endpoints()
        .into_iter()
        .zip(labels)
        .map(|(e, label)| {
            let (cpu_affinity, numa_affinity) = affinity(machine, e);
            let (id, pci) = match e {
                Endpoint::Accelerator(i) => (machine.accelerators[i].id.clone(), machine.accelerators[i].pci),
                Endpoint::Nic(i) => (machine.nics[i].name.clone(), machine.nics[i].pci),
            };
            EndpointJson { label, id, pci: pci.map(|p| p.to_string()), cpu_affinity, numa_affinity }
        })
        .collect();
    MatrixJson { endpoints, matrix: classifier.matrix() }
}

/// The full `accel topo` page: host, NUMA, PCI tree, matrix, legends, warnings.
pub fn render(machine: &Machine) -> String {
    let mut s = String::new();
    header(machine, &mut s);
    numa(machine, &mut s);
    pci_tree(machine, &mut s);
    matrix(machine, &mut s);
    domains(machine, &mut s);
    warnings(machine, &mut s);
    s
}

/// The `accel discover` text: host, NUMA, devices and links, warnings.
pub fn summary(machine: &Machine) -> String {
    let mut s = String::new();
    header(machine, &mut s);
    numa(machine, &mut s);
    let labels = labels(machine);
    if machine.accelerators.is_empty() {
        s.push_str("No accelerators found.\n\n");
    } else {
        let _ = writeln!(s, "Accelerators ({}):", machine.accelerators.len());
        for (acc, label) in machine.accelerators.iter().zip(&labels) {
            let _ = writeln!(s, "  {label:<6} {}", describe(acc));
        }
        s.push('\n');
    }
    if !machine.links.is_empty() {
        let _ = writeln!(s, "Scale-up links ({}):", machine.links.len());
        for link in &machine.links {
            let gbps = link.gbps.map(|g| format!(" {g} GB/s")).unwrap_or_default();
            let hops = link.hops.map(|h| format!(" {h} hop{}", if h == 1 { "" } else { "s" })).unwrap_or_default();
            let from = match (link.origin, &link.source) {
                (accel_model::LinkOrigin::Declared, Some(src)) => format!("  declared by design: {src}"),
                (accel_model::LinkOrigin::Declared, None) => "  declared by design".to_owned(),
                (_, Some(src)) => format!("  observed ({src})"),
                (_, None) => String::new(),
            };
            let _ = writeln!(s, "  {} <-> {}  {} x{}{gbps}{hops}{from}", link.a, link.b, link.kind, link.count);
        }
        s.push('\n');
    }
    nic_legend(machine, &labels[machine.accelerators.len()..], &mut s);
    domains(machine, &mut s);
    warnings(machine, &mut s);
    s
}

/// Domains (with where each came from) and platform attributes, when there are any.
fn domains(machine: &Machine, s: &mut String) {
    if !machine.domains.is_empty() {
        let _ = writeln!(s, "Domains ({}):", machine.domains.len());
        for d in &machine.domains {
            let members = if d.accelerators.is_empty() {
                String::new()
            } else {
                format!(", {} accelerators", d.accelerators.len())
            };
            let _ = writeln!(s, "  {:<14} {}  (from {}{members})", d.kind.as_str(), d.name, d.source);
        }
        s.push('\n');
    }
    // Raw metadata documents (`gce.tpu-env`) are kept for captures, not shown; nor, one by one,
    // the per-device infos an imported topology tool recorded (hundreds on a cloud instance).
    let is_osdev = |k: &str| accel_discover::osdevs::is_osdev_attribute(k);
    let shown: Vec<_> = machine.attributes.iter().filter(|(k, _)| !k.starts_with("gce.") && !is_osdev(k)).collect();
    let osdev = machine.attributes.keys().filter(|k| is_osdev(k)).count();
    if !shown.is_empty() || osdev > 0 {
        let _ = writeln!(s, "Platform:");
        for (k, v) in shown {
            // Values may hold line breaks (documents); one line each here.
            let _ = writeln!(s, "  {k} = {}", accel_discover::validate::escape_controls(v, false));
        }
        if osdev > 0 {
            let _ =
                writeln!(s, "  {osdev} per-device infos recorded by the imported topology tool (`--json` lists them)");
        }
        s.push('\n');
    }
}

fn describe(acc: &Accelerator) -> String {
    let mut parts = vec![acc.product.clone()];
    if let Some(pci) = acc.pci {
        parts.push(pci.to_string());
    }
    parts.push(format!("{} #{}", acc.vendor, acc.index));
    if let Some(mem) = acc.memory_bytes {
        parts.push(bytes(mem));
    }
    parts.push(match acc.numa_node {
        Some(n) => format!("numa {n}"),
        None => "numa ?".into(),
    });
    parts.join(", ")
}

fn header(machine: &Machine, s: &mut String) {
    let host = &machine.host;
    let name = host.hostname.as_deref().unwrap_or("(hostname unknown)");
    let product = match (&host.sys_vendor, &host.product_name) {
        (Some(v), Some(p)) => format!(" - {v} {p}"),
        (None, Some(p)) => format!(" - {p}"),
        _ => String::new(),
    };
    let _ = writeln!(s, "Host {name}{product}\n");
}

fn numa(machine: &Machine, s: &mut String) {
    let _ = writeln!(s, "NUMA nodes ({}):", machine.numa_nodes.len());
    for node in &machine.numa_nodes {
        let cpus = match (&node.memory_of, node.cpus.is_empty()) {
            (Some(owner), _) => format!("(memory of {owner})"),
            (None, true) => "(memory only)".to_owned(),
            (None, false) => format!("cpus {}", node.cpus),
        };
        let mem = node.memory_bytes.map(|b| format!("  memory {}", bytes(b))).unwrap_or_default();
        let dist = if node.distances.is_empty() {
            String::new()
        } else {
            let d: Vec<String> = node.distances.values().map(u32::to_string).collect();
            format!("  distances {}", d.join(" "))
        };
        let _ = writeln!(s, "  node{:<4} {cpus}{mem}{dist}", node.id);
    }
    s.push('\n');
}

/// The PCI tree, pruned to what matters here: the branches leading to accelerators and NICs.
fn pci_tree(machine: &Machine, s: &mut String) {
    let labels = labels(machine);
    let mut tags: BTreeMap<String, String> = BTreeMap::new();
    for (acc, label) in machine.accelerators.iter().zip(&labels) {
        if let Some(pci) = acc.pci {
            tags.insert(pci.to_string(), label.clone());
        }
    }
    for (nic, label) in machine.nics.iter().zip(&labels[machine.accelerators.len()..]) {
        if let Some(pci) = nic.pci {
            tags.insert(pci.to_string(), format!("{label} {}", nic.name));
        }
    }
    let mut keep: BTreeSet<&str> = BTreeSet::new();
    for id in tags.keys() {
        let mut cursor = machine.pci_node(id);
        for _ in 0..machine.pci.len() {
            let Some(node) = cursor else { break };
            if !keep.insert(node.id.as_str()) {
                break;
            }
            cursor = node.parent.as_deref().and_then(|p| machine.pci_node(p));
        }
    }
    let depth = |id: &str| {
        let mut d = 0;
        let mut cursor = machine.pci_node(id).and_then(|n| n.parent.as_deref());
        while let Some(p) = cursor {
            d += 1;
            cursor = machine.pci_node(p).and_then(|n| n.parent.as_deref());
            if d > machine.pci.len() {
                break;
            }
        }
        d
    };
    let endpoints = machine.pci.iter().filter(|n| n.kind == PciNodeKind::Endpoint).count();
    let _ = writeln!(
        s,
        "PCI tree ({} host bridges, {} functions; showing accelerators and NICs):",
        machine.pci.iter().filter(|n| n.kind == PciNodeKind::HostBridge).count(),
        machine.pci.len() - machine.pci.iter().filter(|n| n.kind == PciNodeKind::HostBridge).count()
    );
    for node in machine.pci.iter().filter(|n| keep.contains(n.id.as_str())) {
        let indent = "  ".repeat(depth(&node.id) + 1);
        let ids = match (node.vendor, node.device) {
            (Some(v), Some(d)) => format!(" {v}:{d}"),
            _ => String::new(),
        };
        let class = node.class.map(|c| format!(" {}", c.name())).unwrap_or_default();
        let link = node.link.map(|l| format!(" {} GT/s x{}", l.gts, l.width)).unwrap_or_default();
        let numa = node.numa_node.map(|n| format!(" numa {n}")).unwrap_or_default();
        let tag = tags.get(&node.id).map(|t| format!("  [{t}]")).unwrap_or_default();
        match node.kind {
            PciNodeKind::HostBridge => {
                let _ = writeln!(s, "{indent}{} host bridge", node.id);
            }
            _ => {
                let _ = writeln!(s, "{indent}{}{class}{ids}{link}{numa}{tag}", node.id);
            }
        }
    }
    let shown = keep.iter().filter(|id| machine.pci_node(id).is_some_and(|n| n.kind == PciNodeKind::Endpoint)).count();
    if endpoints > shown {
        let _ = writeln!(s, "  (+{} other endpoints; `accel discover --json` lists every one)", endpoints - shown);
    }
    s.push('\n');
}

fn matrix(machine: &Machine, s: &mut String) {
    if machine.accelerators.is_empty() {
        s.push_str("No accelerators found.\n\n");
        if machine.nics.is_empty() {
            return;
        }
    }
    let json = matrix_json(machine);
    let labels: Vec<&str> = json.endpoints.iter().map(|e| e.label.as_str()).collect();
    // Wide enough for every label and every class (`XGMI1`, `ROCE21`), plus a separating space.
    let widest_class = json.matrix.iter().flatten().map(|c| c.to_string().len()).max().unwrap_or(0);
    let width = labels.iter().map(|l| l.len()).max().unwrap_or(4).max(4).max(widest_class) + 1;
    let declared: BTreeSet<(&str, &str)> =
        machine.links.iter().filter(|l| l.is_declared()).map(|l| (l.a.as_str(), l.b.as_str())).collect();
    let is_declared = |a: &str, b: &str| declared.contains(&(a, b)) || declared.contains(&(b, a));
    // One more column for the `*` of a declared link.
    let width = if declared.is_empty() { width } else { width + 1 };
    let _ = write!(s, "{:width$}", "");
    for label in &labels {
        let _ = write!(s, "{label:>width$}");
    }
    let _ = writeln!(s, "  {:<20}NUMA Affinity", "CPU Affinity");
    for (row, endpoint) in json.matrix.iter().zip(&json.endpoints) {
        let _ = write!(s, "{:width$}", endpoint.label);
        for (class, other) in row.iter().zip(&json.endpoints) {
            let mark = if is_declared(&endpoint.id, &other.id) { "*" } else { "" };
            let _ = write!(s, "{:>width$}", format!("{class}{mark}"));
        }
        let cpus = endpoint.cpu_affinity.as_ref().map_or_else(|| "N/A".to_owned(), CpuSet::to_string);
        let numa = endpoint.numa_affinity.map_or_else(|| "N/A".to_owned(), |n| n.to_string());
        let _ = writeln!(s, "  {cpus:<20}{numa}");
    }
    s.push_str(
        "\nLegend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes\n  \
         NODE = Connection traversing PCIe as well as the interconnect between PCIe host bridges within a NUMA node\n  \
         PHB  = Connection traversing PCIe as well as a PCIe host bridge (typically the CPU)\n  \
         PXB  = Connection traversing multiple PCIe switches (without traversing the PCIe host bridge)\n  \
         PIX  = Connection traversing at most a single PCIe switch\n",
    );
    link_legend(machine, s);
    s.push('\n');
    if !machine.accelerators.is_empty() {
        s.push_str("Accelerator Legend:\n\n");
        for (acc, label) in machine.accelerators.iter().zip(&labels) {
            let _ = writeln!(s, "  {label}: {}", describe(acc));
        }
        s.push('\n');
    }
    let nic_labels: Vec<String> = labels[machine.accelerators.len()..].iter().map(|l| l.to_string()).collect();
    nic_legend(machine, &nic_labels, s);
}

/// One legend line per matrix tag of the machine's links (`NV# = NVLink (direct); NVLink through
/// NVSwitch, # bonded links`), from the link kinds their plugins declared; and, where links were
/// declared by design rather than observed, the line that says so and where they come from.
fn link_legend(machine: &Machine, s: &mut String) {
    let mut declared: Vec<&str> =
        machine.links.iter().filter(|l| l.is_declared()).map(|l| l.source.as_deref().unwrap_or("registry")).collect();
    declared.dedup();
    for source in declared {
        let _ = writeln!(s, "  *    = declared by design, not observed ({source})");
    }
    let mut kinds: Vec<accel_model::LinkKind> = machine.links.iter().map(|l| l.kind).collect();
    kinds.sort();
    kinds.dedup();
    let mut by_tag: Vec<(String, Vec<String>)> = Vec::new();
    for kind in kinds {
        let info = machine.link_kind(kind);
        let tag = format!("{}#", info.short);
        match by_tag.iter_mut().find(|(t, _)| *t == tag) {
            Some((_, names)) => names.push(info.name),
            None => by_tag.push((tag, vec![info.name])),
        }
    }
    for (tag, names) in by_tag {
        let _ = writeln!(s, "  {tag:<4} = {}, # bonded links", names.join("; "));
    }
}

fn nic_legend(machine: &Machine, labels: &[String], s: &mut String) {
    if machine.nics.is_empty() {
        s.push_str("No NICs found on PCI.\n\n");
        return;
    }
    s.push_str("NIC Legend:\n\n");
    for (nic, label) in machine.nics.iter().zip(labels) {
        let mut parts = Vec::new();
        if let Some(pci) = nic.pci {
            parts.push(pci.to_string());
        }
        if let (Some(netdev), true) = (&nic.netdev, nic.rdma_device.is_some()) {
            parts.push(netdev.clone());
        }
        if let Some(speed) = nic.speed_mbps {
            parts.push(format!("{} Gb/s", speed as f64 / 1000.0));
        }
        if nic.rdma {
            parts.push("RDMA".into());
        }
        let _ = writeln!(s, "  {label}: {} ({})", nic.name, parts.join(", "));
    }
    s.push('\n');
}

fn warnings(machine: &Machine, s: &mut String) {
    if machine.warnings.is_empty() {
        return;
    }
    let _ = writeln!(s, "Warnings ({}):", machine.warnings.len());
    for w in &machine.warnings {
        let _ = writeln!(s, "  {w}");
    }
}

pub fn skus(registry: &SkuRegistry) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<28} {:<8} {:<14} {:>9} {:>10}  {:<22} product",
        "id", "vendor", "pci", "memory", "bf16 TF", "scale-up"
    );
    for sku in registry.all() {
        let pci = sku.pci.first().map(|m| format!("{:04x}:{:04x}", m.vendor, m.device)).unwrap_or_else(|| "-".into());
        let mem = sku.memory_bytes.map(bytes).unwrap_or_else(|| "-".into());
        let tf = sku.bf16_dense_tflops.map(|t| format!("{t:.0}")).unwrap_or_else(|| "-".into());
        let up = sku.scale_up.map(|u| format!("{} x{} {} GB/s", u.kind, u.links, u.gbps)).unwrap_or_else(|| "-".into());
        let _ = writeln!(
            s,
            "{:<28} {:<8} {:<14} {:>9} {:>10}  {:<22} {}",
            sku.id, sku.vendor, pci, mem, tf, up, sku.product
        );
    }
    let _ = writeln!(
        s,
        "\n{} SKUs. Sources: `accel skus --json`. Add your own with ACCEL_SKU_DIR or --sku-file.",
        registry.all().len()
    );
    s
}

fn bytes(b: u64) -> String {
    const GIB: f64 = (1u64 << 30) as f64;
    format!("{:.1} GiB", b as f64 / GIB)
}
