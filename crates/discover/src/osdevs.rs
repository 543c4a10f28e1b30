//! The OS devices another topology tool recorded for each PCI function (hwloc's "OS devices":
//! a GPU's runtime names, a NIC's netdev and RDMA names, their info attributes), kept in a
//! capture as one generic JSON file, [`OSDEVS_PATH`], by `accel import hwloc`.
//!
//! Discovery reads only sysfs and procfs; this file carries what such a tool saw and the kernel
//! files do not show (model names, UUIDs, runtime indices). [`read`] loads it through the
//! [`Host`] and [`annotate`] exposes it on a [`Machine`]: each info as a machine attribute
//! `osdev.<pci>.<name>.<info>`, and a warning for each compute device (type `gpu` or
//! `coproc`) on a PCI function that no plugin reported as an accelerator. Nothing here knows a
//! vendor: names and infos are the tool's own words, copied.

use std::collections::BTreeMap;

use accel_model::{Machine, PciAddr, Warning};
use serde::{Deserialize, Serialize};

use crate::Host;

/// Where the file lives in a capture.
pub const OSDEVS_PATH: &str = "/accel/hwloc-osdevs.json";

/// The first field of the file, naming its shape.
pub const OSDEVS_FORMAT: &str = "accel-osdevs 1";

/// The prefixes of the machine attributes [`annotate`] adds (`pci.<addr>.<info>` for a
/// function's own infos, `osdev.<addr>.<name>.<info>` for its OS devices).
pub const ATTRIBUTE_PREFIXES: [&str; 2] = ["pci.", "osdev."];

/// Whether a machine attribute is one [`annotate`] added.
pub fn is_osdev_attribute(key: &str) -> bool {
    ATTRIBUTE_PREFIXES.iter().any(|p| key.starts_with(p))
}

/// The largest file read.
const MAX_BYTES: u64 = 16 << 20;

/// At most this many attributes are added to a machine, so a hostile file cannot flood it.
const MAX_ATTRIBUTES: usize = 20_000;

/// The whole file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OsDevFile {
    /// [`OSDEVS_FORMAT`].
    pub format: String,
    /// The tool and format version that wrote the source (`hwloc XML 2.0`).
    pub source: String,
    /// Machine-wide info attributes (OS release, architecture, DMI strings...).
    #[serde(default)]
    pub machine: BTreeMap<String, String>,
    /// PCI functions that have infos, a link speed or OS devices, in address order.
    #[serde(default)]
    pub functions: Vec<FunctionOsDevs>,
    /// OS devices that hang from no PCI function (under a host bridge, or the machine).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other: Vec<OsDev>,
    /// Distance matrices the tool recorded between devices (hwloc's link bandwidths and hops),
    /// as written: the families read the ones they know ([`OsDevFile::matrix`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub matrices: Vec<Matrix>,
    /// Links the tool recorded one by one (a topology dump's link elements), as written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<ToolLink>,
    /// NUMA nodes the tool said more about: a subtype (`GPUMemory`) and infos (`PCIBusID`, the
    /// function whose memory the node is).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub numa: Vec<NumaRecord>,
}

/// One object of a [`Matrix`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MatrixObject {
    /// The tool's object type (`OSDev`, `PCIDev`, `Package`).
    #[serde(rename = "type")]
    pub kind: String,
    /// The PCI function the object is, or hangs under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci: Option<String>,
    /// An OS device's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os_index: Option<u32>,
}

/// A matrix of values between objects, in the tool's units (hwloc documents each one).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Matrix {
    pub name: String,
    /// The tool's kind bits, as written.
    #[serde(default)]
    pub kind: u64,
    pub objects: Vec<MatrixObject>,
    /// Row-major, `objects.len()` squared.
    pub values: Vec<u64>,
}

impl Matrix {
    /// The value from object `i` to object `j`.
    pub fn value(&self, i: usize, j: usize) -> Option<u64> {
        let n = self.objects.len();
        (i < n && j < n).then(|| self.values.get(i * n + j).copied()).flatten()
    }

    /// Whether the value count fits the objects.
    pub fn is_square(&self) -> bool {
        self.values.len() == self.objects.len() * self.objects.len()
    }
}

/// One link element of a topology dump, as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolLink {
    /// The element's name in the file.
    pub element: String,
    /// The PCI function it was recorded under.
    pub pci: String,
    /// Its target as written (a PCI address, or a placeholder for a hidden one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    /// The target's PCI class as written (`0x068000`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_class: Option<String>,
    /// Any other attributes, as written.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, String>,
}

/// A NUMA node the tool described.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NumaRecord {
    pub node: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subtype: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub infos: BTreeMap<String, String>,
}

/// The machine attribute a plugin sets when it read a matrix or link element of the file
/// (`topology.read.<name>` = the plugin): what no plugin read is named in a warning.
pub const READ_ATTRIBUTE: &str = "topology.read.";

impl OsDevFile {
    /// The matrix of that name, if the tool recorded one that fits its objects.
    pub fn matrix(&self, name: &str) -> Option<&Matrix> {
        self.matrices.iter().find(|m| m.name == name && m.is_square())
    }

    /// The OS devices of one PCI function.
    pub fn osdevs_of(&self, pci: &str) -> &[OsDev] {
        self.functions.iter().find(|f| f.pci == pci).map_or(&[], |f| f.osdevs.as_slice())
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers for the importers that write this file (`accel-hwloc`, `accel-nccl`): one copy each.

/// `text` without control characters (each becomes `?`), at most `max` characters.
pub fn clean(text: &str, max: usize) -> String {
    text.chars().take(max).map(|c| if c.is_control() { '?' } else { c }).collect()
}

/// A device name usable as one path component of a capture (and a bundle path: no spaces).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name != "."
        && name != ".."
        && name.chars().all(|c| c.is_ascii_graphic() && c != '/' && c != '\\')
}

/// How deep an XML document's elements nest, counted from the markup alone before parsing (a
/// recursive parser could otherwise overflow the stack on a hostile file): `Ok(deepest)`, or
/// `Err(byte offset)` of the first element past `limit`. `<` starts markup wherever it appears
/// outside comments, CDATA and processing instructions (attribute values cannot hold it); a tag
/// ends at the first `>` outside a quoted attribute value, so `/>` or `>` inside a value hides
/// nothing; comments, CDATA sections, processing instructions and declarations do not nest, and a
/// closing tag inside them closes nothing. An entity declaration that holds markup (neither hwloc
/// nor NCCL writes one) could expand to elements the scan cannot see, so it counts as too deep
/// (`Err` at the declaration).
pub fn xml_depth(text: &str, limit: usize) -> Result<usize, usize> {
    let bytes = text.as_bytes();
    let find = |from: usize, pat: &[u8]| {
        bytes[from.min(bytes.len())..].windows(pat.len()).position(|w| w == pat).map(|p| from + p + pat.len())
    };
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut i = 0;
    while let Some(off) = bytes[i..].iter().position(|&b| b == b'<') {
        let start = i + off;
        let rest = &bytes[start..];
        let end = if rest.starts_with(b"<!--") {
            find(start + 4, b"-->")
        } else if rest.starts_with(b"<![CDATA[") {
            find(start + 9, b"]]>")
        } else if rest.starts_with(b"<?") {
            find(start + 2, b"?>")
        } else if rest.starts_with(b"<!") {
            // A declaration (DOCTYPE with its internal subset): skipped whole, brackets and
            // quotes included; an entity holding markup refuses the file.
            let (end, refuse) = declaration_end(bytes, start);
            if refuse {
                return Err(start);
            }
            end
        } else {
            let end = tag_end(bytes, start);
            match rest.get(1) {
                Some(b'/') => depth = depth.saturating_sub(1),
                _ if end.is_some_and(|e| bytes[e - 2] == b'/') => {}
                _ => {
                    depth += 1;
                    if depth > limit {
                        return Err(start);
                    }
                    deepest = deepest.max(depth);
                }
            }
            end
        };
        match end {
            Some(e) if e < bytes.len() => i = e,
            _ => break,
        }
    }
    Ok(deepest)
}

/// Where the tag opened at `start` ends (just past its `>`), skipping quoted attribute values.
fn tag_end(bytes: &[u8], start: usize) -> Option<usize> {
    let mut quote = None;
    for (k, &b) in bytes.iter().enumerate().skip(start + 1) {
        match (quote, b) {
            (None, b'"' | b'\'') => quote = Some(b),
            (Some(q), _) if b == q => quote = None,
            (None, b'>') => return Some(k + 1),
            _ => {}
        }
    }
    None
}

/// Where the declaration opened at `start` ends (just past its `>`, outside quotes and its
/// `[...]` internal subset), and whether it declares an entity whose value holds markup.
fn declaration_end(bytes: &[u8], start: usize) -> (Option<usize>, bool) {
    let (mut quote, mut brackets, mut refuse) = (None, 0usize, false);
    let mut in_entity = false;
    let mut k = start + 2;
    while k < bytes.len() {
        let b = bytes[k];
        match (quote, b) {
            (Some(q), _) if b == q => quote = None,
            (Some(_), b'<' | b'&') if in_entity => refuse = true,
            (Some(_), _) => {}
            (None, b'"' | b'\'') => quote = Some(b),
            (None, b'[') => brackets += 1,
            (None, b']') => brackets = brackets.saturating_sub(1),
            (None, b'<') if bytes[k..].starts_with(b"<!ENTITY") => in_entity = true,
            (None, b'<') if bytes[k..].starts_with(b"<!--") => {
                k = bytes[k + 4..].windows(3).position(|w| w == b"-->").map_or(bytes.len(), |p| k + 4 + p + 2);
            }
            (None, b'>') if brackets == 0 => return (Some(k + 1), refuse),
            (None, b'>') => in_entity = false,
            _ => {}
        }
        k += 1;
    }
    (None, refuse)
}

/// Reads the file of a capture for a plugin: `None` when there is none or it is broken (the
/// generic reader warns about a broken one once).
pub fn read_quiet(host: &Host) -> Option<OsDevFile> {
    read(host, &mut Vec::new())
}

/// One PCI function's record.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FunctionOsDevs {
    /// `0000:17:00.0`.
    pub pci: String,
    /// The function's own infos (vendor and device names from the PCI database...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub infos: BTreeMap<String, String>,
    /// The tool's link bandwidth in GB/s (hwloc's `pci_link_speed`; lane width and per-lane
    /// speed are not recorded separately, so no sysfs link files are written from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_gbps: Option<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub osdevs: Vec<OsDev>,
}

/// One OS device.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OsDev {
    pub name: String,
    /// Generic kinds: `storage`, `memory`, `gpu`, `coproc`, `network`, `openfabrics`, `dma`.
    pub types: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subtype: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub infos: BTreeMap<String, String>,
}

impl OsDev {
    /// Whether the tool saw a compute device here (a GPU or a co-processor). A kernel display
    /// node (`card<N>`, `renderD<N>`, `controlD<N>`: what hwloc's GPU type also covers) is not
    /// one by itself: every emulated VGA and BMC has a `card0`.
    pub fn is_compute(&self) -> bool {
        let drm = ["card", "renderD", "controlD"]
            .iter()
            .any(|p| self.name.strip_prefix(p).is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())));
        !drm && self.types.iter().any(|t| t == "gpu" || t == "coproc")
    }
}

/// Reads the file of a capture: `None` when it has none; a broken file is a warning.
pub fn read(host: &Host, warnings: &mut Vec<Warning>) -> Option<OsDevFile> {
    let path = host.path(OSDEVS_PATH);
    let text = host.read_text(&path, MAX_BYTES, "osdevs", warnings)?;
    match serde_json::from_str::<OsDevFile>(&text) {
        Ok(file) if file.format == OSDEVS_FORMAT => Some(file),
        Ok(file) => {
            warnings.push(host.warning("osdevs", &path, format!("unknown format {:?}; ignored", file.format)));
            None
        }
        Err(e) => {
            warnings.push(host.warning("osdevs", &path, format!("not valid JSON: {e}; ignored")));
            None
        }
    }
}

/// The file's facts as machine attributes: `osdev.<pci>.<name>.<info>` for each OS device's
/// infos, `osdev.<pci>.<name>.types` and `.subtype`, `pci.<pci>.<info>` for the function's
/// own infos and `pci.<pci>.link_gbps`, and `osdev.-.<name>...` for devices on no function.
pub fn attributes(file: &OsDevFile) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for f in &file.functions {
        for (k, v) in &f.infos {
            out.insert(format!("pci.{}.{k}", f.pci), v.clone());
        }
        if let Some(gbps) = f.link_gbps {
            out.insert(format!("pci.{}.link_gbps", f.pci), gbps.to_string());
        }
        for d in &f.osdevs {
            let key = format!("osdev.{}.{}", f.pci, d.name);
            out.insert(format!("{key}.types"), d.types.join(","));
            if let Some(s) = &d.subtype {
                out.insert(format!("{key}.subtype"), s.clone());
            }
            for (k, v) in &d.infos {
                out.insert(format!("{key}.{k}"), v.clone());
            }
        }
        if out.len() > MAX_ATTRIBUTES {
            break;
        }
    }
    for d in &file.other {
        if out.len() > MAX_ATTRIBUTES {
            break;
        }
        let key = format!("osdev.-.{}", d.name);
        out.insert(format!("{key}.types"), d.types.join(","));
        for (k, v) in &d.infos {
            out.insert(format!("{key}.{k}"), v.clone());
        }
    }
    out
}

/// Adds the capture's OS devices to a discovered machine (see the module doc). Returns whether
/// the capture had the file.
pub fn annotate(host: &Host, machine: &mut Machine) -> bool {
    let mut warnings = Vec::new();
    let Some(file) = read(host, &mut warnings) else {
        machine.warnings.extend(warnings);
        return false;
    };
    for (k, v) in attributes(&file).into_iter().take(MAX_ATTRIBUTES) {
        machine.attributes.entry(k).or_insert(v);
    }
    warnings.extend(unidentified(&file, machine));
    warnings.extend(unread(&file, machine));
    memory_nodes(&file, machine);
    machine.warnings.extend(warnings);
    true
}

/// A warning for each matrix and link element of the file that no plugin read: never a guess.
pub fn unread(file: &OsDevFile, machine: &Machine) -> Vec<Warning> {
    let mut names: Vec<&str> = file.matrices.iter().map(|m| m.name.as_str()).collect();
    names.extend(file.links.iter().map(|l| l.element.as_str()));
    names.sort_unstable();
    names.dedup();
    names
        .into_iter()
        .filter(|n| !machine.attributes.contains_key(&format!("{READ_ATTRIBUTE}{n}")))
        .map(|n| Warning {
            source: "osdevs".into(),
            path: Some(OSDEVS_PATH.into()),
            message: format!(
                "{} recorded {n:?} between devices, which no plugin reads; left out (no link is guessed from it)",
                file.source
            ),
        })
        .collect()
}

/// A memory-only NUMA node the tool tied to a PCI function (`PCIBusID`) belongs to the
/// accelerator there: it becomes that device's memory node, and the node names its owner.
fn memory_nodes(file: &OsDevFile, machine: &mut Machine) {
    for rec in &file.numa {
        let Some(addr) = rec.infos.get("PCIBusID").and_then(|b| b.trim().to_ascii_lowercase().parse::<PciAddr>().ok())
        else {
            continue;
        };
        let Some(node) = machine.numa_nodes.iter().find(|n| n.id == rec.node) else { continue };
        if !node.cpus.is_empty() {
            continue;
        }
        if let Some(acc) = machine.accelerators.iter_mut().find(|a| a.pci == Some(addr) && a.partition.is_none()) {
            acc.memory_numa_node.get_or_insert(rec.node);
        }
    }
}

/// A warning for each PCI function where the tool saw a compute device that no plugin reported.
pub fn unidentified(file: &OsDevFile, machine: &Machine) -> Vec<Warning> {
    let mut out = Vec::new();
    for f in &file.functions {
        let names: Vec<&str> = f.osdevs.iter().filter(|d| d.is_compute()).map(|d| d.name.as_str()).collect();
        if names.is_empty() {
            continue;
        }
        let Ok(addr) = f.pci.parse::<PciAddr>() else { continue };
        if machine.accelerators.iter().any(|a| a.pci == Some(addr)) {
            continue;
        }
        let ids = machine
            .pci
            .iter()
            .find(|n| n.address == Some(addr))
            .and_then(|n| n.vendor.zip(n.device))
            .map_or_else(|| "unknown ids".to_owned(), |(v, d)| format!("{v}:{d}"));
        out.push(Warning {
            source: "osdevs".into(),
            path: Some(format!("/sys/bus/pci/devices/{addr}")),
            message: format!(
                "the topology tool saw compute device {} here ({ids}), which no plugin identifies; \
                 it keeps its raw PCI ids",
                names.join(", ")
            ),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::MemTree;
    use accel_model::SkuRegistry;
    use std::sync::Arc;

    fn host(json: &str) -> Host {
        let mut t = MemTree::new();
        t.add_file(OSDEVS_PATH, json);
        Host::in_memory(Arc::new(t), SkuRegistry::builtin())
    }

    #[test]
    fn reads_and_annotates() {
        let file = OsDevFile {
            format: OSDEVS_FORMAT.into(),
            source: "test".into(),
            machine: BTreeMap::new(),
            functions: vec![FunctionOsDevs {
                pci: "0000:17:00.0".into(),
                infos: [("PCIDevice".to_owned(), "X".to_owned())].into(),
                link_gbps: Some(31.5),
                osdevs: vec![OsDev {
                    name: "gpu0".into(),
                    types: vec!["gpu".into()],
                    subtype: Some("Runtime".into()),
                    infos: [("UUID".to_owned(), "abc".to_owned())].into(),
                }],
            }],
            ..Default::default()
        };
        let h = host(&serde_json::to_string(&file).unwrap());
        let mut w = Vec::new();
        assert_eq!(read(&h, &mut w), Some(file));
        let mut m = Machine::new(Default::default());
        assert!(annotate(&h, &mut m));
        assert_eq!(m.attributes["osdev.0000:17:00.0.gpu0.UUID"], "abc");
        assert_eq!(m.attributes["pci.0000:17:00.0.link_gbps"], "31.5");
        // No plugin reported an accelerator there: a warning names the device.
        assert_eq!(m.warnings.len(), 1, "{:?}", m.warnings);
        assert!(m.warnings[0].message.contains("gpu0"));
    }

    #[test]
    fn a_display_node_alone_is_not_a_compute_device() {
        let dev =
            |name: &str| OsDev { name: name.into(), types: vec!["gpu".into()], subtype: None, infos: BTreeMap::new() };
        // An emulated VGA's `card0` (EC2's 1d0f:1111) names no compute device; a runtime's does.
        assert!(!dev("card0").is_compute());
        assert!(!dev("renderD128").is_compute());
        assert!(dev("cuda0").is_compute());
        assert!(dev("card").is_compute(), "not a DRM node name");
        assert!(!OsDev { types: vec!["net".into()], ..dev("eth0") }.is_compute());
    }

    #[test]
    fn importer_helpers() {
        assert_eq!(clean("a\nb\u{1b}", 10), "a?b?");
        assert!(valid_name("mlx5_0") && !valid_name("..") && !valid_name("a b") && !valid_name("a/b"));
        assert_eq!(xml_depth("<a><b/><c x='1'><d></d></c></a>", 8), Ok(3));
        assert_eq!(xml_depth("<?xml?><!DOCTYPE x><a>", 8), Ok(1));
        assert_eq!(xml_depth("<", 8), Ok(1));
        assert_eq!(xml_depth("<a><b><c>", 2), Err(6));
        assert_eq!(xml_depth("<a x='/>'><b y=\">\"><c/></b></a>", 8), Ok(2));
        assert_eq!(xml_depth("<a><!-- </a></a> --><b><![CDATA[</b>]]><c>", 8), Ok(3));
        assert_eq!(xml_depth("<!DOCTYPE t [<!ENTITY e \"x\">]><a>", 8), Ok(1));
        assert_eq!(xml_depth("<!DOCTYPE t [<!ENTITY e \"<a><a>\">]><a>", 8), Err(0));
    }

    #[test]
    fn broken_files_warn() {
        let mut w = Vec::new();
        assert!(read(&host("{"), &mut w).is_none());
        assert!(read(&host(r#"{"format":"other","source":""}"#), &mut w).is_none());
        assert_eq!(w.len(), 2, "{w:?}");
        let empty = Host::in_memory(Arc::new(MemTree::new()), SkuRegistry::builtin());
        assert!(read(&empty, &mut w).is_none());
        assert_eq!(w.len(), 2);
    }
}
