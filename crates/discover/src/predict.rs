//! Labels predicted before a node exists (`accel labels --predict`): the machine a node of an
//! instance type, a system or a SKU will be, built from the SKU registry alone, so that the
//! labels and resources [`crate::labels`] gives it can be written into a label selector (KubeRay's
//! label-driven worker groups) before any such node has joined.
//!
//! The machine holds what the registry knows: the system's device count and link kind, each
//! device as [`crate::plugin::pci_accelerator`] fills it from its SKU (the same code discovery
//! runs), the family's vocabulary and Kubernetes labels from its plugin, and every device
//! healthy. What depends on one particular node (its hostname, the name of the NVLink clique or
//! network switch it joins, a device that turns out unhealthy) cannot be known in advance and is
//! left out; [`Prediction::unpredictable`] says so.

use std::sync::Arc;

use accel_model::{Health, HealthState, HostInfo, Link, Machine, PciNode, PciNodeKind, SkuRegistry, System};

use crate::fs::MemTree;
use crate::{Host, Vendor};

/// What a node of some kind will be.
#[derive(Debug, Clone)]
pub struct Prediction {
    /// The machine, as discovery would describe it (less what only the node itself knows).
    pub machine: Machine,
    /// The registry entries it came from: `system aws-p5en-48xlarge`, `sku nvidia-h200-sxm`.
    pub from: Vec<String>,
    /// The kinds of label that cannot be predicted, in words.
    pub unpredictable: Vec<String>,
    /// Label keys the family would set but the prediction leaves out: those whose value is the
    /// memory the driver reports (it differs from the SKU's nominal size with the driver and
    /// the ECC mode: 143155 MiB on the p5en.48xlarge capture for a nominal 141 GiB).
    pub withheld: Vec<String>,
}

/// Why no prediction can be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PredictError {
    #[error("{0:?} is no instance type, system or SKU in the registry{1} (`accel skus` lists them)")]
    Unknown(String, String),
    #[error("{0}")]
    Invalid(String),
}

/// Predicts the machine for `what`: an instance type or DMI product name (`p5en.48xlarge`), a
/// system id (`aws-p5en-48xlarge`), or a SKU id with an optional device count
/// (`nvidia-h200-sxm:8`, one device when no count is given).
pub fn predict(registry: &SkuRegistry, plugins: &[Box<dyn Vendor>], what: &str) -> Result<Prediction, PredictError> {
    let what = what.trim();
    let systems = registry.systems();
    let by_product = systems.iter().find(|s| s.product_names.iter().any(|p| p == what));
    let by_id = systems.iter().find(|s| s.id == what);
    let (sku_id, count, product_name, mut from) = match (by_product.or(by_id), what.rsplit_once(':')) {
        (Some(system), _) => {
            let product = if by_product.is_some() { Some(what.to_owned()) } else { system_product(system) };
            let sku = system
                .skus
                .first()
                .ok_or_else(|| PredictError::Invalid(format!("system {} names no SKU", system.id)))?;
            (sku.clone(), system.devices, product, vec![format!("system {}", system.id)])
        }
        (None, Some((sku, n))) => {
            let n: u32 = n.parse().ok().filter(|n| (1..=1024).contains(n)).ok_or_else(|| {
                PredictError::Invalid(format!("{what:?}: the device count after ':' must be 1 to 1024"))
            })?;
            (sku.to_owned(), n, None, Vec::new())
        }
        (None, None) => (what.to_owned(), 1, None, Vec::new()),
    };
    let sku = registry.get(&sku_id).ok_or_else(|| {
        let all = registry.all();
        let names = systems.iter().flat_map(|s| s.product_names.iter().chain([&s.id])).chain(all.iter().map(|s| &s.id));
        let hint = accel_model::suggest(&sku_id, names.map(String::as_str));
        PredictError::Unknown(what.to_owned(), hint.map(|h| format!("; did you mean {h:?}?")).unwrap_or_default())
    })?;
    from.push(format!("sku {}", sku.id));
    let system = by_product.or(by_id).copied();
    let mut unpredictable = vec![
        "the node's name and hostname (accel.io/node, kubernetes.io/hostname)".to_owned(),
        "names of domains and switches the node joins (a scale-up domain that spans nodes, a network node, topograph's tiers)".to_owned(),
        "devices found unhealthy when the node starts (accel.io/unhealthy-devices)".to_owned(),
    ];
    let mut machine = Machine::new(HostInfo { product_name, ..HostInfo::default() });
    let host = Host::in_memory(Arc::new(MemTree::new()), registry.clone());
    let pci = sku.pci.first();
    if pci.and_then(|p| p.class).is_none() {
        unpredictable.push(format!("NFD's PCI class label: sku {} records no PCI class", sku.id));
    }
    let plugin = plugins.iter().find(|p| p.id() == sku.vendor);
    if plugin.is_none() {
        unpredictable.push(format!("family labels: no built-in plugin for vendor {:?}", sku.vendor));
    }
    let vocabulary = plugin.map(|p| p.vocabulary()).unwrap_or_default();
    for i in 0..count {
        // A placeholder PCI address per device, in bus order, as discovery numbers them.
        let mut node = PciNode::new(format!("0000:{:02x}:00.0", i + 1), PciNodeKind::Endpoint, None);
        if let Some(p) = pci {
            node.vendor = Some(accel_model::PciId(p.vendor));
            node.device = Some(accel_model::PciId(p.device));
            node.subsystem_vendor = p.subsystem_vendor.map(accel_model::PciId);
            node.subsystem_device = p.subsystem_device.map(accel_model::PciId);
            node.class = p.class;
        }
        let plugin_id = plugin.map_or(sku.vendor.as_str(), |p| p.id());
        let mut acc = crate::plugin::pci_accelerator(&host, &node, &sku.vendor, plugin_id);
        if pci.is_none() {
            // No PCI identity in the registry: the device as its SKU names it.
            acc.sku = Some(sku.id.clone());
            acc.product = sku.product.clone();
            acc.family = Some(sku.family.clone());
            acc.memory_bytes = sku.memory_bytes;
            acc.vocabulary.ray_accelerator_type = sku.ray_accelerator_type.clone();
        }
        acc.index = i;
        acc.vocabulary.fill_from(&vocabulary);
        acc.health = Some(Health { state: HealthState::Healthy, ..Health::default() });
        machine.pci.push(node);
        machine.accelerators.push(acc);
    }
    if let Some(system) = system {
        add_system_links(&mut machine, system, sku.scale_up);
    }
    let mut withheld = Vec::new();
    if let Some(p) = plugin {
        let devices: Vec<&accel_model::Accelerator> = machine.accelerators.iter().collect();
        let labels = p.k8s_labels(&machine, &devices);
        // The same labels without the devices' memory: a key that changes or goes away depends
        // on the reported memory, which the registry cannot know.
        let mut blind = machine.clone();
        for acc in &mut blind.accelerators {
            acc.memory_bytes = None;
        }
        let devices: Vec<&accel_model::Accelerator> = blind.accelerators.iter().collect();
        let without = p.k8s_labels(&blind, &devices);
        for (k, v) in labels {
            if without.get(&k) == Some(&v) {
                machine.k8s_labels.insert(k, v);
            } else {
                withheld.push(k);
            }
        }
        if !withheld.is_empty() {
            unpredictable.push(format!(
                "{}: the device memory the driver reports (the SKU gives only the nominal size)",
                withheld.join(", ")
            ));
        }
    }
    Ok(Prediction { machine, from, unpredictable, withheld })
}

/// The DMI product name a system's nodes report: its first product name.
fn system_product(system: &System) -> Option<String> {
    system.product_names.first().cloned()
}

/// Every pair joined by the system's link kind, as discovery declares a system's links.
fn add_system_links(machine: &mut Machine, system: &System, scale_up: Option<accel_model::ScaleUp>) {
    let count = scale_up.map_or(1, |s| s.links.max(1));
    let gbps = scale_up.map(|s| s.gbps_per_link() * f64::from(count));
    let ids: Vec<String> = machine.accelerators.iter().map(|a| a.id.clone()).collect();
    for (i, a) in ids.iter().enumerate() {
        for b in &ids[i + 1..] {
            machine.links.push(Link::new(a.clone(), b.clone(), system.link, count, gbps));
        }
    }
}
