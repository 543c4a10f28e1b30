//! Node labels and resources for schedulers, from a discovered [`Machine`]: Ray
//! (`ray start --labels ... --resources ...`) and Kubernetes (NFD / GPU Feature Discovery names
//! where they exist). Pure functions of the machine, shared by `accel labels`, the planner and
//! `python -m accel.ray start`.
//!
//! Naming: accel's own labels live under `accel.io/`. For Ray it also sets the two `ray.io/`
//! labels that Ray's scheduler reads but never sets from topology itself:
//! `ray.io/gpu-domain` (the scale-up domain that spans nodes, for `placement_group(...,
//! topology_strategy={"ray.io/gpu-domain": "STRICT_PACK"})`) and `ray.io/accelerator-type` in
//! Ray's own vocabulary (`H100`, `AMD-Instinct-MI300X-OAM`, `TPU-V6E`). Every device is a custom
//! resource `accel_dev_<vendor>_<index>` with quantity 1 (index as in the visibility variables).

use std::collections::BTreeMap;

use accel_model::{Accelerator, DomainKind, Machine};

/// What `ray start` takes for this node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RayNode {
    pub labels: BTreeMap<String, String>,
    /// Every custom resource: one `accel_dev_<vendor>_<index>` per device, and each plugin's
    /// own Ray resource (`TPU`, `neuron_cores`, an external plugin's `NPU`) in its units.
    pub resources: BTreeMap<String, f64>,
    /// Ray's `GPU` resource, which `ray start` takes only as `--num-gpus`.
    pub num_gpus: f64,
}

/// The Ray resource that `ray start` takes as a flag of its own, not in `--resources`.
const RAY_GPU: &str = "GPU";
/// Ray's topology label (`topology_strategy`): the node's scale-up domain.
pub const RAY_GPU_DOMAIN: &str = "ray.io/gpu-domain";
/// The devices left out for their health (`GPU3.GPU5`): unhealthy, or of unknown health.
pub const UNHEALTHY_LABEL: &str = "accel.io/unhealthy-devices";
/// Ray's accelerator-type label, as Ray's accelerator managers spell it.
pub const RAY_ACCELERATOR_TYPE: &str = "ray.io/accelerator-type";
/// The node's name in a cluster, as a Ray label: what a placed bundle's selector names.
pub const NODE_LABEL: &str = "accel.io/node";
/// The prefix of accel's own labels.
pub const LABEL_PREFIX: &str = "accel.io/";

/// A device's own Ray resource, capacity 1 on its node: `accel_dev_<vendor>_<index>` (the
/// vendor as a label value, `.` and `-` as `_`).
pub fn device_resource(acc: &Accelerator) -> String {
    device_resource_name(&acc.vendor, acc.index)
}

/// [`device_resource`] from a vendor name and a device index.
pub fn device_resource_name(vendor: &str, index: u32) -> String {
    format!("accel_dev_{}_{index}", label_value(vendor).replace(['.', '-'], "_"))
}

/// The Ray resources a bundle of these devices asks for: each device's plugin's Ray resource in
/// its units (`GPU: 2`, `neuron_cores: 16`), and each device's own [`device_resource`].
pub fn bundle_resources(devices: &[&Accelerator]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for acc in devices {
        if let Some(name) = acc.vocabulary.ray_resource.as_deref() {
            *out.entry(name.to_owned()).or_insert(0.0) += acc.vocabulary.ray_units.unwrap_or(1.0);
        }
        out.insert(device_resource(acc), 1.0);
    }
    out
}

/// The planner labels of a Ray node, from its Ray labels: every `accel.io/<key>` label but
/// [`NODE_LABEL`], with `-` in the key as `_` (`accel.io/nvlink-clique` gives `nvlink_clique`),
/// the inverse of what [`ray_labels_for_node`] writes.
pub fn planner_labels(ray: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    ray.iter()
        .filter(|(k, _)| k.as_str() != NODE_LABEL)
        .filter_map(|(k, v)| Some((k.strip_prefix(LABEL_PREFIX)?.replace('-', "_"), v.clone())))
        .collect()
}

impl RayNode {
    /// `[--num-gpus=N] --labels='k=v,...' --resources='{"name": 1.0}'`, ready to paste after
    /// `ray start`.
    pub fn to_args(&self) -> String {
        let labels: Vec<String> = self.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let resources = serde_json::to_string(&self.resources).unwrap_or_else(|_| "{}".into());
        let gpus = if self.num_gpus > 0.0 { format!("--num-gpus={} ", self.num_gpus) } else { String::new() };
        format!("{gpus}--labels='{}' --resources='{}'", labels.join(","), resources)
    }
}

/// Ray's accelerator-type string for a device (`ray.util.accelerators`), where Ray has one: the
/// SKU file's `ray_accelerator_type`, copied onto the device at discovery.
pub fn ray_accelerator_type(acc: &Accelerator) -> Option<String> {
    acc.vocabulary.ray_accelerator_type.clone()
}

/// A Kubernetes/Ray label value: at most 63 characters of `[A-Za-z0-9._-]`, alphanumeric at
/// both ends; anything else becomes `-`. Empty when nothing is left.
pub fn label_value(text: &str) -> String {
    let mapped: String =
        text.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '-' }).collect();
    let trimmed: String = mapped.chars().take(63).collect();
    trimmed.trim_matches(|c: char| !c.is_ascii_alphanumeric()).to_owned()
}

/// Scale-up islands: groups of accelerators joined (directly or transitively) by links, of
/// more than one device, largest first. Each comes with its link kind (the first link's).
pub fn islands(machine: &Machine) -> Vec<(String, Vec<String>)> {
    let ids: Vec<&str> = machine.accelerators.iter().map(|a| a.id.as_str()).collect();
    let mut parent: Vec<usize> = (0..ids.len()).collect();
    fn find(p: &mut [usize], mut i: usize) -> usize {
        while p[i] != i {
            p[i] = p[p[i]];
            i = p[i];
        }
        i
    }
    let mut kind_of: BTreeMap<usize, String> = BTreeMap::new();
    for link in &machine.links {
        let (Some(a), Some(b)) = (ids.iter().position(|&x| x == link.a), ids.iter().position(|&x| x == link.b)) else {
            continue;
        };
        let (ra, rb) = (find(&mut parent, a), find(&mut parent, b));
        parent[ra] = rb;
        kind_of.entry(a).or_insert_with(|| link.kind.as_str().to_owned());
    }
    let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for i in 0..ids.len() {
        let r = find(&mut parent, i);
        groups.entry(r).or_default().push(i);
    }
    let mut out: Vec<(String, Vec<String>)> = groups
        .into_values()
        .filter(|g| g.len() > 1)
        .map(|g| {
            let kind = g.iter().find_map(|i| kind_of.get(i).cloned()).unwrap_or_default();
            (kind, g.into_iter().map(|i| ids[i].to_owned()).collect())
        })
        .collect();
    out.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.1.cmp(&b.1)));
    out
}

fn domain_labels(machine: &Machine, out: &mut BTreeMap<String, String>) {
    let mut values: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    for d in &machine.domains {
        // `accel.io/<kind>` (`nvlink_clique` gives `accel.io/nvlink-clique`); a network node by
        // its layer.
        let key = match (d.kind, d.name.split_once(':')) {
            (DomainKind::NETWORK_NODE, Some((layer, _))) => format!("accel.io/network-node-{}", label_value(layer)),
            (kind, _) => format!("accel.io/{}", kind.as_str().replace('_', "-")),
        };
        let name =
            if d.kind == DomainKind::NETWORK_NODE { d.name.split_once(':').map_or(&*d.name, |x| x.1) } else { &d.name };
        let value = label_value(name);
        if !value.is_empty() {
            values.entry(key).or_default().insert(value);
        }
    }
    // A key with several values on one node (two xGMI hives) gets no node label: one value
    // would be wrong for half the devices.
    for (key, set) in values {
        if let (1, Some(value)) = (set.len(), set.into_iter().next()) {
            out.entry(key).or_insert(value);
        }
    }
}

fn common_labels(machine: &Machine) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    if let Some(t) = machine.accelerators.iter().find_map(ray_accelerator_type) {
        labels.insert("accel.io/accelerator-type".into(), label_value(&t));
    }
    if !machine.accelerators.is_empty() {
        labels.insert("accel.io/accelerator-count".into(), machine.accelerators.len().to_string());
        let mut vendors: Vec<&str> = machine.accelerators.iter().map(|a| a.vendor.as_str()).collect();
        vendors.dedup();
        labels.insert("accel.io/vendors".into(), label_value(&vendors.join(".")));
    }
    domain_labels(machine, &mut labels);
    let isl = islands(machine);
    if let Some((kind, members)) = isl.first() {
        labels.insert("accel.io/scaleup-kind".into(), label_value(kind));
        labels.insert("accel.io/scaleup-island-size".into(), members.len().to_string());
        labels.insert("accel.io/scaleup-islands".into(), isl.len().to_string());
    }
    // Node facts a plugin publishes as labels: the attribute `label.<name>` is `accel.io/<name>`.
    for (attr, value) in &machine.attributes {
        let Some(name) = attr.strip_prefix("label.") else { continue };
        let (name, value) = (label_value(name).to_ascii_lowercase(), label_value(value));
        if !name.is_empty() && !value.is_empty() {
            labels.insert(format!("accel.io/{name}"), value);
        }
    }
    labels
}

/// The node's scale-up domain (an NVLink clique, a TPU slice, an xGMI hive, whatever a plugin
/// marks `scale_up`; a node-local one qualified by its node), as `ray.io/gpu-domain` takes it.
/// `None` when the node has none, or several different ones (two xGMI hives in one box): one
/// label value cannot name them, and a wrong one would let Ray pack across a boundary.
pub fn gpu_domain(machine: &Machine) -> Option<String> {
    let mut names: Vec<String> =
        machine.domains.iter().filter(|d| d.scale_up).map(|d| label_value(&d.name)).filter(|v| !v.is_empty()).collect();
    names.dedup();
    match names.as_slice() {
        [one] => Some(one.clone()),
        _ => None,
    }
}

/// The name a machine goes by as a node when nothing names it: its hostname, as `python -m
/// accel.ray start` defaults `--node-name` to. Node-local domains (an xGMI hive) are qualified
/// by it ([`accel_model::Domain::scoped_name`]).
fn default_node(machine: &Machine) -> &str {
    machine.host.hostname.as_deref().unwrap_or_default()
}

/// Labels and resources for `ray start`, failing closed: a device that is unhealthy, or whose
/// health is unknown (unless the machine allows that, [`Machine::allows_unknown_health`]), gets
/// no resource and is named in [`UNHEALTHY_LABEL`]. Node-local domains are qualified by the
/// hostname, as `python -m accel.ray start` qualifies them by its default node name.
pub fn ray_labels(machine: &Machine) -> RayNode {
    node_labels(&machine.scoped_to(default_node(machine)))
}

fn node_labels(machine: &Machine) -> RayNode {
    let allow_unknown = machine.allows_unknown_health();
    let mut resources = BTreeMap::new();
    let mut num_gpus = 0.0;
    let labels_of = machine.device_labels();
    let mut sick = Vec::new();
    for (acc, label) in machine.accelerators.iter().zip(&labels_of) {
        // Fail closed: a device that is unhealthy, or of unknown health, gets no per-device
        // resource, so no accel placement can reserve it; the label names it.
        if !accel_model::Health::placeable(acc.health.as_ref(), allow_unknown) {
            sick.push(label.clone());
            continue;
        }
        resources.insert(device_resource(acc), 1.0);
        let units = acc.vocabulary.ray_units.unwrap_or(1.0);
        match acc.vocabulary.ray_resource.as_deref() {
            Some(RAY_GPU) => num_gpus += units,
            Some(name) => *resources.entry(name.to_owned()).or_insert(0.0) += units,
            None => {}
        }
    }
    let mut labels = common_labels(machine);
    if !sick.is_empty() {
        labels.insert(UNHEALTHY_LABEL.into(), label_value(&sick.join(".")));
    }
    if let Some(t) = machine.accelerators.iter().find_map(ray_accelerator_type) {
        labels.insert(RAY_ACCELERATOR_TYPE.into(), label_value(&t));
    }
    if let Some(domain) = gpu_domain(machine) {
        labels.insert(RAY_GPU_DOMAIN.into(), domain);
    }
    RayNode { labels, resources, num_gpus }
}

/// [`ray_labels_for_node`] for the Ray node named `name`, which also carries [`NODE_LABEL`].
pub fn ray_node(machine: &Machine, name: &str, planner: &BTreeMap<String, String>) -> RayNode {
    let mut node = ray_labels_for_node(machine, name, planner);
    node.labels.insert(NODE_LABEL.into(), label_value(name));
    node
}

/// [`ray_labels`] for node `node` of a cluster, with its planner labels (`rack=r1` becomes
/// `accel.io/rack=r1`). Node-local domains (an xGMI hive) are qualified by the node's name, as
/// the planner qualifies them. A planner label named after one of the machine's domain kinds
/// (`nvlink_clique=c1`) names that domain on this node, as the planner reads it, so
/// `accel.io/nvlink-clique` and `ray.io/gpu-domain` follow it.
pub fn ray_labels_for_node(machine: &Machine, node: &str, planner: &BTreeMap<String, String>) -> RayNode {
    let mut machine = machine.scoped_to(if node.is_empty() { default_node(machine) } else { node });
    for d in &mut machine.domains {
        if let Some(value) = planner.get(d.kind.as_str()) {
            d.name = value.clone();
        }
    }
    let mut node = node_labels(&machine);
    for (key, value) in planner {
        let (key, value) = (label_value(key).replace('_', "-").to_ascii_lowercase(), label_value(value));
        if !key.is_empty() && !value.is_empty() {
            node.labels.insert(format!("accel.io/{key}"), value);
        }
    }
    node
}

/// Kubernetes node labels: NFD's PCI labels, each family's own scheme as its plugin gave it at
/// discovery ([`Machine::k8s_labels`]: GPU Feature Discovery's `nvidia.com/gpu.*`, the AMD node
/// labeller's `amd.com/gpu.*`, GKE's TPU labels, an external plugin's), and the `accel.io/` labels
/// for the rest. Values follow those tools' formats but come from accel's own data (the product
/// name is the registry's, not NVML's).
pub fn k8s_labels(machine: &Machine) -> BTreeMap<String, String> {
    let mut labels = common_labels(&machine.scoped_to(default_node(machine)));
    for acc in &machine.accelerators {
        let class = acc.pci.and_then(|a| machine.pci_device(a)).and_then(|n| n.class);
        if let (Some(class), Some(vendor)) = (class, acc.pci_vendor) {
            labels.insert(
                format!("feature.node.kubernetes.io/pci-{:04x}_{vendor}.present", class.base_sub()),
                "true".into(),
            );
        }
    }
    for (k, v) in &machine.k8s_labels {
        labels.entry(k.clone()).or_insert_with(|| v.clone());
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn values() {
        assert_eq!(label_value("5f6a7b8c-1d2e.32766"), "5f6a7b8c-1d2e.32766");
        assert_eq!(label_value("NVIDIA H100 80GB"), "NVIDIA-H100-80GB");
        assert_eq!(label_value("--x--"), "x");
        assert_eq!(label_value(&"a".repeat(80)).len(), 63);
    }

    #[test]
    fn ray_gets_one_gpu_domain_or_none() {
        let one = crate::samples::machine("mi300x").unwrap();
        let two = crate::samples::machine("mi210-2hive").unwrap();
        let tray = crate::samples::machine("gb200-nvl72-tray").unwrap();
        // An xGMI hive lies within its node: qualified by the node's name (the hostname here).
        let host = one.host.hostname.clone().unwrap();
        assert_eq!(ray_labels(&one).labels[RAY_GPU_DOMAIN], format!("{host}.8a3f5e2d1c0b0a09"));
        let (a, b) =
            (ray_labels_for_node(&one, "a", &BTreeMap::new()), ray_labels_for_node(&one, "b", &BTreeMap::new()));
        assert_eq!(
            (a.labels["accel.io/xgmi-hive"].as_str(), b.labels[RAY_GPU_DOMAIN].as_str()),
            ("a.8a3f5e2d1c0b0a09", "b.8a3f5e2d1c0b0a09")
        );
        assert_eq!(ray_labels(&two).labels.get(RAY_GPU_DOMAIN), None, "two hives: no one value is right");
        assert!(!ray_labels(&two).labels.contains_key("accel.io/xgmi-hive"));
        assert_eq!(ray_labels(&tray).labels[RAY_ACCELERATOR_TYPE], "GB200");
        // A cluster file's planner label names the domain, and the Ray label follows it.
        let planner = BTreeMap::from([("nvlink_clique".to_owned(), "rack-7".to_owned())]);
        let node = ray_labels_for_node(&tray, "tray-0", &planner);
        assert_eq!(node.labels[RAY_GPU_DOMAIN], "rack-7");
        assert_eq!(node.labels["accel.io/nvlink-clique"], "rack-7");
    }

    #[test]
    fn unhealthy_devices_lose_their_resource_and_are_named() {
        let mut m = crate::samples::machine("gb200-nvl72-tray").unwrap();
        m.accelerators[2].health = Some(accel_model::Health {
            state: accel_model::HealthState::Unhealthy,
            reasons: vec!["XID 79".into()],
            ..Default::default()
        });
        m.accelerators[3].health = Some(accel_model::Health::default()); // unknown
        let node = ray_labels(&m);
        assert_eq!(node.labels[UNHEALTHY_LABEL], "GPU2.GPU3");
        assert_eq!(node.num_gpus, 2.0);
        assert!(
            node.resources.contains_key("accel_dev_nvidia_1") && !node.resources.contains_key("accel_dev_nvidia_2")
        );
        m.attributes.insert(accel_model::HEALTH_UNKNOWN_ATTR.into(), "allow".into());
        let allowing = ray_labels(&m);
        assert_eq!((allowing.labels[UNHEALTHY_LABEL].as_str(), allowing.num_gpus), ("GPU2", 3.0));
    }

    proptest! {
        #[test]
        fn label_values_are_valid(text in ".{0,100}") {
            let v = label_value(&text);
            prop_assert!(v.len() <= 63);
            prop_assert!(v.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')));
            if let (Some(a), Some(b)) = (v.chars().next(), v.chars().last()) {
                prop_assert!(a.is_ascii_alphanumeric() && b.is_ascii_alphanumeric());
            }
        }
    }
}
