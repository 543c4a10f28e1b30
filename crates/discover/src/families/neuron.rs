//! The AWS Neuron plugin: Inferentia and Trainium devices on PCI (vendor 0x1d0f, not the EFA/ENA
//! network functions), with NeuronCore counts and NeuronLink neighbours from the Neuron sysfs
//! (`/sys/devices/virtual/neuron_device/neuron<N>/{core_count,connected_devices}`).

use std::collections::BTreeSet;

use accel_model::{Accelerator, LinkKind, LinkKindInfo, Machine, Warning};

use crate::plugin::{isolate_by_index, pci_accelerator, pci_functions, sku_link};
use crate::{Host, Isolation, Report, Vendor};

const SRC: &str = "neuron";
const SYSFS: &str = "/sys/devices/virtual/neuron_device";

#[derive(Debug, Clone, Copy, Default)]
pub struct Neuron;

/// NeuronCores per device by SKU where the driver's `core_count` is unreadable (aws-neuron-sdk docs).
fn cores_per_device(sku: Option<&str>) -> u32 {
    match sku {
        Some("aws-inferentia") => 4,
        Some("aws-trainium2") | Some("aws-trainium3") => 8,
        _ => 2,
    }
}

/// `connected_devices`: neighbour indices separated by commas and/or spaces (`1, 3, 4, 12`).
pub fn parse_connected(text: &str) -> Option<Vec<u32>> {
    text.split([',', ' ', '\n'])
        .filter(|p| !p.is_empty())
        .map(|p| p.trim().parse::<u32>().ok().filter(|&n| n < 4096))
        .collect()
}

/// The link kind of NeuronLink.
pub const NEURONLINK: LinkKind = LinkKind::new("neuronlink");

/// Where this family runs among the built-in plugins (lower first; the platform plugin runs
/// before all, the generic PCI fallback after all).
pub const ORDER: u32 = 40;

/// This family's plugin, for the built-in list (`plugin_list`).
pub fn plugin() -> Box<dyn Vendor> {
    Box::new(Neuron)
}

impl Vendor for Neuron {
    fn environment(&self, host: &Host, _machine: &accel_model::Machine) -> crate::plugin::Environment {
        crate::plugin::Environment {
            modules: ["neuron"].map(String::from).to_vec(),
            packages: ["aws-neuronx-runtime-lib", "aws-neuronx-dkms"].map(String::from).to_vec(),
            facts: crate::plugin::read_fact(host, "runtime.neuron", "/opt/aws/neuron/share/neuron-runtime-version").into_iter().collect(),
            ..Default::default()
        }
    }

    fn capture(&self, _host: &Host, _machine: &accel_model::Machine) -> Vec<crate::plugin::Keep> {
        vec![crate::plugin::Keep::Tree { path: "/sys/devices/virtual/neuron_device".into(), depth: 4 }]
    }

    fn link_kinds(&self) -> Vec<LinkKindInfo> {
        vec![LinkKindInfo::new(NEURONLINK, "NL", "NeuronLink")]
    }

    fn id(&self) -> &'static str {
        "neuron"
    }

    fn vocabulary(&self) -> accel_model::Vocabulary {
        crate::plugin::vocabulary(
            "neuron",
            "NRN",
            Some("NEURON_RT_VISIBLE_CORES"),
            Some("neuron_cores"),
            &["NEURON_RT_VISIBLE_CORES"],
            Some("aws.amazon.com/neuron"),
        )
    }

    fn discover(&self, host: &Host, platform: &Machine) -> Report {
        let mut report = Report::default();
        // Neuron devices are the 0x1d0f functions the registry knows and that are not NICs.
        let mut accs: Vec<Accelerator> = pci_functions(platform, 0x1d0f, |c| c.base() != 0x02)
            .map(|n| pci_accelerator(host, n, "aws", "neuron"))
            .filter(|a| a.sku.is_some())
            .collect();
        if accs.is_empty() {
            return report;
        }
        accs.sort_by_key(|a| a.pci);
        let dir = host.path(SYSFS);
        let names = host.list_dir(&dir, SRC, &mut report.warnings);
        let mut neuron: Vec<u32> = names.iter().filter_map(|n| n.strip_prefix("neuron")?.parse().ok()).collect();
        neuron.sort_unstable();
        if neuron.is_empty() {
            report.warnings.push(Warning {
                source: SRC.into(),
                path: Some(SYSFS.into()),
                message: "Neuron driver sysfs missing: core counts and NeuronLink links unknown".into(),
            });
        } else if neuron.len() != accs.len() {
            report.warnings.push(Warning {
                source: SRC.into(),
                path: Some(SYSFS.into()),
                message: format!("{} neuron devices in sysfs for {} on PCI; links ignored", neuron.len(), accs.len()),
            });
            neuron.clear();
        }
        // neuron<N> is the N-th device in PCI order (the driver probes in bus order).
        let mut pairs = BTreeSet::new();
        let mut cores = 0u64;
        let mut core_counts: Vec<Option<u32>> = vec![None; accs.len()];
        for (i, n) in neuron.iter().enumerate() {
            let d = dir.join(format!("neuron{n}"));
            let arch = host.read_attr(&d.join("info/architecture/device_name"), SRC, &mut report.warnings);
            if let (Some(arch), true) = (arch, accs[i].family.is_none()) {
                accs[i].family = Some(arch.to_lowercase());
            }
            core_counts[i] = host.parse_attr(&d.join("core_count"), SRC, &mut report.warnings, |t| {
                t.parse::<u32>().ok().filter(|&c| c <= 1024)
            });
            cores += u64::from(core_counts[i].unwrap_or(0));
            let peers = host.parse_attr(&d.join("connected_devices"), SRC, &mut report.warnings, parse_connected);
            for p in peers.unwrap_or_default() {
                match neuron.iter().position(|&x| x == p) {
                    Some(j) if j != i => {
                        pairs.insert((i.min(j), i.max(j)));
                    }
                    _ => report.warnings.push(host.warning(
                        SRC,
                        &d.join("connected_devices"),
                        format!("names device {p}, which does not exist"),
                    )),
                }
            }
        }
        if cores > 0 {
            report.attributes.insert("aws.neuron_cores".into(), cores.to_string());
        }
        // Ray counts `neuron_cores` and NEURON_RT_VISIBLE_CORES takes core ids: the cores of the
        // devices before it in PCI order come first.
        let mut first = 0u32;
        for (acc, count) in accs.iter_mut().zip(core_counts) {
            let count = count.unwrap_or_else(|| cores_per_device(acc.sku.as_deref()));
            acc.vocabulary.ray_units = Some(f64::from(count));
            if count > 0 {
                acc.vocabulary.isolation = vec![format!("{first}-{}", first + count - 1)];
            }
            first += count;
        }
        // The Neuron runtime opens /dev/neuron<N> (N in PCI order, as neuron<N> above).
        for (i, acc) in accs.iter_mut().enumerate() {
            acc.vocabulary.device_files = vec![format!("/dev/neuron{i}")];
        }
        if crate::plugin::has_dev(host) {
            let hidden: Vec<String> = accs
                .iter()
                .filter(|a| !host.exists(&host.path(&a.vocabulary.device_files[0])))
                .filter_map(|a| a.pci.map(|p| p.to_string()))
                .collect();
            report.warnings.extend(crate::plugin::not_visible(
                SRC,
                "/dev/neuron*",
                &hidden,
                "the runtime cannot use them",
            ));
        }
        report.links = pairs.into_iter().map(|p| sku_link(host, &accs, p, NEURONLINK, 1)).collect();
        report.accelerators = accs;
        report
    }

    fn isolate(&self, devices: &[&Accelerator]) -> Isolation {
        // Each device's NeuronCore range, set at discovery.
        isolate_by_index(devices, &["NEURON_RT_VISIBLE_CORES"])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn connected() {
        assert_eq!(parse_connected("1, 3, 4, 12"), Some(vec![1, 3, 4, 12]));
        assert_eq!(parse_connected(""), Some(vec![]));
        assert_eq!(parse_connected("1, x"), None);
    }

    proptest! {
        #[test]
        fn parser_never_panics(text in ".{0,60}") {
            let _ = parse_connected(&text);
        }
    }
}
