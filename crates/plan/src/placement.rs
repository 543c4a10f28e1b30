//! What a decision says: each bundle's node and exact devices ([`Placement`]), built from a
//! [`Proposal`] and the state it was made on.

use serde::Serialize;

use crate::proposal::Proposal;
use crate::request::Request;
use crate::score::Breakdown;
use crate::state::Read;

/// Where one bundle goes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BundlePlacement {
    /// Index of the bundle in the request.
    pub bundle: usize,
    pub node: String,
    pub devices: Vec<PlacedDevice>,
    pub score: Breakdown,
    /// The sub-group the bundle belongs to, when the request has `groups`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<usize>,
    /// The value of the sub-group's domain (`nvlink_clique` value, or the node for `node`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlacedDevice {
    pub id: String,
    pub vendor: String,
    /// The vendor ordinal that visibility variables take.
    pub index: u32,
    /// `GPU3`, `TPU0`...
    pub label: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<u32>,
    /// The device's RDMA NIC (the nearest; ties spread, docs/placement.md) and its path class.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nic: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nic_path: Option<String>,
}

/// A decision: one entry per bundle, in request order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Placement {
    /// Set by [`crate::Planner::allocate`]; `0` for a plan that was not allocated.
    pub id: u64,
    pub bundles: Vec<BundlePlacement>,
    /// Sum of the bundles' scores (plus pack bonuses and bin-packing costs).
    pub score: f64,
    /// The lowest fabric tier whose one switch holds every bundle (`node` when one node holds
    /// them); absent when the cluster has no tiers or the bundles cross the top one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub span: Option<String>,
}

/// A node's device ids for a bundle, and the score the planner gives them.
pub type DeviceSet = (Vec<String>, Breakdown);

/// The placement a complete proposal describes.
pub(crate) fn from_proposal(r: &(impl Read + ?Sized), request: &Request, proposal: Proposal) -> Placement {
    let mut bundles: Vec<BundlePlacement> = proposal
        .placed
        .iter()
        .map(|&(b, node, mask, breakdown)| {
            let domain = proposal.domains.iter().find(|(d, _, _)| *d == b);
            BundlePlacement {
                bundle: b,
                node: r.name(node).to_owned(),
                devices: describe(r, node, mask),
                score: breakdown,
                group: domain.map(|(_, g, _)| *g),
                domain: domain.map(|(_, _, v)| v.clone()),
            }
        })
        .collect();
    bundles.sort_by_key(|b| b.bundle);
    debug_assert_eq!(bundles.len(), request.bundles.len());
    Placement { id: 0, bundles, score: proposal.total, span: None }
}

/// The devices of `mask` on `node`, as a placement names them.
pub(crate) fn describe(r: &(impl Read + ?Sized), node: usize, mask: u64) -> Vec<PlacedDevice> {
    r.topo(node)
        .devices
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, d)| PlacedDevice {
            id: d.id.clone(),
            vendor: d.vendor.clone(),
            index: d.index,
            label: d.label.clone(),
            numa_node: d.numa,
            nic: d.nic.as_ref().map(|(name, _, _)| name.clone()),
            nic_path: d.nic.as_ref().map(|(_, _, class)| class.clone()),
        })
        .collect()
}
