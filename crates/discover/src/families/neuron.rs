//! The AWS Neuron plugin: Inferentia and Trainium devices on PCI (vendor 0x1d0f, not the EFA/ENA
//! network functions), with NeuronCore counts and NeuronLink neighbours from the Neuron sysfs
//! (`/sys/devices/virtual/neuron_device/neuron<N>/{core_count,connected_devices}`). Each
//! device's number N (its `/dev/neuron<N>` and NeuronCore ids) is the driver's, from sysfs.

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

/// The runtime's logical NeuronCore configuration (LNC): how many physical NeuronCores it groups
/// into one logical core, the unit NEURON_RT_VISIBLE_CORES and Ray's `neuron_cores` count.
/// `NEURON_LOGICAL_NC_CONFIG` (1 or 2) where set; else 2 on Trainium2 and Trainium3, whose
/// default it is, and 1 elsewhere (Neuron docs, "Logical NeuronCore configuration": "On Trn2, each
/// chip has 8 physical NeuronCores. With LNC=2 (default), these are grouped into 4 Logical
/// NeuronCores ... LNC applies only to Trn2 and Trn3 instances").
fn logical_nc_config(host: &Host, sku: Option<&str>, warnings: &mut Vec<Warning>) -> u32 {
    let default = match sku {
        Some("aws-trainium2") | Some("aws-trainium3") => 2,
        _ => return 1,
    };
    match host.env("NEURON_LOGICAL_NC_CONFIG").map(str::trim) {
        None | Some("") => default,
        Some("1") => 1,
        Some("2") => 2,
        Some(other) => {
            let shown: String = other.chars().take(20).collect();
            warnings.push(Warning {
                source: SRC.into(),
                path: None,
                message: format!("NEURON_LOGICAL_NC_CONFIG={shown:?} is not 1 or 2; the default {default} is used"),
            });
            default
        }
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
            facts: crate::plugin::read_fact(host, "runtime.neuron", "/opt/aws/neuron/share/neuron-runtime-version")
                .into_iter()
                .collect(),
            ..Default::default()
        }
    }

    fn capture(&self, _host: &Host, _machine: &accel_model::Machine) -> Vec<crate::plugin::Keep> {
        vec![
            crate::plugin::Keep::Tree { path: "/sys/devices/virtual/neuron_device".into(), depth: 4 },
            // A `neuron<N>/device` link to the PCI function, where a driver makes one.
            crate::plugin::Keep::ClassLinks("/sys/class/neuron_device".into()),
        ]
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
        let mut ids: Vec<u32> =
            names.iter().filter_map(|n| n.strip_prefix("neuron")?.parse().ok()).filter(|&n: &u32| n < 4096).collect();
        ids.sort_unstable();
        // Each device's id N: the name of its class device `neuron<N>`, which is also its
        // /dev/neuron<N> minor (neuron_cdev.c, `ncdev_create_device_node`: `"neuron%d"` with
        // minor = `nd->device_index`). The driver numbers Trn1/Inf2/Trn2 devices by the routing id
        // their firmware reports, not in probe order (v2/v3 `neuron_pci_get_device_id_*`), so N is
        // not the PCI position. It creates `neuron<N>` with no parent (`device_create(neuron_dev_class,
        // NULL, ...)`), so sysfs links it to no PCI function; the bus/slot/function is only
        // available through the NEURON_IOCTL_DEVICE_BDF ioctl (what neuron-ls prints). A `device`
        // link, where one exists, pairs them; otherwise they are paired in PCI order, with a warning.
        let slots: Vec<Option<u32>> = if ids.is_empty() {
            report.warnings.push(Warning {
                source: SRC.into(),
                path: Some(SYSFS.into()),
                message: "Neuron driver sysfs missing: device numbers assumed from PCI order; core counts and \
                          NeuronLink links unknown"
                    .into(),
            });
            (0..accs.len()).map(|i| u32::try_from(i).ok()).collect()
        } else {
            pair_ids(host, &dir, &ids, &accs, &mut report.warnings)
        };
        let mut pairs = BTreeSet::new();
        let mut cores = 0u64;
        let mut core_counts: Vec<Option<u32>> = vec![None; accs.len()];
        let index_of = |n: u32| slots.iter().position(|s| *s == Some(n));
        for (i, slot) in slots.iter().enumerate() {
            let Some(n) = slot.filter(|n| ids.contains(n)) else { continue };
            let d = dir.join(format!("neuron{n}"));
            let arch = host.read_attr(&d.join("info/architecture/device_name"), SRC, &mut report.warnings);
            if let (Some(arch), true) = (arch, accs[i].family.is_none()) {
                accs[i].family = Some(arch.to_lowercase());
            }
            core_counts[i] = host.parse_attr(&d.join("core_count"), SRC, &mut report.warnings, |t| {
                t.parse::<u32>().ok().filter(|&c| c <= 1024)
            });
            cores += u64::from(core_counts[i].unwrap_or(0));
            // `connected_devices` names neighbours by their N.
            let peers = host.parse_attr(&d.join("connected_devices"), SRC, &mut report.warnings, parse_connected);
            for p in peers.unwrap_or_default() {
                match index_of(p) {
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
        // Ray counts `neuron_cores`; NEURON_RT_VISIBLE_CORES takes core ids, and the driver
        // numbers device N's cores from N times the cores per device (neuron_cdev.c: core offset
        // `nc_per_device * nd->device_index`; every device of a host has the same count), whatever
        // the PCI order. Both count *logical* cores: the physical count divided by the LNC.
        let lnc = logical_nc_config(host, accs.first().and_then(|a| a.sku.as_deref()), &mut report.warnings);
        if cores > 0 {
            report.attributes.insert("aws.neuron_cores".into(), (cores / u64::from(lnc)).to_string());
            report.attributes.insert("aws.neuron_physical_cores".into(), cores.to_string());
        }
        if lnc > 1 {
            report.attributes.insert("aws.neuron_lnc".into(), lnc.to_string());
        }
        for (acc, (slot, count)) in accs.iter_mut().zip(slots.iter().zip(&core_counts)) {
            let physical = count.unwrap_or_else(|| cores_per_device(acc.sku.as_deref()));
            let count = if physical % lnc == 0 { physical / lnc } else { physical };
            acc.vocabulary.ray_units = Some(f64::from(count));
            let Some(first) = slot.and_then(|n| n.checked_mul(count)) else { continue };
            if let Some(last) = (count > 0).then(|| first.checked_add(count - 1)).flatten() {
                acc.vocabulary.isolation = vec![format!("{first}-{last}")];
            }
        }
        // The Neuron runtime opens /dev/neuron<N>.
        for (acc, slot) in accs.iter_mut().zip(&slots) {
            if let Some(n) = slot {
                acc.vocabulary.device_files = vec![format!("/dev/neuron{n}")];
            }
        }
        if crate::plugin::has_dev(host) {
            let hidden: Vec<String> = accs
                .iter()
                .filter(|a| a.vocabulary.device_files.first().is_some_and(|f| !host.exists(&host.path(f))))
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

/// The device id N of each PCI function in `accs` (PCI order), from the sysfs ids `ids`: by
/// a `neuron<N>/device` link to the function where one exists, else in PCI order with a
/// warning that says so. A function left without an id (more functions than ids) gets `None`.
fn pair_ids(
    host: &Host,
    dir: &std::path::Path,
    ids: &[u32],
    accs: &[Accelerator],
    warnings: &mut Vec<Warning>,
) -> Vec<Option<u32>> {
    let mut slots: Vec<Option<u32>> = vec![None; accs.len()];
    let mut linked = BTreeSet::new();
    for &n in ids {
        let link = dir.join(format!("neuron{n}/device"));
        let Some(target) = host.resolve_link(&link) else { continue };
        let addr = target.file_name().and_then(|f| f.to_str()).and_then(|f| f.parse::<accel_model::PciAddr>().ok());
        match addr.and_then(|a| accs.iter().position(|acc| acc.pci == Some(a))) {
            Some(i) if slots[i].is_none() => {
                slots[i] = Some(n);
                linked.insert(n);
            }
            Some(_) => {
                warnings.push(host.warning(SRC, &link, "names a PCI function another device names; ignored".into()))
            }
            None => warnings.push(host.warning(SRC, &link, "leads to no Neuron PCI function; ignored".into())),
        }
    }
    let rest: Vec<u32> = ids.iter().copied().filter(|n| !linked.contains(n)).collect();
    let open: Vec<usize> = (0..accs.len()).filter(|&i| slots[i].is_none()).collect();
    if rest.is_empty() && open.is_empty() {
        return slots;
    }
    if rest.len() != open.len() {
        warnings.push(Warning {
            source: SRC.into(),
            path: Some(SYSFS.into()),
            message: format!(
                "{} neuron devices in sysfs for {} on PCI; device numbers, core counts and links of the unpaired ones unknown",
                ids.len(),
                accs.len()
            ),
        });
        return slots;
    }
    for (&i, &n) in open.iter().zip(&rest) {
        slots[i] = Some(n);
    }
    let named: Vec<String> =
        open.iter().zip(&rest).filter_map(|(&i, n)| accs[i].pci.map(|p| format!("{p}=neuron{n}"))).collect();
    warnings.push(Warning {
        source: SRC.into(),
        path: Some(SYSFS.into()),
        message: format!(
            "sysfs links no neuron<N> to its PCI function: paired in PCI order ({}), which the driver does not \
             promise (it numbers devices by firmware routing id)",
            named.join(", ")
        ),
    });
    slots
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
