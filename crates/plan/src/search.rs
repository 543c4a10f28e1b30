//! The per-node search: which free devices of one node best satisfy one bundle. Every
//! constraint is a per-device filter or a pairwise compatibility, so a valid bundle is a clique
//! of the compatibility graph; small nodes are enumerated exactly.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::cluster::Topo;
use crate::request::{Bundle, Connectivity, NicDistance};
use crate::score::score;

/// Search steps per (node state, bundle), counted from the first step: past it the best found
/// so far is taken, or none ("infeasible, budget exhausted"). Exact for every node up to 16
/// devices (C(16, 8) = 12,870 subsets).
pub const SEARCH_BUDGET: u32 = 200_000;

/// Counts the steps of every search a planner runs, and whether one gave up empty-handed.
/// Atomics, so read-only paths (explanations) can count through `&Planner`.
#[derive(Debug, Default)]
pub(crate) struct Meter {
    steps: AtomicU64,
    exhausted: AtomicBool,
}

impl Meter {
    pub fn reset(&self) {
        self.steps.store(0, Ordering::Relaxed);
        self.exhausted.store(false, Ordering::Relaxed);
    }
    fn add(&self, steps: u32, exhausted_empty: bool) {
        self.steps.fetch_add(u64::from(steps), Ordering::Relaxed);
        if exhausted_empty {
            self.exhausted.store(true, Ordering::Relaxed);
        }
    }
    pub fn note_exhausted(&self) {
        self.exhausted.store(true, Ordering::Relaxed);
    }
    pub fn steps(&self) -> u64 {
        self.steps.load(Ordering::Relaxed)
    }
    /// Whether a search ran out of budget without finding any valid subset.
    pub fn exhausted(&self) -> bool {
        self.exhausted.load(Ordering::Relaxed)
    }
}

/// A bundle compiled against one topology.
#[derive(Debug, Clone)]
pub(crate) struct Prepared {
    /// Devices that pass the per-device filters (capability and NIC), free or not.
    pub eligible: u64,
    /// For each device, the devices it may share the bundle with.
    pub compat: Vec<u64>,
    pub count: u32,
    pub cpus: Option<u32>,
}

/// Which of the bundle's constraints apply (explanations relax them one by one).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stage {
    pub capability: bool,
    pub nic: bool,
    pub connectivity: bool,
    pub numa: bool,
    pub cpus: bool,
}

impl Stage {
    pub const ALL: Stage = Stage { capability: true, nic: true, connectivity: true, numa: true, cpus: true };
}

pub(crate) fn capable(topo: &Topo, bundle: &Bundle, i: usize) -> bool {
    let d = &topo.devices[i];
    let within = |list: &[String], value: Option<&str>| {
        list.is_empty() || value.is_some_and(|v| list.iter().any(|x| x.eq_ignore_ascii_case(v)))
    };
    within(&bundle.vendor, Some(&d.vendor))
        && within(&bundle.family, d.family.as_deref())
        && within(&bundle.sku, d.sku.as_deref())
        && bundle.min_memory_gb.is_none_or(|gb| d.memory_bytes.is_some_and(|m| m as f64 >= gb * 1e9))
        && bundle.dtypes.iter().all(|t| d.dtypes.iter().any(|x| x.eq_ignore_ascii_case(t)))
}

fn nic_ok(topo: &Topo, bundle: &Bundle, i: usize) -> bool {
    if bundle.nic.is_none() && bundle.nics.is_none() {
        return true;
    }
    let limit = match bundle.nic.unwrap_or(NicDistance::Pxb) {
        NicDistance::Pix => 0,
        NicDistance::Pxb => 1,
    };
    topo.devices[i].nics_within[limit] >= bundle.nics.unwrap_or(1)
}

pub(crate) fn prepare(topo: &Topo, bundle: &Bundle, stage: Stage) -> Prepared {
    let n = topo.len();
    let mut eligible = 0u64;
    for i in 0..n {
        let cap = !stage.capability || capable(topo, bundle, i);
        if cap && (!stage.nic || nic_ok(topo, bundle, i)) {
            eligible |= 1 << i;
        }
    }
    let compat = (0..n)
        .map(|i| {
            let mut c = topo.all & !(1u64 << i);
            if stage.connectivity {
                match bundle.connectivity {
                    Connectivity::Any => {}
                    Connectivity::ScaleUp => c &= topo.link[i],
                    Connectivity::Island => c &= topo.island[i],
                    Connectivity::MinGbps(min) => {
                        let mut ok = 0u64;
                        for j in 0..n {
                            if topo.gbps(i, j) >= min {
                                ok |= 1 << j;
                            }
                        }
                        c &= ok;
                    }
                }
            }
            if stage.numa && bundle.same_numa {
                c &= topo.numa_peers[i];
            }
            c
        })
        .collect();
    Prepared { eligible, compat, count: bundle.count, cpus: if stage.cpus { bundle.cpus } else { None } }
}

/// CPU cores on the NUMA nodes of `chosen`.
pub(crate) fn near_cpus(topo: &Topo, chosen: u64) -> u32 {
    let mut nodes: Vec<u32> = Vec::new();
    let mut rest = chosen;
    while rest != 0 {
        let d = rest.trailing_zeros() as usize;
        rest &= rest - 1;
        if let Some(numa) = topo.devices[d].numa {
            if !nodes.contains(&numa) {
                nodes.push(numa);
            }
        }
    }
    nodes.iter().map(|n| topo.numa_cpus.get(n).copied().unwrap_or(0)).sum()
}

/// The best valid subset of `free` for the bundle: its mask and score. Ties go to the subset
/// found first (lowest device indices), so the answer is deterministic. At most
/// [`SEARCH_BUDGET`] steps: past it, the best found so far (or `None`, noted in `meter`).
pub(crate) fn best(topo: &Topo, prep: &Prepared, free: u64, meter: &Meter) -> Option<(u64, f64)> {
    let cands = prep.eligible & free;
    if prep.count == 0 || cands.count_ones() < prep.count || !cpus_reachable(topo, prep, cands) {
        return None;
    }
    let mut state = Dfs { topo, prep, free, best: None, steps: 0, all: None };
    state.go(0, cands, prep.count);
    meter.add(state.steps, state.steps > SEARCH_BUDGET && state.best.is_none());
    state.best
}

/// Whether the NUMA nodes of `chosen` hold enough CPU cores for the bundle: a bound (adding
/// devices never removes NUMA nodes), so a search cut here misses nothing.
fn cpus_reachable(topo: &Topo, prep: &Prepared, chosen: u64) -> bool {
    prep.cpus.is_none_or(|cpus| near_cpus(topo, chosen) >= cpus)
}

/// Every valid subset of `free` for the bundle with its score, in enumeration order; `None`
/// past the search budget.
pub(crate) fn all(topo: &Topo, prep: &Prepared, free: u64, meter: &Meter) -> Option<Vec<(u64, f64)>> {
    let cands = prep.eligible & free;
    if prep.count == 0 || cands.count_ones() < prep.count || !cpus_reachable(topo, prep, cands) {
        return Some(Vec::new());
    }
    let mut state = Dfs { topo, prep, free, best: None, steps: 0, all: Some(Vec::new()) };
    state.go(0, cands, prep.count);
    meter.add(state.steps, false);
    if state.steps > SEARCH_BUDGET {
        return None;
    }
    state.all
}

struct Dfs<'a> {
    topo: &'a Topo,
    prep: &'a Prepared,
    free: u64,
    best: Option<(u64, f64)>,
    steps: u32,
    /// Collects every valid subset instead of the best one.
    all: Option<Vec<(u64, f64)>>,
}

impl Dfs<'_> {
    fn go(&mut self, chosen: u64, cands: u64, left: u32) {
        if left == 0 {
            if let Some(cpus) = self.prep.cpus {
                if near_cpus(self.topo, chosen) < cpus {
                    return;
                }
            }
            let s = score(self.topo, chosen, self.free).total;
            if let Some(all) = self.all.as_mut() {
                all.push((chosen, s));
                return;
            }
            if self.best.is_none_or(|(_, b)| s > b) {
                self.best = Some((chosen, s));
            }
            return;
        }
        if self.steps > SEARCH_BUDGET || !cpus_reachable(self.topo, self.prep, chosen | cands) {
            return;
        }
        let mut rest = cands;
        while rest != 0 && rest.count_ones() >= left {
            // Counted from the first step, found or not: an impossible bundle on a node with
            // many devices must not enumerate every subset.
            self.steps += 1;
            if self.steps > SEARCH_BUDGET {
                return;
            }
            let d = rest.trailing_zeros() as usize;
            rest &= rest - 1;
            self.go(chosen | 1 << d, rest & self.prep.compat[d], left - 1);
        }
    }
}

/// The largest valid subset of `free` (ignoring the CPU constraint): the nearest feasible
/// bundle when the requested count cannot be met.
pub(crate) fn largest(prep: &Prepared, free: u64, meter: &Meter) -> u64 {
    let mut best = 0u64;
    let mut steps = 0u32;
    grow(prep, 0, prep.eligible & free, &mut best, &mut steps);
    meter.add(steps, false);
    best
}

fn grow(prep: &Prepared, chosen: u64, cands: u64, best: &mut u64, steps: &mut u32) {
    if chosen.count_ones() > best.count_ones() {
        *best = chosen;
    }
    let mut rest = cands;
    while rest != 0 {
        if chosen.count_ones() + rest.count_ones() <= best.count_ones() || *steps > SEARCH_BUDGET {
            return;
        }
        *steps += 1;
        let d = rest.trailing_zeros() as usize;
        rest &= rest - 1;
        grow(prep, chosen | 1 << d, rest & prep.compat[d], best, steps);
    }
}
