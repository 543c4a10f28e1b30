//! The machine description: NUMA nodes, the PCI tree, accelerators, NICs, scale-up links and domains.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

pub use crate::name::{DomainKind, LinkKind, Name};
use crate::{CpuSet, PciAddr, PciClass, PciId, PciLink};

/// Version of the JSON shape of [`Machine`]; bumped on any incompatible change (see docs/schema.md).
pub const SCHEMA_VERSION: u32 = 1;

/// One node, as discovery saw it. Partial by design: what could not be read is absent,
/// and why is in `warnings`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub schema_version: u32,
    pub host: HostInfo,
    pub numa_nodes: Vec<NumaNode>,
    /// Host bridges, bridges and endpoints, parents before children.
    pub pci: Vec<PciNode>,
    pub accelerators: Vec<Accelerator>,
    pub nics: Vec<Nic>,
    pub links: Vec<Link>,
    /// How each kind in `links` is shown (its plugin's [`LinkKindInfo`]), one entry per kind.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub link_kinds: Vec<LinkKindInfo>,
    pub domains: Vec<Domain>,
    pub warnings: Vec<Warning>,
    /// Platform facts that are not devices, links or domains, as `namespace.key` = value:
    /// `tpu.worker_id`, `tpu.topology`, `tpu.accelerator_type`, `cloud.zone`. Each plugin that
    /// sets one documents it (docs/schema.md).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, String>,
    /// Kubernetes node labels in each family's own scheme (GPU Feature Discovery's
    /// `nvidia.com/gpu.*`, GKE's TPU labels, an external plugin's), from the plugins that found
    /// the devices; `accel labels --format k8s` and the NFD export add them to accel's own.
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub k8s_labels: BTreeMap<String, String>,
}

/// The machine attribute by which a node's operator lets devices of unknown health be placed
/// (`python -m accel.ray start --allow-unknown-health`, `accel labels --allow-unknown-health`).
pub const HEALTH_UNKNOWN_ATTR: &str = "health.unknown";

impl Machine {
    /// True when this machine's operator allows placing devices whose health is unknown
    /// (the attribute [`HEALTH_UNKNOWN_ATTR`] is `allow`). Fail closed otherwise.
    pub fn allows_unknown_health(&self) -> bool {
        self.attributes.get(HEALTH_UNKNOWN_ATTR).is_some_and(|v| v == "allow")
    }

    pub fn new(host: HostInfo) -> Machine {
        Machine {
            schema_version: SCHEMA_VERSION,
            host,
            numa_nodes: Vec::new(),
            pci: Vec::new(),
            accelerators: Vec::new(),
            nics: Vec::new(),
            links: Vec::new(),
            link_kinds: Vec::new(),
            domains: Vec::new(),
            warnings: Vec::new(),
            attributes: BTreeMap::new(),
            k8s_labels: BTreeMap::new(),
        }
    }

    /// How links of `kind` are shown: the declared [`LinkKindInfo`], else the kind in capitals.
    pub fn link_kind(&self, kind: LinkKind) -> LinkKindInfo {
        self.link_kinds.iter().find(|i| i.kind == kind).cloned().unwrap_or_else(|| LinkKindInfo {
            kind,
            short: kind.default_short(),
            name: kind.as_str().to_owned(),
            gbps_per_link: None,
        })
    }

    pub fn pci_node(&self, id: &str) -> Option<&PciNode> {
        self.pci.iter().find(|n| n.id == id)
    }

    pub fn pci_device(&self, addr: PciAddr) -> Option<&PciNode> {
        self.pci.iter().find(|n| n.address == Some(addr))
    }

    pub fn numa_node(&self, id: u32) -> Option<&NumaNode> {
        self.numa_nodes.iter().find(|n| n.id == id)
    }

    pub fn accelerator(&self, id: &str) -> Option<&Accelerator> {
        self.accelerators.iter().find(|a| a.id == id)
    }

    /// Each accelerator's short name, in order: its vocabulary's label prefix and a counter per
    /// prefix (`GPU0`, `GPU1`, `NRN0`...), unique on the node. `accel topo` prints these and the
    /// planner accepts them.
    pub fn device_labels(&self) -> Vec<String> {
        let mut counters: BTreeMap<&str, u32> = BTreeMap::new();
        self.accelerators
            .iter()
            .map(|a| {
                let prefix = a.vocabulary.label_prefix();
                let n = counters.entry(prefix).or_default();
                *n += 1;
                format!("{prefix}{}", *n - 1)
            })
            .collect()
    }

    pub fn warn(&mut self, source: &str, path: Option<String>, message: impl Into<String>) {
        self.warnings.push(Warning { source: source.to_owned(), path, message: message.into() });
    }

    /// This machine as node `node` of a cluster: every node-local domain renamed to its
    /// [`Domain::scoped_name`], so that no two nodes share one. Labels and exports of one node
    /// read the machine through this.
    pub fn scoped_to(&self, node: &str) -> Machine {
        let mut out = self.clone();
        for d in &mut out.domains {
            d.name = d.scoped_name(node);
        }
        out
    }
}

/// What identifies the host itself.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostInfo {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub hostname: Option<String>,
    /// DMI `product_name`: `DGXH100`, `p5en.48xlarge`, `NVIDIA_DGX_Spark`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub product_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub sys_vendor: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NumaNode {
    pub id: u32,
    /// Empty for memory-only nodes (GPU HBM on POWER9 and Grace, CXL memory).
    pub cpus: CpuSet,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub memory_bytes: Option<u64>,
    /// SLIT distances to each node by id (10 = local).
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub distances: BTreeMap<u32, u32>,
    /// The accelerator whose memory this node is (GPU memory exposed as a CPU-less node on
    /// Grace and POWER9): never a CPU node for affinity.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub memory_of: Option<String>,
}

impl NumaNode {
    /// A node with CPUs, memory and distances, owned by no device.
    pub fn new(id: u32, cpus: CpuSet, memory_bytes: Option<u64>, distances: BTreeMap<u32, u32>) -> NumaNode {
        NumaNode { id, cpus, memory_bytes, distances, memory_of: None }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PciNodeKind {
    /// A root complex's host bridge (`pci0000:17`); it has no PCI address of its own in sysfs.
    HostBridge,
    /// A PCI-to-PCI bridge: a root port or a switch port.
    Bridge,
    Endpoint,
}

/// One node of the PCI tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PciNode {
    /// The sysfs name: `pci0000:17` for a host bridge, the address otherwise.
    pub id: String,
    pub kind: PciNodeKind,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub address: Option<PciAddr>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub parent: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub vendor: Option<PciId>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub device: Option<PciId>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub subsystem_vendor: Option<PciId>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub subsystem_device: Option<PciId>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub class: Option<PciClass>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub link: Option<PciLink>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub max_link: Option<PciLink>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub driver: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub numa_node: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub local_cpus: Option<CpuSet>,
}

impl PciNode {
    pub fn new(id: String, kind: PciNodeKind, parent: Option<String>) -> PciNode {
        PciNode {
            address: id.parse().ok(),
            id,
            kind,
            parent,
            vendor: None,
            device: None,
            subsystem_vendor: None,
            subsystem_device: None,
            class: None,
            link: None,
            max_link: None,
            driver: None,
            numa_node: None,
            local_cpus: None,
        }
    }
}

/// A device that runs user compute: a GPU, TPU, NeuronDevice, Gaudi, LPU or a partition of one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Accelerator {
    /// Stable id: `<vendor>-<pci address>` where the device is on PCI, else `<vendor>-<uuid or index>`.
    pub id: String,
    /// Ordinal among this vendor's devices on the node, in PCI bus order: the number that
    /// visibility variables such as `CUDA_VISIBLE_DEVICES` take.
    pub index: u32,
    /// Lowercase vendor id (`nvidia`, `amd`, `google`, `aws`, `intel`, `groq`, or `pci-<id>`).
    pub vendor: String,
    /// The discovery plugin that reported it.
    pub plugin: String,
    /// Registry id of the SKU, when the device was recognised.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub sku: Option<String>,
    pub product: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub family: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub architecture: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub pci: Option<PciAddr>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub pci_vendor: Option<PciId>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub pci_device: Option<PciId>,
    /// The NUMA node whose CPUs are closest (not a memory-only node).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub numa_node: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub memory_bytes: Option<u64>,
    /// A CPU-less NUMA node that exposes this device's memory (Grace, POWER9).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub memory_numa_node: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub uuid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub serial: Option<String>,
    /// Set when this is one partition of a physical device (AMD CPX/DPX, MIG).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub partition: Option<Partition>,
    /// Data types the device computes in (`bf16`, `fp8`), from its SKU, resolved at discovery.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub dtypes: Vec<String>,
    /// How runtimes and schedulers name this device, given by the plugin that reported it.
    #[serde(default)]
    pub vocabulary: Vocabulary,
    /// The device's health at discovery. Absent in a description written without a verdict (by
    /// hand, or by an accel before health verdicts); discovery always sets it.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub health: Option<Health>,
}

/// A device's health verdict, with its reasons and what was checked. Fails closed: a device is
/// `healthy` only when every check its sources could run passed and none was unreadable.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    pub state: HealthState,
    /// Why it is unhealthy or unknown (`3 uncorrectable ECC errors`, `PCIe link x8 of x16`, a
    /// family's source that failed or is missing). Empty when healthy.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub reasons: Vec<String>,
    /// The checks that ran: `pcie_link`, and `<plugin>:errors` for the reporting plugin's source.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub checked: Vec<String>,
    /// Checks a capture could not run because it holds no recording of their source (a
    /// capture's verdict covers only what it recorded). Never set on a live machine, where a
    /// missing source makes the device `unknown`.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub unchecked: Vec<String>,
}

/// The three verdicts. `unknown` (a source failed or is missing on a live machine) counts as
/// unhealthy for placement unless the cluster says otherwise.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthState {
    Healthy,
    Unhealthy,
    #[default]
    Unknown,
}

impl Health {
    /// True when placement may use the device: healthy, or unknown when `allow_unknown`.
    pub fn placeable(health: Option<&Health>, allow_unknown: bool) -> bool {
        match health.map(|h| h.state) {
            None | Some(HealthState::Healthy) => true,
            Some(HealthState::Unknown) => allow_unknown,
            Some(HealthState::Unhealthy) => false,
        }
    }

    /// One line for labels, taints and drain reasons: the state and its first reason.
    pub fn summary(&self) -> String {
        match (self.state, self.reasons.first()) {
            (HealthState::Healthy, _) => "healthy".into(),
            (state, Some(reason)) => format!("{}: {reason}", state.as_str()),
            (state, None) => state.as_str().into(),
        }
    }
}

impl HealthState {
    pub fn as_str(self) -> &'static str {
        match self {
            HealthState::Healthy => "healthy",
            HealthState::Unhealthy => "unhealthy",
            HealthState::Unknown => "unknown",
        }
    }
}

/// One device's names in the world around it: its kind, the label tools print, the variable
/// that hides the others, and what Ray counts it as. The plugin that reports a device fills
/// this; nothing above discovery keeps a vendor table of its own (docs/schema.md).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Vocabulary {
    /// Device kind: `gpu`, `tpu`, `neuron`, `hpu`, `lpu`, `npu`, `accelerator`.
    #[serde(skip_serializing_if = "String::is_empty", default)]
    pub kind: String,
    /// Label prefix for matrices and plans (`GPU` gives `GPU0`, `GPU1`...).
    #[serde(skip_serializing_if = "String::is_empty", default)]
    pub label: String,
    /// The environment variable that confines a process to a set of these devices.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub visibility_env: Option<String>,
    /// What joins several devices' values in `visibility_env`: `,` when absent.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub visibility_separator: Option<String>,
    /// The values this device contributes to `visibility_env`: its index, a UUID, a Gaudi module
    /// id, a NeuronCore range (`8-15`). Empty means the index.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub isolation: Vec<String>,
    /// Ray's resource for the device (`GPU`, `TPU`, `neuron_cores`, `HPU`, `NPU`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub ray_resource: Option<String>,
    /// How many units of `ray_resource` the device is: 1, or its NeuronCore count.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub ray_units: Option<f64>,
    /// Variables Ray itself sets for that resource, which accel switches off
    /// (`RAY_EXPERIMENTAL_NOSET_<VAR>=1`) when it sets visibility.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub ray_managed_env: Vec<String>,
    /// Ray's accelerator-type string (`H100`, `TPU-V6E`), from the SKU.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub ray_accelerator_type: Option<String>,
    /// The Kubernetes extended resource of the vendor's device plugin (`nvidia.com/gpu`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub k8s_resource: Option<String>,
    /// The vendor's own Kubernetes DRA driver, which publishes these devices' ResourceSlices
    /// itself (`gpu.nvidia.com`). Absent: no DRA driver is known for the family, and accel's
    /// own slices (driver `accel.io`) describe them.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub dra_driver: Option<String>,
    /// Slurm's gres name for the device (`gres.conf` `Name=`): `gpu` for GPUs; the device kind
    /// when absent.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub slurm_gres: Option<String>,
    /// The device files under `/dev` the driver creates for this device, its own node first
    /// (`/dev/nvidia0`, `/dev/dri/renderD128`); Slurm's `gres.conf` `File=` is the first. Set per
    /// device by the plugin that found it; empty when the plugin does not know them.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub device_files: Vec<String>,
}

impl Vocabulary {
    /// Fills every field that is still empty from `defaults` (a plugin's vocabulary for its kind).
    pub fn fill_from(&mut self, defaults: &Vocabulary) {
        fn text(v: &mut String, d: &str) {
            if v.is_empty() {
                d.clone_into(v);
            }
        }
        fn opt<T: Clone>(v: &mut Option<T>, d: &Option<T>) {
            if v.is_none() {
                v.clone_from(d);
            }
        }
        fn list(v: &mut Vec<String>, d: &[String]) {
            if v.is_empty() {
                *v = d.to_vec();
            }
        }
        text(&mut self.kind, &defaults.kind);
        text(&mut self.label, &defaults.label);
        opt(&mut self.visibility_env, &defaults.visibility_env);
        opt(&mut self.visibility_separator, &defaults.visibility_separator);
        list(&mut self.isolation, &defaults.isolation);
        opt(&mut self.ray_resource, &defaults.ray_resource);
        opt(&mut self.ray_units, &defaults.ray_units);
        list(&mut self.ray_managed_env, &defaults.ray_managed_env);
        opt(&mut self.ray_accelerator_type, &defaults.ray_accelerator_type);
        opt(&mut self.k8s_resource, &defaults.k8s_resource);
        opt(&mut self.dra_driver, &defaults.dra_driver);
        opt(&mut self.slurm_gres, &defaults.slurm_gres);
    }

    /// What joins several devices' values in the visibility variable.
    pub fn separator(&self) -> &str {
        self.visibility_separator.as_deref().unwrap_or(",")
    }

    /// Slurm's gres name: the plugin's, else the device kind, else `accel`.
    pub fn gres_name(&self) -> &str {
        match (&self.slurm_gres, self.kind.as_str()) {
            (Some(g), _) => g,
            (None, "") => "accel",
            (None, k) => k,
        }
    }

    /// The label prefix, `ACC` for a device whose plugin named none.
    pub fn label_prefix(&self) -> &str {
        if self.label.is_empty() {
            "ACC"
        } else {
            &self.label
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partition {
    /// Id shared by every partition of the same physical device.
    pub physical_id: String,
    pub index: u32,
    /// Vendor mode name: `CPX`, `DPX`, `MIG 1g.10gb`.
    pub mode: String,
    /// Compute units (AMD CUs) of this partition alone, when the driver says.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub compute_units: Option<u32>,
    /// Whether the runtime numbers this partition as a device of its own (AMD CPX/DPX: HIP
    /// ordinals). `false` for a partition the runtime selects by UUID only (MIG), which keeps
    /// its physical device's ordinal out of the way: discovery numbers it after every whole
    /// device of its vendor.
    #[serde(skip_serializing_if = "is_true", default = "yes")]
    pub own_ordinal: bool,
}

fn is_true(b: &bool) -> bool {
    *b
}

fn yes() -> bool {
    true
}

/// A network interface on PCI: a netdev, an RDMA device, or both on one function.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Nic {
    /// What tools call it: the RDMA device (`mlx5_0`), else the netdev, else the PCI address.
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub netdev: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub rdma_device: Option<String>,
    /// True when the NIC can do RDMA (an RDMA device exists, or it is an InfiniBand controller).
    pub rdma: bool,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub pci: Option<PciAddr>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub speed_mbps: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub numa_node: Option<u32>,
}

/// How the links of one kind are shown and valued: a plugin declares one for every kind it
/// reports, and `accel topo`'s legend and matrix are built from these, so a new kind needs no
/// change to accel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkKindInfo {
    pub kind: LinkKind,
    /// The matrix tag before the link count (`NV` gives `NV18`): at most 8 printable characters.
    pub short: Name,
    /// What the legend says of it: `NVLink through NVSwitch`.
    pub name: String,
    /// Nominal GB/s of one link (both directions), for a link of this kind that reports no
    /// bandwidth of its own.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub gbps_per_link: Option<f64>,
}

impl LinkKindInfo {
    pub fn new(kind: LinkKind, short: &str, name: &str) -> LinkKindInfo {
        LinkKindInfo {
            kind,
            short: Name::new(short).filter(|_| short.len() <= 8).unwrap_or_else(|| kind.default_short()),
            name: name.to_owned(),
            gbps_per_link: None,
        }
    }
}

/// A scale-up link between two accelerators (undirected; `a` < `b`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Link {
    pub a: String,
    pub b: String,
    pub kind: LinkKind,
    /// Number of bonded links (the `#` of `NV#`).
    pub count: u32,
    /// Bandwidth between the pair in GB/s, both directions together, where known.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub gbps: Option<f64>,
    /// Hops between the pair over this fabric, where the source counts them (hwloc's `XGMIHops`):
    /// 1 is a direct link.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub hops: Option<u32>,
    /// How accel knows of the link: seen on the machine (`observed`, the default, left out of
    /// the JSON), or `declared` by the design of a system the SKU registry identifies, where the
    /// capture holds no link evidence. An observed link always wins.
    #[serde(skip_serializing_if = "LinkOrigin::is_observed", default)]
    pub origin: LinkOrigin,
    /// Where the link was read, where it is not the reporting plugin's own runtime: the matrix or
    /// file element of an imported topology (`hwloc:NVLinkBandwidth`, `nccl:xgmi`), or the
    /// registry entry of a declared link (`builtin:aws.toml system p5en.48xlarge`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub source: Option<String>,
}

impl Link {
    /// An observed link with no hop count and no separate source.
    pub fn new(a: impl Into<String>, b: impl Into<String>, kind: LinkKind, count: u32, gbps: Option<f64>) -> Link {
        Link { a: a.into(), b: b.into(), kind, count, gbps, hops: None, origin: LinkOrigin::Observed, source: None }
    }

    /// True when the link was declared by design rather than seen on the machine.
    pub fn is_declared(&self) -> bool {
        self.origin == LinkOrigin::Declared
    }
}

/// How accel knows of a scale-up link ([`Link::origin`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkOrigin {
    /// Read from the machine: a vendor runtime, the kernel, or a topology tool's record of it.
    #[default]
    Observed,
    /// Fixed by the design of a system identified by its instance type, DMI product name or
    /// baseboard, from the SKU registry; never read from this machine.
    Declared,
}

impl LinkOrigin {
    pub fn is_observed(&self) -> bool {
        *self == LinkOrigin::Observed
    }

    pub fn as_str(self) -> &'static str {
        match self {
            LinkOrigin::Observed => "observed",
            LinkOrigin::Declared => "declared",
        }
    }
}

/// A grouping above (or across) the node, with where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Domain {
    pub kind: DomainKind,
    pub name: String,
    /// Provenance: `k8s-label:topology.kubernetes.io/zone`, `gce-metadata`, `nvml-fabric`...
    pub source: String,
    /// The accelerators in it; empty means the whole node.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub accelerators: Vec<String>,
    /// A scale-up fabric's domain (an NVLink clique, a TPU slice, an xGMI hive): the accelerators
    /// in it reach each other over the fabric, not the network. Schedulers' "GPU domain" (Slurm
    /// blocks, topograph's `accelerator` label, DRA's `scaleUpDomain`) is this.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub scale_up: bool,
    /// How many nodes the domain spans, where its family's evidence says: `1` for a domain that
    /// cannot leave its node (an xGMI hive, a PCIe switch, a node-local NVSwitch) or a TPU slice
    /// of one host; a TPU slice's host count. Absent where the cluster decides (an NVL72 clique
    /// holds 1 to 18 trays: `--clique-trays`, node labels, a topology file) or for a domain
    /// above the node (zone, rack).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub nodes: Option<u32>,
}

impl Domain {
    /// Whether the domain lies within one node: its name is then unique only inside that node
    /// (two nodes cloned from one capture share it), so views across nodes use
    /// [`Domain::scoped_name`].
    pub fn node_local(&self) -> bool {
        self.nodes == Some(1)
    }

    /// The domain's name across a cluster: a node-local domain's qualified by its node
    /// (`mi355x-0.8a3f5e2d1c0b0a09`), any other as it is. Already qualified names stay as they are.
    pub fn scoped_name(&self, node: &str) -> String {
        let prefix = format!("{node}.");
        if !self.node_local() || node.is_empty() || self.name.starts_with(&prefix) {
            return self.name.clone();
        }
        prefix + &self.name
    }
}

/// Something discovery could not read or did not understand. Never fatal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Warning {
    /// The area or plugin: `numa`, `pci`, `nic`, `generic-pci`, `nvidia`...
    pub source: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub path: Option<String>,
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.path {
            Some(path) => write!(f, "{}: {}: {}", self.source, path, self.message),
            None => write!(f, "{}: {}", self.source, self.message),
        }
    }
}
