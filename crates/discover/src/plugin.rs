//! The vendor-plugin trait, what a plugin returns, and the explicit list of plugins.

use std::collections::BTreeMap;

use accel_model::{Accelerator, Domain, Link, LinkKind, Machine, PciClass, PciId, PciNode, PciNodeKind, Warning};

use crate::{Amd, Gaudi, GenericPci, Groq, Host, IntelGpu, Neuron, Nvidia, Platform, Tpu};

/// One accelerator family's read-only view of a host.
pub trait Vendor: Send + Sync {
    /// Stable lowercase id (`nvidia`, `amd`, `generic-pci`): config key, metric label, log field.
    fn id(&self) -> &'static str;

    /// Finds this family's devices. Absence is not an error: no devices is an empty report.
    /// `platform` holds what the host layer and earlier plugins found.
    fn discover(&self, host: &Host, platform: &Machine) -> Report;

    /// What a worker needs in order to see exactly these devices. Returns data; never sets
    /// environment variables itself.
    fn isolate(&self, devices: &[&Accelerator]) -> Isolation;
}

/// A plugin's findings: a partial answer with warnings beats an all-or-nothing error.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub accelerators: Vec<Accelerator>,
    pub links: Vec<Link>,
    pub domains: Vec<Domain>,
    pub warnings: Vec<Warning>,
    /// Platform facts for [`Machine::attributes`] (later plugins see them).
    pub attributes: BTreeMap<String, String>,
    /// PCI functions of this plugin's family that its runtime says this process cannot use (a
    /// container given a subset of the host's devices): not reported, by this plugin or a later
    /// one (the generic PCI plugin).
    pub unusable: Vec<accel_model::PciAddr>,
}

/// Environment variables that confine a worker to a set of devices.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Isolation {
    pub env: BTreeMap<String, String>,
}

/// Every plugin this build knows, in the order they run. The platform plugin runs first (its
/// metadata feeds the TPU plugin); the generic PCI plugin runs last and picks up whatever no
/// vendor plugin claimed.
pub fn default_plugins() -> Vec<Box<dyn Vendor>> {
    vec![
        Box::new(Platform),
        Box::new(Nvidia),
        Box::new(Amd),
        Box::new(Tpu),
        Box::new(Neuron),
        Box::new(Gaudi),
        Box::new(IntelGpu),
        Box::new(Groq),
        Box::new(GenericPci),
    ]
}

/// An accelerator for a PCI function, filled from the PCI node and the SKU registry; plugins
/// then add what their vendor interface knows (memory, UUID, serial, partition).
pub fn pci_accelerator(host: &Host, node: &PciNode, vendor: &str, plugin: &str) -> Accelerator {
    let sku = node
        .vendor
        .zip(node.device)
        .and_then(|(v, d)| host.skus().lookup(v, d, node.subsystem_vendor.zip(node.subsystem_device)));
    Accelerator {
        id: format!("{vendor}-{}", node.id),
        index: 0,
        vendor: vendor.to_owned(),
        plugin: plugin.to_owned(),
        sku: sku.map(|s| s.id.clone()),
        product: match (sku, node.vendor.zip(node.device)) {
            (Some(s), _) => s.product.clone(),
            (None, Some((v, d))) => format!("unknown device {v}:{d}"),
            (None, None) => "unknown device (ids unreadable)".to_owned(),
        },
        family: sku.map(|s| s.family.clone()),
        architecture: sku.and_then(|s| s.architecture.clone()),
        pci: node.address,
        pci_vendor: node.vendor,
        pci_device: node.device,
        numa_node: node.numa_node,
        memory_bytes: sku.and_then(|s| s.memory_bytes),
        memory_numa_node: None,
        uuid: None,
        serial: None,
        partition: None,
    }
}

/// PCI endpoints of one vendor whose class passes `class_ok`.
pub fn pci_functions<'m>(
    platform: &'m Machine,
    vendor: u16,
    class_ok: impl Fn(PciClass) -> bool + 'm,
) -> impl Iterator<Item = &'m PciNode> + 'm {
    platform.pci.iter().filter(move |n| {
        n.kind == PciNodeKind::Endpoint
            && n.vendor == Some(PciId(vendor))
            && n.address.is_some()
            && n.class.is_none_or(&class_ok)
    })
}

/// A scale-up link between `accs[i]` and `accs[j]`, with the bandwidth the first one's SKU gives
/// `count` links.
pub fn sku_link(host: &Host, accs: &[Accelerator], (i, j): (usize, usize), kind: LinkKind, count: u32) -> Link {
    Link { a: accs[i].id.clone(), b: accs[j].id.clone(), kind, count, gbps: link_gbps(host, &accs[i], count) }
}

/// Isolation by the devices' indices, comma-separated, in each of `vars`.
pub fn isolate_by_index(devices: &[&Accelerator], vars: &[&str]) -> Isolation {
    let list: Vec<String> = devices.iter().map(|d| d.index.to_string()).collect();
    Isolation { env: vars.iter().map(|v| ((*v).to_owned(), list.join(","))).collect() }
}

/// Bandwidth of `count` links of an accelerator's SKU, where the registry knows its scale-up.
pub fn link_gbps(host: &Host, acc: &Accelerator, count: u32) -> Option<f64> {
    let sku = host.skus().get(acc.sku.as_deref()?)?;
    sku.scale_up.map(|s| s.gbps_per_link() * f64::from(count))
}

/// Whether the root has a `/dev` to check runtime device nodes in (the live machine, a
/// container); captures carry none, and then nothing is checked.
pub(crate) fn has_dev(host: &Host) -> bool {
    host.is_dir(&host.path("/dev"))
}

/// The warning for devices on PCI that the vendor runtime cannot open here (no device node: a
/// container given a subset of the host's devices), naming them.
pub(crate) fn not_visible(source: &str, node: &str, hidden: &[String], consequence: &str) -> Option<Warning> {
    (!hidden.is_empty()).then(|| Warning {
        source: source.into(),
        path: Some(node.into()),
        message: format!(
            "devices {} are on PCI but have no {node} device node (not passed into this container?); {consequence}",
            hidden.join(", ")
        ),
    })
}
