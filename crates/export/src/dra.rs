//! Kubernetes Dynamic Resource Allocation: a node's accelerators as `resource.k8s.io/v1`
//! `ResourceSlice`s, all in one pool named after the node.
//!
//! Each device carries the standard attributes (`resource.kubernetes.io/pcieRoot`, `pciBusID`,
//! `numaNode`), then the driver's own (unqualified names, so they take the driver's domain):
//! vendor, index, model, SKU, family, architecture, UUID, Ray's accelerator type, the scale-up
//! island and its kind and size, the scale-up domain that spans nodes (`scaleUpDomain`, `scaleUpDomainKind`: an NVLink clique, a TPU slice), and for a partition its mode,
//! index and physical device; capacity `memory`.
//!
//! Partitions (MIG, CPX) consume shared counters: one counter set per physical device, holding
//! the memory and the number of its partitions, published in slices of their own (Kubernetes
//! 1.35: a slice holds devices or counters, never both). Limits kept: at most 128 devices per
//! slice (64 when they consume counters), 8 counter sets per slice, 32 attributes and
//! capacities per device, strings of at most 64 characters.
//!
//! A device that is unhealthy, or whose health is unknown, carries a device taint
//! (`accel.io/unhealthy`, `accel.io/health-unknown`) with its first reason.

use std::collections::BTreeMap;

use accel_discover::labels::{islands, label_value, ray_accelerator_type};
use accel_model::{Accelerator, HealthState, Machine, PciNodeKind};
use serde::Serialize;

use crate::{dns_label, ExportError};

/// Most devices in one slice.
pub const MAX_DEVICES: usize = 128;
/// Most devices in one slice when any of them consumes counters or carries taints.
pub const MAX_COUNTER_DEVICES: usize = 64;
/// Most attributes and capacities of one device, together.
pub const MAX_ATTRIBUTES: usize = 32;
/// Most counter sets in one slice.
pub const MAX_COUNTER_SETS: usize = 8;
/// Longest string attribute value.
pub const MAX_STRING: usize = 64;
/// The driver name when none is given.
pub const DEFAULT_DRIVER: &str = "accel.io";

/// The standard attributes' domain (kubernetes.io/docs/reference/node/dra-standard-device-attributes).
const STANDARD: &str = "resource.kubernetes.io";

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSlice {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub metadata: Metadata,
    pub spec: Spec,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Metadata {
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    pub driver: String,
    pub pool: Pool,
    pub node_name: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<Device>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shared_counters: Vec<CounterSet>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pool {
    pub name: String,
    pub generation: i64,
    pub resource_slice_count: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Device {
    pub name: String,
    pub attributes: BTreeMap<String, Attribute>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: BTreeMap<String, Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub consumes_counters: Vec<CounterConsumption>,
    /// Device taints (KEP-5055): an unhealthy device, or one whose health is unknown, carries
    /// one, so the scheduler leaves it out unless a claim tolerates it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
}

/// A device taint: `accel.io/unhealthy` or `accel.io/health-unknown`, its first reason as the
/// value (a label value), effect `NoSchedule` (running pods stay; new claims avoid it).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Taint {
    pub key: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub value: String,
    pub effect: &'static str,
}

/// The taint key for an unhealthy device.
pub const TAINT_UNHEALTHY: &str = "accel.io/unhealthy";
/// The taint key for a device whose health is unknown.
pub const TAINT_UNKNOWN: &str = "accel.io/health-unknown";

fn taints(acc: &Accelerator) -> Vec<Taint> {
    let Some(h) = &acc.health else { return Vec::new() };
    let key = match h.state {
        HealthState::Healthy => return Vec::new(),
        HealthState::Unhealthy => TAINT_UNHEALTHY,
        HealthState::Unknown => TAINT_UNKNOWN,
    };
    let value = h.reasons.first().map(|r| label_value(r)).unwrap_or_default();
    vec![Taint { key: key.into(), value, effect: "NoSchedule" }]
}

/// A device attribute: exactly one of these, written as a one-entry map (`{int: 3}`).
#[derive(Debug, Clone, PartialEq)]
pub enum Attribute {
    Int(i64),
    Bool(bool),
    String(String),
    Version(String),
}

impl Serialize for Attribute {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(1))?;
        match self {
            Attribute::Int(v) => map.serialize_entry("int", v)?,
            Attribute::Bool(v) => map.serialize_entry("bool", v)?,
            Attribute::String(v) => map.serialize_entry("string", v)?,
            Attribute::Version(v) => map.serialize_entry("version", v)?,
        }
        map.end()
    }
}

/// A capacity or counter value (a Kubernetes quantity).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Value {
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CounterSet {
    pub name: String,
    pub counters: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CounterConsumption {
    pub counter_set: String,
    pub counters: BTreeMap<String, Value>,
}

/// A quantity in the largest binary unit that divides it exactly (`80Gi`), else bytes.
pub fn quantity(bytes: u64) -> String {
    for (shift, unit) in [(40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki")] {
        if bytes != 0 && bytes % (1u64 << shift) == 0 {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

fn string(value: &str) -> Attribute {
    Attribute::String(value.chars().take(MAX_STRING).collect())
}

/// A DNS subdomain (RFC 1123): lowercase labels joined by dots, at most 253 characters.
fn check_driver(driver: &str) -> Result<(), ExportError> {
    let ok = driver.len() <= 253
        && driver.split('.').all(|label| !label.is_empty() && dns_label(label) == label && label.len() <= 63);
    if ok {
        Ok(())
    } else {
        Err(ExportError::Input(format!("driver {driver:?} is not a DNS subdomain (lowercase a-z, 0-9, '-', '.')")))
    }
}

/// The host bridge above a PCI function: `pci0000:17`, the standard `pcieRoot` value.
fn pcie_root(machine: &Machine, acc: &Accelerator) -> Option<String> {
    let mut node = machine.pci_device(acc.pci?)?;
    for _ in 0..64 {
        if node.kind == PciNodeKind::HostBridge {
            return Some(node.id.clone());
        }
        node = machine.pci_node(node.parent.as_deref()?)?;
    }
    None
}

fn device(machine: &Machine, acc: &Accelerator, island: Option<&(usize, String, usize)>) -> Device {
    let mut attrs: BTreeMap<String, Attribute> = BTreeMap::new();
    if let Some(root) = pcie_root(machine, acc) {
        attrs.insert(format!("{STANDARD}/pcieRoot"), string(&root));
    }
    if let Some(addr) = acc.pci {
        attrs.insert(format!("{STANDARD}/pciBusID"), string(&addr.to_string()));
    }
    if let Some(numa) = acc.numa_node {
        attrs.insert(format!("{STANDARD}/numaNode"), Attribute::Int(numa.into()));
    }
    attrs.insert("vendor".into(), string(&acc.vendor));
    attrs.insert("index".into(), Attribute::Int(acc.index.into()));
    attrs.insert("model".into(), string(&acc.product));
    let optional = [
        ("sku", acc.sku.clone()),
        ("family", acc.family.clone()),
        ("architecture", acc.architecture.clone()),
        ("uuid", acc.uuid.clone()),
        ("acceleratorType", ray_accelerator_type(acc)),
    ];
    for (key, value) in optional {
        if let Some(v) = value {
            attrs.insert(key.into(), string(&v));
        }
    }
    if let Some((k, kind, size)) = island {
        attrs.insert("scaleUpIsland".into(), Attribute::Int(*k as i64));
        attrs.insert("scaleUpKind".into(), string(kind));
        attrs.insert("scaleUpIslandSize".into(), Attribute::Int(*size as i64));
    }
    // The device's scale-up domain (an NVLink clique, a TPU slice, an xGMI hive), whatever its
    // kind; a node-local one is qualified by the node (`resource_slices` scoped the machine).
    let domain =
        machine.domains.iter().find(|d| d.scale_up && (d.accelerators.is_empty() || d.accelerators.contains(&acc.id)));
    if let Some(d) = domain {
        attrs.insert("scaleUpDomain".into(), string(&d.name));
        attrs.insert("scaleUpDomainKind".into(), string(d.kind.as_str()));
    }
    let mut consumes = Vec::new();
    if let Some(p) = &acc.partition {
        attrs.insert("partitionMode".into(), string(&p.mode));
        attrs.insert("partitionIndex".into(), Attribute::Int(p.index.into()));
        attrs.insert("physicalDevice".into(), string(&dns_label(&p.physical_id)));
        let mut counters = BTreeMap::from([("partitions".to_owned(), Value { value: "1".into() })]);
        if let Some(m) = acc.memory_bytes {
            counters.insert("memory".into(), Value { value: quantity(m) });
        }
        consumes.push(CounterConsumption { counter_set: dns_label(&p.physical_id), counters });
    }
    let mut capacity = BTreeMap::new();
    if let Some(m) = acc.memory_bytes {
        capacity.insert("memory".into(), Value { value: quantity(m) });
    }
    debug_assert!(attrs.len() + capacity.len() <= MAX_ATTRIBUTES);
    Device { name: dns_label(&acc.id), attributes: attrs, capacity, consumes_counters: consumes, taints: taints(acc) }
}

/// The counter sets of the partitioned physical devices: memory and partition count, the sums
/// of what their partitions consume.
fn counter_sets(machine: &Machine) -> Vec<CounterSet> {
    let mut sets: BTreeMap<String, (u64, u64, bool)> = BTreeMap::new();
    for acc in &machine.accelerators {
        if let Some(p) = &acc.partition {
            let entry = sets.entry(dns_label(&p.physical_id)).or_insert((0, 0, true));
            entry.0 += 1;
            match acc.memory_bytes {
                Some(m) => entry.1 += m,
                None => entry.2 = false,
            }
        }
    }
    sets.into_iter()
        .map(|(name, (count, memory, memory_known))| {
            let mut counters = BTreeMap::from([("partitions".to_owned(), Value { value: count.to_string() })]);
            if memory_known {
                counters.insert("memory".into(), Value { value: quantity(memory) });
            }
            CounterSet { name, counters }
        })
        .collect()
}

/// A node's ResourceSlices, and the devices left out of them.
#[derive(Debug, Clone)]
pub struct Slices {
    pub slices: Vec<ResourceSlice>,
    /// One line per device that could not be published (no usable name, or a name another device
    /// already has), naming its vendor (the plugin that reported it) and its id.
    pub skipped: Vec<String>,
}

/// The node's ResourceSlices for `driver` (default [`DEFAULT_DRIVER`]). A node without
/// accelerators gets no slice. A device whose name cannot be published costs itself alone (it
/// is listed in [`Slices::skipped`]); one plugin's bad ids never take the export down.
pub fn resource_slices(machine: &Machine, node: &str, driver: &str) -> Result<Slices, ExportError> {
    check_driver(driver)?;
    let node_label = dns_label(node);
    if node_label.is_empty() {
        return Err(ExportError::Input(format!("node name {node:?} has nothing usable in a DNS label")));
    }
    let scoped = machine.scoped_to(node);
    let machine = &scoped;
    let mut island_of: BTreeMap<String, (usize, String, usize)> = BTreeMap::new();
    for (k, (kind, members)) in islands(machine).into_iter().enumerate() {
        for m in &members {
            island_of.insert(m.clone(), (k, kind.clone(), members.len()));
        }
    }
    let mut skipped = Vec::new();
    let mut taken = std::collections::BTreeSet::new();
    let mut devices: Vec<Device> = Vec::new();
    for acc in &machine.accelerators {
        let dev = device(machine, acc, island_of.get(&acc.id));
        let who = format!("{} device {:?}", acc.vendor, acc.id);
        if dev.name.is_empty() {
            skipped.push(format!("{who}: its id has nothing usable in a DNS label; not published"));
        } else if !taken.insert(dev.name.clone()) {
            skipped.push(format!("{who}: its DNS label {:?} is another device's; not published", dev.name));
        } else {
            devices.push(dev);
        }
    }
    // A slice with any device that consumes counters or carries taints holds at most 64.
    let (plain, partitioned): (Vec<Device>, Vec<Device>) =
        devices.into_iter().partition(|d| d.consumes_counters.is_empty() && d.taints.is_empty());
    let sets = counter_sets(machine);
    let mut specs: Vec<(Vec<Device>, Vec<CounterSet>)> = Vec::new();
    for chunk in sets.chunks(MAX_COUNTER_SETS) {
        specs.push((Vec::new(), chunk.to_vec()));
    }
    for chunk in plain.chunks(MAX_DEVICES) {
        specs.push((chunk.to_vec(), Vec::new()));
    }
    for chunk in partitioned.chunks(MAX_COUNTER_DEVICES) {
        specs.push((chunk.to_vec(), Vec::new()));
    }
    let count = specs.len() as i64;
    let driver_label = dns_label(driver);
    let slices = specs
        .into_iter()
        .enumerate()
        .map(|(k, (devices, shared_counters))| ResourceSlice {
            api_version: "resource.k8s.io/v1",
            kind: "ResourceSlice",
            metadata: Metadata { name: format!("{node_label}-{driver_label}-{k}") },
            spec: Spec {
                driver: driver.to_owned(),
                pool: Pool { name: node_label.clone(), generation: 1, resource_slice_count: count },
                node_name: node.to_owned(),
                devices,
                shared_counters,
            },
        })
        .collect();
    Ok(Slices { slices, skipped })
}

/// The slices as one YAML stream (`---` between documents), ready for `kubectl apply -f -`.
pub fn to_yaml(slices: &[ResourceSlice]) -> Result<String, ExportError> {
    let mut out = String::new();
    for slice in slices {
        out += "---\n";
        out += &serde_norway::to_string(slice)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        assert_eq!(quantity(85899345920), "80Gi");
        assert_eq!(quantity(85520809984), "81559Mi");
        assert_eq!(quantity(1000), "1000");
        assert_eq!(quantity(0), "0");
    }

    #[test]
    fn drivers() {
        assert!(check_driver("accel.io").is_ok());
        assert!(check_driver("gpu.example.com").is_ok());
        assert!(check_driver("Accel.io").is_err());
        assert!(check_driver("a..b").is_err());
        assert!(check_driver("").is_err());
    }
}
