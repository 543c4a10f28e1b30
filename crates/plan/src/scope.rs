//! Where a decision may look: the whole cluster, the nodes of one label value (a domain), or
//! one node, narrowed by labels every node must carry (`select`, an outer domain); and the
//! nodes of a scope, one per interchangeable class.

use std::collections::{BTreeMap, BTreeSet};

use crate::index::Class;
use crate::request::Request;
use crate::state::Read;

/// Every node, the nodes of one label value (a pair of the index), or one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    All,
    Pair(usize),
    Node(usize),
}

/// A scope and the labels every node used must also carry.
#[derive(Debug, Clone)]
pub(crate) struct Unit {
    pub scope: Scope,
    pub filter: Vec<(String, String)>,
}

/// The selected scope: one named node, the smallest selected label value (the rest of
/// `select` as a filter), or everything. `None` when a selected value exists nowhere.
pub(crate) fn selected(r: &(impl Read + ?Sized), request: &Request) -> Option<Unit> {
    if let Some(name) = request.select.get("node") {
        let n = r.node_id(name)?;
        let filter = request.select.iter().filter(|(k, _)| *k != "node").map(|(k, v)| (k.clone(), v.clone()));
        return Some(Unit { scope: Scope::Node(n), filter: filter.collect() });
    }
    let ix = r.index();
    let mut smallest: Option<(usize, &String)> = None;
    for (k, v) in &request.select {
        let p = ix.pair_id(k, v)?;
        let size: usize = ix.pairs[p].classes.values().map(BTreeSet::len).sum();
        if smallest.is_none_or(|(q, _)| size < ix.pairs[q].classes.values().map(BTreeSet::len).sum()) {
            smallest = Some((p, k));
        }
    }
    let filter: Vec<(String, String)> = request
        .select
        .iter()
        .filter(|(k, _)| smallest.is_none_or(|(_, sk)| *k != sk))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Some(Unit { scope: smallest.map_or(Scope::All, |(p, _)| Scope::Pair(p)), filter })
}

/// Whether `node` is in `unit` (and not `exclude`d).
pub(crate) fn node_in(r: &(impl Read + ?Sized), exclude: &BTreeSet<usize>, node: usize, unit: &Unit) -> bool {
    if exclude.contains(&node) {
        return false;
    }
    let labels = r.labels(node);
    let ix = r.index();
    let scoped = match unit.scope {
        Scope::All => true,
        Scope::Node(n) => n == node,
        Scope::Pair(p) => {
            let pair = &ix.pairs[p];
            labels.get(&ix.keys[pair.key]) == Some(&pair.value)
        }
    };
    scoped
        && unit.filter.iter().all(|(k, v)| match k.as_str() {
            "node" => r.name(node) == v,
            _ => labels.get(k) == Some(v),
        })
}

/// The classes of a scope's nodes (for a single node, its own class).
pub(crate) fn classes(r: &(impl Read + ?Sized), unit: &Unit) -> Vec<Class> {
    let ix = r.index();
    match unit.scope {
        Scope::All => ix.all.keys().copied().collect(),
        Scope::Pair(p) => ix.pairs[p].classes.keys().copied().collect(),
        Scope::Node(n) => vec![Class { topo: r.topo_id(n), free: r.free(n), whole: false }],
    }
}

/// One node per class of a unit (the lowest-numbered that is in it and not in `skip`), with
/// its free devices and bin-packing standing; only classes with at least `need` free devices.
pub(crate) fn representatives(
    r: &(impl Read + ?Sized),
    exclude: &BTreeSet<usize>,
    unit: &Unit,
    need: u32,
    skip: &[usize],
) -> Vec<(usize, u64, bool)> {
    let ix = r.index();
    let classes: &BTreeMap<Class, BTreeSet<usize>> = match unit.scope {
        Scope::All => &ix.all,
        Scope::Pair(p) => &ix.pairs[p].classes,
        Scope::Node(n) => {
            return if skip.contains(&n) || !node_in(r, exclude, n, unit) || r.free(n).count_ones() < need {
                Vec::new()
            } else {
                vec![(n, r.free(n), ix.whole(r.label_set(n)))]
            };
        }
    };
    let mut out = Vec::new();
    for (class, members) in classes {
        if class.free.count_ones() < need {
            continue;
        }
        if let Some(&m) = members.iter().find(|&&m| !skip.contains(&m) && node_in(r, exclude, m, unit)) {
            out.push((m, class.free, class.whole));
        }
    }
    out
}

/// The unit of an inner domain (`scope`) inside `outer`: the domain's nodes that also pass the
/// outer unit.
pub(crate) fn inner(r: &(impl Read + ?Sized), outer: &Unit, scope: Scope) -> Unit {
    let ix = r.index();
    let mut filter = outer.filter.clone();
    if let Scope::Pair(p) = outer.scope {
        let pair = &ix.pairs[p];
        if scope != Scope::Pair(p) {
            filter.push((ix.keys[pair.key].clone(), pair.value.clone()));
        }
    }
    if let Scope::Node(n) = outer.scope {
        filter.push(("node".into(), r.name(n).to_owned()));
    }
    Unit { scope, filter }
}

/// A scope's value as a placement names it: the node, the domain's value, or empty.
pub(crate) fn value(r: &(impl Read + ?Sized), scope: Scope) -> String {
    match scope {
        Scope::Node(n) => r.name(n).to_owned(),
        Scope::Pair(p) => r.index().pairs[p].value.clone(),
        Scope::All => String::new(),
    }
}

/// Whether a domain (a pair) may hold `bundles` at all, from its counts alone: a node with as
/// many free devices as the largest bundle, and for `spread` as many such nodes as bundles. A
/// necessary condition, so skipping a domain that fails it loses nothing.
pub(crate) fn may_hold(
    r: &(impl Read + ?Sized),
    pair: usize,
    bundles: &[&crate::request::Bundle],
    spread: bool,
) -> bool {
    let pair = &r.index().pairs[pair];
    let largest = bundles.iter().map(|b| b.count).max().unwrap_or(0);
    let smallest = bundles.iter().map(|b| b.count).min().unwrap_or(0);
    // Bundles larger than half the roomiest node cannot share a node: each needs its own.
    let roomiest = pair.roomiest();
    let big: Vec<u32> = bundles.iter().map(|b| b.count).filter(|&c| 2 * c > roomiest).collect();
    let big_ok = big.iter().min().is_none_or(|&c| pair.nodes_with(c) as usize >= big.len());
    pair.nodes_with(largest) >= 1 && big_ok && (!spread || pair.nodes_with(smallest) as usize >= bundles.len())
}
