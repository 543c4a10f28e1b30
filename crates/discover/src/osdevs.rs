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
    machine.warnings.extend(warnings);
    true
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
            other: Vec::new(),
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
