//! The SKU registry: PCI ids to product facts, loaded from data files (built-in ones plus any
//! the user drops in), never from code.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::{LinkKind, PciClass, PciId, System};

/// The registry files compiled into the binary (every `skus/*.toml`, found by build.rs):
/// origin, the PCI vendor ids their entries use (the file's `pci_vendors`, checked by a test),
/// and the text. A file is parsed the first time a lookup needs it, so start-up pays only for
/// the vendors present on the machine.
const BUILTIN: &[(&str, &[u16], &str)] = include!(concat!(env!("OUT_DIR"), "/skus.rs"));

/// One product, as the registry knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sku {
    pub id: String,
    pub vendor: String,
    pub product: String,
    pub family: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bf16_dense_tflops: Option<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dtypes: Vec<String>,
    /// Ray's accelerator-type string for the product (`H100`, `TPU-V6E`, `aws-neuron-core`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ray_accelerator_type: Option<String>,
    pub sources: Vec<String>,
    #[serde(default)]
    pub pci: Vec<PciMatch>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_up: Option<ScaleUp>,
    /// Where this entry was loaded from (`builtin:nvidia.toml`, a file path). Set by the registry.
    #[serde(default, skip_deserializing)]
    pub origin: String,
}

/// PCI ids that identify a SKU. Subsystem ids narrow a match where one device id covers several SKUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PciMatch {
    #[serde(with = "id_number")]
    pub vendor: u16,
    #[serde(with = "id_number")]
    pub device: u16,
    #[serde(default, with = "opt_id_number", skip_serializing_if = "Option::is_none")]
    pub subsystem_vendor: Option<u16>,
    #[serde(default, with = "opt_id_number", skip_serializing_if = "Option::is_none")]
    pub subsystem_device: Option<u16>,
    /// The PCI class code the device presents (`"0x030200"`, a 3D controller), as a real
    /// capture of it shows. Not used to match; it lets `accel labels --predict` give NFD's PCI
    /// label for a node not yet seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<PciClass>,
}

/// A SKU's scale-up interconnect.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScaleUp {
    pub kind: LinkKind,
    pub links: u32,
    /// Aggregate bidirectional GB/s per device, as the vendor states it.
    pub gbps: f64,
}

impl ScaleUp {
    /// Bidirectional GB/s of one link.
    pub fn gbps_per_link(&self) -> f64 {
        if self.links == 0 {
            0.0
        } else {
            self.gbps / f64::from(self.links)
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SkuError {
    #[error("{origin}:{message}")]
    Parse { origin: String, message: String },
    #[error("{origin}: sku {id:?}: {message}")]
    Invalid { origin: String, id: String, message: String },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SkuFile {
    /// The PCI vendor ids of the file's entries (required of built-in files, see build.rs).
    #[serde(default)]
    #[allow(dead_code)]
    pci_vendors: Vec<u16>,
    #[serde(default)]
    sku: Vec<Sku>,
    #[serde(default)]
    system: Vec<System>,
}

/// All known SKUs: the built-in files, then user files in load order. A later entry overrides
/// an earlier one with the same id, and wins a PCI match against an equally specific one, so a
/// user's file can correct or extend the built-in data.
#[derive(Debug, Clone)]
pub struct SkuRegistry {
    builtin: Vec<Builtin>,
    user: Vec<Sku>,
    user_systems: Vec<System>,
}

#[derive(Debug, Clone)]
struct Builtin {
    origin: &'static str,
    vendors: &'static [u16],
    text: &'static str,
    parsed: OnceLock<Vec<Sku>>,
    systems: OnceLock<Vec<System>>,
}

impl Builtin {
    fn skus(&self) -> &[Sku] {
        self.parsed
            .get_or_init(|| SkuRegistry::parse(self.origin, self.text).expect("built-in SKU files are valid (tested)"))
    }

    fn systems(&self) -> &[System] {
        self.systems.get_or_init(|| {
            SkuRegistry::parse_systems(self.origin, self.text).expect("built-in SKU files are valid (tested)")
        })
    }
}

impl Default for SkuRegistry {
    fn default() -> SkuRegistry {
        SkuRegistry::builtin()
    }
}

impl SkuRegistry {
    /// The registry compiled into this binary.
    pub fn builtin() -> SkuRegistry {
        let builtin = BUILTIN
            .iter()
            .map(|&(origin, vendors, text)| Builtin {
                origin,
                vendors,
                text,
                parsed: OnceLock::new(),
                systems: OnceLock::new(),
            })
            .collect();
        SkuRegistry { builtin, user: Vec::new(), user_systems: Vec::new() }
    }

    /// A registry with no built-in data (for tests and for tools that bring their own).
    pub fn empty() -> SkuRegistry {
        SkuRegistry { builtin: Vec::new(), user: Vec::new(), user_systems: Vec::new() }
    }

    /// Parses one registry file (TOML with `[[sku]]` tables) without adding it.
    pub fn parse(origin: &str, text: &str) -> Result<Vec<Sku>, SkuError> {
        let file = Self::parse_file(origin, text)?;
        let mut skus = file.sku;
        for sku in &mut skus {
            let invalid = |message: &str| SkuError::Invalid {
                origin: origin.to_owned(),
                id: sku.id.clone(),
                message: message.to_owned(),
            };
            if !is_slug(&sku.id) {
                return Err(invalid("id must be a non-empty lowercase slug (a-z, 0-9, -)"));
            }
            if sku.sources.is_empty() {
                return Err(invalid("every entry must name at least one public source"));
            }
            if sku.scale_up.is_some_and(|s| !(s.gbps.is_finite() && s.gbps >= 0.0)) {
                return Err(invalid("scale_up.gbps must be a non-negative number"));
            }
            sku.origin = origin.to_owned();
        }
        Ok(skus)
    }

    /// Parses one registry file's `[[system]]` tables without adding them.
    pub fn parse_systems(origin: &str, text: &str) -> Result<Vec<System>, SkuError> {
        let mut systems = Self::parse_file(origin, text)?.system;
        for system in &mut systems {
            let invalid = |message: &str| SkuError::Invalid {
                origin: origin.to_owned(),
                id: system.id.clone(),
                message: message.to_owned(),
            };
            if !is_slug(&system.id) {
                return Err(invalid("id must be a non-empty lowercase slug (a-z, 0-9, -)"));
            }
            if system.sources.is_empty() {
                return Err(invalid("every entry must name at least one public source"));
            }
            if system.product_names.is_empty() && system.board_names.is_empty() {
                return Err(invalid("a system needs product_names or board_names to be identified by"));
            }
            if system.skus.is_empty() || system.devices < 2 {
                return Err(invalid("a system names its accelerator skus and at least 2 devices"));
            }
            system.origin = origin.to_owned();
        }
        Ok(systems)
    }

    /// Adds systems over everything loaded so far.
    pub fn merge_systems(&mut self, systems: Vec<System>) {
        self.user_systems.extend(systems);
    }

    /// The system a machine with these DMI strings is: the user's entries first (latest first),
    /// then the built-in ones.
    pub fn system(&self, product_name: Option<&str>, board_name: Option<&str>) -> Option<&System> {
        self.user_systems
            .iter()
            .rev()
            .chain(self.builtin.iter().flat_map(Builtin::systems))
            .find(|s| s.matches(product_name, board_name))
    }

    /// Every system in effect: the user's (latest entry per id), then the built-in ones they do
    /// not replace.
    pub fn systems(&self) -> Vec<&System> {
        let mut out: Vec<&System> = Vec::new();
        for s in self.user_systems.iter().rev() {
            if !out.iter().any(|o| o.id == s.id) {
                out.push(s);
            }
        }
        for s in self.builtin.iter().flat_map(Builtin::systems) {
            if !out.iter().any(|o| o.id == s.id) {
                out.push(s);
            }
        }
        out
    }

    fn parse_file(origin: &str, text: &str) -> Result<SkuFile, SkuError> {
        toml::from_str::<SkuFile>(text).map_err(|e| {
            // One line, `origin:line:column: message`, instead of toml's multi-line snippet.
            let at = e.span().map(|span| {
                let before = &text[..span.start.min(text.len())];
                let line = before.matches('\n').count() + 1;
                let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                format!("{line}:{column}:")
            });
            SkuError::Parse {
                origin: origin.to_owned(),
                message: format!("{} {}", at.unwrap_or_default(), e.message()),
            }
        })
    }

    /// Adds entries over everything loaded so far.
    pub fn merge(&mut self, skus: Vec<Sku>) {
        self.user.extend(skus);
    }

    fn overridden(&self, id: &str) -> bool {
        self.user.iter().any(|s| s.id == id)
    }

    /// Every entry in effect, built-in first, each id once.
    pub fn all(&self) -> Vec<&Sku> {
        let mut out: Vec<&Sku> =
            self.builtin.iter().flat_map(Builtin::skus).filter(|s| !self.overridden(&s.id)).collect();
        for (i, sku) in self.user.iter().enumerate() {
            if !self.user[i + 1..].iter().any(|later| later.id == sku.id) {
                out.push(sku);
            }
        }
        out
    }

    pub fn get(&self, id: &str) -> Option<&Sku> {
        self.user
            .iter()
            .rev()
            .find(|s| s.id == id)
            .or_else(|| self.builtin.iter().flat_map(Builtin::skus).find(|s| s.id == id))
    }

    /// The SKU for a PCI function. A match on subsystem ids beats a plain one; among equals the
    /// entry loaded last wins.
    pub fn lookup(&self, vendor: PciId, device: PciId, subsystem: Option<(PciId, PciId)>) -> Option<&Sku> {
        let user = self.user.iter().rev();
        let builtin = self
            .builtin
            .iter()
            .rev()
            .filter(|b| b.vendors.contains(&vendor.0))
            .flat_map(Builtin::skus)
            .filter(|s| !self.overridden(&s.id));
        let mut best: Option<(u32, &Sku)> = None;
        for sku in user.chain(builtin) {
            for m in sku.pci.iter().filter(|m| m.vendor == vendor.0 && m.device == device.0) {
                let score = match (m.subsystem_vendor, m.subsystem_device, subsystem) {
                    (None, None, _) => 1,
                    (sv, sd, Some((v, d))) if sv.is_none_or(|x| x == v.0) && sd.is_none_or(|x| x == d.0) => 2,
                    _ => continue,
                };
                // Candidates come latest first, so only a strictly better score replaces one.
                if best.is_none_or(|(s, _)| score > s) {
                    best = Some((score, sku));
                }
            }
        }
        best.map(|(_, sku)| sku)
    }
}

/// A registry id: a non-empty lowercase slug.
fn is_slug(id: &str) -> bool {
    !id.is_empty() && id.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// The lowercase vendor name of a PCI vendor: the name of the built-in SKU file that declares
/// it (`intel.toml` declares 0x8086 and 0x1da3), or `pci-<id>` for others.
pub fn vendor_name(vendor: PciId) -> String {
    BUILTIN
        .iter()
        .find(|(_, ids, _)| ids.contains(&vendor.0))
        .and_then(|(origin, _, _)| origin.strip_prefix("builtin:")?.strip_suffix(".toml"))
        .map_or_else(|| format!("pci-{:04x}", vendor.0), str::to_owned)
}

/// PCI ids are written as TOML integers (`0x10de`); JSON output shows them as the same hex string.
mod id_number {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &u16, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("0x{v:04x}"))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u16, D::Error> {
        u16::deserialize(d)
    }
}

mod opt_id_number {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<u16>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => super::id_number::serialize(v, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u16>, D::Error> {
        Option::<u16>::deserialize(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_registry_is_valid_and_covers_the_required_skus() {
        let registry = SkuRegistry::builtin();
        for &(origin, vendors, text) in BUILTIN {
            for sku in SkuRegistry::parse(origin, text).unwrap() {
                assert!(
                    sku.pci.iter().all(|m| vendors.contains(&m.vendor)),
                    "{origin}: {} outside its vendor hint",
                    sku.id
                );
            }
        }
        let mut ids: Vec<&str> = registry.all().iter().map(|s| s.id.as_str()).collect();
        let n = ids.len();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), n, "sku ids are unique");
        for sku in registry.all() {
            assert!(sku.sources.iter().all(|s| s.starts_with("https://") || s.starts_with("http://")), "{}", sku.id);
        }
        // One PCI id per required product family: the lookup must find each.
        let required: &[(u16, u16)] = &[
            (0x10de, 0x2bb5),
            (0x10de, 0x2901),
            (0x10de, 0x2941),
            (0x10de, 0x3182),
            (0x10de, 0x2335),
            (0x10de, 0x2330),
            (0x10de, 0x2331),
            (0x10de, 0x20b2),
            (0x10de, 0x26b9),
            (0x10de, 0x27b8),
            (0x1002, 0x75a3),
            (0x1002, 0x75a0),
            (0x1002, 0x74a5),
            (0x1002, 0x74a1),
            (0x1002, 0x7408),
            (0x1002, 0x740f),
            (0x1ae0, 0x005e),
            (0x1ae0, 0x0063),
            (0x1ae0, 0x0062),
            (0x1ae0, 0x006f),
            (0x1ae0, 0x0076),
            (0x1d0f, 0x7164),
            (0x1d0f, 0x7364),
            (0x1d0f, 0x7264),
            (0x1da3, 0x1020),
            (0x1da3, 0x1060),
            (0x8086, 0x0bd5),
        ];
        for &(v, d) in required {
            assert!(registry.lookup(PciId(v), PciId(d), None).is_some(), "{v:04x}:{d:04x} missing");
        }
        assert!(registry.all().iter().any(|s| s.vendor == "groq"), "groq LPU missing");
    }

    #[test]
    fn user_files_override_and_subsystems_narrow() {
        let mut registry = SkuRegistry::builtin();
        let text = r#"
[[sku]]
id = "test-h100-special"
vendor = "nvidia"
product = "H100 special board"
family = "hopper"
sources = ["https://example.com/spec"]
[[sku.pci]]
vendor = 0x10de
device = 0x2330
subsystem_vendor = 0x10de
subsystem_device = 0x1234
"#;
        registry.merge(SkuRegistry::parse("user.toml", text).unwrap());
        let plain = registry.lookup(PciId(0x10de), PciId(0x2330), Some((PciId(0x10de), PciId(0x16c1)))).unwrap();
        assert_ne!(plain.id, "test-h100-special");
        let special = registry.lookup(PciId(0x10de), PciId(0x2330), Some((PciId(0x10de), PciId(0x1234)))).unwrap();
        assert_eq!(special.id, "test-h100-special");
        assert_eq!(special.origin, "user.toml");

        // Same id as a built-in entry: the user's replaces it everywhere.
        let fix = text.replace("test-h100-special", "nvidia-h100-sxm").replace("H100 special board", "H100 corrected");
        let n = registry.all().len();
        registry.merge(SkuRegistry::parse("fix.toml", &fix).unwrap());
        assert_eq!(registry.all().len(), n);
        assert_eq!(registry.get("nvidia-h100-sxm").unwrap().product, "H100 corrected");
        assert_eq!(registry.all().iter().filter(|s| s.id == "nvidia-h100-sxm").count(), 1);
        // Its PCI match is now the user's only (subsystem 10de:1234), so a plain H100 is unknown.
        assert!(registry.lookup(PciId(0x10de), PciId(0x2330), None).is_none());
    }

    #[test]
    fn bad_files_are_refused_with_their_origin() {
        let e = SkuRegistry::parse("a.toml", "[[sku]]\nid = \"x\"").unwrap_err();
        assert_eq!(e.to_string(), "a.toml:1:1: missing field `vendor`");
        let e =
            SkuRegistry::parse("b.toml", "[[sku]]\nid=\"x\"\nvendor=\"v\"\nproduct=\"p\"\nfamily=\"f\"\nsources=[]")
                .unwrap_err();
        assert_eq!(e.to_string(), "b.toml: sku \"x\": every entry must name at least one public source");
        let e = SkuRegistry::parse(
            "c.toml",
            "[[sku]]\nid=\"x\"\nvendor=\"v\"\nproduct=\"p\"\nfamily=\"f\"\nsources=[\"https://x\"]\ncolour=1",
        )
        .unwrap_err();
        assert!(e.to_string().contains("colour"), "{e}");
    }
}
