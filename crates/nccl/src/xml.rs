//! Reads an NCCL or RCCL topology file into plain facts: the CPUs (`<cpu numaid= affinity=>`),
//! the PCI tree under each (`<pci busid= class= vendor= device= link_speed= link_width=>`), the
//! accelerators (`<gpu dev= sm= rank= gdr=>`, RCCL's `gcn=` and `arch=`) with their link
//! elements (each child of a `<gpu>` that names a `target` or a `count`, as written), and the
//! NICs (`<nic><net name= dev= speed= port= guid= .../></nic>`).
//!
//! The format is NCCL's (src/graph/xml.cc; `<system version="1">`, RCCL writes `version="2"`),
//! both as `NCCL_TOPO_DUMP_FILE` writes it and as clouds hand-write `NCCL_TOPO_FILE` inputs
//! (fake switches `ffff:ff:0N.0`, missing attributes, comments). A structural fault (not XML, a
//! `<pci>` without a readable bus id, a `<gpu>` outside any `<pci>`, nesting or sizes past the
//! limits) is an error naming the line; an odd attribute is a warning.

use std::collections::BTreeMap;

use accel_model::{CpuSet, PciAddr};

/// Why a file could not be imported at all (a partial import is warnings instead). Every error
/// names the line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    #[error("the file is larger than {0} bytes")]
    TooLarge(usize),
    #[error("line {line}: {message}")]
    At { line: u32, message: String },
}

/// The largest file read (real dumps are tens of kilobytes).
pub const MAX_XML_BYTES: usize = 16 << 20;
const MAX_XML_NODES: u32 = 1_000_000;
const MAX_NESTING: usize = 64;
const MAX_PCI: usize = 16_384;
const MAX_CPUS: usize = 1024;
const MAX_ATTR: usize = 256;
const MAX_WARNINGS: usize = 200;

/// A CPU (NUMA node) element.
#[derive(Debug, Clone, PartialEq)]
pub struct Cpu {
    /// `numaid`; `None` where the file says -1 (a VM without NUMA) or nothing.
    pub numa: Option<u32>,
    /// `affinity`, where given.
    pub affinity: Option<CpuSet>,
    /// The other attributes (`arch`, `vendor`, `familyid`, `modelid`, `host_hash`).
    pub attributes: BTreeMap<String, String>,
}

/// A `<pci>` element.
#[derive(Debug, Clone, PartialEq)]
pub struct Pci {
    pub addr: PciAddr,
    /// The line it is written on.
    pub line: u32,
    /// Index in [`Topology::cpus`].
    pub cpu: usize,
    /// Enclosing `<pci>` elements, outermost first.
    pub parents: Vec<PciAddr>,
    pub class: Option<u32>,
    pub vendor: Option<u16>,
    pub device: Option<u16>,
    pub subsystem: Option<(u16, u16)>,
    /// `link_speed` in GT/s, as far as its text can be read (`8 GT/s`, `32.0 GT/s PCIe`).
    pub link_gts: Option<f64>,
    pub link_width: Option<u32>,
    pub has_children: bool,
    /// `<gpu>` elements: their attributes.
    pub gpus: Vec<BTreeMap<String, String>>,
    /// Link elements under its `<gpu>`: (element name, attributes).
    pub links: Vec<(String, BTreeMap<String, String>)>,
    /// `<net>` elements under its `<nic>`: attributes.
    pub nets: Vec<BTreeMap<String, String>>,
}

/// What the file says.
#[derive(Debug, Clone, Default)]
pub struct Topology {
    /// The `version` attribute of `<system>`.
    pub version: String,
    pub cpus: Vec<Cpu>,
    /// PCI elements, parents before children.
    pub pci: Vec<Pci>,
    pub warnings: Vec<String>,
}

impl Topology {
    fn warn(&mut self, message: String) {
        if self.warnings.len() < MAX_WARNINGS {
            self.warnings.push(message);
        }
    }
}

/// Parses a topology file.
pub fn parse(bytes: &[u8]) -> Result<Topology, ImportError> {
    if bytes.len() > MAX_XML_BYTES {
        return Err(ImportError::TooLarge(MAX_XML_BYTES));
    }
    let text = std::str::from_utf8(bytes)
        .map_err(|e| ImportError::At { line: line_of(bytes, e.valid_up_to()), message: "not UTF-8".into() })?;
    if let Err(at) = accel_discover::osdevs::xml_depth(text, MAX_NESTING) {
        let line = line_of(bytes, at);
        return Err(ImportError::At { line, message: format!("elements nest deeper than {MAX_NESTING}") });
    }
    let options = roxmltree::ParsingOptions { allow_dtd: false, nodes_limit: MAX_XML_NODES };
    let doc = roxmltree::Document::parse_with_options(text, options).map_err(|e| ImportError::At {
        line: e.pos().row,
        message: format!("not well-formed XML: {}", strip_position(&e.to_string())),
    })?;
    let root = doc.root_element();
    let at = |node: roxmltree::Node| doc.text_pos_at(node.range().start).row;
    if !root.has_tag_name("system") {
        return Err(ImportError::At {
            line: at(root),
            message: format!(
                "the root element is <{}>, not <system>: not an NCCL topology file",
                clean(root.tag_name().name(), 40)
            ),
        });
    }
    let mut topo = Topology { version: clean(root.attribute("version").unwrap_or(""), 20), ..Topology::default() };
    if !matches!(topo.version.as_str(), "1" | "2") {
        topo.warn(format!(
            "<system version=\"{}\">: versions 1 (NCCL) and 2 (RCCL) are known; read as they are",
            topo.version
        ));
    }
    for cpu in root.children().filter(|c| c.is_element()) {
        match cpu.tag_name().name() {
            "cpu" => read_cpu(cpu, &at, &mut topo)?,
            other => topo.warn(format!("line {}: <{}> outside any <cpu>; left out", at(cpu), clean(other, 40))),
        }
    }
    if topo.cpus.is_empty() {
        return Err(ImportError::At { line: at(root), message: "<system> holds no <cpu>".into() });
    }
    Ok(topo)
}

fn read_cpu(cpu: roxmltree::Node, at: &dyn Fn(roxmltree::Node) -> u32, topo: &mut Topology) -> Result<(), ImportError> {
    if topo.cpus.len() >= MAX_CPUS {
        return Err(ImportError::At { line: at(cpu), message: format!("more than {MAX_CPUS} <cpu> elements") });
    }
    let numa = match cpu.attribute("numaid").map(str::trim) {
        None | Some("-1") => None,
        Some(n) => Some(n.parse::<u32>().ok().filter(|n| *n < 4096).ok_or_else(|| ImportError::At {
            line: at(cpu),
            message: format!("<cpu numaid=\"{}\">: not a NUMA node number", clean(n, 20)),
        })?),
    };
    let affinity = match cpu.attribute("affinity") {
        None => None,
        Some(mask) => match parse_mask(mask) {
            Some(set) => Some(set),
            None => {
                topo.warn(format!(
                    "line {}: <cpu affinity=\"{}\"> is not a CPU mask; left out",
                    at(cpu),
                    clean(mask, 40)
                ));
                None
            }
        },
    };
    let attributes = attrs(cpu, &["numaid", "affinity"]);
    topo.cpus.push(Cpu { numa, affinity, attributes });
    let index = topo.cpus.len() - 1;
    for child in cpu.children().filter(|c| c.is_element()) {
        match child.tag_name().name() {
            "pci" => read_pci(child, index, &[], at, topo)?,
            // A NIC straight under the CPU (a NIC NCCL could not place on PCI).
            "nic" => {
                topo.warn(format!("line {}: <nic> outside any <pci>; its PCI function is unknown, left out", at(child)))
            }
            "gpu" => {
                return Err(ImportError::At { line: at(child), message: "a <gpu> outside any <pci>".into() });
            }
            other => topo.warn(format!("line {}: <{}> under <cpu> is not read", at(child), clean(other, 40))),
        }
    }
    Ok(())
}

fn read_pci(
    node: roxmltree::Node,
    cpu: usize,
    parents: &[PciAddr],
    at: &dyn Fn(roxmltree::Node) -> u32,
    topo: &mut Topology,
) -> Result<(), ImportError> {
    let line = at(node);
    let busid =
        node.attribute("busid").ok_or_else(|| ImportError::At { line, message: "a <pci> without busid".into() })?;
    let addr = busid.trim().to_ascii_lowercase().parse::<PciAddr>().map_err(|_| ImportError::At {
        line,
        message: format!("<pci busid=\"{}\">: not a PCI address", clean(busid, 40)),
    })?;
    if topo.pci.len() >= MAX_PCI {
        return Err(ImportError::At { line, message: format!("more than {MAX_PCI} <pci> elements") });
    }
    if let Some(first) = topo.pci.iter().find(|p| p.addr == addr) {
        topo.warn(format!("line {line}: PCI function {addr} appears again (first on line {}); left out", first.line));
        return Ok(());
    }
    let hex = |name: &str, topo: &mut Topology| -> Option<u32> {
        let v = node.attribute(name)?;
        match u32::from_str_radix(v.trim().trim_start_matches("0x"), 16) {
            Ok(n) => Some(n),
            Err(_) => {
                topo.warn(format!("line {line}: {name}=\"{}\" is not hexadecimal; left out", clean(v, 20)));
                None
            }
        }
    };
    let class = hex("class", topo).filter(|c| *c <= 0xff_ffff);
    let id16 = |v: Option<u32>| v.and_then(|v| u16::try_from(v).ok());
    let vendor = id16(hex("vendor", topo));
    let device = id16(hex("device", topo));
    let subsystem = id16(hex("subsystem_vendor", topo)).zip(id16(hex("subsystem_device", topo)));
    let link_gts = match node.attribute("link_speed") {
        None => None,
        Some(s) => {
            let gts = link_speed(s);
            if gts.is_none() {
                topo.warn(format!("line {line}: link_speed=\"{}\" is not read as GT/s; left out", clean(s, 30)));
            }
            gts
        }
    };
    let link_width =
        node.attribute("link_width").and_then(|w| w.trim().parse::<u32>().ok()).filter(|w| *w > 0 && *w <= 32);
    let mut entry = Pci {
        addr,
        line,
        cpu,
        parents: parents.to_vec(),
        class,
        vendor,
        device,
        subsystem,
        link_gts,
        link_width,
        has_children: false,
        gpus: Vec::new(),
        links: Vec::new(),
        nets: Vec::new(),
    };
    let mut inner: Vec<PciAddr> = parents.to_vec();
    inner.push(addr);
    let mut children = Vec::new();
    for child in node.children().filter(|c| c.is_element()) {
        match child.tag_name().name() {
            "pci" => children.push(child),
            "gpu" => {
                entry.gpus.push(attrs(child, &[]));
                for link in child.children().filter(|c| c.is_element()) {
                    let name = clean(link.tag_name().name(), 32);
                    let a = attrs(link, &[]);
                    if a.contains_key("target") || a.contains_key("count") {
                        entry.links.push((name, a));
                    } else {
                        topo.warn(format!(
                            "line {}: <{name}> under <gpu> names no target or count; left out",
                            at(link)
                        ));
                    }
                }
            }
            "nic" => {
                for net in child.children().filter(|c| c.is_element()) {
                    if net.has_tag_name("net") {
                        entry.nets.push(attrs(net, &[]));
                    }
                }
            }
            other => topo.warn(format!("line {}: <{}> under <pci> is not read", at(child), clean(other, 40))),
        }
    }
    entry.has_children = !children.is_empty();
    topo.pci.push(entry);
    for child in children {
        read_pci(child, cpu, &inner, at, topo)?;
    }
    Ok(())
}

/// An element's attributes (but `skip`), values cleaned.
fn attrs(node: roxmltree::Node, skip: &[&str]) -> BTreeMap<String, String> {
    node.attributes()
        .filter(|a| !skip.contains(&a.name()))
        .take(64)
        .map(|a| (clean(a.name(), 64), clean(a.value(), MAX_ATTR)))
        .collect()
}

/// NCCL's CPU mask: 32-bit hex words separated by commas, most significant first, without
/// `0x` (`00000000,ffff0000`); hwloc's style with `0x` is read too.
pub fn parse_mask(text: &str) -> Option<CpuSet> {
    let words: Vec<&str> = text.trim().split(',').map(|w| w.trim().trim_start_matches("0x")).collect();
    if words.len() > 128 || words.iter().any(|w| w.is_empty() || w.len() > 8 || u32::from_str_radix(w, 16).is_err()) {
        return None;
    }
    let mut cpus = Vec::new();
    for (i, w) in words.iter().rev().enumerate() {
        let bits = u32::from_str_radix(w, 16).ok()?;
        for b in 0..32 {
            if bits & (1 << b) != 0 {
                cpus.push(u32::try_from(i).ok()? * 32 + b);
            }
        }
    }
    Some(CpuSet::new(cpus))
}

/// `8 GT/s`, `16.0 GT/s PCIe`, `32 GT/s PCIe/s`, `2.5 GT/s PCIe` -> GT/s.
pub fn link_speed(text: &str) -> Option<f64> {
    let t = text.trim();
    let (value, rest) = t.split_once(char::is_whitespace).unwrap_or((t, ""));
    let gts: f64 = value.parse().ok()?;
    (rest.trim_start().starts_with("GT/s") && gts.is_finite() && gts > 0.0 && gts <= 256.0).then_some(gts)
}

pub use accel_discover::osdevs::clean;

/// roxmltree's message without its trailing ` at LINE:COL` (the line is given separately).
fn strip_position(message: &str) -> String {
    match message.rfind(" at ") {
        Some(i) if message[i + 4..].chars().all(|c| c.is_ascii_digit() || c == ':') => message[..i].to_owned(),
        _ => message.to_owned(),
    }
}

fn line_of(bytes: &[u8], offset: usize) -> u32 {
    u32::try_from(bytes[..offset.min(bytes.len())].iter().filter(|b| **b == b'\n').count() + 1).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_parsers() {
        assert_eq!(parse_mask("00000000,ffff0000").unwrap().to_string(), "16-31");
        assert_eq!(parse_mask("0x000000ff,0xffff0000,0x00ffffff").unwrap().len(), 24 + 16 + 8);
        assert!(parse_mask("0-23").is_none());
        assert_eq!(link_speed("8 GT/s"), Some(8.0));
        assert_eq!(link_speed("32 GT/s PCIe/s"), Some(32.0));
        assert_eq!(link_speed("16.0 GT/s PCIe"), Some(16.0));
        assert_eq!(link_speed("100000 MT/s"), None);
        assert_eq!(strip_position("unexpected end of stream at 3:7"), "unexpected end of stream");
    }
}
