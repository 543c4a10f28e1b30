//! Packing bundles into one unit (a domain, a node or the cluster): greedily, each bundle to the
//! best (node, devices) given what the decision already took, and exactly for small units (every
//! valid device set of each bundle in turn, within a step budget). Both read the state through
//! [`Read`] and extend a [`Proposal`].

use crate::proposal::{Ask, Placed, Proposal};
use crate::request::Strategy;
use crate::scope::{self, Scope, Unit};
use crate::score::score;
use crate::search;
use crate::state::Read;

/// Bonus for placing a bundle on a node an earlier bundle of the same `pack` request uses.
pub const W_PACK: f64 = 20.0;

/// Requests with at most this many candidate domains, of at most this many nodes each, also get
/// the exact multi-bundle search.
pub const EXACT_MAX_NODES: usize = 8;
/// Steps (partial and complete placements) the exact search may take before it gives up (the
/// greedy answer stands). Counted at every step, not only at complete placements: a request
/// that cannot fit reaches none, and must still stop.
pub(crate) const EXACT_BUDGET: u32 = 100_000;

/// The request's bundles, largest first (the order both searches place them in).
pub(crate) fn largest_first(ask: &Ask<'_>, bundles: impl Iterator<Item = usize>) -> Vec<usize> {
    let mut order: Vec<usize> = bundles.collect();
    order.sort_by_key(|&b| std::cmp::Reverse(ask.request.bundles[b].count));
    order
}

/// Greedy inside one unit: `order`'s bundles, each to the best (node, devices) given what
/// earlier bundles of the decision took. False (and `failed_bundle` set) when one fits
/// nowhere.
pub(crate) fn greedy(r: &(impl Read + ?Sized), ask: &Ask<'_>, order: &[usize], unit: &Unit, st: &mut Proposal) -> bool {
    let request = ask.request;
    for &b in order {
        let bundle = &request.bundles[b];
        // Nodes this decision already uses, then one node per class.
        let mut cands: Vec<(usize, u64, bool, bool)> = st
            .overrides
            .iter()
            .filter(|(n, _)| scope::node_in(r, ask.exclude, *n, unit))
            .map(|&(n, f)| (n, f, false, true))
            .collect();
        let skip: Vec<usize> = st.overrides.iter().map(|(n, _)| *n).collect();
        cands.extend(
            scope::representatives(r, ask.exclude, unit, bundle.count, &skip)
                .into_iter()
                .map(|(n, f, w)| (n, f, w, false)),
        );
        // (score with the pack bonus and bin-packing cost, node, devices)
        let mut best: Option<(f64, usize, u64)> = None;
        for (node, free, whole, used) in cands {
            if used && request.strategy == Strategy::Spread {
                continue;
            }
            let topo = r.topo_id(node);
            let found = if used {
                let prep = r.prepared(topo, bundle, ask.keys[b]);
                search::best(r.topo_by_id(topo), &prep, free, r.meter())
            } else {
                r.best_cached(topo, free, bundle, ask.keys[b])
            };
            let Some((mask, s)) = found else { continue };
            let bin = r.index().bin_of(r.label_set(node));
            let breaks = whole && bin.is_some_and(|d| !st.touched.contains(&d));
            let s = s + if used { W_PACK } else { 0.0 } - if breaks { r.binpack_weight() } else { 0.0 };
            let better = match best {
                None => true,
                Some((bs, bn, _)) => s > bs || (s == bs && node < bn),
            };
            if better {
                best = Some((s, node, mask));
            }
        }
        let Some((s, node, mask)) = best else {
            st.failed_bundle = Some(b);
            return false;
        };
        st.take(r, b, node, mask, s);
    }
    true
}

/// State of the exact search.
struct Exact {
    best: Option<(Placed, f64)>,
    /// Steps taken, and the most it may take.
    leaves: u32,
    budget: u32,
    overrides: Vec<(usize, u64)>,
    placed: Placed,
}

/// The exact search for `order`'s bundles inside a small unit (at most [`EXACT_MAX_NODES`]
/// nodes), on top of decision `st` (whose nodes count as used: the pack bonus), with the same
/// sequential objective as the greedy search; the result extends `st`. `None` for a larger
/// unit, past the budget, or when nothing fits.
pub(crate) fn exact(
    r: &(impl Read + ?Sized),
    ask: &Ask<'_>,
    order: &[usize],
    unit: &Unit,
    st: &Proposal,
    budget: u32,
) -> Option<Proposal> {
    let nodes: Vec<usize> = match unit.scope {
        Scope::Node(n) => vec![n],
        Scope::All | Scope::Pair(_) => {
            let ix = r.index();
            let classes = match unit.scope {
                Scope::Pair(p) => &ix.pairs[p].classes,
                _ => &ix.all,
            };
            let mut nodes = Vec::new();
            for members in classes.values() {
                nodes.extend(members.iter().copied().filter(|&n| scope::node_in(r, ask.exclude, n, unit)));
                if nodes.len() > EXACT_MAX_NODES {
                    return None;
                }
            }
            nodes.sort_unstable();
            nodes
        }
    };
    let mut ex = Exact { best: None, leaves: 0, budget, overrides: st.overrides.clone(), placed: Vec::new() };
    step(r, ask, order, &nodes, 0.0, &mut ex);
    if ex.leaves > budget {
        return None;
    }
    let (placed, total) = ex.best?;
    // Extend `st` as the greedy search would have: devices, domains, bin-packing costs.
    let mut out = st.clone();
    for (b, node, mask, breakdown) in placed {
        let ix = r.index();
        let d = ix.bin_of(r.label_set(node));
        let whole = ix.whole(r.label_set(node));
        if let Some(d) = d.filter(|d| !out.touched.contains(d)) {
            if whole {
                out.total -= r.binpack_weight();
            }
            out.touched.push(d);
        }
        let free = out.free(r, node);
        match out.overrides.iter_mut().find(|(n, _)| *n == node) {
            Some(entry) => entry.1 &= !mask,
            None => out.overrides.push((node, free & !mask)),
        }
        out.placed.push((b, node, mask, breakdown));
    }
    out.total += total;
    Some(out)
}

fn step(r: &(impl Read + ?Sized), ask: &Ask<'_>, order: &[usize], nodes: &[usize], total: f64, ex: &mut Exact) {
    ex.leaves += 1;
    let Some((&b, rest)) = order.split_first() else {
        if ex.best.as_ref().is_none_or(|(_, best)| total > *best) {
            ex.best = Some((ex.placed.clone(), total));
        }
        return;
    };
    if ex.leaves > ex.budget {
        return;
    }
    let request = ask.request;
    for &node in nodes {
        let used = ex.overrides.iter().any(|(n, _)| *n == node);
        if used && request.strategy == Strategy::Spread {
            continue;
        }
        let free = ex.overrides.iter().rev().find(|(n, _)| *n == node).map_or(r.free(node), |(_, f)| *f);
        let topo = r.topo_id(node);
        let prep = r.prepared(topo, &request.bundles[b], ask.keys[b]);
        let Some(options) = search::all(r.topo_by_id(topo), &prep, free, r.meter()) else {
            ex.leaves = ex.budget + 1;
            return;
        };
        for (mask, s) in options {
            let breakdown = score(r.topo_by_id(topo), mask, free);
            ex.overrides.push((node, free & !mask));
            ex.placed.push((b, node, mask, breakdown));
            let bonus = if used { W_PACK } else { 0.0 };
            step(r, ask, rest, nodes, total + s + bonus, ex);
            ex.placed.pop();
            ex.overrides.pop();
            if ex.leaves > ex.budget {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::request::{Bundle, Request};
    use crate::state::testkit::state;

    fn all() -> Unit {
        Unit { scope: Scope::All, filter: Vec::new() }
    }

    #[test]
    fn greedy_proposes_without_taking_and_packs_onto_used_nodes() {
        let st = state(&[("a", 4, "A"), ("b", 8, "B")], &[("b", 4)]);
        let request = Request::new(vec![Bundle::new(2), Bundle::new(2)]);
        let none = BTreeSet::new();
        let ask = Ask::new(&request, &none);
        let mut p = Proposal::default();
        assert!(greedy(&st, &ask, &largest_first(&ask, 0..2), &all(), &mut p));
        // Both bundles on one node (the pack bonus), and the state is untouched.
        let nodes: BTreeSet<usize> = p.placed.iter().map(|&(_, n, _, _)| n).collect();
        assert_eq!(nodes.len(), 1, "{p:?}");
        assert_eq!(st.free(0).count_ones() + st.free(1).count_ones(), 8);
        let n = *nodes.iter().next().unwrap();
        assert_eq!(p.free(&st, n).count_ones() + 4, st.free(n).count_ones());
    }

    #[test]
    fn greedy_names_the_bundle_that_fits_nowhere() {
        let st = state(&[("a", 4, "A")], &[]);
        let request = Request::new(vec![Bundle::new(3), Bundle::new(3)]);
        let none = BTreeSet::new();
        let ask = Ask::new(&request, &none);
        let mut p = Proposal::default();
        assert!(!greedy(&st, &ask, &[0, 1], &all(), &mut p));
        assert_eq!(p.failed_bundle, Some(1));
        assert_eq!(p.placed.len(), 1);
    }

    #[test]
    fn exact_covers_small_units_and_refuses_large_ones() {
        let st = state(&[("a", 4, "A"), ("b", 4, "A")], &[]);
        let request = Request::new(vec![Bundle::new(4), Bundle::new(4)]);
        let none = BTreeSet::new();
        let ask = Ask::new(&request, &none);
        let found = exact(&st, &ask, &[0, 1], &all(), &Proposal::default(), EXACT_BUDGET).unwrap();
        let nodes: BTreeSet<usize> = found.placed.iter().map(|&(_, n, _, _)| n).collect();
        assert_eq!(nodes.len(), 2);
        let nine: Vec<(&str, usize, &str)> =
            ["n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8"].iter().map(|&n| (n, 1, "A")).collect();
        // Nine nodes of distinct free counts... of one class each: more than EXACT_MAX_NODES.
        let st = state(&nine, &[]);
        let request = Request::new(vec![Bundle::new(1)]);
        let ask = Ask::new(&request, &none);
        assert!(exact(&st, &ask, &[0], &all(), &Proposal::default(), EXACT_BUDGET).is_none());
    }
}
