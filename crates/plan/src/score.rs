//! The placement score: what the planner maximises for one bundle on one node. Documented in
//! docs/placement.md; the weights are the constants below.

use serde::Serialize;

use crate::cluster::Topo;

/// Weight of the mean pairwise GB/s (the minimum counts fully).
pub const W_MEAN_GBPS: f64 = 0.1;
/// Bonus when every device of the bundle sits on one NUMA node.
pub const W_SAME_NUMA: f64 = 100.0;
/// Bonus per device with an RDMA NIC at PIX, scaled by the bundle's size (all PIX = 50).
pub const W_NIC_PIX: f64 = 50.0;
/// The same for PXB.
pub const W_NIC_PXB: f64 = 25.0;
/// Penalty per free device left behind in a scale-up island the bundle breaks into.
pub const W_BROKEN: f64 = 10.0;
/// Penalty per free device left on the node (best fit: fill nodes, keep empty ones whole).
pub const W_LEFTOVER: f64 = 1.0;

/// The parts of one bundle's score, and their weighted sum.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Breakdown {
    /// Lowest GB/s between two devices of the bundle (0 for a single device).
    pub min_pair_gbps: f64,
    pub mean_pair_gbps: f64,
    pub same_numa: bool,
    /// Devices with an RDMA NIC at PIX, and at PXB.
    pub nic_pix: u32,
    pub nic_pxb: u32,
    /// Free devices left in the scale-up islands the bundle takes devices from.
    pub broken: u32,
    /// Free devices left on the node.
    pub leftover: u32,
    pub total: f64,
}

pub(crate) fn score(topo: &Topo, chosen: u64, free: u64) -> Breakdown {
    let n = topo.len();
    let mut min = f64::INFINITY;
    let mut sum = 0.0;
    let mut pairs = 0u32;
    let mut islands = 0u64;
    let mut numa: Option<Option<u32>> = None;
    let mut same_numa = true;
    let (mut pix, mut pxb) = (0u32, 0u32);
    let mut rest = chosen;
    while rest != 0 {
        let a = rest.trailing_zeros() as usize;
        rest &= rest - 1;
        let mut later = rest;
        while later != 0 {
            let b = later.trailing_zeros() as usize;
            later &= later - 1;
            let g = topo.bw[a * n + b];
            min = min.min(g);
            sum += g;
            pairs += 1;
        }
        islands |= topo.island[a];
        let dev = &topo.devices[a];
        match numa {
            None => numa = Some(dev.numa),
            Some(first) => same_numa &= first == dev.numa,
        }
        match dev.nic.as_ref().map(|(_, rank, _)| *rank) {
            Some(0) => pix += 1,
            Some(1) => pxb += 1,
            _ => {}
        }
    }
    same_numa &= matches!(numa, Some(Some(_)));
    let (min, mean) = if pairs == 0 { (0.0, 0.0) } else { (min, sum / f64::from(pairs)) };
    let k = f64::from(chosen.count_ones().max(1));
    let broken = (islands & free & !chosen).count_ones();
    let leftover = (free & !chosen).count_ones();
    let total = min
        + W_MEAN_GBPS * mean
        + if same_numa { W_SAME_NUMA } else { 0.0 }
        + W_NIC_PIX * f64::from(pix) / k
        + W_NIC_PXB * f64::from(pxb) / k
        - W_BROKEN * f64::from(broken)
        - W_LEFTOVER * f64::from(leftover);
    Breakdown {
        min_pair_gbps: min,
        mean_pair_gbps: mean,
        same_numa,
        nic_pix: pix,
        nic_pxb: pxb,
        broken,
        leftover,
        total,
    }
}
