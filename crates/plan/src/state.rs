//! The planner's one piece of mutable state: the nodes, their free devices and the index over
//! them ([`crate::index::Index`]), with the searches memoised per (topology, free devices,
//! bundle). Only the face ([`crate::Planner`]) changes it, by committing a decision or following
//! an outside source of truth; the strategies read it through [`Read`] and return proposals.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use accel_model::Machine;

use crate::cluster::{machine_domains, BinPack, Cluster, HealthPolicy, MachineRef, Node, Topo, Topos};
use crate::index::Index;
use crate::request::Bundle;
use crate::search::{self, Meter, Prepared, Stage};
use crate::PlanError;

/// A cached search: the best set and its score, and whether the search ran out of budget.
type Searched = (Option<(u64, f64)>, bool);

/// What a strategy may read of the planner's state. Reading never changes a decision: the
/// memoised searches give the same answer as searching again.
pub(crate) trait Read {
    /// A node's topology, and the id it shares with equal machines.
    fn topo(&self, node: usize) -> &Topo;
    fn topo_id(&self, node: usize) -> usize;
    /// A topology by its id.
    fn topo_by_id(&self, id: usize) -> &Topo;
    /// A node's free (usable) devices.
    fn free(&self, node: usize) -> u64;
    fn name(&self, node: usize) -> &str;
    /// The index of a node's label set (its labels and its machine's domains).
    fn label_set(&self, node: usize) -> usize;
    fn labels(&self, node: usize) -> &BTreeMap<String, String>;
    fn node_id(&self, name: &str) -> Option<usize>;
    fn index(&self) -> &Index;
    /// The fabric's tiers, lowest first (label keys).
    fn tiers(&self) -> &[String];
    /// What breaking a whole bin-packing domain costs.
    fn binpack_weight(&self) -> f64;
    /// Steps of the current decision's searches.
    fn meter(&self) -> &Meter;
    /// `bundle` compiled against topology `topo` (memoised by `key`).
    fn prepared(&self, topo: usize, bundle: &Bundle, key: u64) -> Arc<Prepared>;
    /// The best device set of a node of topology `topo` with `free` devices for `bundle`
    /// (memoised by `key`; equal nodes are searched once).
    fn best_cached(&self, topo: usize, free: u64, bundle: &Bundle, key: u64) -> Option<(u64, f64)>;

    /// Tiers crossed between `nodes`: 0 for one node, `k` when the lowest tier whose one switch
    /// holds them all is the `k`-th, one more than the tier count when none does.
    fn distance_of(&self, nodes: &[usize]) -> u32 {
        let Some((&first, rest)) = nodes.split_first() else { return 0 };
        if rest.iter().all(|&n| n == first) {
            return 0;
        }
        let labels: Vec<&BTreeMap<String, String>> = nodes.iter().map(|&n| self.labels(n)).collect();
        crate::fabric::tiers_spanned(self.tiers(), &labels)
    }
}

/// The key a bundle's memoised searches are filed under.
pub(crate) fn bundle_key(bundle: &Bundle) -> u64 {
    let mut h = DefaultHasher::new();
    serde_json::to_string(bundle).unwrap_or_default().hash(&mut h);
    h.finish()
}

/// Nodes, free devices, the index and the memoised searches.
#[derive(Debug)]
pub(crate) struct State {
    topos: Topos,
    nodes: Vec<Node>,
    free: Vec<u64>,
    by_name: HashMap<String, usize>,
    label_sets: Vec<BTreeMap<String, String>>,
    label_set_ids: HashMap<BTreeMap<String, String>, usize>,
    ix: Index,
    prepared: Mutex<HashMap<(usize, u64), Arc<Prepared>>>,
    /// Best set per (topology, free devices, bundle), and whether that search ran out of budget.
    cache: Mutex<HashMap<(usize, u64, u64), Searched>>,
    /// Steps of the searches of the current (last) decision.
    pub meter: Meter,
    /// How health counts ([`Topo::usable`]): unusable devices are never free.
    health: HealthPolicy,
    /// The names requests may use here, and how many topologies they already cover.
    pub known: crate::names::Known,
    known_topos: usize,
    tiers: Vec<String>,
    binpack: BinPack,
    /// The label keys of bin-packing domains.
    bin_kinds: BTreeSet<String>,
}

impl State {
    /// The state of `cluster`: every node, its labels over its machine's domains, and the devices
    /// it already has in use.
    pub fn new(cluster: &Cluster) -> Result<State, PlanError> {
        let mut st = State::empty();
        st.health = cluster.health;
        st.binpack = cluster.binpack.clone();
        st.tiers = cluster.tiers.clone();
        st.bin_kinds = if cluster.binpack.kinds.is_empty() {
            let machines = cluster.machines.values().chain(cluster.nodes.iter().filter_map(|n| match &n.machine {
                MachineRef::Inline(m) => Some(&**m),
                MachineRef::Name(_) => None,
            }));
            machines.flat_map(|m| m.domains.iter().filter(|d| d.scale_up).map(|d| d.kind.as_str().to_owned())).collect()
        } else {
            cluster.binpack.kinds.iter().cloned().collect()
        };
        let policy = cluster.health;
        let mut shared: HashMap<&str, (usize, BTreeMap<String, String>)> = HashMap::new();
        for node in &cluster.nodes {
            let machine = cluster.machine(node)?;
            let (topo, domains) = match &node.machine {
                MachineRef::Name(name) => {
                    if let Some(found) = shared.get(name.as_str()) {
                        found.clone()
                    } else {
                        let t = st.topos.intern(Topo::new(machine, policy)?);
                        let entry = (t, machine_domains(machine));
                        shared.insert(name.as_str(), entry.clone());
                        entry
                    }
                }
                MachineRef::Inline(m) => (st.topos.intern(Topo::new(m, policy)?), machine_domains(m)),
            };
            let mut labels = domains;
            crate::cluster::scope_node_local(&mut labels, machine, &node.name);
            labels.extend(node.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
            crate::fabric::topograph_domains(&mut labels, machine);
            st.push_node(node.name.clone(), labels, topo)?;
            if !node.allocated.is_empty() {
                let i = st.node_index(&node.name)?;
                let ids: Vec<&str> = node.allocated.iter().map(String::as_str).collect();
                let mask = st.mask_of(i, &ids)?;
                st.set_free(i, st.free[i] & !mask);
            }
        }
        if st.tiers.is_empty() {
            st.tiers = crate::fabric::default_tiers(st.ix.keys.iter().map(String::as_str));
        }
        Ok(st)
    }

    fn empty() -> State {
        State {
            topos: Topos::default(),
            nodes: Vec::new(),
            free: Vec::new(),
            by_name: HashMap::new(),
            label_sets: Vec::new(),
            label_set_ids: HashMap::new(),
            ix: Index::default(),
            prepared: Mutex::new(HashMap::new()),
            cache: Mutex::new(HashMap::new()),
            meter: Meter::default(),
            health: HealthPolicy::default(),
            known: crate::names::Known::new(),
            known_topos: 0,
            tiers: Vec::new(),
            binpack: BinPack::default(),
            bin_kinds: BTreeSet::new(),
        }
    }

    /// [`crate::Planner::add_node`].
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
        crate::fabric::topograph_domains(&mut all, machine);
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

    pub fn node_index(&self, name: &str) -> Result<usize, PlanError> {
        self.by_name.get(name).copied().ok_or_else(|| PlanError::UnknownNode(name.to_owned()))
    }

    /// The devices (ids or labels such as `GPU3`) of a node as a mask.
    pub fn mask_of(&self, node: usize, ids: &[&str]) -> Result<u64, PlanError> {
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

    /// Sets a node's free devices (never an unusable one) and updates the index.
    pub fn set_free(&mut self, node: usize, free: u64) {
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

    /// The devices of `mask` on `node` as ids (or, with `labels`, as `GPU3`-style labels).
    pub fn names_of(&self, node: usize, mask: u64, labels: bool) -> Vec<String> {
        let topo = &self.topos.list[self.nodes[node].topo];
        topo.devices
            .iter()
            .enumerate()
            .filter(|(d, _)| mask & (1 << d) != 0)
            .map(|(_, d)| if labels { d.label.clone() } else { d.id.clone() })
            .collect()
    }
}

impl Read for State {
    fn topo(&self, node: usize) -> &Topo {
        &self.topos.list[self.nodes[node].topo]
    }
    fn topo_id(&self, node: usize) -> usize {
        self.nodes[node].topo
    }
    fn topo_by_id(&self, id: usize) -> &Topo {
        &self.topos.list[id]
    }
    fn free(&self, node: usize) -> u64 {
        self.free[node]
    }
    fn name(&self, node: usize) -> &str {
        &self.nodes[node].name
    }
    fn label_set(&self, node: usize) -> usize {
        self.nodes[node].labels
    }
    fn labels(&self, node: usize) -> &BTreeMap<String, String> {
        &self.label_sets[self.nodes[node].labels]
    }
    fn node_id(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }
    fn index(&self) -> &Index {
        &self.ix
    }
    fn tiers(&self) -> &[String] {
        &self.tiers
    }
    fn binpack_weight(&self) -> f64 {
        self.binpack.weight
    }
    fn meter(&self) -> &Meter {
        &self.meter
    }

    fn prepared(&self, topo: usize, bundle: &Bundle, key: u64) -> Arc<Prepared> {
        let mut memo = self.prepared.lock().unwrap_or_else(|e| e.into_inner());
        memo.entry((topo, key))
            .or_insert_with(|| Arc::new(search::prepare(&self.topos.list[topo], bundle, Stage::ALL)))
            .clone()
    }

    fn best_cached(&self, topo: usize, free: u64, bundle: &Bundle, key: u64) -> Option<(u64, f64)> {
        if let Some(&(hit, exhausted)) = self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(&(topo, free, key)) {
            if exhausted {
                self.meter.note_exhausted();
            }
            return hit;
        }
        let prep = self.prepared(topo, bundle, key);
        let before = self.meter.steps();
        let result = search::best(&self.topos.list[topo], &prep, free, &self.meter);
        let exhausted = result.is_none() && self.meter.steps() - before > u64::from(search::SEARCH_BUDGET);
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() > 1_000_000 {
            cache.clear();
        }
        cache.insert((topo, free, key), (result, exhausted));
        result
    }
}

/// Small states for the strategies' own tests: nodes of `gpus` devices each, every pair joined
/// by a scale-up link, in the scale-up domain `clique`.
#[cfg(test)]
pub(crate) mod testkit {
    use accel_model::{Accelerator, Domain, DomainKind, HostInfo, Link, LinkKind, Machine, Vocabulary};

    use super::State;
    use crate::cluster::{Cluster, ClusterNode, MachineRef};

    pub fn machine(gpus: usize, clique: &str) -> Machine {
        let mut m = Machine::new(HostInfo::default());
        for i in 0..gpus {
            m.accelerators.push(Accelerator {
                id: format!("gpu{i}"),
                index: i as u32,
                vendor: "test".into(),
                plugin: "test".into(),
                sku: None,
                product: "test".into(),
                family: None,
                architecture: None,
                pci: None,
                pci_vendor: None,
                pci_device: None,
                numa_node: Some(0),
                memory_bytes: None,
                memory_numa_node: None,
                uuid: None,
                serial: None,
                partition: None,
                dtypes: Vec::new(),
                vocabulary: Vocabulary { label: "GPU".into(), ..Default::default() },
                health: None,
            });
        }
        for a in 0..gpus {
            for b in a + 1..gpus {
                let (a, b) = (format!("gpu{a}"), format!("gpu{b}"));
                m.links.push(Link::new(a, b, LinkKind::new("link"), 1, Some(100.0)));
            }
        }
        m.domains.push(Domain {
            kind: DomainKind::new("clique"),
            scale_up: true,
            name: clique.into(),
            source: "test".into(),
            accelerators: Vec::new(),
            nodes: None,
        });
        m
    }

    /// A state of (name, devices, clique) nodes, `used` devices of each taken.
    pub fn state(nodes: &[(&str, usize, &str)], used: &[(&str, usize)]) -> State {
        let cluster = Cluster {
            nodes: nodes
                .iter()
                .map(|&(name, gpus, clique)| ClusterNode {
                    name: name.into(),
                    labels: Default::default(),
                    machine: MachineRef::Inline(Box::new(machine(gpus, clique))),
                    allocated: used
                        .iter()
                        .filter(|(n, _)| *n == name)
                        .flat_map(|&(_, k)| (0..k).map(|i| format!("gpu{i}")))
                        .collect(),
                })
                .collect(),
            ..Default::default()
        };
        State::new(&cluster).unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::testkit::state;
    use super::*;

    #[test]
    fn free_devices_and_the_index_move_together() {
        let mut st = state(&[("a", 4, "A"), ("b", 4, "A")], &[("a", 1)]);
        let a = st.node_index("a").unwrap();
        assert_eq!(st.free(a).count_ones(), 3);
        let clique = st.index().pair_id("clique", "A").unwrap();
        assert_eq!(st.index().pairs[clique].free, 7);
        st.set_free(a, 0);
        assert_eq!(st.index().pairs[clique].free, 4);
        assert_eq!(st.names_of(a, 0b11, true), ["GPU0", "GPU1"]);
        assert!(matches!(st.mask_of(a, &["gpu9"]), Err(PlanError::UnknownDevice { .. })));
    }

    #[test]
    fn equal_searches_are_memoised() {
        let st = state(&[("a", 8, "A"), ("b", 8, "A")], &[]);
        let bundle = Bundle::new(4);
        let key = bundle_key(&bundle);
        let first = st.best_cached(0, 0xff, &bundle, key);
        let steps = st.meter.steps();
        assert_eq!(st.best_cached(0, 0xff, &bundle, key), first);
        assert_eq!(st.meter.steps(), steps, "the second search is a cache hit");
    }
}
