//! The vendor-neutral readings every family's `metrics` produces: the plugin protocol v1 `metrics`
//! document (the format fixed with the plugin protocol), so a built-in family and an external
//! plugin are interchangeable and one renderer (the agent's) turns either into Prometheus series.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One `metrics` document: devices and scale-up links of one node at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Readings {
    #[serde(default = "protocol")]
    pub protocol: u32,
    #[serde(default)]
    pub devices: Vec<DeviceReading>,
    #[serde(default)]
    pub links: Vec<LinkReading>,
}

fn protocol() -> u32 {
    crate::protocol::PROTOCOL as u32
}

/// One device. Every field but `pci` is optional: absent means the vendor does not expose it,
/// and it produces no series.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceReading {
    /// The PCI function, `0000:3b:00.0` (matched against the node's accelerators).
    pub pci: String,
    /// The partition of a partitioned device (MI300X CPX, MIG) the reading is for. An agent-side
    /// extension of the protocol (unknown to v1 plugins, which report whole devices); absent
    /// means the whole PCI function.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_total_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_watts: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature_celsius: Option<f64>,
    /// Clock domain (`sm`, `memory`, `soc`) to its current frequency in Hz.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub clock_hz: BTreeMap<String, u64>,
    /// Error counters (`ecc_corrected_total`, `ecc_uncorrected_total`, ...) and `xid_last`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub errors: BTreeMap<String, u64>,
}

/// One scale-up link of a device (an NVLink, an xGMI link), as cumulative counters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkReading {
    pub pci: String,
    pub link: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_pci: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_bytes_total: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_bytes_total: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors_total: Option<u64>,
}

/// One family's readings at one moment, with what went wrong on the way (a failed library
/// call), as the `metrics` verb gives them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics {
    pub readings: Readings,
    pub warnings: Vec<String>,
}

impl Metrics {
    /// A reader's result as a family's `metrics`: `None` (not provided on this host) when it
    /// found no device and had nothing to warn about.
    pub fn found((readings, warnings): (Readings, Vec<accel_model::Warning>)) -> Option<Metrics> {
        (!readings.devices.is_empty() || !warnings.is_empty())
            .then(|| Metrics { readings, warnings: warnings.iter().map(ToString::to_string).collect() })
    }
}

/// At most this many clock domains or error kinds per device are kept (label cardinality).
pub const MAX_KEYS: usize = 32;

impl Readings {
    /// Drops what a renderer must not turn into labels: keys outside `[a-z0-9_]` or longer
    /// than 64 bytes, maps past [`MAX_KEYS`], non-finite numbers. Returns what was dropped, as
    /// warnings naming `source`.
    pub fn sanitize(&mut self, source: &str) -> Vec<String> {
        let mut warnings = Vec::new();
        let ok_key = |k: &str| {
            !k.is_empty()
                && k.len() <= 64
                && k.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        };
        for d in &mut self.devices {
            for map in [&mut d.clock_hz, &mut d.errors] {
                let before = map.len();
                map.retain(|k, _| ok_key(k));
                while map.len() > MAX_KEYS {
                    map.pop_last();
                }
                if map.len() != before {
                    warnings.push(format!(
                        "{source}: {}: dropped {} malformed or excess keys",
                        d.pci,
                        before - map.len()
                    ));
                }
            }
            for v in [&mut d.utilization_ratio, &mut d.power_watts, &mut d.temperature_celsius] {
                if v.is_some_and(|x| !x.is_finite()) {
                    *v = None;
                    warnings.push(format!("{source}: {}: dropped a non-finite value", d.pci));
                }
            }
        }
        warnings
    }

    /// Appends another reader's readings.
    pub fn extend(&mut self, other: Readings) {
        self.devices.extend(other.devices);
        self.links.extend(other.links);
    }
}

/// A PCI address as sysfs and the protocol write it: lowercase, 4-digit domain.
/// NVML's `00000000:18:00.0` becomes `0000:18:00.0`.
pub fn normalize_pci(addr: &str) -> String {
    let addr = addr.trim().to_ascii_lowercase();
    match addr.split_once(':') {
        Some((domain, rest)) if domain.len() > 4 && domain.bytes().all(|b| b.is_ascii_hexdigit()) => {
            let d = u32::from_str_radix(domain, 16).unwrap_or(0);
            format!("{d:04x}:{rest}")
        }
        _ => addr,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_document_parses_with_unknown_fields() {
        let doc = r#"{"protocol":1,"devices":[{"pci":"0000:3b:00.0","utilization_ratio":0.42,
            "clock_hz":{"sm":1980000000},"errors":{"ecc_corrected_total":3,"xid_last":79},"vendor_extra":true}],
            "links":[{"pci":"0000:3b:00.0","link":0,"tx_bytes_total":1,"rx_bytes_total":2}]}"#;
        let r: Readings = serde_json::from_str(doc).unwrap();
        assert_eq!(r.devices[0].utilization_ratio, Some(0.42));
        assert_eq!(r.devices[0].errors["xid_last"], 79);
        assert_eq!(r.devices[0].memory_used_bytes, None);
        assert_eq!(r.links[0].rx_bytes_total, Some(2));
    }

    #[test]
    fn sanitize_drops_bad_keys_and_values() {
        let mut r = Readings::default();
        let mut d = DeviceReading { pci: "x".into(), power_watts: Some(f64::NAN), ..Default::default() };
        d.clock_hz.insert("sm".into(), 1);
        d.clock_hz.insert("Bad Key\"}".into(), 2);
        for i in 0..40 {
            d.errors.insert(format!("e{i:02}_total"), 0);
        }
        r.devices.push(d);
        let w = r.sanitize("plugin x");
        assert_eq!(r.devices[0].clock_hz.len(), 1);
        assert_eq!(r.devices[0].errors.len(), MAX_KEYS);
        assert_eq!(r.devices[0].power_watts, None);
        assert_eq!(w.len(), 3, "{w:?}");
    }

    #[test]
    fn pci_addresses_normalize() {
        assert_eq!(normalize_pci("00000000:18:00.0"), "0000:18:00.0");
        assert_eq!(normalize_pci("00000008:01:00.0"), "0008:01:00.0");
        assert_eq!(normalize_pci("0000:3B:00.0"), "0000:3b:00.0");
    }
}
