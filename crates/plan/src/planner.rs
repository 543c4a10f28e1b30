//! The planner: cluster state (free devices per node, indexed by [`crate::index::Index`]),
//! plan, allocate, release and repair. Nodes of one class (same topology, free devices and
//! bin-packing standing) are searched once; a decision reads the classes and domains it needs,
//! in best-fit order, never every node.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use accel_model::Machine;
use serde::Serialize;

use crate::cluster::{machine_domains, BinPack, Cluster, HealthPolicy, MachineRef, Node, Topo, Topos};
use crate::explain::{self, Partial, View};
use crate::index::{Class, Index};
use crate::request::{Bundle, Request, Strategy};
use crate::score::{score, Breakdown};
use crate::search::{self, Meter, Prepared, Stage};
use crate::{Infeasible, PlanError};

/// Bonus for placing a bundle on a node an earlier bundle of the same `pack` request uses.
pub const W_PACK: f64 = 20.0;

/// Domain attempts one decision may make for its sub-groups, backtracking included.
pub const GROUP_TRIALS: usize = 256;

/// Feasible candidate domains a decision scores, in best-fit order (fewest free devices
/// first), before it takes the best of them: a decision never walks every domain of a large
/// cluster when the first few fit.
pub const DOMAIN_CANDIDATES: usize = 8;

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
    /// Sum of the bundles' scores (plus pack bonuses and bin-packing costs).
    pub score: f64,
    /// The lowest fabric tier whose one switch holds every bundle (`node` when one node holds
    /// them); absent when the cluster has no tiers or the bundles cross the top one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub span: Option<String>,
}

/// Requests with at most this many candidate domains, of at most this many nodes each, also get
/// the exact multi-bundle search.
pub const EXACT_MAX_NODES: usize = 8;
/// Steps (partial and complete placements) the exact search may take before it gives up (the
/// greedy answer stands). Counted at every step, not only at complete placements: a request
/// that cannot fit reaches none, and must still stop.
const EXACT_BUDGET: u32 = 100_000;
/// The same for one sub-group inside one domain, where the greedy search found nothing.
const GROUP_EXACT_BUDGET: u32 = 2_000;

/// State of the exact multi-bundle search.
struct Exact {
    best: Option<Attempt>,
    /// Steps taken, and the most it may take.
    leaves: u32,
    budget: u32,
    overrides: Vec<(usize, u64)>,
    placed: Vec<(usize, usize, u64, Breakdown)>,
}

/// A node's device ids for a bundle, and the score the planner gives them.
pub type DeviceSet = (Vec<String>, Breakdown);

/// A cached search: the best set and its score, and whether the search ran out of budget.
type Searched = (Option<(u64, f64)>, bool);

/// What the planner keeps of an allocation: its request and each bundle's node and devices.
#[derive(Debug)]
struct Allocation {
    request: Request,
    bundles: Vec<(usize, u64)>,
}

/// Allocation state over one cluster. Decisions are deterministic: the same cluster, state and
/// request always give the same placement.
#[derive(Debug)]
pub struct Planner {
    topos: Topos,
    nodes: Vec<Node>,
    free: Vec<u64>,
    by_name: HashMap<String, usize>,
    label_sets: Vec<BTreeMap<String, String>>,
    label_set_ids: HashMap<BTreeMap<String, String>, usize>,
    ix: Index,
    allocations: BTreeMap<u64, Allocation>,
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
    /// The fabric's tiers, lowest first (label keys).
    tiers: Vec<String>,
    binpack: BinPack,
    /// The label keys of bin-packing domains.
    bin_kinds: BTreeSet<String>,
    /// Nodes a repair must not use.
    exclude: BTreeSet<usize>,
    /// Failures need no explanation (a soft tier cap's higher tiers: the first one's stands).
    quiet: bool,
}

/// A partial or complete decision.
#[derive(Debug, Clone, Default)]
pub(crate) struct Attempt {
    /// (bundle, node, devices, score)
    pub placed: Vec<(usize, usize, u64, Breakdown)>,
    pub total: f64,
    pub failed_bundle: Option<usize>,
    /// Free devices of the nodes this decision takes from, after it.
    overrides: Vec<(usize, u64)>,
    /// Bin-packing domains this decision takes from.
    touched: Vec<usize>,
    /// Per placed bundle with a sub-group: (bundle, sub-group, domain value).
    domains: Vec<(usize, usize, String)>,
    /// The domains sub-groups took (pairs, or nodes for `node`), per sub-group.
    group_domains: Vec<Scope>,
}

/// Where a decision may look: every node, the nodes of one label value, or one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    All,
    Pair(usize),
    Node(usize),
}

/// A scope and the labels every node used must also carry (`select`, an outer domain).
#[derive(Debug, Clone)]
pub(crate) struct Unit {
    scope: Scope,
    filter: Vec<(String, String)>,
}

impl Planner {
    /// A planner over `cluster`. Everything it needs about a device (dtypes, memory, link
    /// bandwidth) is on the machines: discovery resolved the SKUs.
    pub fn new(cluster: &Cluster) -> Result<Planner, PlanError> {
        let mut planner = Planner::empty();
        planner.health = cluster.health;
        planner.binpack = cluster.binpack.clone();
        planner.tiers = cluster.tiers.clone();
        planner.bin_kinds = if cluster.binpack.kinds.is_empty() {
            let machines = cluster.machines.values().chain(cluster.nodes.iter().filter_map(|n| match &n.machine {
                MachineRef::Inline(m) => Some(&**m),
                MachineRef::Name(_) => None,
            }));
            machines.flat_map(|m| m.domains.iter().filter(|d| d.scale_up).map(|d| d.kind.as_str().to_owned())).collect()
        } else {
            cluster.binpack.kinds.iter().cloned().collect()
        };
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
            crate::cluster::scope_node_local(&mut labels, machine, &node.name);
            labels.extend(node.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
            planner.push_node(node.name.clone(), labels, topo)?;
            if !node.allocated.is_empty() {
                let ids: Vec<&str> = node.allocated.iter().map(String::as_str).collect();
                planner.mark_used(&node.name, &ids)?;
            }
        }
        if planner.tiers.is_empty() {
            planner.tiers = crate::fabric::default_tiers(planner.ix.keys.iter().map(String::as_str));
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
            label_set_ids: HashMap::new(),
            ix: Index::default(),
            allocations: BTreeMap::new(),
            next_id: 1,
            prepared: HashMap::new(),
            cache: HashMap::new(),
            meter: Meter::default(),
            health: HealthPolicy::default(),
            known: crate::names::Known::new(),
            known_topos: 0,
            tiers: Vec::new(),
            binpack: BinPack::default(),
            bin_kinds: BTreeSet::new(),
            exclude: BTreeSet::new(),
            quiet: false,
        }
    }

    /// Adds one node (labels override the machine's own domains). Its machine's scale-up
    /// domain kinds become bin-packing domains for the nodes added after it.
    pub fn add_node(
        &mut self,
        name: &str,
        labels: &BTreeMap<String, String>,
        machine: &Machine,
    ) -> Result<(), PlanError> {
        let topo = self.topos.intern(Topo::new(machine, self.health)?);
        if self.binpack.kinds.is_empty() {
            self.bin_kinds.extend(machine.domains.iter().filter(|d| d.scale_up).map(|d| d.kind.as_str().to_owned()));
        }
        let mut all = machine_domains(machine);
        crate::cluster::scope_node_local(&mut all, machine, name);
        all.extend(labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        self.push_node(name.to_owned(), all, topo)
    }

    fn push_node(&mut self, name: String, labels: BTreeMap<String, String>, topo: usize) -> Result<(), PlanError> {
        if self.by_name.contains_key(&name) {
            return Err(PlanError::Cluster(format!("two nodes are named {name:?}")));
        }
        let label_id = match self.label_set_ids.get(&labels) {
            Some(&i) => i,
            None => {
                self.known.add_keys(labels.keys());
                self.ix.add_label_set(&labels, &self.bin_kinds);
                self.label_sets.push(labels.clone());
                self.label_set_ids.insert(labels, self.label_sets.len() - 1);
                self.label_sets.len() - 1
            }
        };
        for t in &self.topos.list[self.known_topos..] {
            self.known.add_devices(&t.devices);
        }
        self.known_topos = self.topos.list.len();
        let idx = self.nodes.len();
        let usable = self.topos.list[topo].all & self.topos.list[topo].usable;
        self.by_name.insert(name.clone(), idx);
        self.nodes.push(Node { name, labels: label_id, topo });
        self.free.push(usable);
        let (nodes, free) = (&self.nodes, &self.free);
        self.ix.add_node(idx, label_id, topo, (usable, usable), &|m| (nodes[m].labels, nodes[m].topo, free[m]));
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

    fn usable(&self, node: usize) -> u64 {
        let t = &self.topos.list[self.nodes[node].topo];
        t.all & t.usable
    }

    fn set_free(&mut self, node: usize, free: u64) {
        let usable = self.usable(node);
        let free = free & usable;
        let old = self.free[node];
        if old == free {
            return;
        }
        self.free[node] = free;
        let (nodes, frees) = (&self.nodes, &self.free);
        let (ls, topo) = (nodes[node].labels, nodes[node].topo);
        self.ix.update(node, ls, topo, (old, free, usable), &|m| (nodes[m].labels, nodes[m].topo, frees[m]));
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
    /// such as Ray's per-device resources). `sync_free(node, &[])` takes a node that is gone
    /// out of every later decision.
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

    /// A node's labels, its machine's domains included.
    pub fn node_labels(&self, node: &str) -> Result<&BTreeMap<String, String>, PlanError> {
        let i = self.node_index(node)?;
        Ok(&self.label_sets[self.nodes[i].labels])
    }

    /// The fabric tiers this planner counts, lowest first (label keys).
    pub fn tiers(&self) -> &[String] {
        &self.tiers
    }

    /// Tiers crossed between two nodes: 0 for the same node, `k` when the lowest tier whose
    /// one switch holds both is the `k`-th, and one more than the tier count when none does.
    pub fn distance(&self, a: &str, b: &str) -> Result<u32, PlanError> {
        let (a, b) = (self.node_index(a)?, self.node_index(b)?);
        Ok(self.distance_of(&[a, b]))
    }

    fn distance_of(&self, nodes: &[usize]) -> u32 {
        let Some((&first, rest)) = nodes.split_first() else { return 0 };
        if rest.iter().all(|&n| n == first) {
            return 0;
        }
        let labels: Vec<&BTreeMap<String, String>> =
            nodes.iter().map(|&n| &self.label_sets[self.nodes[n].labels]).collect();
        crate::fabric::tiers_spanned(&self.tiers, &labels)
    }

    /// Plans and commits: the devices stay taken until [`Planner::release`].
    pub fn allocate(&mut self, request: &Request) -> Result<Placement, PlanError> {
        let mut placement = self.plan(request)?;
        let id = self.next_id;
        self.next_id += 1;
        let taken = self.commit(&placement)?;
        self.allocations.insert(id, Allocation { request: request.clone(), bundles: taken });
        placement.id = id;
        Ok(placement)
    }

    /// Takes a placement's devices; returns (node, devices) per bundle, in bundle order.
    fn commit(&mut self, placement: &Placement) -> Result<Vec<(usize, u64)>, PlanError> {
        let mut taken = Vec::with_capacity(placement.bundles.len());
        for b in &placement.bundles {
            let node = self.node_index(&b.node)?;
            let ids: Vec<&str> = b.devices.iter().map(|d| d.id.as_str()).collect();
            let mask = self.mask_of(node, &ids)?;
            self.set_free(node, self.free[node] & !mask);
            taken.push((node, mask));
        }
        Ok(taken)
    }

    /// Frees the devices of an allocation.
    pub fn release(&mut self, id: u64) -> Result<(), PlanError> {
        let taken = self.allocations.remove(&id).ok_or(PlanError::UnknownAllocation(id))?;
        for (node, mask) in taken.bundles {
            self.set_free(node, self.free[node] | mask);
        }
        Ok(())
    }

    /// Places the `lost` bundles of allocation `id` again, after their node or devices failed,
    /// inside the same domain as before: the sub-group's domain, the request's `same` domain,
    /// or else the lost node's bin-packing (scale-up) domain; anywhere only when the old node
    /// had none. The lost bundles' old devices leave the allocation but stay taken, as failed
    /// hardware should (free them with [`Planner::sync_free`] when they come back), and their
    /// nodes are not used by this repair. On success the allocation holds the new devices and
    /// the whole placement is returned; when no node of the domain can take them, an
    /// explanation says why and the allocation keeps only its surviving bundles' devices.
    pub fn repair(&mut self, id: u64, lost: &[usize]) -> Result<Placement, PlanError> {
        let alloc = self.allocations.get(&id).ok_or(PlanError::UnknownAllocation(id))?;
        let request = alloc.request.clone();
        let old = alloc.bundles.clone();
        if let Some(&b) = lost.iter().find(|&&b| b >= old.len()) {
            return Err(PlanError::Request(format!("allocation {id} has no bundle {b} ({} bundles)", old.len())));
        }
        let lost: BTreeSet<usize> = lost.iter().copied().collect();
        // The lost bundles' devices stay taken (they failed, or their node did): the caller
        // frees them with `sync_free` once they are back. Their nodes sit this repair out.
        let exclude: BTreeSet<usize> = lost.iter().map(|&b| old[b].0).collect();
        let mut exclude = exclude;
        if let Some(a) = self.allocations.get_mut(&id) {
            for &b in &lost {
                a.bundles[b].1 = 0;
            }
        }
        // The domain each lost bundle must stay in.
        let mut sub = Request::new(Vec::new());
        sub.strategy = request.strategy;
        sub.select = request.select.clone();
        let mut select: Option<(String, String)> = None;
        for &b in &lost {
            sub.bundles.push(request.bundles[b].clone());
            let node = old[b].0;
            let kind = match (&request.groups, &request.same) {
                (Some(g), _) => Some(g.same.clone()),
                (None, Some(same)) => Some(same.clone()),
                (None, None) => {
                    self.ix.bin_of(self.nodes[node].labels).map(|p| self.ix.keys[self.ix.pairs[p].key].clone())
                }
            };
            // A sub-group's domain is where its surviving bundles are, else where it was.
            let group_node = request.groups.as_ref().and_then(|g| {
                let size = g.size.max(1) as usize;
                let first = b / size * size;
                (first..first + size).find(|o| !lost.contains(o)).map(|o| old[o].0)
            });
            let holder = group_node.unwrap_or(node);
            let want = kind.and_then(|k| {
                if k == "node" {
                    Some(("node".to_owned(), self.nodes[holder].name.clone()))
                } else {
                    self.label_sets[self.nodes[holder].labels].get(&k).map(|v| (k.clone(), v.clone()))
                }
            });
            match (&select, want) {
                // No domain to keep: anywhere will do.
                (_, None) => {}
                (None, Some(w)) => select = Some(w),
                (Some(s), Some(w)) if *s == w => {}
                (Some(_), Some(_)) => {
                    return Err(PlanError::Request(format!(
                        "repair the lost bundles of different domains in separate calls (bundle {b})"
                    )))
                }
            }
        }
        if let Some((k, v)) = &select {
            if k == "node" {
                // The node that held the sub-group is the one place; it is not excluded.
                exclude.retain(|&n| self.nodes[n].name != *v);
            }
            sub.select.insert(k.clone(), v.clone());
        }
        if request.strategy == Strategy::Spread {
            exclude.extend(old.iter().enumerate().filter(|(b, _)| !lost.contains(b)).map(|(_, (n, _))| *n));
        }
        self.exclude = exclude;
        self.meter.reset();
        let result = self.plan_bounded(&sub);
        self.exclude.clear();
        let placed = match result {
            Ok(p) => p,
            Err(PlanError::Infeasible(mut why)) => {
                let place = select.as_ref().map(|(k, v)| format!(" inside {k}={v}")).unwrap_or_default();
                let which: Vec<String> = lost.iter().map(|b| b.to_string()).collect();
                why.message = format!(
                    "allocation {id}: lost bundle(s) {} cannot be placed again{place}: {}",
                    which.join(", "),
                    why.message
                );
                why.bundle = why.bundle.and_then(|i| lost.iter().nth(i).copied());
                return Err(PlanError::Infeasible(why));
            }
            Err(e) => return Err(e),
        };
        let taken = self.commit(&placed)?;
        let lost_list: Vec<usize> = lost.iter().copied().collect();
        if let Some(a) = self.allocations.get_mut(&id) {
            for (k, &b) in lost_list.iter().enumerate() {
                a.bundles[b] = taken[k];
            }
        }
        self.placement_of(id)
    }

    /// The current placement of an allocation.
    pub fn placement_of(&self, id: u64) -> Result<Placement, PlanError> {
        let alloc = self.allocations.get(&id).ok_or(PlanError::UnknownAllocation(id))?;
        let mut attempt = Attempt::default();
        for (b, &(node, mask)) in alloc.bundles.iter().enumerate() {
            let breakdown = score(&self.topos.list[self.nodes[node].topo], mask, self.free[node] | mask);
            attempt.total += breakdown.total;
            attempt.placed.push((b, node, mask, breakdown));
            if let Some(g) = &alloc.request.groups {
                let group = b / g.size.max(1) as usize;
                attempt.domains.push((b, group, self.domain_value(node, &g.same)));
            }
        }
        let mut p = self.placement(&alloc.request, attempt);
        p.id = id;
        Ok(p)
    }

    fn domain_value(&self, node: usize, kind: &str) -> String {
        if kind == "node" {
            return self.nodes[node].name.clone();
        }
        self.label_sets[self.nodes[node].labels].get(kind).cloned().unwrap_or_default()
    }

    /// The score the planner gives `devices` of `node` (for any bundle), in the node's current state
    /// (the devices must be free). For tests and comparisons with other placers.
    pub fn score_of(&self, node: &str, devices: &[&str]) -> Result<Breakdown, PlanError> {
        let i = self.node_index(node)?;
        let mask = self.mask_of(i, devices)?;
        Ok(score(&self.topos.list[self.nodes[i].topo], mask, self.free[i]))
    }

    /// Every valid device set of `node` for `bundle` in the node's current state, with the
    /// score the planner gives it; `None` when enumerating them would pass the search budget.
    /// For benchmarks that compare the planner with exact solvers.
    pub fn options(&mut self, node: &str, bundle: &Bundle) -> Result<Option<Vec<DeviceSet>>, PlanError> {
        let i = self.node_index(node)?;
        let topo = self.nodes[i].topo;
        let prep = self.prepared(topo, bundle, Planner::bundle_key(bundle));
        let t = &self.topos.list[topo];
        let Some(sets) = search::all(t, &prep, self.free[i], &self.meter) else { return Ok(None) };
        Ok(Some(
            sets.into_iter()
                .map(|(mask, _)| {
                    let ids =
                        t.devices.iter().enumerate().filter(|(d, _)| mask & (1 << d) != 0).map(|(_, d)| d.id.clone());
                    (ids.collect(), score(t, mask, self.free[i]))
                })
                .collect(),
        ))
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
        let Some(within) = &request.within else { return self.plan_level(request) };
        let tier = crate::fabric::resolve_tier(&self.tiers, &within.tier)
            .map(str::to_owned)
            .or_else(|| self.ix.key_id(&within.tier).map(|_| within.tier.clone()))
            .ok_or_else(|| {
                let known: Vec<String> = self.tiers.clone();
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
            let from = self.tiers.iter().position(|t| *t == tier).map_or(self.tiers.len(), |i| i + 1);
            levels.extend(self.tiers[from..].iter().cloned().map(Some));
            levels.push(None);
        }
        let mut first_error = None;
        let mut anywhere: Option<Placement> = None;
        for (k, level) in levels.iter().enumerate() {
            let mut r = request.clone();
            r.within = None;
            r.same = level.clone();
            let quiet = std::mem::replace(&mut self.quiet, first_error.is_some());
            let result = self.plan_level(&r);
            self.quiet = quiet;
            match result {
                Ok(mut p) => {
                    p.span = self.span(&p);
                    return Ok(p);
                }
                Err(e) if first_error.is_none() => first_error = Some(e),
                Err(_) => {}
            }
            // Soft: once the cap's own tier fails, ask the whole cluster before the tiers in
            // between; when it fails too, none of them can hold the gang.
            if k == 0 && levels.len() > 2 {
                let mut r = request.clone();
                r.within = None;
                self.quiet = true;
                let result = self.plan_level(&r);
                self.quiet = quiet;
                match result {
                    Ok(p) => anywhere = Some(p),
                    Err(_) => break,
                }
            }
            if level.is_none() {
                break;
            }
        }
        if let Some(mut p) = anywhere {
            p.span = self.span(&p);
            return Ok(p);
        }
        Err(first_error.unwrap_or_else(|| PlanError::Request("no tier to try".into())))
    }

    /// The lowest tier holding every bundle of a placement.
    fn span(&self, p: &Placement) -> Option<String> {
        let nodes: Vec<usize> = p.bundles.iter().filter_map(|b| self.by_name.get(&b.node).copied()).collect();
        match self.distance_of(&nodes) as usize {
            0 => Some("node".into()),
            d if d <= self.tiers.len() => Some(self.tiers[d - 1].clone()),
            _ => None,
        }
    }

    /// Plans with the request's own `same` (or none): candidate units in best-fit order, the
    /// first [`DOMAIN_CANDIDATES`] that hold the request scored, the best taken.
    fn plan_level(&mut self, request: &Request) -> Result<Placement, PlanError> {
        if self.impossible(request) {
            return Err(self.explain_failure(request, 0, None));
        }
        let keys: Vec<u64> = request.bundles.iter().map(Planner::bundle_key).collect();
        let need: u64 = request.bundles.iter().map(|b| u64::from(b.count)).sum();
        let mut best: Option<Attempt> = None;
        let mut best_partial: Option<(Unit, Attempt)> = None;
        let mut feasible = 0usize;
        let mut tried = 0usize;
        let small = self.few_units(request);
        let mut cursor = None;
        'units: loop {
            let units = self.units(request, need, &mut cursor, DOMAIN_CANDIDATES * 4);
            if units.is_empty() {
                break;
            }
            for unit in units {
                tried += 1;
                let mut attempt = self.place(request, &keys, &unit);
                // The exact search is for small problems: few candidate domains, few nodes in each.
                if request.bundles.len() > 1 && request.groups.is_none() && small {
                    if let Some(exact) = self.exhaustive(request, &keys, &unit) {
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
            let mut p = self.placement(request, attempt);
            if !self.tiers.is_empty() {
                p.span = self.span(&p);
            }
            return Ok(p);
        }
        let partial = best_partial.map(|(unit, attempt)| Partial {
            placed: attempt.placed.len(),
            holder: match unit.scope {
                Scope::Node(node) => self.nodes[node].name.clone(),
                Scope::Pair(p) => format!("{}={}", self.ix.keys[self.ix.pairs[p].key], self.ix.pairs[p].value),
                Scope::All => String::new(),
            },
        });
        Err(self.explain_failure(request, tried, partial))
    }

    fn explain_failure(&mut self, request: &Request, tried: usize, partial: Option<Partial>) -> PlanError {
        if self.quiet {
            return PlanError::Request("unexplained: a higher tier's attempt".into());
        }
        let exhausted = self.meter.exhausted();
        let mut err = match &request.groups {
            None => explain::explain(self, request, tried, partial),
            Some(g) => {
                // A bundle that fits nowhere alone is named first; else the sub-groups are.
                let mut alone = request.clone();
                alone.groups = None;
                match explain::explain(self, &alone, tried, None) {
                    PlanError::Infeasible(why) if why.bundle.is_some() => PlanError::Infeasible(why),
                    _ => {
                        let devices: u32 = request.bundles.iter().take(g.size as usize).map(|b| b.count).sum();
                        let spread = if g.replicas == Strategy::Spread { " (spread: one domain each)" } else { "" };
                        let placed = partial.map_or(0, |p| p.placed) / g.size.max(1) as usize;
                        let nearest = self.plan_bounded(&alone).ok().map(|p| {
                            let nodes: BTreeSet<&str> = p.bundles.iter().map(|b| b.node.as_str()).collect();
                            format!("without groups: {} bundles on {} nodes", p.bundles.len(), nodes.len())
                        });
                        PlanError::Infeasible(Infeasible {
                            bundle: None,
                            constraint: "groups".into(),
                            message: format!(
                                "no {} domain is left for every sub-group of {} bundles ({devices} devices){spread}; \
                                 {placed} of {} sub-groups placed",
                                g.same,
                                g.size,
                                request.bundles.len() / g.size.max(1) as usize
                            ),
                            nearest,
                            budget_exhausted: false,
                        })
                    }
                }
            }
        };
        if let PlanError::Infeasible(why) = &mut err {
            if exhausted && !why.budget_exhausted {
                why.budget_exhausted = true;
                why.message += &format!(
                    " (infeasible, budget exhausted: a search stopped after {} steps without a valid set)",
                    search::SEARCH_BUDGET
                );
            }
        }
        err
    }

    /// The selected scope: one named node, the smallest selected label value (the rest of
    /// `select` as a filter), or everything. `None` when a selected value exists nowhere.
    fn selected_unit(&self, request: &Request) -> Option<Unit> {
        if let Some(name) = request.select.get("node") {
            let n = *self.by_name.get(name)?;
            let filter = request.select.iter().filter(|(k, _)| *k != "node").map(|(k, v)| (k.clone(), v.clone()));
            return Some(Unit { scope: Scope::Node(n), filter: filter.collect() });
        }
        let mut smallest: Option<(usize, &String)> = None;
        for (k, v) in &request.select {
            let p = self.ix.pair_id(k, v)?;
            let size: usize = self.ix.pairs[p].classes.values().map(BTreeSet::len).sum();
            if smallest.is_none_or(|(q, _)| size < self.ix.pairs[q].classes.values().map(BTreeSet::len).sum()) {
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

    /// Whether some bundle asks for more than any selected node holds: more devices than its
    /// free ones, or more CPU cores than all its NUMA nodes together. Reads classes only.
    fn impossible(&self, request: &Request) -> bool {
        let Some(unit) = self.selected_unit(request) else { return true };
        let classes: Vec<Class> = match unit.scope {
            Scope::All => self.ix.all.keys().copied().collect(),
            Scope::Pair(p) => self.ix.pairs[p].classes.keys().copied().collect(),
            Scope::Node(n) => vec![Class { topo: self.nodes[n].topo, free: self.free[n], whole: false }],
        };
        // More devices than the scope has free (its filter aside: an upper bound).
        let free: u64 = match unit.scope {
            Scope::All => self.ix.all.iter().map(|(c, m)| u64::from(c.free.count_ones()) * m.len() as u64).sum(),
            Scope::Pair(p) => self.ix.pairs[p].free,
            Scope::Node(n) => u64::from(self.free[n].count_ones()),
        };
        let need: u64 = request.bundles.iter().map(|b| u64::from(b.count)).sum();
        need > free
            || request.bundles.iter().any(|b| {
                !classes.iter().any(|c| {
                    let cores: u32 = self.topos.list[c.topo].numa_cpus.values().sum();
                    c.free.count_ones() >= b.count && b.cpus.is_none_or(|want| cores >= want)
                })
            })
    }

    fn node_in(&self, node: usize, unit: &Unit) -> bool {
        if self.exclude.contains(&node) {
            return false;
        }
        let labels = &self.label_sets[self.nodes[node].labels];
        let scoped = match unit.scope {
            Scope::All => true,
            Scope::Node(n) => n == node,
            Scope::Pair(p) => {
                let pair = &self.ix.pairs[p];
                labels.get(&self.ix.keys[pair.key]) == Some(&pair.value)
            }
        };
        scoped
            && unit.filter.iter().all(|(k, v)| match k.as_str() {
                "node" => self.nodes[node].name == *v,
                _ => labels.get(k) == Some(v),
            })
    }

    /// Candidate units for a request, in best-fit order, from `cursor` on, at most `limit`:
    /// the domains of kind `same` with enough free devices, each node class's representative
    /// for `same: node`, or the selected scope alone. The cursor moves past what was returned,
    /// so a decision reads only as many domains as it tries.
    fn units(&self, request: &Request, need: u64, cursor: &mut Option<(u64, usize)>, limit: usize) -> Vec<Unit> {
        let Some(base) = self.selected_unit(request) else { return Vec::new() };
        let first = cursor.is_none();
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
                self.class_representatives(&base, need as u32, &[])
                    .into_iter()
                    .map(|(n, _, _)| Unit { scope: Scope::Node(n), filter: base.filter.clone() })
                    .collect()
            }
            (Some(kind), _) => {
                let Some(key) = self.ix.key_id(kind) else { return Vec::new() };
                let from = cursor.unwrap_or((need, 0));
                let mut out = Vec::new();
                // Sub-groups need not share a node: only the largest bundle bounds the domain.
                let bundles: Vec<&Bundle> = request.bundles.iter().collect();
                let spread = request.strategy == Strategy::Spread && request.groups.is_none();
                for &(free, p) in self.ix.order[key].range(from..) {
                    *cursor = Some((free, p + 1));
                    if !self.may_hold(p, &bundles, spread) {
                        continue;
                    }
                    let mut filter = base.filter.clone();
                    if let Scope::Pair(sp) = base.scope {
                        if self.ix.pairs[sp].key == key {
                            if sp != p {
                                continue;
                            }
                        } else {
                            filter.push((self.ix.keys[self.ix.pairs[sp].key].clone(), self.ix.pairs[sp].value.clone()));
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

    /// Whether a domain may hold `bundles` at all, from its counts alone: a node with as many
    /// free devices as the largest bundle, and for `spread` as many such nodes as bundles. A
    /// necessary condition, so skipping a domain that fails it loses nothing.
    fn may_hold(&self, pair: usize, bundles: &[&Bundle], spread: bool) -> bool {
        let pair = &self.ix.pairs[pair];
        let largest = bundles.iter().map(|b| b.count).max().unwrap_or(0);
        let smallest = bundles.iter().map(|b| b.count).min().unwrap_or(0);
        // Bundles larger than half the roomiest node cannot share a node: each needs its own.
        let roomiest = pair.roomiest();
        let big: Vec<u32> = bundles.iter().map(|b| b.count).filter(|&c| 2 * c > roomiest).collect();
        let big_ok = big.iter().min().is_none_or(|&c| pair.nodes_with(c) as usize >= big.len());
        pair.nodes_with(largest) >= 1 && big_ok && (!spread || pair.nodes_with(smallest) as usize >= bundles.len())
    }

    /// Whether the request has at most [`EXACT_MAX_NODES`] candidate units (the exact search's
    /// first condition).
    fn few_units(&self, request: &Request) -> bool {
        match request.same.as_deref() {
            None => true,
            Some("node") => self.ix.all.len() <= EXACT_MAX_NODES,
            Some(kind) => self.ix.key_id(kind).is_none_or(|k| self.ix.order[k].len() <= EXACT_MAX_NODES),
        }
    }

    /// One node per class of a unit (the lowest-numbered that passes its filter and is not in
    /// `skip`), with its free devices and bin-packing standing; only classes with at least
    /// `need` free devices.
    fn class_representatives(&self, unit: &Unit, need: u32, skip: &[usize]) -> Vec<(usize, u64, bool)> {
        let classes = match unit.scope {
            Scope::All => &self.ix.all,
            Scope::Pair(p) => &self.ix.pairs[p].classes,
            Scope::Node(n) => {
                return if skip.contains(&n) || !self.node_in(n, unit) || self.free[n].count_ones() < need {
                    Vec::new()
                } else {
                    vec![(n, self.free[n], self.ix.whole(self.nodes[n].labels))]
                };
            }
        };
        let mut out = Vec::new();
        for (class, members) in classes {
            if class.free.count_ones() < need {
                continue;
            }
            if let Some(&m) = members.iter().find(|&&m| !skip.contains(&m) && self.node_in(m, unit)) {
                out.push((m, class.free, class.whole));
            }
        }
        out
    }

    /// Places the request inside one unit: its sub-groups one by one when it has `groups`,
    /// else its bundles greedily, largest first.
    fn place(&mut self, request: &Request, keys: &[u64], unit: &Unit) -> Attempt {
        let mut st = Attempt::default();
        match &request.groups {
            None => {
                let mut order: Vec<usize> = (0..request.bundles.len()).collect();
                order.sort_by_key(|&b| std::cmp::Reverse(request.bundles[b].count));
                self.greedy(request, keys, &order, unit, &mut st);
            }
            Some(g) => self.place_groups(request, keys, unit, g, &mut st),
        }
        st
    }

    /// Sub-groups in order, each inside one domain of kind `g.same` within `unit`. Each tries
    /// the domains that may hold it (those earlier sub-groups use first, for `pack`; never
    /// those, for `spread`; then best fit) and keeps the first [`DOMAIN_CANDIDATES`] that do,
    /// best score first; when a later sub-group finds no domain, the earlier ones' next choices
    /// are tried (depth first, at most [`GROUP_TRIALS`] domain attempts a decision).
    fn place_groups(&mut self, request: &Request, keys: &[u64], unit: &Unit, g: &crate::Groups, st: &mut Attempt) {
        let mut budget = GROUP_TRIALS;
        match self.groups_from(request, keys, unit, g, 0, st.clone(), &mut budget) {
            Ok(done) => *st = done,
            Err(failed) => {
                let (gi, partial) = *failed;
                *st = partial;
                st.failed_bundle = Some(gi * g.size as usize);
            }
        }
    }

    /// Places sub-groups `gi..` on top of `st`; on failure, the deepest sub-group that found no
    /// domain and the decision up to it.
    #[allow(clippy::too_many_arguments)]
    fn groups_from(
        &mut self,
        request: &Request,
        keys: &[u64],
        unit: &Unit,
        g: &crate::Groups,
        gi: usize,
        st: Attempt,
        budget: &mut usize,
    ) -> Result<Attempt, Box<(usize, Attempt)>> {
        let size = g.size as usize;
        if gi * size >= request.bundles.len() {
            return Ok(st);
        }
        let mut trials = self.group_trials(request, keys, unit, g, gi, &st, budget);
        if trials.is_empty() {
            return Err(Box::new((gi, st)));
        }
        trials.sort_by(|a, b| b.total.total_cmp(&a.total));
        let mut deepest: Option<(usize, Attempt)> = None;
        for trial in trials {
            match self.groups_from(request, keys, unit, g, gi + 1, trial, budget) {
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
    #[allow(clippy::too_many_arguments)]
    fn group_trials(
        &mut self,
        request: &Request,
        keys: &[u64],
        unit: &Unit,
        g: &crate::Groups,
        gi: usize,
        st: &Attempt,
        budget: &mut usize,
    ) -> Vec<Attempt> {
        let size = g.size as usize;
        let chunk: Vec<usize> = (gi * size..(gi + 1) * size).collect();
        let mut order = chunk.clone();
        order.sort_by_key(|&b| std::cmp::Reverse(request.bundles[b].count));
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
                self.class_representatives(unit, need as u32, &skip).into_iter().map(|(n, _, _)| Scope::Node(n)),
            );
        } else {
            let bundles: Vec<&Bundle> = chunk.iter().map(|&b| &request.bundles[b]).collect();
            let spread = request.strategy == Strategy::Spread;
            let more = self.inner_domains(unit, &g.same, &bundles, spread);
            scopes.extend(more.into_iter().map(Scope::Pair).filter(|s| !used.contains(s)));
        }
        let mut trials = Vec::new();
        for scope in scopes {
            if trials.len() >= DOMAIN_CANDIDATES || *budget == 0 {
                break;
            }
            if g.replicas == Strategy::Spread && used.contains(&scope) {
                continue;
            }
            *budget -= 1;
            let inner = self.inner_unit(unit, scope);
            let mut trial = st.clone();
            if !self.greedy(request, keys, &order, &inner, &mut trial) {
                // The greedy order can block itself inside a small domain: search it exactly.
                match self.exhaustive_from(request, keys, &order, &inner, st, GROUP_EXACT_BUDGET) {
                    Some(exact) => trial = exact,
                    None => continue,
                }
            }
            let value = match scope {
                Scope::Node(n) => self.nodes[n].name.clone(),
                Scope::Pair(p) => self.ix.pairs[p].value.clone(),
                Scope::All => String::new(),
            };
            trial.domains.extend(chunk.iter().map(|&b| (b, gi, value.clone())));
            trial.group_domains.push(scope);
            trials.push(trial);
        }
        trials
    }

    /// The unit of one sub-group's domain inside `outer`: the domain's nodes that also pass the
    /// outer unit.
    fn inner_unit(&self, outer: &Unit, scope: Scope) -> Unit {
        let mut filter = outer.filter.clone();
        if let Scope::Pair(p) = outer.scope {
            let pair = &self.ix.pairs[p];
            if scope != Scope::Pair(p) {
                filter.push((self.ix.keys[pair.key].clone(), pair.value.clone()));
            }
        }
        if let Scope::Node(n) = outer.scope {
            filter.push(("node".into(), self.nodes[n].name.clone()));
        }
        Unit { scope, filter }
    }

    /// Domains of `kind` that may hold `bundles` (one sub-group) inside `outer`, in best-fit
    /// order: an outer domain's inner ones come from the index's nesting, never from reading
    /// its nodes; over the whole cluster, the kind's own order (bounded by the caller's
    /// candidate count).
    fn inner_domains(&self, outer: &Unit, kind: &str, bundles: &[&Bundle], spread: bool) -> Vec<usize> {
        let Some(key) = self.ix.key_id(kind) else { return Vec::new() };
        let need: u64 = bundles.iter().map(|b| u64::from(b.count)).sum();
        let fits = |p: usize| self.ix.pairs[p].free >= need && self.may_hold(p, bundles, spread);
        let listed: Option<Vec<usize>> = match outer.scope {
            Scope::Pair(o) if self.ix.pairs[o].key == key => Some(vec![o]),
            Scope::Pair(o) => Some(self.ix.children(o, key).collect()),
            Scope::Node(n) => {
                let v = self.label_sets[self.nodes[n].labels].get(kind);
                Some(v.and_then(|v| self.ix.pair_id(kind, v)).into_iter().collect())
            }
            Scope::All => None,
        };
        match listed {
            Some(list) => {
                let mut found: Vec<(u64, usize)> =
                    list.into_iter().filter(|&p| fits(p)).map(|p| (self.ix.pairs[p].free, p)).collect();
                found.sort_unstable();
                found.into_iter().map(|(_, p)| p).collect()
            }
            None => self.ix.order[key]
                .range((need, 0)..)
                .map(|&(_, p)| p)
                .filter(|&p| fits(p))
                .filter(|&p| {
                    // With a filter (select), the domain's first member stands for it; the
                    // sub-group's own search checks every node it uses.
                    outer.filter.is_empty()
                        || self.ix.pairs[p].classes.values().flatten().next().is_some_and(|&n| self.node_in(n, outer))
                })
                .take(DOMAIN_CANDIDATES * 8)
                .collect(),
        }
    }

    /// Greedy inside one unit: `order`'s bundles, each to the best (node, devices) given what
    /// earlier bundles of the decision took. False (and `failed_bundle` set) when one fits
    /// nowhere.
    fn greedy(&mut self, request: &Request, keys: &[u64], order: &[usize], unit: &Unit, st: &mut Attempt) -> bool {
        for &b in order {
            let bundle = &request.bundles[b];
            // Nodes this decision already uses, then one node per class.
            let mut cands: Vec<(usize, u64, bool, bool)> = st
                .overrides
                .iter()
                .filter(|(n, _)| self.node_in(*n, unit))
                .map(|&(n, f)| (n, f, false, true))
                .collect();
            let skip: Vec<usize> = st.overrides.iter().map(|(n, _)| *n).collect();
            cands.extend(
                self.class_representatives(unit, bundle.count, &skip).into_iter().map(|(n, f, w)| (n, f, w, false)),
            );
            // (score with the pack bonus and bin-packing cost, node, devices)
            let mut best: Option<(f64, usize, u64)> = None;
            for (node, free, whole, used) in cands {
                if used && request.strategy == Strategy::Spread {
                    continue;
                }
                let topo = self.nodes[node].topo;
                let found = if used {
                    let prep = self.prepared(topo, bundle, keys[b]);
                    search::best(&self.topos.list[topo], &prep, free, &self.meter)
                } else {
                    self.best_cached(topo, free, bundle, keys[b])
                };
                let Some((mask, s)) = found else { continue };
                let bin = self.ix.bin_of(self.nodes[node].labels);
                let breaks = whole && bin.is_some_and(|d| !st.touched.contains(&d));
                let s = s + if used { W_PACK } else { 0.0 } - if breaks { self.binpack.weight } else { 0.0 };
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
            let free = st.overrides.iter().find(|(n, _)| *n == node).map_or(self.free[node], |(_, f)| *f);
            let breakdown = score(&self.topos.list[self.nodes[node].topo], mask, free);
            st.total += s;
            st.placed.push((b, node, mask, breakdown));
            if let Some(d) = self.ix.bin_of(self.nodes[node].labels) {
                if !st.touched.contains(&d) {
                    st.touched.push(d);
                }
            }
            match st.overrides.iter_mut().find(|(n, _)| *n == node) {
                Some(entry) => entry.1 &= !mask,
                None => st.overrides.push((node, free & !mask)),
            }
        }
        true
    }

    /// Exact search inside a small unit (at most [`EXACT_MAX_NODES`] nodes): every valid
    /// (node, device set) for each bundle in turn, the same sequential objective as the greedy
    /// search. `None` for a larger unit, past the budget, or when nothing fits.
    fn exhaustive(&mut self, request: &Request, keys: &[u64], unit: &Unit) -> Option<Attempt> {
        let mut order: Vec<usize> = (0..request.bundles.len()).collect();
        order.sort_by_key(|&b| std::cmp::Reverse(request.bundles[b].count));
        self.exhaustive_from(request, keys, &order, unit, &Attempt::default(), EXACT_BUDGET)
    }

    /// The exact search for `order`'s bundles inside a small unit, on top of decision `st`
    /// (whose nodes count as used: the pack bonus); the result extends `st`.
    fn exhaustive_from(
        &mut self,
        request: &Request,
        keys: &[u64],
        order: &[usize],
        unit: &Unit,
        st: &Attempt,
        budget: u32,
    ) -> Option<Attempt> {
        let nodes: Vec<usize> = match unit.scope {
            Scope::Node(n) => vec![n],
            Scope::All | Scope::Pair(_) => {
                let classes = match unit.scope {
                    Scope::Pair(p) => &self.ix.pairs[p].classes,
                    _ => &self.ix.all,
                };
                let mut nodes = Vec::new();
                for members in classes.values() {
                    nodes.extend(members.iter().copied().filter(|&n| self.node_in(n, unit)));
                    if nodes.len() > EXACT_MAX_NODES {
                        return None;
                    }
                }
                nodes.sort_unstable();
                nodes
            }
        };
        let mut exact = Exact { best: None, leaves: 0, budget, overrides: st.overrides.clone(), placed: Vec::new() };
        self.exact_step(request, keys, order, &nodes, 0.0, &mut exact);
        if exact.leaves > budget {
            return None;
        }
        let found = exact.best?;
        // Extend `st` as the greedy search would have: devices, domains, bin-packing costs.
        let mut out = st.clone();
        for (b, node, mask, breakdown) in found.placed {
            let d = self.ix.bin_of(self.nodes[node].labels);
            let whole = self.ix.whole(self.nodes[node].labels);
            if let Some(d) = d.filter(|d| !out.touched.contains(d)) {
                if whole {
                    out.total -= self.binpack.weight;
                }
                out.touched.push(d);
            }
            let free = out.overrides.iter().find(|(n, _)| *n == node).map_or(self.free[node], |(_, f)| *f);
            match out.overrides.iter_mut().find(|(n, _)| *n == node) {
                Some(entry) => entry.1 &= !mask,
                None => out.overrides.push((node, free & !mask)),
            }
            out.placed.push((b, node, mask, breakdown));
        }
        out.total += found.total;
        Some(out)
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
        ex.leaves += 1;
        let Some((&b, rest)) = order.split_first() else {
            if ex.best.as_ref().is_none_or(|best| total > best.total) {
                ex.best = Some(Attempt { placed: ex.placed.clone(), total, ..Attempt::default() });
            }
            return;
        };
        if ex.leaves > ex.budget {
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
                ex.leaves = ex.budget + 1;
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
                if ex.leaves > ex.budget {
                    return;
                }
            }
        }
    }

    fn placement(&self, request: &Request, attempt: Attempt) -> Placement {
        let mut bundles: Vec<BundlePlacement> = attempt
            .placed
            .iter()
            .map(|&(b, node, mask, breakdown)| {
                let domain = attempt.domains.iter().find(|(d, _, _)| *d == b);
                BundlePlacement {
                    bundle: b,
                    node: self.nodes[node].name.clone(),
                    devices: self.describe(node, mask),
                    score: breakdown,
                    group: domain.map(|(_, g, _)| *g),
                    domain: domain.map(|(_, _, v)| v.clone()),
                }
            })
            .collect();
        bundles.sort_by_key(|b| b.bundle);
        debug_assert_eq!(bundles.len(), request.bundles.len());
        Placement { id: 0, bundles, score: attempt.total, span: None }
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
    fn representatives(&self, request: &Request) -> Vec<usize> {
        self.selected_unit(request)
            .map(|unit| self.class_representatives(&unit, 0, &[]).into_iter().map(|(n, _, _)| n).collect())
            .unwrap_or_default()
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
    if let Some(g) = &request.groups {
        if g.size == 0 || request.bundles.len() % g.size as usize != 0 {
            return Err(PlanError::Request(format!(
                "groups.size {} must divide the {} bundles into whole sub-groups",
                g.size,
                request.bundles.len()
            )));
        }
    }
    if request.same.is_some() && request.within.is_some() {
        return Err(PlanError::Request(
            "give either same (one domain) or within (a tier cap), not both: a hard within is same on a fabric tier"
                .into(),
        ));
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
