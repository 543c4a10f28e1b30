//! The placement request: bundles of devices with capability, connectivity and locality
//! constraints, and how bundles relate to each other (same domain, pack or spread).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A list of bundles to place together, all or nothing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    pub bundles: Vec<Bundle>,
    /// Every bundle lands in one domain of this kind (`node`, `nvlink_clique`, `rack`,
    /// `tpu_slice`, `zone`, ...). Absent: no such constraint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub same: Option<String>,
    /// `pack` (the default) prefers nodes the request already uses; `spread` puts every bundle on
    /// a different node.
    #[serde(default)]
    pub strategy: Strategy,
    /// Only nodes whose labels (or domains) carry these values: `{"rack": "r2"}`; the key
    /// `node` names one node, which then holds every bundle.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub select: BTreeMap<String, String>,
    /// Sub-group affinity: the bundles, in request order, form sub-groups of `size` bundles, and
    /// each sub-group lands inside one domain of kind `same` (a tensor-parallel group in one
    /// NVLink domain), while the sub-groups (data-parallel replicas) spread or pack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<Groups>,
    /// A tier cap: every bundle under one switch of this fabric tier (`leaf`, `spine`, `core`,
    /// `block`, or any tier key of the cluster's `tiers`), hard or soft.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within: Option<Within>,
}

/// Sub-groups of a gang: consecutive runs of `size` bundles, each inside one domain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Groups {
    /// Bundles per sub-group; the request's bundle count must be a multiple of it.
    pub size: u32,
    /// The domain kind (or label key) each sub-group stays inside: `nvlink_clique`, `rack`,
    /// `block`, `node`...
    pub same: String,
    /// `spread` puts every sub-group in a different domain; `pack` (the default) lets sub-groups
    /// share one and prefers domains earlier sub-groups already use.
    #[serde(default)]
    pub replicas: Strategy,
}

/// Stay under one switch of a fabric tier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Within {
    /// A tier of the cluster's fabric (`leaf`, `spine`, `core`; or its full label key).
    pub tier: String,
    /// Hard (the default): infeasible unless every bundle shares one switch of this tier. Soft:
    /// prefer that, else the lowest tier above it that holds the gang, else anywhere; the
    /// placement says which tier it spans.
    #[serde(default = "yes")]
    pub hard: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    #[default]
    Pack,
    Spread,
}

/// One group of devices on one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bundle {
    /// Number of devices.
    pub count: u32,
    /// Allowed vendors (`nvidia`, `amd`, ...); empty allows any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vendor: Vec<String>,
    /// Allowed families (`hopper`, `cdna3`, ...); empty allows any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub family: Vec<String>,
    /// Allowed SKU ids (`h100-sxm5-80gb`, ...); empty allows any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sku: Vec<String>,
    /// Minimum device memory in GB (10^9 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_memory_gb: Option<f64>,
    /// Data types every device must support (`fp8`, `bf16`): the `dtypes` discovery resolved from its SKU.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dtypes: Vec<String>,
    #[serde(default)]
    pub connectivity: Connectivity,
    /// All devices on one NUMA node.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub same_numa: bool,
    /// Each device needs an RDMA NIC at this distance or closer (`pix` or `pxb`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic: Option<NicDistance>,
    /// How many RDMA NICs each device needs at the `nic` distance (`pxb` when `nic` is absent)
    /// or closer; 1 when absent. NICs are shared, not reserved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nics: Option<u32>,
    /// CPU cores on the devices' NUMA nodes (checked, not reserved).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u32>,
}

impl Bundle {
    /// A bundle of `count` devices with no constraints.
    pub fn new(count: u32) -> Bundle {
        Bundle {
            count,
            vendor: Vec::new(),
            family: Vec::new(),
            sku: Vec::new(),
            min_memory_gb: None,
            dtypes: Vec::new(),
            connectivity: Connectivity::Any,
            same_numa: false,
            nic: None,
            nics: None,
            cpus: None,
        }
    }

    pub fn connectivity(mut self, c: Connectivity) -> Bundle {
        self.connectivity = c;
        self
    }
}

/// How the devices of a bundle must be joined, pairwise.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub enum Connectivity {
    #[default]
    Any,
    /// Every pair joined directly by a scale-up link (NVLink/NVSwitch, xGMI, ICI, NeuronLink...).
    ScaleUp,
    /// Every device in one scale-up island (a connected component of the link graph).
    Island,
    /// Every pair at least this many GB/s (both directions together).
    MinGbps(f64),
}

impl fmt::Display for Connectivity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Connectivity::Any => f.write_str("any"),
            Connectivity::ScaleUp => f.write_str("scale-up"),
            Connectivity::Island => f.write_str("island"),
            Connectivity::MinGbps(g) => write!(f, "min {g} GB/s"),
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum ConnectivityRepr {
    Name(String),
    Min { min_gbps: f64 },
}

impl Serialize for Connectivity {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Connectivity::MinGbps(g) => ConnectivityRepr::Min { min_gbps: *g }.serialize(s),
            other => ConnectivityRepr::Name(other.to_string()).serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Connectivity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Connectivity, D::Error> {
        match ConnectivityRepr::deserialize(d)? {
            ConnectivityRepr::Min { min_gbps } if min_gbps.is_finite() && min_gbps >= 0.0 => {
                Ok(Connectivity::MinGbps(min_gbps))
            }
            ConnectivityRepr::Min { .. } => Err(serde::de::Error::custom("min_gbps must be a non-negative number")),
            ConnectivityRepr::Name(name) => match name.as_str() {
                "any" => Ok(Connectivity::Any),
                "scale-up" | "scale_up" | "scaleup" => Ok(Connectivity::ScaleUp),
                "island" | "same-island" | "same_island" => Ok(Connectivity::Island),
                other => Err(serde::de::Error::custom(format!(
                    "unknown connectivity {other:?}: expected \"any\", \"scale-up\", \"island\" or {{\"min_gbps\": N}}"
                ))),
            },
        }
    }
}

/// The farthest an RDMA NIC may sit from each device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NicDistance {
    /// Through at most one PCIe switch.
    Pix,
    /// Through PCIe switches only, no host bridge.
    Pxb,
}

impl fmt::Display for NicDistance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NicDistance::Pix => "PIX",
            NicDistance::Pxb => "PXB",
        })
    }
}

impl Request {
    /// A request for `bundles` with no other constraint.
    pub fn new(bundles: Vec<Bundle>) -> Request {
        Request { bundles, ..Request::default() }
    }

    /// Parses a request from JSON text.
    pub fn from_json(text: &str) -> Result<Request, serde_json::Error> {
        serde_json::from_str(text)
    }
}
