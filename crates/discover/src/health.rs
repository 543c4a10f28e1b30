//! Device health verdicts that fail closed: each device gets `healthy`, `unhealthy` or `unknown`
//! with its reasons, from the PCIe link the PCI tree shows and from its family's own sources
//! (the built-in readers' error counters, an external plugin's `health` verb).
//!
//! The rules, in one place:
//! - **PCIe link.** A link trained narrower than its maximum width is unhealthy. A lower speed
//!   is not: GPUs lower their link speed when idle (link power management), so a speed check
//!   would call every idle GPU broken.
//! - **Error counters** (the `metrics` document's `errors`): any `*_uncorrected_total` above 0
//!   (uncorrectable ECC, RAS blocks), `xid_last` above 0, `retired_pages_pending` or
//!   `row_remap_failure` above 0.
//! - **Links**: a scale-up link with `errors_total` above 0.
//! - **A family's source** that fails, or that says nothing of a device it reported, makes the
//!   device `unknown`. So does a family with no source at all on a live machine (NVML not
//!   loaded). A capture holds what it recorded: there, a missing source is listed as
//!   `unchecked` and the verdict covers the rest.

use std::collections::BTreeMap;

use accel_model::{Health, HealthState, Machine};

use crate::protocol::PluginError;
use crate::readings::{normalize_pci, Readings};

/// One device's findings from one family's source, keyed by PCI address.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceFindings {
    /// Why the device is unhealthy; empty when this source found nothing wrong.
    pub reasons: Vec<String>,
}

/// What a family's health source said, by normalised PCI address.
pub type Findings = BTreeMap<String, DeviceFindings>;

/// The findings of a `metrics` document, by the rules in this module's header.
pub fn from_readings(readings: &Readings) -> Findings {
    let mut out = Findings::new();
    for d in &readings.devices {
        let f = out.entry(normalize_pci(&d.pci)).or_default();
        for (key, &n) in &d.errors {
            if n == 0 {
                continue;
            }
            if let Some(kind) = key.strip_suffix("_uncorrected_total") {
                f.reasons.push(format!("{n} uncorrectable {} errors", kind.replace('_', " ").to_uppercase()));
            } else if key == "xid_last" {
                f.reasons.push(format!("XID {n}"));
            } else if key == "retired_pages_pending" {
                f.reasons.push(format!("{n} retired pages pending a reset"));
            } else if key == "row_remap_failure" {
                f.reasons.push("row remapping failed".into());
            }
        }
    }
    for l in &readings.links {
        if let Some(n) = l.errors_total.filter(|&n| n > 0) {
            out.entry(normalize_pci(&l.pci)).or_default().reasons.push(format!("link {}: {n} errors", l.link));
        }
    }
    out
}

/// What each plugin's health source said ([`crate::Vendor::health`]), by plugin id.
pub type ByPlugin<'a> = BTreeMap<&'a str, Option<Result<Findings, PluginError>>>;

/// Sets every accelerator's [`Health`]: the PCIe link rule, then what its plugin's health
/// source said (`by_plugin`) of its own devices; `live`: a plugin without a source on the live
/// machine makes its devices unknown.
pub fn evaluate(live: bool, by_plugin: &ByPlugin<'_>, machine: &mut Machine) {
    let verdicts: Vec<Health> = machine
        .accelerators
        .iter()
        .map(|acc| {
            let mut h = Health::default();
            let mut unknown = Vec::new();
            if let Some(node) = acc.pci.and_then(|p| machine.pci_device(p)) {
                if let (Some(link), Some(max)) = (node.link, node.max_link) {
                    h.checked.push("pcie_link".into());
                    if link.width < max.width {
                        h.reasons.push(format!("PCIe link x{} of x{}", link.width, max.width));
                    }
                }
            }
            let check = format!("{}:errors", acc.plugin);
            match by_plugin.get(acc.plugin.as_str()) {
                Some(Some(Ok(findings))) => match acc.pci.and_then(|p| findings.get(&p.to_string())) {
                    Some(f) => {
                        h.checked.push(check);
                        h.reasons.extend(f.reasons.iter().cloned());
                    }
                    None => unknown.push(format!("{check}: its source said nothing of this device")),
                },
                Some(Some(Err(e))) => unknown.push(format!("{check}: {e}")),
                _ if live => unknown.push(format!("{check}: no source on this machine (its runtime is not loaded)")),
                _ => h.unchecked.push(check),
            }
            h.state = if !h.reasons.is_empty() {
                HealthState::Unhealthy
            } else if !unknown.is_empty() {
                h.reasons = unknown;
                HealthState::Unknown
            } else {
                HealthState::Healthy
            };
            h
        })
        .collect();
    for (acc, h) in machine.accelerators.iter_mut().zip(verdicts) {
        acc.health = Some(h);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readings::{DeviceReading, LinkReading};

    #[test]
    fn counters_become_reasons_and_zeros_do_not() {
        let mut d = DeviceReading { pci: "00000000:18:00.0".into(), ..Default::default() };
        d.errors.insert("ecc_uncorrected_total".into(), 3);
        d.errors.insert("ecc_corrected_total".into(), 900);
        d.errors.insert("xid_last".into(), 79);
        let quiet = DeviceReading { pci: "0000:2a:00.0".into(), ..Default::default() };
        let link = LinkReading { pci: "0000:2a:00.0".into(), link: 2, errors_total: Some(0), ..Default::default() };
        let f = from_readings(&Readings { devices: vec![d, quiet], links: vec![link], ..Default::default() });
        assert_eq!(f["0000:18:00.0"].reasons, ["3 uncorrectable ECC errors", "XID 79"]);
        assert!(f["0000:2a:00.0"].reasons.is_empty());
    }
}
