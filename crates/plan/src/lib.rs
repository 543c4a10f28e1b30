//! Topology-aware placement for accel: pure functions from a cluster (named [`Machine`]s) and a
//! [`Request`] (bundles of devices with constraints) to exact devices on exact nodes.
//!
//! The planner never reads the host, the network or the environment: everything it knows is in
//! the [`Cluster`] it was given. Decisions are deterministic. The score it maximises is in
//! [`score`] and docs/placement.md.
//!
//! [`Machine`]: accel_model::Machine

mod cluster;
mod domains;
mod explain;
pub mod fabric;
mod groups;
mod index;
pub mod names;
mod packing;
mod placement;
mod planner;
mod proposal;
mod repair;
mod request;
mod rng;
mod scope;
pub mod score;
mod search;
mod state;

use std::fmt;

use serde::Serialize;

pub use cluster::{
    machine_domains, node_domains, BinPack, Cluster, ClusterNode, HealthPolicy, MachineRef, UnknownHealth,
    MAX_DEVICES_PER_NODE, W_BINPACK,
};
pub use groups::DOMAIN_CANDIDATES;
pub use packing::W_PACK;
pub use placement::{BundlePlacement, DeviceSet, PlacedDevice, Placement};
pub use planner::Planner;
pub use request::{Bundle, Connectivity, Groups, NicDistance, Request, Strategy, Within};
pub use rng::XorShift;
pub use score::Breakdown;
pub use search::SEARCH_BUDGET;

/// Why planning failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error("invalid request: {0}")]
    Request(String),
    #[error("invalid cluster: {0}")]
    Cluster(String),
    #[error("unknown node {0:?}")]
    UnknownNode(String),
    #[error("node {node:?} has no device {device:?}")]
    UnknownDevice { node: String, device: String },
    #[error("unknown allocation {0}")]
    UnknownAllocation(u64),
    #[error("{0}")]
    Infeasible(Infeasible),
    /// A name no registry entry, plugin or node of the cluster knows: a typo, not a shortage.
    #[error("unknown {field} {value:?}{}", hint(suggestion, known))]
    Unknown { field: String, value: String, suggestion: Option<String>, known: Vec<String> },
}

fn hint(suggestion: &Option<String>, known: &[String]) -> String {
    match suggestion {
        Some(s) => format!("; did you mean {s:?}?"),
        None if known.is_empty() => String::new(),
        None => {
            let shown: Vec<&str> = known.iter().take(12).map(String::as_str).collect();
            let more = if known.len() > 12 { ", ..." } else { "" };
            format!("; known: {}{more}", shown.join(", "))
        }
    }
}

/// A request that cannot be met: the constraint that failed and the nearest feasible alternative.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Infeasible {
    /// The bundle that cannot be placed, when one bundle alone is the problem.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bundle: Option<usize>,
    /// `select`, `count`, `capability`, `free`, `nic`, `connectivity`, `same_numa`, `cpus`,
    /// `same`, `spread` or `capacity`.
    pub constraint: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nearest: Option<String>,
    /// A search ran out of its step budget ([`SEARCH_BUDGET`]) without finding a valid set: a
    /// placement may exist that the bounded search did not reach.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub budget_exhausted: bool,
}

impl fmt::Display for Infeasible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(n) = &self.nearest {
            write!(f, "; nearest feasible: {n}")?;
        }
        Ok(())
    }
}
