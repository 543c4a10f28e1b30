//! The domain walk and tier caps: candidate units (the request's `same` domains with enough
//! free devices, in best-fit order; each node class's representative for `same: node`; or the
//! selected scope alone), the first [`DOMAIN_CANDIDATES`] that hold the request scored and the
//! best kept; a `within` tier cap tries its tier, and for a soft cap each higher one, then
//! anywhere. Reads the state through [`Read`]; returns a [`Proposal`], or what the explanation
//! needs when nothing fits.

use std::collections::BTreeSet;

use crate::explain::Partial;
use crate::groups::{self, DOMAIN_CANDIDATES};
use crate::index::Class;
use crate::packing::{self, EXACT_BUDGET, EXACT_MAX_NODES};
use crate::proposal::{Ask, Proposal};
use crate::request::{Bundle, Request, Strategy};
use crate::scope::{self, Scope, Unit};
use crate::state::Read;
use crate::PlanError;

/// Why a decision found nothing: the request as tried (a tier cap's own tier), how many units
/// it tried, its best partial decision, and whether a search ran out of budget meanwhile.
#[derive(Debug)]
pub(crate) struct Failed {
    pub request: Box<Request>,
    pub tried: usize,
    pub partial: Option<Partial>,
    pub exhausted: bool,
}

/// The decision for `ask`, its `within` cap included.
pub(crate) fn decide(r: &(impl Read + ?Sized), ask: &Ask<'_>) -> Result<Result<Proposal, Failed>, PlanError> {
    let request = ask.request;
    let Some(within) = &request.within else { return Ok(level(r, ask)) };
    let tiers = r.tiers();
    let tier = crate::fabric::resolve_tier(tiers, &within.tier)
        .map(str::to_owned)
        .or_else(|| r.index().key_id(&within.tier).map(|_| within.tier.clone()))
        .ok_or_else(|| {
            let known: Vec<String> = tiers.to_vec();
            PlanError::Unknown {
                field: "tier".into(),
                suggestion: crate::names::suggest(&within.tier, known.iter().map(String::as_str)),
                value: within.tier.clone(),
                known,
            }
        })?;
    // Hard: that tier only. Soft: that tier, then each higher one, then anywhere.
    let mut levels = vec![Some(tier.clone())];
    if !within.hard {
        let from = tiers.iter().position(|t| *t == tier).map_or(tiers.len(), |i| i + 1);
        levels.extend(tiers[from..].iter().cloned().map(Some));
        levels.push(None);
    }
    let at = |same: Option<String>| {
        let mut r = request.clone();
        r.within = None;
        r.same = same;
        r
    };
    let mut first: Option<Failed> = None;
    let mut anywhere: Option<Proposal> = None;
    for (k, tier_level) in levels.iter().enumerate() {
        let req = at(tier_level.clone());
        match level(r, &Ask::new(&req, ask.exclude)) {
            Ok(p) => return Ok(Ok(p)),
            Err(f) if first.is_none() => first = Some(f),
            Err(_) => {}
        }
        // Soft: once the cap's own tier fails, ask the whole cluster before the tiers in
        // between; when it fails too, none of them can hold the gang.
        if k == 0 && levels.len() > 2 {
            let req = at(request.same.clone());
            match level(r, &Ask::new(&req, ask.exclude)) {
                Ok(p) => anywhere = Some(p),
                Err(_) => break,
            }
        }
        if tier_level.is_none() {
            break;
        }
    }
    if let Some(p) = anywhere {
        return Ok(Ok(p));
    }
    Ok(Err(first.expect("a tier cap tries at least its own tier")))
}

/// Plans with the request's own `same` (or none): candidate units in best-fit order, the first
/// [`DOMAIN_CANDIDATES`] that hold the request scored, the best taken.
fn level(r: &(impl Read + ?Sized), ask: &Ask<'_>) -> Result<Proposal, Failed> {
    let request = ask.request;
    let failed = |tried, partial| Failed {
        request: Box::new(request.clone()),
        tried,
        partial,
        exhausted: r.meter().exhausted(),
    };
    if impossible(r, ask) {
        return Err(failed(0, None));
    }
    let need: u64 = request.bundles.iter().map(|b| u64::from(b.count)).sum();
    let mut best: Option<Proposal> = None;
    let mut best_partial: Option<(Unit, Proposal)> = None;
    let mut feasible = 0usize;
    let mut tried = 0usize;
    let small = few_units(r, request);
    let mut cursor = None;
    'units: loop {
        let units = units(r, ask, need, &mut cursor, DOMAIN_CANDIDATES * 4);
        if units.is_empty() {
            break;
        }
        for unit in units {
            tried += 1;
            let mut attempt = place(r, ask, &unit);
            // The exact search is for small problems: few candidate domains, few nodes in each.
            if request.bundles.len() > 1 && request.groups.is_none() && small {
                let order = packing::largest_first(ask, 0..request.bundles.len());
                if let Some(exact) = packing::exact(r, ask, &order, &unit, &Proposal::default(), EXACT_BUDGET) {
                    if attempt.failed_bundle.is_some() || exact.total > attempt.total {
                        attempt = exact;
                    }
                }
            }
            if attempt.failed_bundle.is_none() {
                feasible += 1;
                if best.as_ref().is_none_or(|b| attempt.total > b.total) {
                    best = Some(attempt);
                }
                if feasible >= DOMAIN_CANDIDATES {
                    break 'units;
                }
            } else if best_partial.as_ref().is_none_or(|(_, p)| attempt.placed.len() > p.placed.len()) {
                best_partial = Some((unit, attempt));
            }
        }
    }
    if let Some(attempt) = best {
        return Ok(attempt);
    }
    let partial = best_partial.map(|(unit, attempt)| Partial {
        placed: attempt.placed.len(),
        holder: match unit.scope {
            Scope::Node(node) => r.name(node).to_owned(),
            Scope::Pair(p) => {
                let ix = r.index();
                format!("{}={}", ix.keys[ix.pairs[p].key], ix.pairs[p].value)
            }
            Scope::All => String::new(),
        },
    });
    Err(failed(tried, partial))
}

/// Places the request inside one unit: its sub-groups one by one when it has `groups`, else
/// its bundles greedily, largest first.
fn place(r: &(impl Read + ?Sized), ask: &Ask<'_>, unit: &Unit) -> Proposal {
    match &ask.request.groups {
        None => {
            let mut st = Proposal::default();
            let order = packing::largest_first(ask, 0..ask.request.bundles.len());
            packing::greedy(r, ask, &order, unit, &mut st);
            st
        }
        Some(g) => groups::place(r, ask, unit, g),
    }
}

/// Whether some bundle asks for more than any selected node holds: more devices than its free
/// ones, or more CPU cores than all its NUMA nodes together. Reads classes only.
pub(crate) fn impossible(r: &(impl Read + ?Sized), ask: &Ask<'_>) -> bool {
    let request = ask.request;
    let Some(unit) = scope::selected(r, request) else { return true };
    let classes: Vec<Class> = scope::classes(r, &unit);
    let ix = r.index();
    // More devices than the scope has free (its filter aside: an upper bound).
    let free: u64 = match unit.scope {
        Scope::All => ix.all.iter().map(|(c, m)| u64::from(c.free.count_ones()) * m.len() as u64).sum(),
        Scope::Pair(p) => ix.pairs[p].free,
        Scope::Node(n) => u64::from(r.free(n).count_ones()),
    };
    let need: u64 = request.bundles.iter().map(|b| u64::from(b.count)).sum();
    need > free
        || request.bundles.iter().any(|b| {
            !classes.iter().any(|c| {
                let cores: u32 = r.topo_by_id(c.topo).numa_cpus.values().sum();
                c.free.count_ones() >= b.count && b.cpus.is_none_or(|want| cores >= want)
            })
        })
}

/// Candidate units for a request, in best-fit order, from `cursor` on, at most `limit`: the
/// domains of kind `same` with enough free devices, each node class's representative for
/// `same: node`, or the selected scope alone. The cursor moves past what was returned, so a
/// decision reads only as many domains as it tries.
fn units(
    r: &(impl Read + ?Sized),
    ask: &Ask<'_>,
    need: u64,
    cursor: &mut Option<(u64, usize)>,
    limit: usize,
) -> Vec<Unit> {
    let request = ask.request;
    let Some(base) = scope::selected(r, request) else { return Vec::new() };
    let first = cursor.is_none();
    let ix = r.index();
    match (request.same.as_deref(), base.scope) {
        (_, Scope::Node(_)) | (None, _) => {
            *cursor = Some((u64::MAX, usize::MAX));
            if first {
                vec![base]
            } else {
                Vec::new()
            }
        }
        (Some("node"), _) => {
            *cursor = Some((u64::MAX, usize::MAX));
            if !first {
                return Vec::new();
            }
            scope::representatives(r, ask.exclude, &base, need as u32, &[])
                .into_iter()
                .map(|(n, _, _)| Unit { scope: Scope::Node(n), filter: base.filter.clone() })
                .collect()
        }
        (Some(kind), _) => {
            let Some(key) = ix.key_id(kind) else { return Vec::new() };
            let from = cursor.unwrap_or((need, 0));
            let mut out = Vec::new();
            // Sub-groups need not share a node: only the largest bundle bounds the domain.
            let bundles: Vec<&Bundle> = request.bundles.iter().collect();
            let spread = request.strategy == Strategy::Spread && request.groups.is_none();
            for &(free, p) in ix.order[key].range(from..) {
                *cursor = Some((free, p + 1));
                if !scope::may_hold(r, p, &bundles, spread) {
                    continue;
                }
                let mut filter = base.filter.clone();
                if let Scope::Pair(sp) = base.scope {
                    if ix.pairs[sp].key == key {
                        if sp != p {
                            continue;
                        }
                    } else {
                        filter.push((ix.keys[ix.pairs[sp].key].clone(), ix.pairs[sp].value.clone()));
                    }
                }
                out.push(Unit { scope: Scope::Pair(p), filter });
                if out.len() >= limit {
                    break;
                }
            }
            if out.is_empty() {
                *cursor = Some((u64::MAX, usize::MAX));
            }
            out
        }
    }
}

/// Whether the request has at most [`EXACT_MAX_NODES`] candidate units (the exact search's
/// first condition).
fn few_units(r: &(impl Read + ?Sized), request: &Request) -> bool {
    let ix = r.index();
    match request.same.as_deref() {
        None => true,
        Some("node") => ix.all.len() <= EXACT_MAX_NODES,
        Some(kind) => ix.key_id(kind).is_none_or(|k| ix.order[k].len() <= EXACT_MAX_NODES),
    }
}

/// The lowest tier holding every node of a decision (`node` for one node); `None` when they
/// cross the top tier.
pub(crate) fn span(r: &(impl Read + ?Sized), nodes: &BTreeSet<usize>) -> Option<String> {
    let nodes: Vec<usize> = nodes.iter().copied().collect();
    match r.distance_of(&nodes) as usize {
        0 => Some("node".into()),
        d if d <= r.tiers().len() => Some(r.tiers()[d - 1].clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Request;
    use crate::state::testkit::state;

    #[test]
    fn the_walk_takes_the_best_fitting_domain_and_reports_failures_unexplained() {
        // Clique A has 2 free devices of 8, clique B 8: a 2-device gang goes to A (best fit).
        let st = state(&[("a0", 4, "A"), ("a1", 4, "A"), ("b0", 4, "B"), ("b1", 4, "B")], &[("a0", 4), ("a1", 2)]);
        let mut request = Request::new(vec![Bundle::new(1), Bundle::new(1)]);
        request.same = Some("clique".into());
        let none = BTreeSet::new();
        let p = decide(&st, &Ask::new(&request, &none)).unwrap().unwrap();
        assert!(p.placed.iter().all(|&(_, n, _, _)| n == 1), "{p:?}");
        // Three bundles of 3 in one clique of 4-device nodes: none holds them (each needs its
        // own node); the failure carries the request as tried, for the explanation.
        let mut request = Request::new(vec![Bundle::new(3); 3]);
        request.same = Some("clique".into());
        let failed = decide(&st, &Ask::new(&request, &none)).unwrap().unwrap_err();
        assert_eq!(*failed.request, request);
        assert!(failed.partial.is_none_or(|p| p.placed < 3));
    }

    #[test]
    fn impossible_reads_only_the_classes() {
        let st = state(&[("a", 4, "A")], &[("a", 1)]);
        let none = BTreeSet::new();
        assert!(impossible(&st, &Ask::new(&Request::new(vec![Bundle::new(4)]), &none)));
        assert!(!impossible(&st, &Ask::new(&Request::new(vec![Bundle::new(3)]), &none)));
    }
}
