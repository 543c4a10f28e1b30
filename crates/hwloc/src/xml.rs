//! Reads an hwloc topology XML (format 2.0, and 3.0 with its bitmask OS-device types) into the
//! facts the importer keeps: machine infos, CPUs, NUMA nodes and distances, the PCI tree with
//! each function's locality, and the OS devices under each function.
//!
//! Every limit is explicit, so a hostile file (huge ids or counts, deep nesting, control
//! characters) is an error or a warning, never a panic, a hang or a huge allocation.

use std::collections::{BTreeMap, BTreeSet};

use accel_model::{CpuSet, PciAddr};

/// Why an XML could not be imported at all (a partial import is warnings instead).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    #[error("the file is larger than {0} bytes")]
    TooLarge(usize),
    #[error("not XML: {0}")]
    NotXml(String),
    #[error("not an hwloc topology: {0}")]
    NotHwloc(String),
    #[error("unsupported hwloc XML version {0:?} (2.x and 3.x are read; export again with hwloc 2 or later)")]
    Version(String),
}

/// The largest XML read (real `lstopo --whole-io` files are well under 1 MiB).
pub const MAX_XML_BYTES: usize = 64 << 20;
/// The most XML nodes parsed.
const MAX_XML_NODES: u32 = 4_000_000;
/// The largest CPU or NUMA node id kept.
const MAX_ID: u32 = 1 << 16;
/// The most NUMA nodes, PCI functions and OS devices kept.
const MAX_NUMA: usize = 4096;
const MAX_PCI: usize = 65_536;
const MAX_OSDEVS: usize = 65_536;
/// The deepest element nesting read (real files nest about 20 deep).
const MAX_NESTING: usize = 512;
/// The deepest PCI bridge chain kept.
const MAX_BRIDGE_DEPTH: usize = 32;
/// The most infos kept per object, and the longest info name and value.
const MAX_INFOS: usize = 256;
const MAX_INFO_NAME: usize = 128;
const MAX_INFO_VALUE: usize = 4096;
/// The most warnings kept (the rest are counted).
const MAX_WARNINGS: usize = 200;
/// The most objects of one distance matrix other than NUMA latencies (a GPU matrix holds one
/// row per runtime device: 24 on a 4-APU node in CPX mode) and the most such matrices.
const MAX_MATRIX_OBJECTS: usize = 1024;
const MAX_MATRICES: usize = 64;

/// The two XML formats hwloc writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `version="2.0"`: `osdev_type` is an enum.
    V2,
    /// `version="3.0"`: `osdev_type` is a bitmask.
    V3,
}

/// A NUMA node as hwloc recorded it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Numa {
    /// hwloc's cpuset: the CPUs the node is local to (for a memory-only node, those of the
    /// object it is attached to).
    pub locality: CpuSet,
    /// `local_memory` in bytes.
    pub memory: Option<u64>,
    /// `subtype` (`GPUMemory`, `HBM`...): a node with one is a memory-only node.
    pub subtype: Option<String>,
    /// Its infos (`PCIBusID` names the GPU whose memory a `GPUMemory` node is).
    pub infos: BTreeMap<String, String>,
}

/// An object a distance matrix names, as far as the importer can say what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjRef {
    /// hwloc's object type (`OSDev`, `PCIDev`, `Package`, `NUMANode`...).
    pub kind: String,
    /// The PCI function the object is, or hangs under.
    pub pci: Option<PciAddr>,
    /// An OS device's name (`nvml0`, `rsmi3`).
    pub name: Option<String>,
    pub os_index: Option<u32>,
}

/// A distance matrix other than the NUMA latencies (`<distances2>` or `<distances2hetero>`):
/// `NVLinkBandwidth`, `XGMIBandwidth`, `XGMIHops`... kept as written, for the families to read.
#[derive(Debug, Clone, PartialEq)]
pub struct Matrix {
    pub name: String,
    /// hwloc's kind bits (1 from the OS, 2 from the user, 4 latency, 8 bandwidth, 16 hops in
    /// 3.0, 32 heterogeneous types).
    pub kind: u64,
    pub objects: Vec<ObjRef>,
    /// Row-major, `objects.len()` squared.
    pub values: Vec<u64>,
}

/// One PCI function (an endpoint or a bridge).
#[derive(Debug, Clone, PartialEq)]
pub struct Pci {
    pub addr: PciAddr,
    /// The host bridge's sysfs name (`pci0000:00`).
    pub host_bridge: String,
    /// Bridges above it, root port first.
    pub parents: Vec<PciAddr>,
    pub is_bridge: bool,
    /// 16-bit class (base and subclass), programming interface and revision when recorded.
    pub class: u16,
    pub prog_if: Option<u8>,
    pub revision: Option<u8>,
    pub vendor: u16,
    pub device: u16,
    pub subsystem: (u16, u16),
    /// hwloc's `pci_link_speed`, GB/s.
    pub link_gbps: Option<f64>,
    /// The cpuset and nodeset of the nearest non-I/O ancestor.
    pub local_cpus: Option<CpuSet>,
    pub nodeset: Option<CpuSet>,
    pub infos: BTreeMap<String, String>,
    pub osdevs: Vec<OsDevice>,
}

/// An OS device (`eth0`, `mlx5_0`, a GPU's runtime handle).
#[derive(Debug, Clone, PartialEq)]
pub struct OsDevice {
    pub name: String,
    /// Generic kinds, from either format's `osdev_type`.
    pub types: Vec<&'static str>,
    pub subtype: Option<String>,
    pub infos: BTreeMap<String, String>,
}

impl OsDevice {
    pub fn is(&self, kind: &str) -> bool {
        self.types.contains(&kind)
    }
}

/// What the XML says.
#[derive(Debug, Clone)]
pub struct Topology {
    pub format: Format,
    /// The `version` attribute as written.
    pub version: String,
    /// Infos of the root object and of the top level (format 3.0 puts some there).
    pub infos: BTreeMap<String, String>,
    /// Online CPUs: the PU objects.
    pub pus: BTreeSet<u32>,
    pub numa: BTreeMap<u32, Numa>,
    /// NUMA latency matrix: node ids (OS indexes) and row-major values.
    pub distances: Option<(Vec<u32>, Vec<u64>)>,
    /// Every other distance matrix, resolved to the objects it names.
    pub matrices: Vec<Matrix>,
    /// PCI functions, parents before children.
    pub pci: Vec<Pci>,
    /// OS devices that hang from no PCI function (a host bridge, the machine): kept in the
    /// OS-device file only.
    pub other_osdevs: Vec<OsDevice>,
    pub warnings: Vec<String>,
}

impl Topology {
    fn warn(&mut self, message: String) {
        if self.warnings.len() < MAX_WARNINGS {
            self.warnings.push(message);
        } else if self.warnings.len() == MAX_WARNINGS {
            self.warnings.push("more warnings left out".into());
        }
    }
}

/// Parses an hwloc XML document.
pub fn parse(bytes: &[u8]) -> Result<Topology, ImportError> {
    if bytes.len() > MAX_XML_BYTES {
        return Err(ImportError::TooLarge(MAX_XML_BYTES));
    }
    let text = std::str::from_utf8(bytes).map_err(|e| ImportError::NotXml(format!("not UTF-8: {e}")))?;
    if accel_discover::osdevs::xml_depth(text, MAX_NESTING).is_err() {
        return Err(ImportError::NotHwloc(format!(
            "elements nest deeper than {MAX_NESTING} (or an entity declaration holds markup)"
        )));
    }
    let options = roxmltree::ParsingOptions { allow_dtd: true, nodes_limit: MAX_XML_NODES };
    let doc = roxmltree::Document::parse_with_options(text, options).map_err(|e| ImportError::NotXml(e.to_string()))?;
    let root = doc.root_element();
    if !root.has_tag_name("topology") {
        return Err(ImportError::NotHwloc(format!("the root element is <{}>, not <topology>", root.tag_name().name())));
    }
    let version = root.attribute("version").unwrap_or("").to_owned();
    let format = match version.split('.').next() {
        Some("2") => Format::V2,
        Some("3") => Format::V3,
        _ => return Err(ImportError::Version(clean(&version, 40))),
    };
    let mut topo = Topology {
        format,
        version,
        infos: BTreeMap::new(),
        pus: BTreeSet::new(),
        numa: BTreeMap::new(),
        distances: None,
        matrices: Vec::new(),
        pci: Vec::new(),
        other_osdevs: Vec::new(),
        warnings: Vec::new(),
    };
    let mut objects = 0;
    let mut refs = Refs::default();
    for child in root.children().filter(|c| c.is_element()) {
        if child.tag_name().name() == "object" {
            objects += 1;
            if objects == 1 {
                topo.infos = infos(&child, &mut topo);
            }
            walk(child, &mut topo, &mut refs);
        }
    }
    // Distances come after the objects they name; read them once every object is known.
    for child in root.children().filter(|c| c.is_element()) {
        match child.tag_name().name() {
            "distances2" if topo.distances.is_none() && is_numa_latency(&child) => {
                topo.distances = distances(&child, &mut topo)
            }
            name @ ("distances2" | "distances2hetero") => {
                if topo.matrices.len() >= MAX_MATRICES {
                    topo.warn(format!("more than {MAX_MATRICES} distance matrices; the rest left out"));
                    break;
                }
                if let Some(m) = matrix(&child, name == "distances2hetero", &refs, &mut topo) {
                    topo.matrices.push(m);
                }
            }
            _ => {}
        }
    }
    if objects == 0 {
        return Err(ImportError::NotHwloc("no root <object>".into()));
    }
    // Format 3.0 writes some machine infos (HostName, OS release) at the top level.
    for (k, v) in infos(&root, &mut topo) {
        topo.infos.entry(k).or_insert(v);
    }
    Ok(topo)
}

/// What an object passes to the objects inside it.
#[derive(Debug, Clone, Default)]
struct Context {
    host_bridge: Option<String>,
    bridges: Vec<PciAddr>,
    /// Index in `Topology::pci` of the nearest PCI ancestor.
    pci: Option<usize>,
    cpuset: Option<CpuSet>,
    nodeset: Option<CpuSet>,
}

/// Every object by its `gp_index`, and by type and OS index, for the matrices to name.
#[derive(Debug, Default)]
struct Refs {
    by_gp: BTreeMap<u64, ObjRef>,
    by_os: BTreeMap<(String, u32), ObjRef>,
}

fn walk(top: roxmltree::Node, topo: &mut Topology, refs: &mut Refs) {
    // An explicit stack: nesting depth is the input's to choose.
    let mut stack = vec![(top, Context::default())];
    while let Some((node, ctx)) = stack.pop() {
        let mut inner = ctx.clone();
        let kind = node.attribute("type").unwrap_or("");
        let reference = |pci: Option<usize>, topo: &Topology| ObjRef {
            kind: clean(kind, 32),
            pci: pci.map(|i| topo.pci[i].addr),
            name: (kind == "OSDev").then(|| clean(node.attribute("name").unwrap_or(""), 256)),
            os_index: id(node.attribute("os_index")),
        };
        if let Some(set) = node.attribute("cpuset").filter(|_| !is_io(kind)) {
            match mask(set) {
                Some(cpus) => inner.cpuset = Some(cpus),
                None => topo.warn(format!("{kind} object: unreadable cpuset {}", clean(set, 60))),
            }
            inner.nodeset = node.attribute("nodeset").and_then(mask);
        }
        match kind {
            "PU" => match id(node.attribute("os_index")) {
                Some(cpu) => {
                    topo.pus.insert(cpu);
                }
                None => topo.warn("PU without a valid os_index; skipped".into()),
            },
            "NUMANode" => numa(node, &inner, topo),
            "Bridge" if node.attribute("pci_busid").is_none() => {
                // A host bridge: `bridge_pci="0000:[00-0f]"` gives the root bus.
                match host_bridge(node.attribute("bridge_pci").unwrap_or("")) {
                    Some(name) => inner.host_bridge = Some(name),
                    None => topo.warn(format!(
                        "host bridge with unreadable bridge_pci {}; its functions hang off their own root bus",
                        clean(node.attribute("bridge_pci").unwrap_or(""), 40)
                    )),
                }
                inner.bridges.clear();
            }
            "Bridge" | "PCIDev" => match pci(node, kind == "Bridge", &ctx, topo) {
                Some(index) => {
                    inner.pci = Some(index);
                    if kind == "Bridge" {
                        inner.bridges.push(topo.pci[index].addr);
                    }
                }
                // What hangs below a function left out would be misplaced anywhere else.
                None => continue,
            },
            "OSDev" => osdev(node, &ctx, topo),
            _ => {}
        }
        if refs.by_gp.len() < MAX_PCI + MAX_OSDEVS + MAX_NUMA {
            let pci = if matches!(kind, "Bridge" | "PCIDev") { inner.pci } else { ctx.pci };
            let r = reference(pci, topo);
            if let Some(os) = r.os_index {
                refs.by_os.entry((r.kind.clone(), os)).or_insert_with(|| r.clone());
            }
            if let Some(gp) = node.attribute("gp_index").and_then(|g| g.trim().parse::<u64>().ok()) {
                refs.by_gp.insert(gp, r);
            }
        }
        let children: Vec<_> = node.children().filter(|c| c.has_tag_name("object")).collect();
        for child in children.into_iter().rev() {
            stack.push((child, inner.clone()));
        }
    }
}

fn is_io(kind: &str) -> bool {
    matches!(kind, "Bridge" | "PCIDev" | "OSDev" | "Misc")
}

fn numa(node: roxmltree::Node, ctx: &Context, topo: &mut Topology) {
    let Some(os) = id(node.attribute("os_index")) else {
        topo.warn("NUMANode without a valid os_index; skipped".into());
        return;
    };
    if topo.numa.len() >= MAX_NUMA {
        topo.warn(format!("more than {MAX_NUMA} NUMA nodes; node {os} and later left out"));
        return;
    }
    let memory = node.attribute("local_memory").and_then(|m| m.parse::<u64>().ok());
    let subtype = node.attribute("subtype").map(|s| clean(s, 64));
    let infos = infos(&node, topo);
    let entry = Numa { locality: ctx.cpuset.clone().unwrap_or_default(), memory, subtype, infos };
    if topo.numa.insert(os, entry).is_some() {
        topo.warn(format!("NUMA node {os} appears twice; the last one kept"));
    }
}

fn pci(node: roxmltree::Node, is_bridge: bool, ctx: &Context, topo: &mut Topology) -> Option<usize> {
    let busid = node.attribute("pci_busid").unwrap_or("");
    let Ok(addr) = busid.parse::<PciAddr>() else {
        topo.warn(format!(
            "PCI object with unreadable pci_busid {}; it and what hangs below it left out",
            clean(busid, 40)
        ));
        return None;
    };
    if topo.pci.len() >= MAX_PCI {
        topo.warn(format!("more than {MAX_PCI} PCI functions; {addr} and later left out"));
        return None;
    }
    if topo.pci.iter().any(|p| p.addr == addr) {
        topo.warn(format!("PCI function {addr} appears twice; the second (and what hangs below it) left out"));
        return None;
    }
    if ctx.bridges.len() >= MAX_BRIDGE_DEPTH {
        topo.warn(format!("{addr} sits under more than {MAX_BRIDGE_DEPTH} bridges; left out"));
        return None;
    }
    let pci_type = node.attribute("pci_type").unwrap_or("");
    let Some(t) = parse_pci_type(pci_type) else {
        topo.warn(format!("{addr}: unreadable pci_type {}; skipped", clean(pci_type, 60)));
        return None;
    };
    let link_gbps = node
        .attribute("pci_link_speed")
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|g| g.is_finite() && *g > 0.0 && *g < 1e6);
    let infos = infos(&node, topo);
    topo.pci.push(Pci {
        addr,
        host_bridge: ctx.host_bridge.clone().unwrap_or_else(|| addr.root_bus_name()),
        parents: ctx.bridges.clone(),
        is_bridge,
        class: t.class,
        prog_if: t.prog_if,
        revision: t.revision,
        vendor: t.vendor,
        device: t.device,
        subsystem: t.subsystem,
        link_gbps,
        local_cpus: ctx.cpuset.clone(),
        nodeset: ctx.nodeset.clone(),
        infos,
        osdevs: Vec::new(),
    });
    Some(topo.pci.len() - 1)
}

fn osdev(node: roxmltree::Node, ctx: &Context, topo: &mut Topology) {
    let total: usize = topo.pci.iter().map(|p| p.osdevs.len()).sum::<usize>() + topo.other_osdevs.len();
    if total >= MAX_OSDEVS {
        topo.warn(format!("more than {MAX_OSDEVS} OS devices; the rest left out"));
        return;
    }
    let name = node.attribute("name").unwrap_or("");
    let raw_type = node.attribute("osdev_type").unwrap_or("");
    let types = osdev_types(topo.format, raw_type);
    if types.is_empty() {
        topo.warn(format!("OS device {}: unknown osdev_type {}", clean(name, 64), clean(raw_type, 20)));
    }
    let infos = infos(&node, topo);
    let subtype = node.attribute("subtype").map(|s| clean(s, 64));
    let dev = OsDevice { name: name.to_owned(), types, subtype, infos };
    match ctx.pci {
        Some(index) => topo.pci[index].osdevs.push(dev),
        None => topo.other_osdevs.push(dev),
    }
}

/// `osdev_type` in generic words: an enum in format 2.0, a bitmask in 3.0.
pub fn osdev_types(format: Format, raw: &str) -> Vec<&'static str> {
    let Ok(v) = raw.trim().parse::<u32>() else { return Vec::new() };
    match format {
        Format::V2 => match v {
            0 => vec!["storage"],
            1 => vec!["gpu"],
            2 => vec!["network"],
            3 => vec!["openfabrics"],
            4 => vec!["dma"],
            5 => vec!["coproc"],
            6 => vec!["memory"],
            _ => Vec::new(),
        },
        Format::V3 => {
            const BITS: [(u32, &str); 7] = [
                (1, "storage"),
                (2, "memory"),
                (4, "gpu"),
                (8, "coproc"),
                (16, "network"),
                (32, "openfabrics"),
                (64, "dma"),
            ];
            BITS.iter().filter(|(bit, _)| v & bit != 0).map(|(_, name)| *name).collect()
        }
    }
}

/// The `<info name= value=>` children of an object, bounded and with control characters
/// replaced.
fn infos(node: &roxmltree::Node, topo: &mut Topology) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for info in node.children().filter(|c| c.has_tag_name("info")) {
        let (Some(name), Some(value)) = (info.attribute("name"), info.attribute("value")) else { continue };
        if out.len() >= MAX_INFOS {
            topo.warn(format!("more than {MAX_INFOS} infos on one object; the rest left out"));
            break;
        }
        if name.is_empty() || name.len() > MAX_INFO_NAME || name.chars().any(|c| c.is_control()) {
            topo.warn(format!("info with an unusable name {}; left out", clean(name, 40)));
            continue;
        }
        let cleaned = clean(value, MAX_INFO_VALUE);
        if cleaned != value {
            topo.warn(format!("info {name}: control characters replaced or value shortened"));
        }
        out.insert(name.to_owned(), cleaned);
    }
    out
}

pub use accel_discover::osdevs::clean;

fn id(text: Option<&str>) -> Option<u32> {
    text?.trim().parse::<u32>().ok().filter(|&v| v < MAX_ID)
}

/// An hwloc bitmap (`0x000000ff,0xffff0000`); an infinite one (`0xf...f`) or one with ids past
/// the limit is `None`.
fn mask(text: &str) -> Option<CpuSet> {
    if text.contains("...") || text.split(',').count() > (MAX_ID / 32) as usize {
        return None;
    }
    CpuSet::parse_mask(text).ok()
}

/// `0000:[00-0f]` → `pci0000:00`.
fn host_bridge(text: &str) -> Option<String> {
    let (domain, rest) = text.split_once(':')?;
    let first = rest.strip_prefix('[')?.split('-').next()?;
    if domain.is_empty() || domain.len() > 8 || first.len() != 2 {
        return None;
    }
    let domain = u32::from_str_radix(domain, 16).ok()?;
    let bus = u8::from_str_radix(first, 16).ok()?;
    Some(format!("pci{domain:04x}:{bus:02x}"))
}

struct PciType {
    class: u16,
    vendor: u16,
    device: u16,
    subsystem: (u16, u16),
    revision: Option<u8>,
    prog_if: Option<u8>,
}

/// `0302 [10de:06d2] [00de:0030] a3` (revision; format 3.0 adds the programming interface).
fn parse_pci_type(text: &str) -> Option<PciType> {
    let mut parts = text.split_whitespace();
    let class = u16::from_str_radix(parts.next()?, 16).ok()?;
    let pair = |s: &str| -> Option<(u16, u16)> {
        let (a, b) = s.strip_prefix('[')?.strip_suffix(']')?.split_once(':')?;
        Some((u16::from_str_radix(a, 16).ok()?, u16::from_str_radix(b, 16).ok()?))
    };
    let (vendor, device) = pair(parts.next()?)?;
    let subsystem = pair(parts.next()?)?;
    let byte = |s: Option<&str>| s.and_then(|s| u8::from_str_radix(s, 16).ok());
    let revision = byte(parts.next());
    let prog_if = byte(parts.next());
    Some(PciType { class, vendor, device, subsystem, revision, prog_if })
}

/// Whether a `<distances2>` is a NUMA latency matrix (hwloc's kind bit 4 is latency, or its name
/// says so).
fn is_numa_latency(node: &roxmltree::Node) -> bool {
    let kind: u64 = node.attribute("kind").and_then(|k| k.parse().ok()).unwrap_or(0);
    node.attribute("type") == Some("NUMANode") && (kind & 4 != 0 || node.attribute("name") == Some("NUMALatency"))
}

/// Any other matrix, its objects resolved: `<distances2 type= indexing="gp"|"os">` names objects
/// of one type by global or OS index, `<distances2hetero>` each as `Type:gp_index`. A matrix
/// with an object the file does not hold, a count or value out of bounds, is left out with a
/// warning naming it.
fn matrix(node: &roxmltree::Node, hetero: bool, refs: &Refs, topo: &mut Topology) -> Option<Matrix> {
    let name = clean(node.attribute("name").unwrap_or("(unnamed)"), 64);
    let kind: u64 = node.attribute("kind").and_then(|k| k.trim().parse().ok()).unwrap_or(0);
    let n: usize = match node.attribute("nbobjs").and_then(|v| v.trim().parse().ok()) {
        Some(n) if n > 0 && n <= MAX_MATRIX_OBJECTS => n,
        _ => {
            topo.warn(format!(
                "distance matrix {name}: nbobjs {} is not between 1 and {MAX_MATRIX_OBJECTS}; left out",
                clean(node.attribute("nbobjs").unwrap_or(""), 20)
            ));
            return None;
        }
    };
    let of_type = clean(node.attribute("type").unwrap_or(""), 32);
    let by_os = node.attribute("indexing") == Some("os");
    let mut objects = Vec::with_capacity(n);
    let mut values = Vec::with_capacity(n * n);
    let mut bad: Option<String> = None;
    for child in node.children().filter(|c| c.is_element()) {
        let text = child.text().unwrap_or("");
        match child.tag_name().name() {
            "indexes" => {
                for t in text.split_whitespace() {
                    if objects.len() >= n {
                        break;
                    }
                    let found = if hetero {
                        t.split_once(':').and_then(|(_, gp)| gp.parse::<u64>().ok()).and_then(|gp| refs.by_gp.get(&gp))
                    } else if by_os {
                        t.parse::<u32>().ok().and_then(|os| refs.by_os.get(&(of_type.clone(), os)))
                    } else {
                        t.parse::<u64>().ok().and_then(|gp| refs.by_gp.get(&gp))
                    };
                    match found {
                        Some(r) => objects.push(r.clone()),
                        None => {
                            bad.get_or_insert_with(|| {
                                format!("names object {} that the file does not hold", clean(t, 40))
                            });
                        }
                    }
                }
            }
            "u64values" => {
                for t in text.split_whitespace() {
                    if values.len() >= n * n {
                        break;
                    }
                    match t.parse::<u64>() {
                        Ok(v) => values.push(v),
                        Err(_) => {
                            bad.get_or_insert_with(|| format!("value {} is not a number", clean(t, 40)));
                        }
                    }
                }
            }
            _ => {}
        }
    }
    if bad.is_none() && (objects.len() != n || values.len() != n * n) {
        bad = Some(format!("{} objects and {} values for {n} objects", objects.len(), values.len()));
    }
    if let Some(why) = bad {
        topo.warn(format!("distance matrix {name}: {why}; left out"));
        return None;
    }
    Some(Matrix { name, kind, objects, values })
}

/// The first NUMA latency matrix (`<distances2 type="NUMANode">` by OS index).
fn distances(node: &roxmltree::Node, topo: &mut Topology) -> Option<(Vec<u32>, Vec<u64>)> {
    if node.attribute("indexing").is_some_and(|i| i != "os") {
        topo.warn("NUMA distances not indexed by OS index; left out".into());
        return None;
    }
    let n: usize = node.attribute("nbobjs").and_then(|v| v.parse().ok())?;
    if n == 0 || n > MAX_NUMA {
        topo.warn(format!("NUMA distances for {} nodes; left out", clean(node.attribute("nbobjs")?, 20)));
        return None;
    }
    let mut ids = Vec::new();
    let mut values = Vec::new();
    for child in node.children().filter(|c| c.is_element()) {
        let text = child.text().unwrap_or("");
        match child.tag_name().name() {
            "indexes" => {
                for t in text.split_whitespace() {
                    if ids.len() >= n {
                        break;
                    }
                    ids.push(id(Some(t))?);
                }
            }
            "u64values" => {
                for t in text.split_whitespace() {
                    if values.len() >= n * n {
                        break;
                    }
                    values.push(t.parse::<u64>().ok()?);
                }
            }
            _ => {}
        }
    }
    if ids.len() != n || values.len() != n * n {
        topo.warn(format!("NUMA distances: {} ids and {} values for {n} nodes; left out", ids.len(), values.len()));
        return None;
    }
    Some((ids, values))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_parsers() {
        assert_eq!(host_bridge("0000:[00-0f]").as_deref(), Some("pci0000:00"));
        assert_eq!(host_bridge("10000:[e0-ff]").as_deref(), Some("pci10000:e0"));
        assert_eq!(host_bridge("zz"), None);
        let t = parse_pci_type("0302 [10de:06d2] [00de:0030] a3 00").unwrap();
        assert_eq!((t.class, t.vendor, t.device, t.subsystem), (0x0302, 0x10de, 0x06d2, (0x00de, 0x0030)));
        assert_eq!((t.revision, t.prog_if), (Some(0xa3), Some(0)));
        assert!(parse_pci_type("0302 10de:06d2").is_none());
        assert_eq!(osdev_types(Format::V3, "48"), ["network", "openfabrics"]);
        assert_eq!(osdev_types(Format::V2, "3"), ["openfabrics"]);
        assert!(osdev_types(Format::V2, "99").is_empty());
        assert!(mask("0xf...f").is_none());
        assert_eq!(mask("0x00010000,0x00000001").unwrap().to_string(), "0,48");
    }
}
