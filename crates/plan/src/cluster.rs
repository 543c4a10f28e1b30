//! The cluster the planner places on: named nodes, each a [`Machine`] plus labels, and the
//! per-node topology the planner precomputes (bandwidth matrix, scale-up islands, NUMA, NICs).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use accel_model::{Endpoint, Health, Machine, PathClass, PathClassifier};
use serde::{Deserialize, Serialize};

use crate::PlanError;

/// Most devices one node may hold: device sets are 64-bit masks.
pub const MAX_DEVICES_PER_NODE: usize = 64;

/// A set of nodes. Machines may be shared: a node names an entry of `machines` or holds its own.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    /// Machines shared by several nodes, by name (`dgx-h100`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub machines: BTreeMap<String, Machine>,
    pub nodes: Vec<ClusterNode>,
    /// How device health counts for placement.
    #[serde(default, skip_serializing_if = "HealthPolicy::is_default")]
    pub health: HealthPolicy,
    /// The fabric's switch tiers above the node, lowest first, as node label keys
    /// (`network.topology.nvidia.com/leaf`, `.../spine`, `.../core`, or `block`). Empty: the
    /// tiers [`crate::fabric::default_tiers`] finds in the nodes' labels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tiers: Vec<String>,
    /// Domain bin-packing: how strongly placement prefers partly used domains, so that whole
    /// ones stay free for large gangs.
    #[serde(default, skip_serializing_if = "BinPack::is_default")]
    pub binpack: BinPack,
}

/// Domain bin-packing: a bundle that takes devices from a domain of one of `kinds` whose devices
/// are all free pays `weight` (the score's other terms are in docs/placement.md). `weight: 0`
/// turns it off.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BinPack {
    #[serde(default = "default_binpack_weight")]
    pub weight: f64,
    /// Domain kinds (label keys) it applies to. Empty: the scale-up domains that span nodes
    /// (`nvlink_clique`, `tpu_slice`, `xgmi_hive`... whichever the nodes carry).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kinds: Vec<String>,
}

/// The default bin-packing weight: more than any score difference between two placements of a
/// small bundle inside one node type, less than a NUMA or NIC preference.
pub const W_BINPACK: f64 = 40.0;

fn default_binpack_weight() -> f64 {
    W_BINPACK
}

impl Default for BinPack {
    fn default() -> BinPack {
        BinPack { weight: W_BINPACK, kinds: Vec::new() }
    }
}

impl BinPack {
    fn is_default(&self) -> bool {
        *self == BinPack::default()
    }
}

/// How device health counts for placement. Unhealthy devices are never placed; devices whose
/// health is `unknown` are not placed either unless `unknown` is `allow` (fail closed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthPolicy {
    #[serde(default)]
    pub unknown: UnknownHealth,
}

/// What placement does with a device whose health is `unknown`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnknownHealth {
    #[default]
    Exclude,
    Allow,
}

impl HealthPolicy {
    fn is_default(&self) -> bool {
        *self == HealthPolicy::default()
    }

    pub fn allow_unknown(&self) -> bool {
        self.unknown == UnknownHealth::Allow
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterNode {
    pub name: String,
    /// Domain values and other labels (`{"rack": "r1", "zone": "z1"}`); they override the
    /// machine's own domains of the same kind.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    pub machine: MachineRef,
    /// Accelerator ids already in use on this node (by work the planner did not place).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allocated: Vec<String>,
}

/// A node's machine: the name of an entry in [`Cluster::machines`], or the machine itself.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum MachineRef {
    Name(String),
    Inline(Box<Machine>),
}

impl<'de> Deserialize<'de> for MachineRef {
    // Not `#[serde(untagged)]`: that buffers the input and hides the machine's own error, and
    // some model fields deserialize from borrowed strings, which a borrowed `Value` provides.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<MachineRef, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        match &value {
            serde_json::Value::String(name) => Ok(MachineRef::Name(name.clone())),
            _ => {
                Machine::deserialize(&value).map(|m| MachineRef::Inline(Box::new(m))).map_err(serde::de::Error::custom)
            }
        }
    }
}

impl Cluster {
    /// Adds `count` nodes named `<name>-<k>` sharing `machine`: clones of one machine, so a
    /// domain is shared only where evidence says so. A node-local domain (an xGMI hive, a
    /// one-host TPU slice) is each node's own ([`node_domains`]); a scale-up domain that spans
    /// nodes gets a label of its kind (`nvlink_clique`) per group of the nodes it spans: its
    /// own count where the machine gives one (a TPU slice's hosts), else `clique_trays` (NVL72:
    /// 18 trays a clique).
    pub fn add_nodes(&mut self, name: &str, machine: Machine, count: usize, clique_trays: usize) {
        let shared = machine.domains.iter().find(|d| d.scale_up && !d.node_local());
        let clique = shared.map(|d| (d.kind, d.name.clone(), d.nodes.map_or(clique_trays, |n| n as usize).max(1)));
        self.machines.insert(name.to_owned(), machine);
        for k in 0..count {
            let mut labels = BTreeMap::new();
            if let Some((kind, clique, per)) = &clique {
                labels.insert(kind.as_str().to_owned(), format!("{clique}-{}", k / per));
            }
            self.nodes.push(ClusterNode {
                name: format!("{name}-{k}"),
                labels,
                machine: MachineRef::Name(name.to_owned()),
                allocated: Vec::new(),
            });
        }
    }

    /// Puts every `size` consecutive nodes in one rack (label `rack=r<k>`).
    pub fn label_racks(&mut self, size: usize) {
        for (i, node) in self.nodes.iter_mut().enumerate() {
            node.labels.insert("rack".into(), format!("r{}", i / size.max(1)));
        }
    }

    pub fn from_json(text: &str) -> Result<Cluster, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The machine of a node.
    pub fn machine<'a>(&'a self, node: &'a ClusterNode) -> Result<&'a Machine, PlanError> {
        match &node.machine {
            MachineRef::Inline(m) => Ok(m),
            MachineRef::Name(name) => self
                .machines
                .get(name)
                .ok_or_else(|| PlanError::Cluster(format!("node {:?} names unknown machine {name:?}", node.name))),
        }
    }
}

/// What the planner knows about one device.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Device {
    pub id: String,
    pub vendor: String,
    pub index: u32,
    pub label: String,
    pub family: Option<String>,
    pub sku: Option<String>,
    pub memory_bytes: Option<u64>,
    pub dtypes: Vec<String>,
    pub numa: Option<u32>,
    /// The closest RDMA NIC: its name, path class rank (0 = PIX, 1 = PXB, 2 = farther) and
    /// path class (`PIX`, `PXB`, `NODE`...).
    pub nic: Option<(String, u8, String)>,
    /// RDMA NICs at PIX, and at PXB or closer.
    pub nics_within: [u32; 2],
    /// The health verdict's one-line summary when placement leaves the device out.
    pub health: Option<String>,
}

/// The precomputed topology of one machine. Nodes with equal topologies share one.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Topo {
    pub devices: Vec<Device>,
    /// Pairwise GB/s, row-major `n * n`.
    pub bw: Vec<f64>,
    /// Devices joined to each device by a direct scale-up link.
    pub link: Vec<u64>,
    /// The scale-up island (connected component of links) of each device.
    pub island: Vec<u64>,
    /// Devices on the same (known) NUMA node as each device.
    pub numa_peers: Vec<u64>,
    /// CPU count of each NUMA node.
    pub numa_cpus: BTreeMap<u32, u32>,
    pub all: u64,
    /// Devices placement may use: all but the unhealthy (and, unless allowed, the unknown).
    pub usable: u64,
}

/// Rough peer-to-peer GB/s (both directions) for PCIe path classes: used only to rank pairs
/// that have no scale-up link.
pub(crate) fn pcie_gbps(class: PathClass) -> f64 {
    match class {
        PathClass::SelfPath => 0.0,
        PathClass::Link { .. } => 0.0,
        PathClass::Pix => 50.0,
        PathClass::Pxb => 40.0,
        PathClass::Phb => 30.0,
        PathClass::Node => 20.0,
        PathClass::Sys => 10.0,
    }
}

impl Topo {
    pub fn new(machine: &Machine, policy: HealthPolicy) -> Result<Topo, PlanError> {
        let n = machine.accelerators.len();
        if n > MAX_DEVICES_PER_NODE {
            return Err(PlanError::Cluster(format!(
                "a machine has {n} accelerators; the planner handles at most {MAX_DEVICES_PER_NODE} per node"
            )));
        }
        let classifier = PathClassifier::new(machine);
        let labels = machine.device_labels();
        // The cluster's policy, or the node operator's (`health.unknown=allow` on the machine).
        let allow_unknown = policy.allow_unknown() || machine.allows_unknown_health();
        let mut devices = Vec::with_capacity(n);
        // How many devices each RDMA NIC is already the closest NIC of (the spread rule below).
        let mut nic_uses = vec![0u32; machine.nics.len()];
        for (i, acc) in machine.accelerators.iter().enumerate() {
            let mut nics_within = [0u32; 2];
            // The RDMA NICs at the closest distance (rank, then path class): the ties.
            let mut closest: Vec<usize> = Vec::new();
            let mut best: Option<(u8, u32, PathClass)> = None;
            for (j, card) in machine.nics.iter().enumerate() {
                if !card.rdma {
                    continue;
                }
                let class = classifier.classify(Endpoint::Accelerator(i), Endpoint::Nic(j));
                let rank = match class {
                    PathClass::Pix => 0,
                    PathClass::Pxb => 1,
                    _ => 2,
                };
                for (within, count) in nics_within.iter_mut().enumerate() {
                    if usize::from(rank) <= within {
                        *count += 1;
                    }
                }
                let key = (rank, class.rank());
                match best {
                    Some((r, c, _)) if key > (r, c) => {}
                    Some((r, c, _)) if key == (r, c) => closest.push(j),
                    _ => {
                        best = Some((rank, class.rank(), class));
                        closest = vec![j];
                    }
                }
            }
            // Devices equally near several NICs are spread across them (docs/placement.md,
            // "NIC per device"): in device order, each takes the tied NIC that the fewest
            // earlier devices took, the first in the machine's NIC order on a tie.
            let nic = best.and_then(|(rank, _, class)| {
                let j = closest.iter().copied().min_by_key(|&j| (nic_uses[j], j))?;
                nic_uses[j] += 1;
                Some((machine.nics[j].name.clone(), rank, class.to_string()))
            });
            devices.push(Device {
                id: acc.id.clone(),
                vendor: acc.vendor.clone(),
                index: acc.index,
                label: labels[i].clone(),
                family: acc.family.clone(),
                sku: acc.sku.clone(),
                memory_bytes: acc.memory_bytes,
                dtypes: acc.dtypes.clone(),
                numa: acc.numa_node,
                nic,
                nics_within,
                health: (!Health::placeable(acc.health.as_ref(), allow_unknown))
                    .then(|| acc.health.as_ref().map(Health::summary).unwrap_or_default()),
            });
        }
        let index: HashMap<&str, usize> =
            machine.accelerators.iter().enumerate().map(|(i, a)| (a.id.as_str(), i)).collect();
        let mut bw = vec![0.0; n * n];
        let mut link = vec![0u64; n];
        for a in 0..n {
            for b in 0..n {
                if a != b {
                    bw[a * n + b] = pcie_gbps(classifier.classify(Endpoint::Accelerator(a), Endpoint::Accelerator(b)));
                }
            }
        }
        let mut best_link = vec![0.0f64; n * n];
        for l in &machine.links {
            let (Some(&a), Some(&b)) = (index.get(l.a.as_str()), index.get(l.b.as_str())) else { continue };
            if a == b {
                continue;
            }
            // Discovery gives a link its SKU's bandwidth; a link of an unknown SKU counts 25 GB/s.
            let gbps = l.gbps.unwrap_or(25.0 * f64::from(l.count.max(1)));
            link[a] |= 1 << b;
            link[b] |= 1 << a;
            // Several link records for one pair: the best one counts.
            let best = best_link[a * n + b].max(gbps);
            best_link[a * n + b] = best;
            best_link[b * n + a] = best;
        }
        for a in 0..n {
            for b in 0..n {
                if link[a] & (1 << b) != 0 {
                    bw[a * n + b] = best_link[a * n + b];
                }
            }
        }
        let mut island = vec![0u64; n];
        for start in 0..n {
            if island[start] != 0 {
                continue;
            }
            let mut comp = 1u64 << start;
            let mut frontier = comp;
            while frontier != 0 {
                let d = frontier.trailing_zeros() as usize;
                frontier &= frontier - 1;
                let new = link[d] & !comp;
                comp |= new;
                frontier |= new;
            }
            let mut rest = comp;
            while rest != 0 {
                let d = rest.trailing_zeros() as usize;
                rest &= rest - 1;
                island[d] = comp;
            }
        }
        let mut numa_peers = vec![0u64; n];
        for a in 0..n {
            for b in 0..n {
                if devices[a].numa.is_some() && devices[a].numa == devices[b].numa {
                    numa_peers[a] |= 1 << b;
                }
            }
        }
        let numa_cpus = machine.numa_nodes.iter().map(|node| (node.id, node.cpus.len() as u32)).collect();
        let all = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
        let usable = devices.iter().enumerate().filter(|(_, d)| d.health.is_none()).fold(0u64, |m, (i, _)| m | 1 << i);
        Ok(Topo { devices, bw, link, island, numa_peers, numa_cpus, all, usable })
    }

    pub fn len(&self) -> usize {
        self.devices.len()
    }

    pub fn gbps(&self, a: usize, b: usize) -> f64 {
        self.bw[a * self.len() + b]
    }
}

/// One node as the planner holds it: name, labels and a shared topology.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub name: String,
    /// Index of the node's label set (domains included) in the planner's interned list.
    pub labels: usize,
    pub topo: usize,
}

/// Interns topologies so that equal machines share one (and one cache entry).
#[derive(Debug, Default)]
pub(crate) struct Topos {
    pub list: Vec<Arc<Topo>>,
}

impl Topos {
    pub fn intern(&mut self, topo: Topo) -> usize {
        if let Some(i) = self.list.iter().position(|t| **t == topo) {
            return i;
        }
        self.list.push(Arc::new(topo));
        self.list.len() - 1
    }
}

/// The domain values of node `node`: [`machine_domains`] with each node-local domain (an xGMI
/// hive) qualified by the node's name ([`accel_model::Domain::scoped_name`]), so nodes cloned
/// from one capture never share one.
pub fn node_domains(machine: &Machine, node: &str) -> BTreeMap<String, String> {
    let mut out = machine_domains(machine);
    scope_node_local(&mut out, machine, node);
    out
}

/// Qualifies, in a node's domain values, each value that is one of its machine's node-local
/// domains by the node's name (without copying the machine: a cluster may hold 10,000 nodes).
pub(crate) fn scope_node_local(values: &mut BTreeMap<String, String>, machine: &Machine, node: &str) {
    for d in machine.domains.iter().filter(|d| d.node_local()) {
        if let Some(v) = values.get_mut(d.kind.as_str()).filter(|v| **v == d.name) {
            *v = d.scoped_name(node);
        }
    }
}

/// The domain values of a machine: each domain kind that covers the whole node (or, for
/// device-level domains such as an NVLink clique, the first one listed), by kind name.
pub fn machine_domains(machine: &Machine) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for d in &machine.domains {
        let kind = serde_json::to_value(d.kind).ok().and_then(|v| v.as_str().map(str::to_owned));
        if let Some(kind) = kind {
            out.entry(kind).or_insert_with(|| d.name.clone());
        }
    }
    out
}
