//! Why a request cannot be met: relax the constraints of the failing bundle one at a time, in a
//! fixed order, and name the first one that no node can satisfy, with the nearest feasible
//! alternative (the largest bundle that fits, and the placement without that constraint).

use crate::cluster::Topo;
use crate::request::{Bundle, Connectivity, Request};
use crate::search::{self, Meter, Stage};
use crate::{Infeasible, PlanError};

/// What the explanation asks of the planner. The planner implements it and calls [`explain`];
/// this module never names the planner, so the two do not import each other.
pub(crate) trait View {
    fn topo(&self, node: usize) -> &Topo;
    fn node_name(&self, node: usize) -> &str;
    fn free_mask(&self, node: usize) -> u64;
    fn meter(&self) -> &Meter;
    /// A one-line summary of the placement of `request`, if it can be placed.
    fn plan_summary(&mut self, request: &Request) -> Option<String>;
    /// How many bundles and nodes the placement of `request` takes, if it can be placed.
    fn plan_size(&mut self, request: &Request) -> Option<(usize, usize)>;
}

/// The best partial decision the planner reached: how many bundles it placed, and, when the
/// request asks for one `same` domain, which node or domain value held them.
#[derive(Debug)]
pub(crate) struct Partial {
    pub placed: usize,
    pub holder: String,
}

/// The checks in the order they are applied; each stage adds one constraint.
const STAGES: [&str; 8] = ["count", "capability", "health", "free", "nic", "connectivity", "same_numa", "cpus"];

fn stage(s: usize) -> Stage {
    Stage { capability: s >= 1, nic: s >= 4, connectivity: s >= 5, numa: s >= 6, cpus: s >= 7 }
}

fn without(name: &str) -> Stage {
    let mut st = Stage::ALL;
    match name {
        "nic" => st.nic = false,
        "connectivity" => st.connectivity = false,
        "same_numa" => st.numa = false,
        "cpus" => st.cpus = false,
        "capability" => st.capability = false,
        _ => {}
    }
    st
}

fn labels(p: &impl View, node: usize, mask: u64) -> String {
    let topo = p.topo(node);
    let names: Vec<&str> =
        topo.devices.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, d)| d.label.as_str()).collect();
    names.join(",")
}

fn capability_text(b: &Bundle) -> String {
    let mut parts = Vec::new();
    if !b.vendor.is_empty() {
        parts.push(format!("vendor in [{}]", b.vendor.join(", ")));
    }
    if !b.family.is_empty() {
        parts.push(format!("family in [{}]", b.family.join(", ")));
    }
    if !b.sku.is_empty() {
        parts.push(format!("sku in [{}]", b.sku.join(", ")));
    }
    if let Some(gb) = b.min_memory_gb {
        parts.push(format!("memory >= {gb} GB"));
    }
    if !b.dtypes.is_empty() {
        parts.push(format!("dtypes [{}]", b.dtypes.join(", ")));
    }
    parts.join(", ")
}

fn condition(b: &Bundle, name: &str) -> String {
    match name {
        "count" => "accelerators".into(),
        "capability" => format!("accelerators with {}", capability_text(b)),
        "health" => "healthy accelerators that match".into(),
        "free" => "free accelerators that match".into(),
        "nic" => match b.nics.unwrap_or(1) {
            1 => format!(
                "free matching accelerators, each with an RDMA NIC at {} or closer",
                b.nic.unwrap_or(crate::NicDistance::Pxb)
            ),
            n => format!(
                "free matching accelerators, each with {n} RDMA NICs at {} or closer",
                b.nic.unwrap_or(crate::NicDistance::Pxb)
            ),
        },
        "connectivity" => match b.connectivity {
            Connectivity::ScaleUp => "free accelerators all joined by scale-up links".into(),
            Connectivity::Island => "free accelerators in one scale-up island".into(),
            Connectivity::MinGbps(g) => format!("free accelerators with at least {g} GB/s between every pair"),
            Connectivity::Any => "free accelerators".into(),
        },
        "same_numa" => "free suitable accelerators on one NUMA node".into(),
        _ => format!("free suitable accelerators whose NUMA nodes hold {} CPU cores", b.cpus.unwrap_or(0)),
    }
}

/// The best single placement of `bundle` over `nodes` under `st`, as text.
fn best_text(p: &impl View, nodes: &[usize], bundle: &Bundle, st: Stage) -> Option<String> {
    let mut best: Option<(f64, usize, u64)> = None;
    for &n in nodes {
        let prep = search::prepare(p.topo(n), bundle, st);
        if let Some((mask, s)) = search::best(p.topo(n), &prep, p.free_mask(n), p.meter()) {
            if best.is_none_or(|(bs, _, _)| s > bs) {
                best = Some((s, n, mask));
            }
        }
    }
    best.map(|(_, n, mask)| {
        let sc = crate::score::score(p.topo(n), mask, p.free_mask(n));
        format!("{} ({}), min pairwise {} GB/s", p.node_name(n), labels(p, n, mask), sc.min_pair_gbps)
    })
}

/// Diagnoses one bundle on its own; `None` when it fits by itself.
fn diagnose(p: &impl View, nodes: &[usize], b: usize, bundle: &Bundle) -> Option<Infeasible> {
    for (s, &name) in STAGES.iter().enumerate() {
        let st = stage(s);
        let mut best: Option<(usize, u64)> = None;
        let mut feasible = false;
        for &n in nodes {
            let topo = p.topo(n);
            // Health first, then what is free (the free mask never holds an unhealthy device).
            let free = match s {
                0 | 1 => topo.all,
                2 => topo.all & topo.usable,
                _ => p.free_mask(n),
            };
            let prep = search::prepare(topo, bundle, st);
            if name == "cpus" {
                feasible |= search::best(topo, &prep, free, p.meter()).is_some();
                continue;
            }
            let got = search::largest(&prep, free, p.meter());
            if best.is_none_or(|(_, m)| got.count_ones() > m.count_ones()) {
                best = Some((n, got));
            }
        }
        let ok = if name == "cpus" { feasible } else { best.is_some_and(|(_, m)| m.count_ones() >= bundle.count) };
        if ok {
            continue;
        }
        let mut message = format!("bundle {b}: no node has {} {}", bundle.count, condition(bundle, name));
        let mut nearest = Vec::new();
        if let Some((n, m)) = best.filter(|(_, m)| *m != 0) {
            let what = if matches!(name, "count" | "capability" | "health") { "" } else { " available" };
            message += &format!("; best{what}: {} has {} ({})", p.node_name(n), m.count_ones(), labels(p, n, m));
        }
        // The nearest feasible bundle: the largest that meets every constraint on free devices.
        if name != "cpus" {
            let mut part: Option<(usize, u64)> = None;
            for &n in nodes {
                let got = search::largest(&search::prepare(p.topo(n), bundle, Stage::ALL), p.free_mask(n), p.meter());
                if part.is_none_or(|(_, m)| got.count_ones() > m.count_ones()) {
                    part = Some((n, got));
                }
            }
            if let Some((n, m)) = part.filter(|(_, m)| *m != 0) {
                nearest.push(format!("count {} on {} ({})", m.count_ones(), p.node_name(n), labels(p, n, m)));
            }
        }
        if s >= 4 {
            if let Some(text) = best_text(p, nodes, bundle, without(name)) {
                nearest.push(format!("without the {name} constraint: {text}"));
            }
        }
        if name == "free" {
            nearest.push("wait for a release: the devices exist but are in use".into());
        }
        if name == "health" {
            let sick: Vec<String> = nodes
                .iter()
                .flat_map(|&n| {
                    let topo = p.topo(n);
                    topo.devices.iter().enumerate().filter(|(i, _)| topo.usable & (1 << i) == 0).map(move |(_, d)| {
                        format!("{} {} ({})", p.node_name(n), d.label, d.health.as_deref().unwrap_or("?"))
                    })
                })
                .take(5)
                .collect();
            nearest.push(format!("repair or replace the devices left out as unhealthy: {}", sick.join(", ")));
        }
        return Some(Infeasible {
            bundle: Some(b),
            constraint: name.to_owned(),
            message,
            nearest: if nearest.is_empty() { None } else { Some(nearest.join("; or ")) },
            budget_exhausted: false,
        });
    }
    None
}

/// Why `request` cannot be met on any of the `units` candidate domains the planner tried,
/// given its best partial decision; `reps` holds one node per interchangeable class among the
/// nodes the decision could use (`select`, exclusions), empty when there are none.
pub(crate) fn explain(
    p: &mut impl View,
    request: &Request,
    reps: &[usize],
    units: usize,
    best_partial: Option<Partial>,
) -> PlanError {
    if reps.is_empty() {
        let want: Vec<String> = request.select.iter().map(|(k, v)| format!("{k}={v}")).collect();
        return PlanError::Infeasible(Infeasible {
            bundle: None,
            constraint: "select".into(),
            message: format!("no node carries {}", want.join(", ")),
            nearest: None,
            budget_exhausted: false,
        });
    }
    for (b, bundle) in request.bundles.iter().enumerate() {
        // A gang repeats one bundle: diagnosing it once says all there is.
        if request.bundles[..b].contains(bundle) {
            continue;
        }
        if let Some(why) = diagnose(p, reps, b, bundle) {
            return PlanError::Infeasible(why);
        }
    }
    together(p, request, units, best_partial)
}

/// The constraints that bind a request's bundles together, in the order the rule tries them:
/// each with the request without it.
fn binding(request: &Request) -> Vec<(&'static str, Request)> {
    let mut out = Vec::new();
    if request.groups.is_some() {
        let mut r = request.clone();
        r.groups = None;
        out.push(("groups", r));
    }
    if request.same.is_some() {
        let mut r = request.clone();
        r.same = None;
        out.push(("same", r));
    }
    if request.strategy == crate::Strategy::Spread {
        let mut r = request.clone();
        r.strategy = crate::Strategy::Pack;
        out.push(("spread", r));
    }
    out
}

/// Every bundle fits alone; the one rule for what keeps them from fitting together. The first
/// binding constraint (`groups`, `same`, `spread`) whose removal alone lets the request fit is
/// named, with that placement as the nearest; when only removing them all does, the first is
/// named, with that placement. When the bundles do not fit together even free of every binding
/// constraint, the constraint is `capacity`, and the nearest is the largest part that fits (whole
/// sub-groups, else the first bundles).
fn together(p: &mut impl View, request: &Request, units: usize, best_partial: Option<Partial>) -> PlanError {
    let n = request.bundles.len();
    let placed = best_partial.as_ref().map_or(0, |b| b.placed);
    let binding = binding(request);
    let mut found: Option<(&str, String)> = None;
    for (name, relaxed) in &binding {
        if let Some(nearest) = relaxed_nearest(p, name, request, relaxed) {
            found = Some((name, nearest));
            break;
        }
    }
    if found.is_none() && binding.len() > 1 {
        let mut all = request.clone();
        all.groups = None;
        all.same = None;
        all.strategy = crate::Strategy::Pack;
        let names: Vec<&str> = binding.iter().map(|(n, _)| *n).collect();
        if let Some(pl) = p.plan_summary(&all) {
            found = Some((binding[0].0, format!("without {}: {pl}", names.join(", "))));
        }
    }
    let Some((constraint, nearest)) = found else { return capacity(p, request, placed) };
    let message = match constraint {
        "groups" => {
            let g = request.groups.as_ref().expect("groups binds only when given");
            let devices: u32 = request.bundles.iter().take(g.size as usize).map(|b| b.count).sum();
            let spread = if g.replicas == crate::Strategy::Spread { " (spread: one domain each)" } else { "" };
            let size = g.size.max(1) as usize;
            format!(
                "no {} domain is left for every sub-group of {} bundles ({devices} devices){spread}; \
                 {} of {} sub-groups placed",
                g.same,
                g.size,
                placed / size,
                n / size
            )
        }
        "same" => {
            let kind = request.same.as_deref().unwrap_or("");
            let holder = best_partial.as_ref().map(|b| b.holder.clone()).unwrap_or_default();
            let holder =
                if holder.is_empty() { String::new() } else { format!("; the best, {holder}, holds {placed}") };
            format!("no {kind} domain can hold all {n} bundles together ({units} candidates){holder}")
        }
        _ => format!("the {n} bundles need {n} different nodes; only {placed} could be placed"),
    };
    PlanError::Infeasible(Infeasible {
        bundle: None,
        constraint: constraint.to_owned(),
        message,
        nearest: Some(nearest),
        budget_exhausted: false,
    })
}

/// The nearest alternative without one binding constraint, if the request fits without it.
fn relaxed_nearest(p: &mut impl View, name: &str, request: &Request, relaxed: &Request) -> Option<String> {
    match name {
        "groups" => {
            let (bundles, nodes) = p.plan_size(relaxed)?;
            Some(format!("without groups: {bundles} bundles on {nodes} nodes"))
        }
        "same" => {
            let pl = p.plan_summary(relaxed)?;
            Some(format!("without same={}: {pl}", request.same.as_deref().unwrap_or("")))
        }
        _ => p.plan_summary(relaxed).map(|pl| format!("with pack instead of spread: {pl}")),
    }
}

/// `capacity`: the bundles fit one at a time but not together, even free of every binding
/// constraint. The nearest is the largest part of the request that fits as asked: the most whole
/// sub-groups, else the first bundles (found by bisection: a part of a part that fits fits).
fn capacity(p: &mut impl View, request: &Request, placed: usize) -> PlanError {
    let n = request.bundles.len();
    let need: u64 = request.bundles.iter().map(|b| u64::from(b.count)).sum();
    let size = request.groups.as_ref().map_or(1, |g| g.size.max(1) as usize);
    let part = |k: usize| {
        let mut r = request.clone();
        r.bundles.truncate(k * size);
        r
    };
    // The most whole units (sub-groups, or bundles) that fit: bisection over 1..n/size.
    let (mut lo, mut hi) = (0usize, (n / size).saturating_sub(1));
    let mut best: Option<(usize, usize)> = None;
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        match p.plan_size(&part(mid)) {
            Some((_, nodes)) => {
                best = Some((mid, nodes));
                lo = mid;
            }
            None => hi = mid - 1,
        }
    }
    let nearest = best.map(|(k, nodes)| {
        let on = if nodes == 1 { "1 node".to_owned() } else { format!("{nodes} nodes") };
        match &request.groups {
            Some(_) => format!("{k} of {} sub-groups ({} bundles) fit, on {on}", n / size, k * size),
            None => format!("the first {k} of {n} bundles fit, on {on}"),
        }
    });
    PlanError::Infeasible(Infeasible {
        bundle: None,
        constraint: "capacity".into(),
        message: format!("the {n} bundles ({need} devices) fit one at a time but not together; {placed} placed"),
        nearest,
        budget_exhausted: false,
    })
}
