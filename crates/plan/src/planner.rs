//! The planner: cluster state (free devices per node), plan, allocate and release. Nodes with
//! the same topology, labels and free devices form a group that is searched once.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use accel_model::Machine;
use serde::Serialize;

use crate::cluster::{machine_domains, Cluster, HealthPolicy, MachineRef, Node, Topo, Topos};
use crate::explain::{self, Partial, View};
use crate::request::{Bundle, Request, Strategy};
use crate::score::{score, Breakdown};
use crate::search::{self, Meter, Prepared, Stage};
use crate::PlanError;

/// Bonus for placing a bundle on a node an earlier bundle of the same `pack` request uses.
pub const W_PACK: f64 = 20.0;

/// Where one bundle goes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BundlePlacement {
    /// Index of the bundle in the request.
    pub bundle: usize,
    pub node: String,
    pub devices: Vec<PlacedDevice>,
    pub score: Breakdown,
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
    /// The closest RDMA NIC and its path class.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nic: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nic_path: Option<String>,
}

/// A decision: one entry per bundle, in request order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Placement {
    /// Set by [`Planner::allocate`]; `0` for a plan that was not allocated.
    pub id: u64,
    pub bundles: Vec<BundlePlacement>,
    /// Sum of the bundles' scores (plus pack bonuses).
    pub score: f64,
}

/// Requests with at most this many candidate domains, of at most this many nodes each, also get
/// the exact multi-bundle search.
pub const EXACT_MAX_NODES: usize = 8;
/// Complete placements the exact search may score before it gives up (the greedy answer stands).
const EXACT_BUDGET: u32 = 20_000;

/// State of the exact multi-bundle search.
struct Exact {
    best: Option<Attempt>,
    leaves: u32,
    overrides: Vec<(usize, u64)>,
    placed: Vec<(usize, usize, u64, Breakdown)>,
}

/// A cached search: the best set and its score, and whether the search ran out of budget.
type Searched = (Option<(u64, f64)>, bool);

/// Nodes that are interchangeable for the planner: same labels, topology and free devices.
type GroupKey = (usize, usize, u64);

/// Allocation state over one cluster. Decisions are deterministic: the same cluster, state and
/// request always give the same placement.
#[derive(Debug)]
pub struct Planner {
    topos: Topos,
    nodes: Vec<Node>,
    free: Vec<u64>,
    by_name: HashMap<String, usize>,
    label_sets: Vec<BTreeMap<String, String>>,
    groups: BTreeMap<GroupKey, BTreeSet<usize>>,
    allocations: BTreeMap<u64, Vec<(usize, u64)>>,
    next_id: u64,
    prepared: HashMap<(usize, u64), Arc<Prepared>>,
    /// Best set per (topology, free devices, bundle), and whether that search ran out of budget.
    cache: HashMap<(usize, u64, u64), Searched>,
    /// Steps of the searches of the current (last) plan.
    meter: Meter,
    /// How health counts ([`Topo::usable`]): unusable devices are never free.
    health: HealthPolicy,
    /// The names requests may use here, and how many topologies they already cover.
    known: crate::names::Known,
    known_topos: usize,
}

/// A partial decision inside one candidate domain.
pub(crate) struct Attempt {
    pub placed: Vec<(usize, usize, u64, Breakdown)>,
    pub total: f64,
    pub failed_bundle: Option<usize>,
}

/// What bundles may be placed on: a set of node groups (a domain, or the whole cluster), or
/// one node.
#[derive(Debug, Clone)]
pub(crate) enum Unit {
    Groups(Vec<GroupKey>),
    Node(usize),
}

impl Planner {
    /// A planner over `cluster`. Everything it needs about a device (dtypes, memory, link
    /// bandwidth) is on the machines: discovery resolved the SKUs.
    pub fn new(cluster: &Cluster) -> Result<Planner, PlanError> {
        let mut planner = Planner::empty();
        planner.health = cluster.health;
        let self_policy = cluster.health;
        let mut shared: HashMap<&str, (usize, BTreeMap<String, String>)> = HashMap::new();
        for node in &cluster.nodes {
            let machine = cluster.machine(node)?;
            let (topo, domains) = match &node.machine {
                MachineRef::Name(name) => {
                    if let Some(found) = shared.get(name.as_str()) {
                        found.clone()
                    } else {
                        let t = planner.topos.intern(Topo::new(machine, self_policy)?);
                        let entry = (t, machine_domains(machine));
                        shared.insert(name.as_str(), entry.clone());
                        entry
                    }
                }
                MachineRef::Inline(m) => (planner.topos.intern(Topo::new(m, self_policy)?), machine_domains(m)),
            };
            let mut labels = domains;
            labels.extend(node.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
            planner.push_node(node.name.clone(), labels, topo)?;
            let ids: Vec<&str> = node.allocated.iter().map(String::as_str).collect();
            planner.mark_used(&node.name, &ids)?;
        }
        Ok(planner)
    }

    fn empty() -> Planner {
        Planner {
            topos: Topos::default(),
            nodes: Vec::new(),
            free: Vec::new(),
            by_name: HashMap::new(),
            label_sets: Vec::new(),
            groups: BTreeMap::new(),
            allocations: BTreeMap::new(),
            next_id: 1,
            prepared: HashMap::new(),
            cache: HashMap::new(),
            meter: Meter::default(),
            health: HealthPolicy::default(),
            known: crate::names::Known::new(),
            known_topos: 0,
        }
    }

    /// Adds one node (labels override the machine's own domains).
    pub fn add_node(
        &mut self,
        name: &str,
        labels: &BTreeMap<String, String>,
        machine: &Machine,
    ) -> Result<(), PlanError> {
        let topo = self.topos.intern(Topo::new(machine, self.health)?);
        let mut all = machine_domains(machine);
        all.extend(labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        self.push_node(name.to_owned(), all, topo)
    }

    fn push_node(&mut self, name: String, labels: BTreeMap<String, String>, topo: usize) -> Result<(), PlanError> {
        if self.by_name.contains_key(&name) {
            return Err(PlanError::Cluster(format!("two nodes are named {name:?}")));
        }
        let label_id = match self.label_sets.iter().position(|l| *l == labels) {
            Some(i) => i,
            None => {
                self.known.add_keys(labels.keys());
                self.label_sets.push(labels);
                self.label_sets.len() - 1
            }
        };
        for t in &self.topos.list[self.known_topos..] {
            self.known.add_devices(&t.devices);
        }
        self.known_topos = self.topos.list.len();
        let idx = self.nodes.len();
        let free = self.topos.list[topo].all & self.topos.list[topo].usable;
        self.by_name.insert(name.clone(), idx);
        self.nodes.push(Node { name, labels: label_id, topo });
        self.free.push(free);
        self.groups.entry((label_id, topo, free)).or_default().insert(idx);
        Ok(())
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    fn node_index(&self, name: &str) -> Result<usize, PlanError> {
        self.by_name.get(name).copied().ok_or_else(|| PlanError::UnknownNode(name.to_owned()))
    }

    fn mask_of(&self, node: usize, ids: &[&str]) -> Result<u64, PlanError> {
        let topo = &self.topos.list[self.nodes[node].topo];
        let mut mask = 0u64;
        for id in ids {
            let i = topo.devices.iter().position(|d| d.id == *id || d.label == *id).ok_or_else(|| {
                PlanError::UnknownDevice { node: self.nodes[node].name.clone(), device: (*id).to_owned() }
            })?;
            mask |= 1 << i;
        }
        Ok(mask)
    }

    fn set_free(&mut self, node: usize, free: u64) {
        let free = free & self.topos.list[self.nodes[node].topo].usable;
        let key = (self.nodes[node].labels, self.nodes[node].topo, self.free[node]);
        if let Some(set) = self.groups.get_mut(&key) {
            set.remove(&node);
            if set.is_empty() {
                self.groups.remove(&key);
            }
        }
        self.free[node] = free;
        self.groups.entry((self.nodes[node].labels, self.nodes[node].topo, free)).or_default().insert(node);
    }

    /// Marks devices (ids or labels such as `GPU3`) of a node as used by work the planner did
    /// not place.
    pub fn mark_used(&mut self, node: &str, devices: &[&str]) -> Result<(), PlanError> {
        let i = self.node_index(node)?;
        let mask = self.mask_of(i, devices)?;
        self.set_free(i, self.free[i] & !mask);
        Ok(())
    }

    /// Sets exactly which devices of a node are free (to follow an outside source of truth,
    /// such as Ray's per-device resources).
    pub fn sync_free(&mut self, node: &str, free_devices: &[&str]) -> Result<(), PlanError> {
        let i = self.node_index(node)?;
        let mask = self.mask_of(i, free_devices)?;
        self.set_free(i, mask);
        Ok(())
    }

    /// Free device ids of a node.
    pub fn free_devices(&self, node: &str) -> Result<Vec<String>, PlanError> {
        let i = self.node_index(node)?;
        let topo = &self.topos.list[self.nodes[i].topo];
        Ok(topo
            .devices
            .iter()
            .enumerate()
            .filter(|(d, _)| self.free[i] & (1 << d) != 0)
            .map(|(_, d)| d.id.clone())
            .collect())
    }

    /// The short labels (`GPU3`) of devices of a node, given by id.
    pub fn labels(&self, node: &str, devices: &[&str]) -> Result<Vec<String>, PlanError> {
        let i = self.node_index(node)?;
        let topo = &self.topos.list[self.nodes[i].topo];
        let mask = self.mask_of(i, devices)?;
        Ok(topo
            .devices
            .iter()
            .enumerate()
            .filter(|(d, _)| mask & (1 << d) != 0)
            .map(|(_, d)| d.label.clone())
            .collect())
    }

    /// Plans and commits: the devices stay taken until [`Planner::release`].
    pub fn allocate(&mut self, request: &Request) -> Result<Placement, PlanError> {
        let mut placement = self.plan(request)?;
        let id = self.next_id;
        self.next_id += 1;
        let mut taken = Vec::new();
        for b in &placement.bundles {
            let node = self.by_name[&b.node];
            let ids: Vec<&str> = b.devices.iter().map(|d| d.id.as_str()).collect();
            let mask = self.mask_of(node, &ids)?;
            self.set_free(node, self.free[node] & !mask);
            taken.push((node, mask));
        }
        self.allocations.insert(id, taken);
        placement.id = id;
        Ok(placement)
    }

    /// Frees the devices of an allocation.
    pub fn release(&mut self, id: u64) -> Result<(), PlanError> {
        let taken = self.allocations.remove(&id).ok_or(PlanError::UnknownAllocation(id))?;
        for (node, mask) in taken {
            self.set_free(node, self.free[node] | mask);
        }
        Ok(())
    }

    /// The score the planner gives `devices` of `node` (for any bundle), in the node's current state
    /// (the devices must be free). For tests and comparisons with other placers.
    pub fn score_of(&self, node: &str, devices: &[&str]) -> Result<Breakdown, PlanError> {
        let i = self.node_index(node)?;
        let mask = self.mask_of(i, devices)?;
        Ok(score(&self.topos.list[self.nodes[i].topo], mask, self.free[i]))
    }

    fn bundle_key(bundle: &Bundle) -> u64 {
        let mut h = DefaultHasher::new();
        serde_json::to_string(bundle).unwrap_or_default().hash(&mut h);
        h.finish()
    }

    pub(crate) fn prepared(&mut self, topo: usize, bundle: &Bundle, key: u64) -> Arc<Prepared> {
        self.prepared
            .entry((topo, key))
            .or_insert_with(|| Arc::new(search::prepare(&self.topos.list[topo], bundle, Stage::ALL)))
            .clone()
    }

    fn best_cached(&mut self, topo: usize, free: u64, bundle: &Bundle, key: u64) -> Option<(u64, f64)> {
        if let Some(&(hit, exhausted)) = self.cache.get(&(topo, free, key)) {
            if exhausted {
                self.meter.note_exhausted();
            }
            return hit;
        }
        let prep = self.prepared(topo, bundle, key);
        let before = self.meter.steps();
        let result = search::best(&self.topos.list[topo], &prep, free, &self.meter);
        let exhausted = result.is_none() && self.meter.steps() - before > u64::from(search::SEARCH_BUDGET);
        if self.cache.len() > 1_000_000 {
            self.cache.clear();
        }
        self.cache.insert((topo, free, key), (result, exhausted));
        result
    }

    /// Search steps the last [`Planner::plan`] (or [`Planner::allocate`]) took, explanation
    /// included. Each search stops at [`search::SEARCH_BUDGET`] steps, so this is bounded by
    /// the request's size, never by the number of subsets.
    pub fn last_search_steps(&self) -> u64 {
        self.meter.steps()
    }

    /// Plans without committing. Fails with an explanation naming the constraint that cannot
    /// be met and the nearest feasible alternative. Every search is bounded; when one ran out of
    /// budget and nothing was found, the explanation says so (`budget_exhausted`).
    pub fn plan(&mut self, request: &Request) -> Result<Placement, PlanError> {
        self.meter.reset();
        self.plan_bounded(request)
    }

    pub(crate) fn plan_bounded(&mut self, request: &Request) -> Result<Placement, PlanError> {
        validate(request)?;
        self.known.check(request)?;
        let units = self.units(request, None);
        // Constraints no selected node can meet even when empty go straight to the explanation.
        if self.impossible(request) {
            return Err(explain::explain(self, request, units.len(), None));
        }
        let keys: Vec<u64> = request.bundles.iter().map(Planner::bundle_key).collect();
        let mut best: Option<Attempt> = None;
        let mut best_partial: Option<(usize, Attempt)> = None;
        for (u, unit) in units.iter().enumerate() {
            let mut attempt = self.attempt(request, &keys, unit);
            // The exact search is for small problems: few candidate domains, few nodes in each.
            if request.bundles.len() > 1 && units.len() <= EXACT_MAX_NODES {
                if let Some(exact) = self.exhaustive(request, &keys, unit) {
                    if attempt.failed_bundle.is_some() || exact.total > attempt.total {
                        attempt = exact;
                    }
                }
            }
            if attempt.failed_bundle.is_none() {
                if best.as_ref().is_none_or(|b| attempt.total > b.total) {
                    best = Some(attempt);
                }
            } else if best_partial.as_ref().is_none_or(|(_, p)| attempt.placed.len() > p.placed.len()) {
                best_partial = Some((u, attempt));
            }
        }
        if let Some(attempt) = best {
            return Ok(self.placement(request, attempt));
        }
        let exhausted = self.meter.exhausted();
        let partial = best_partial.map(|(u, attempt)| Partial {
            placed: attempt.placed.len(),
            holder: match (&units[u], request.same.as_deref()) {
                (Unit::Node(node), _) => self.nodes[*node].name.clone(),
                (Unit::Groups(groups), Some(kind)) => groups
                    .first()
                    .and_then(|g| self.label_value(g.0, kind))
                    .map(|v| format!("{kind}={v}"))
                    .unwrap_or_default(),
                (Unit::Groups(_), None) => String::new(),
            },
        });
        let mut err = explain::explain(self, request, units.len(), partial);
        if let PlanError::Infeasible(why) = &mut err {
            if exhausted && !why.budget_exhausted {
                why.budget_exhausted = true;
                why.message += &format!(
                    " (infeasible, budget exhausted: a search stopped after {} steps without a valid set)",
                    search::SEARCH_BUDGET
                );
            }
        }
        Err(err)
    }

    /// Whether some bundle asks for more than any selected node holds: more devices than its
    /// free ones, or more CPU cores than all its NUMA nodes together.
    fn impossible(&self, request: &Request) -> bool {
        let nodes = self.representatives(&self.selected_nodes(request));
        request.bundles.iter().any(|b| {
            !nodes.iter().any(|&n| {
                let topo = self.topo(n);
                let cores: u32 = topo.numa_cpus.values().sum();
                self.free[n].count_ones() >= b.count && b.cpus.is_none_or(|c| cores >= c)
            })
        })
    }

    /// Candidate units for a request: every domain of kind `same` (or each node for
    /// `same: node`, one per interchangeable group), or the whole cluster.
    pub(crate) fn units(&self, request: &Request, same_override: Option<Option<&str>>) -> Vec<Unit> {
        let same = same_override.unwrap_or(request.same.as_deref());
        if request.select.contains_key("node") {
            // One named node: every bundle goes there.
            return self.selected_nodes(request).into_iter().map(Unit::Node).collect();
        }
        let selected = |labels: &BTreeMap<String, String>| request.select.iter().all(|(k, v)| labels.get(k) == Some(v));
        let keys = self.groups.keys().filter(|(l, _, _)| selected(&self.label_sets[*l]));
        match same {
            None => vec![Unit::Groups(keys.copied().collect())],
            Some("node") => {
                let mut firsts: Vec<usize> =
                    keys.filter_map(|k| self.groups[k].first().copied()).filter(|&n| self.free[n] != 0).collect();
                firsts.sort_unstable();
                firsts.into_iter().map(Unit::Node).collect()
            }
            Some(kind) => {
                let mut by_value: BTreeMap<&str, Vec<GroupKey>> = BTreeMap::new();
                for k in keys {
                    if let Some(v) = self.label_sets[k.0].get(kind) {
                        by_value.entry(v.as_str()).or_default().push(*k);
                    }
                }
                by_value.into_values().map(Unit::Groups).collect()
            }
        }
    }

    /// Exact search inside a small unit (at most [`EXACT_MAX_NODES`] nodes): every valid
    /// (node, device set) for each bundle in turn, the same sequential objective as the greedy
    /// search. `None` for a larger unit, past the budget, or when nothing fits.
    fn exhaustive(&mut self, request: &Request, keys: &[u64], unit: &Unit) -> Option<Attempt> {
        let nodes: Vec<usize> = match unit {
            Unit::Node(n) => vec![*n],
            Unit::Groups(groups) => {
                let mut nodes = Vec::new();
                for key in groups {
                    nodes.extend(self.groups.get(key).into_iter().flatten().copied());
                    if nodes.len() > EXACT_MAX_NODES {
                        return None;
                    }
                }
                nodes.sort_unstable();
                nodes
            }
        };
        let mut order: Vec<usize> = (0..request.bundles.len()).collect();
        order.sort_by_key(|&b| std::cmp::Reverse(request.bundles[b].count));
        let mut exact = Exact { best: None, leaves: 0, overrides: Vec::new(), placed: Vec::new() };
        self.exact_step(request, keys, &order, &nodes, 0.0, &mut exact);
        if exact.leaves > EXACT_BUDGET {
            return None;
        }
        exact.best
    }

    fn exact_step(
        &mut self,
        request: &Request,
        keys: &[u64],
        order: &[usize],
        nodes: &[usize],
        total: f64,
        ex: &mut Exact,
    ) {
        let Some((&b, rest)) = order.split_first() else {
            ex.leaves += 1;
            if ex.best.as_ref().is_none_or(|best| total > best.total) {
                ex.best = Some(Attempt { placed: ex.placed.clone(), total, failed_bundle: None });
            }
            return;
        };
        if ex.leaves > EXACT_BUDGET {
            return;
        }
        for &node in nodes {
            let used = ex.overrides.iter().any(|(n, _)| *n == node);
            if used && request.strategy == Strategy::Spread {
                continue;
            }
            let free = ex.overrides.iter().rev().find(|(n, _)| *n == node).map_or(self.free[node], |(_, f)| *f);
            let topo = self.nodes[node].topo;
            let prep = self.prepared(topo, &request.bundles[b], keys[b]);
            let Some(options) = search::all(&self.topos.list[topo], &prep, free, &self.meter) else {
                ex.leaves = EXACT_BUDGET + 1;
                return;
            };
            for (mask, s) in options {
                let breakdown = score(&self.topos.list[topo], mask, free);
                ex.overrides.push((node, free & !mask));
                ex.placed.push((b, node, mask, breakdown));
                let bonus = if used { W_PACK } else { 0.0 };
                self.exact_step(request, keys, rest, nodes, total + s + bonus, ex);
                ex.placed.pop();
                ex.overrides.pop();
                if ex.leaves > EXACT_BUDGET {
                    return;
                }
            }
        }
    }

    /// Greedy inside one unit: bundles in decreasing size, each to the best (node, devices)
    /// given what earlier bundles took.
    pub(crate) fn attempt(&mut self, request: &Request, keys: &[u64], unit: &Unit) -> Attempt {
        let mut order: Vec<usize> = (0..request.bundles.len()).collect();
        order.sort_by_key(|&b| std::cmp::Reverse(request.bundles[b].count));
        let mut overrides: Vec<(usize, u64)> = Vec::new();
        let mut placed = Vec::new();
        let mut total = 0.0;
        for &b in &order {
            let bundle = &request.bundles[b];
            // (score with the pack bonus, node, devices)
            let mut best: Option<(f64, usize, u64)> = None;
            let consider =
                |me: &mut Planner, node: usize, free: u64, clean: bool, best: &mut Option<(f64, usize, u64)>| {
                    let used = overrides.iter().any(|(n, _)| *n == node);
                    if used && request.strategy == Strategy::Spread {
                        return;
                    }
                    let topo = me.nodes[node].topo;
                    let found = if clean {
                        me.best_cached(topo, free, bundle, keys[b])
                    } else {
                        let prep = me.prepared(topo, bundle, keys[b]);
                        search::best(&me.topos.list[topo], &prep, free, &me.meter)
                    };
                    if let Some((mask, s)) = found {
                        let s = s + if used { W_PACK } else { 0.0 };
                        let better = match best {
                            None => true,
                            Some((bs, bn, _)) => s > *bs || (s == *bs && node < *bn),
                        };
                        if better {
                            *best = Some((s, node, mask));
                        }
                    }
                };
            match unit {
                Unit::Node(node) => {
                    let free = overrides.iter().find(|(n, _)| n == node).map_or(self.free[*node], |(_, f)| *f);
                    let clean = !overrides.iter().any(|(n, _)| n == node);
                    // One node holds every bundle: pack bonuses do not change the choice there.
                    consider(self, *node, free, clean, &mut best);
                }
                Unit::Groups(groups) => {
                    for key in groups {
                        let Some(members) = self.groups.get(key) else { continue };
                        let members: Vec<usize> = members.iter().copied().take(overrides.len() + 1).collect();
                        for node in members {
                            match overrides.iter().find(|(n, _)| *n == node) {
                                Some(&(_, free)) => consider(self, node, free, false, &mut best),
                                None => {
                                    consider(self, node, key.2, true, &mut best);
                                    break;
                                }
                            }
                        }
                    }
                }
            }
            let Some((s, node, mask)) = best else {
                return Attempt { placed, total, failed_bundle: Some(b) };
            };
            let free = overrides.iter().find(|(n, _)| *n == node).map_or(self.free[node], |(_, f)| *f);
            let breakdown = score(&self.topos.list[self.nodes[node].topo], mask, free);
            total += s;
            placed.push((b, node, mask, breakdown));
            match overrides.iter_mut().find(|(n, _)| *n == node) {
                Some(entry) => entry.1 &= !mask,
                None => overrides.push((node, free & !mask)),
            }
        }
        Attempt { placed, total, failed_bundle: None }
    }

    fn placement(&self, request: &Request, attempt: Attempt) -> Placement {
        let mut bundles: Vec<BundlePlacement> = attempt
            .placed
            .iter()
            .map(|&(b, node, mask, breakdown)| BundlePlacement {
                bundle: b,
                node: self.nodes[node].name.clone(),
                devices: self.describe(node, mask),
                score: breakdown,
            })
            .collect();
        bundles.sort_by_key(|b| b.bundle);
        debug_assert_eq!(bundles.len(), request.bundles.len());
        Placement { id: 0, bundles, score: attempt.total }
    }

    pub(crate) fn describe(&self, node: usize, mask: u64) -> Vec<PlacedDevice> {
        let topo = &self.topos.list[self.nodes[node].topo];
        topo.devices
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
}

/// What the explanation reads of the planner.
impl View for Planner {
    fn topo(&self, node: usize) -> &Topo {
        &self.topos.list[self.nodes[node].topo]
    }
    fn node_name(&self, node: usize) -> &str {
        &self.nodes[node].name
    }
    fn free_mask(&self, node: usize) -> u64 {
        self.free[node]
    }
    fn meter(&self) -> &Meter {
        &self.meter
    }
    fn selected_nodes(&self, request: &Request) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&n| {
                request.select.iter().all(|(k, v)| match k.as_str() {
                    "node" => self.nodes[n].name == *v,
                    _ => self.label_sets[self.nodes[n].labels].get(k) == Some(v),
                })
            })
            .collect()
    }
    fn representatives(&self, nodes: &[usize]) -> Vec<usize> {
        let mut seen = BTreeSet::new();
        nodes
            .iter()
            .copied()
            .filter(|&n| seen.insert((self.nodes[n].labels, self.nodes[n].topo, self.free[n])))
            .collect()
    }
    fn plan_summary(&mut self, request: &Request) -> Option<String> {
        let pl = self.plan_bounded(request).ok()?;
        let bundles: Vec<String> = pl
            .bundles
            .iter()
            .map(|b| {
                let devs: Vec<&str> = b.devices.iter().map(|d| d.label.as_str()).collect();
                format!("bundle {} on {} ({})", b.bundle, b.node, devs.join(","))
            })
            .collect();
        Some(bundles.join(", "))
    }
}

fn validate(request: &Request) -> Result<(), PlanError> {
    if request.bundles.is_empty() {
        return Err(PlanError::Request("a request needs at least one bundle".into()));
    }
    for (i, b) in request.bundles.iter().enumerate() {
        if b.count == 0 {
            return Err(PlanError::Request(format!("bundle {i}: count must be at least 1")));
        }
        if b.count as usize > crate::cluster::MAX_DEVICES_PER_NODE {
            return Err(PlanError::Request(format!(
                "bundle {i}: count {} is more than a node can hold ({})",
                b.count,
                crate::cluster::MAX_DEVICES_PER_NODE
            )));
        }
    }
    Ok(())
}

impl Planner {
    fn label_value(&self, label_set: usize, kind: &str) -> Option<&str> {
        self.label_sets[label_set].get(kind).map(String::as_str)
    }
}
