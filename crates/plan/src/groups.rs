//! Sub-groups (`groups`): the request's bundles in consecutive groups of `size`, each inside
//! one domain of kind `same`. Sub-groups are placed in order; each tries the domains that may
//! hold it (those earlier sub-groups use first, for `pack`; never those, for `spread`; then best
//! fit) and keeps the first [`DOMAIN_CANDIDATES`] that do, best score first; when a later
//! sub-group finds no domain, the earlier ones' next choices are tried (depth first, at most
//! [`GROUP_TRIALS`] domain attempts a decision). Reads the state through [`Read`]; returns a
//! [`Proposal`].

use crate::packing;
use crate::proposal::{Ask, Proposal};
use crate::request::{Bundle, Groups, Strategy};
use crate::scope::{self, Scope, Unit};
use crate::state::Read;

/// Domain attempts one decision may make for its sub-groups, backtracking included.
pub const GROUP_TRIALS: usize = 256;
/// Feasible candidate domains a decision scores, in best-fit order (fewest free devices
/// first), before it takes the best of them: a decision never walks every domain of a large
/// cluster when the first few fit.
pub const DOMAIN_CANDIDATES: usize = 8;
/// Exact-search steps for one sub-group inside one domain, where the greedy search found
/// nothing.
const GROUP_EXACT_BUDGET: u32 = 2_000;

/// Places every sub-group of `ask` inside `unit`: the complete decision, or the deepest partial
/// one with `failed_bundle` the first bundle of the sub-group that found no domain.
pub(crate) fn place(r: &(impl Read + ?Sized), ask: &Ask<'_>, unit: &Unit, g: &Groups) -> Proposal {
    let mut budget = GROUP_TRIALS;
    match from(r, ask, unit, g, 0, Proposal::default(), &mut budget) {
        Ok(done) => done,
        Err(failed) => {
            let (gi, mut partial) = *failed;
            partial.failed_bundle = Some(gi * g.size as usize);
            partial
        }
    }
}

/// Places sub-groups `gi..` on top of `st`; on failure, the deepest sub-group that found no
/// domain and the decision up to it.
fn from(
    r: &(impl Read + ?Sized),
    ask: &Ask<'_>,
    unit: &Unit,
    g: &Groups,
    gi: usize,
    st: Proposal,
    budget: &mut usize,
) -> Result<Proposal, Box<(usize, Proposal)>> {
    let size = g.size as usize;
    if gi * size >= ask.request.bundles.len() {
        return Ok(st);
    }
    let mut trials = trials(r, ask, unit, g, gi, &st, budget);
    if trials.is_empty() {
        return Err(Box::new((gi, st)));
    }
    trials.sort_by(|a, b| b.total.total_cmp(&a.total));
    let mut deepest: Option<(usize, Proposal)> = None;
    for trial in trials {
        match from(r, ask, unit, g, gi + 1, trial, budget) {
            Ok(done) => return Ok(done),
            Err(failed) => {
                if deepest.as_ref().is_none_or(|(d, _)| failed.0 > *d) {
                    deepest = Some(*failed);
                }
            }
        }
        if *budget == 0 {
            break;
        }
    }
    Err(Box::new(deepest.unwrap_or((gi, st))))
}

/// The ways sub-group `gi` may be placed on top of `st`: one decision per domain that holds
/// it, at most [`DOMAIN_CANDIDATES`].
fn trials(
    r: &(impl Read + ?Sized),
    ask: &Ask<'_>,
    unit: &Unit,
    g: &Groups,
    gi: usize,
    st: &Proposal,
    budget: &mut usize,
) -> Vec<Proposal> {
    let request = ask.request;
    let size = g.size as usize;
    let chunk: Vec<usize> = (gi * size..(gi + 1) * size).collect();
    let order = packing::largest_first(ask, chunk.iter().copied());
    let need: u64 = chunk.iter().map(|&b| u64::from(request.bundles[b].count)).sum();
    let used = st.group_domains.clone();
    let mut scopes: Vec<Scope> = Vec::new();
    if g.replicas == Strategy::Pack {
        for s in &used {
            if !scopes.contains(s) {
                scopes.push(*s);
            }
        }
    }
    if g.same == "node" {
        let skip: Vec<usize> =
            used.iter().filter_map(|s| if let Scope::Node(n) = s { Some(*n) } else { None }).collect();
        scopes.extend(
            scope::representatives(r, ask.exclude, unit, need as u32, &skip)
                .into_iter()
                .map(|(n, _, _)| Scope::Node(n)),
        );
    } else {
        let bundles: Vec<&Bundle> = chunk.iter().map(|&b| &request.bundles[b]).collect();
        let spread = request.strategy == Strategy::Spread;
        let more = inner_domains(r, ask, unit, &g.same, &bundles, spread);
        scopes.extend(more.into_iter().map(Scope::Pair).filter(|s| !used.contains(s)));
    }
    let mut trials = Vec::new();
    for s in scopes {
        if trials.len() >= DOMAIN_CANDIDATES || *budget == 0 {
            break;
        }
        if g.replicas == Strategy::Spread && used.contains(&s) {
            continue;
        }
        *budget -= 1;
        let inner = scope::inner(r, unit, s);
        let mut trial = st.clone();
        if !packing::greedy(r, ask, &order, &inner, &mut trial) {
            // The greedy order can block itself inside a small domain: search it exactly.
            match packing::exact(r, ask, &order, &inner, st, GROUP_EXACT_BUDGET) {
                Some(exact) => trial = exact,
                None => continue,
            }
        }
        let value = scope::value(r, s);
        trial.domains.extend(chunk.iter().map(|&b| (b, gi, value.clone())));
        trial.group_domains.push(s);
        trials.push(trial);
    }
    trials
}

/// Domains of `kind` that may hold `bundles` (one sub-group) inside `outer`, in best-fit
/// order: an outer domain's inner ones come from the index's nesting, never from reading its
/// nodes; over the whole cluster, the kind's own order (bounded by the caller's candidate
/// count).
fn inner_domains(
    r: &(impl Read + ?Sized),
    ask: &Ask<'_>,
    outer: &Unit,
    kind: &str,
    bundles: &[&Bundle],
    spread: bool,
) -> Vec<usize> {
    let ix = r.index();
    let Some(key) = ix.key_id(kind) else { return Vec::new() };
    let need: u64 = bundles.iter().map(|b| u64::from(b.count)).sum();
    let fits = |p: usize| ix.pairs[p].free >= need && scope::may_hold(r, p, bundles, spread);
    let listed: Option<Vec<usize>> = match outer.scope {
        Scope::Pair(o) if ix.pairs[o].key == key => Some(vec![o]),
        Scope::Pair(o) => Some(ix.children(o, key).collect()),
        Scope::Node(n) => {
            let v = r.labels(n).get(kind);
            Some(v.and_then(|v| ix.pair_id(kind, v)).into_iter().collect())
        }
        Scope::All => None,
    };
    match listed {
        Some(list) => {
            let mut found: Vec<(u64, usize)> =
                list.into_iter().filter(|&p| fits(p)).map(|p| (ix.pairs[p].free, p)).collect();
            found.sort_unstable();
            found.into_iter().map(|(_, p)| p).collect()
        }
        None => ix.order[key]
            .range((need, 0)..)
            .map(|&(_, p)| p)
            .filter(|&p| fits(p))
            .filter(|&p| {
                // With a filter (select), the domain's first member stands for it; the
                // sub-group's own search checks every node it uses.
                outer.filter.is_empty()
                    || ix.pairs[p]
                        .classes
                        .values()
                        .flatten()
                        .next()
                        .is_some_and(|&n| scope::node_in(r, ask.exclude, n, outer))
            })
            .take(DOMAIN_CANDIDATES * 8)
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::request::Request;
    use crate::state::testkit::state;

    fn groups(size: u32, replicas: Strategy) -> Groups {
        Groups { size, same: "clique".into(), replicas }
    }

    #[test]
    fn each_sub_group_takes_one_domain() {
        let st = state(&[("a0", 4, "A"), ("a1", 4, "A"), ("b0", 4, "B"), ("b1", 4, "B")], &[]);
        let request = Request::new(vec![Bundle::new(4); 4]);
        let none = BTreeSet::new();
        let ask = Ask::new(&request, &none);
        let all = Unit { scope: Scope::All, filter: Vec::new() };
        let p = place(&st, &ask, &all, &groups(2, Strategy::Spread));
        assert_eq!(p.failed_bundle, None, "{p:?}");
        let by_group: Vec<(usize, String)> = p.domains.iter().map(|(_, g, v)| (*g, v.clone())).collect();
        assert_eq!(by_group.iter().filter(|(g, _)| *g == 0).map(|(_, v)| v).collect::<BTreeSet<_>>().len(), 1);
        assert_ne!(by_group[0].1, by_group[3].1, "spread: one domain each");
    }

    #[test]
    fn a_sub_group_without_a_domain_is_named_by_its_first_bundle() {
        let st = state(&[("a0", 4, "A"), ("b0", 4, "B")], &[]);
        let request = Request::new(vec![Bundle::new(4); 3]);
        let none = BTreeSet::new();
        let ask = Ask::new(&request, &none);
        let all = Unit { scope: Scope::All, filter: Vec::new() };
        let p = place(&st, &ask, &all, &groups(1, Strategy::Spread));
        assert_eq!(p.failed_bundle, Some(2));
        assert_eq!(p.placed.len(), 2);
    }
}
