//! The one objective both sides are scored by: each bundle's intrinsic quality (the terms of its
//! score [`Breakdown`] that do not depend on what else is free) plus the pack bonus.

use std::collections::BTreeSet;

use accel_plan::score::{W_MEAN_GBPS, W_NIC_PIX, W_NIC_PXB, W_SAME_NUMA};
use accel_plan::{Breakdown, Placement, W_PACK};

/// A bundle's intrinsic quality: the score terms that depend only on its devices (bandwidth,
/// NUMA, NICs). The state-dependent terms (`leftover`, `broken`, domain bin-packing) are left out:
/// they depend on the order bundles are placed in, which an assignment does not have.
pub fn quality(b: &Breakdown, devices: u32) -> f64 {
    let k = f64::from(devices.max(1));
    b.min_pair_gbps
        + W_MEAN_GBPS * b.mean_pair_gbps
        + if b.same_numa { W_SAME_NUMA } else { 0.0 }
        + W_NIC_PIX * f64::from(b.nic_pix) / k
        + W_NIC_PXB * f64::from(b.nic_pxb) / k
}

/// The objective of a whole assignment, given each bundle's node, device count and breakdown:
/// the sum of the bundles' qualities plus `W_PACK` for every bundle beyond the first on a node
/// (`W_PACK * (bundles - nodes used)`), the planner's pack bonus.
pub fn objective<'a>(bundles: impl IntoIterator<Item = (&'a str, u32, &'a Breakdown)>) -> f64 {
    let mut nodes = BTreeSet::new();
    let mut count = 0usize;
    let mut total = 0.0;
    for (node, devices, b) in bundles {
        nodes.insert(node);
        count += 1;
        total += quality(b, devices);
    }
    total + W_PACK * (count - nodes.len()) as f64
}

/// The objective of one of the planner's placements.
pub fn of_placement(p: &Placement) -> f64 {
    objective(p.bundles.iter().map(|b| (b.node.as_str(), b.devices.len() as u32, &b.score)))
}

/// Whether two objective values are equal within `1e-6` relative (absolute near zero).
pub fn same(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * a.abs().max(b.abs()).max(1.0)
}
