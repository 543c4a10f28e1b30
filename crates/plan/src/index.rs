//! The free-capacity index: nodes grouped into classes (topology, free devices, and whether their
//! bin-packing domain is whole), over the whole cluster and per label value, and every label
//! key's domains ordered by free devices. Allocate and release update it; a decision reads only
//! the classes and domains it needs, never every node.

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Nodes in one class are interchangeable for a bundle's search: same topology, same free
/// devices, and the same bin-packing standing (a whole free domain or not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Class {
    pub topo: usize,
    pub free: u64,
    /// The node's bin-packing domain has every usable device free: taking from it breaks a
    /// whole domain.
    pub whole: bool,
}

/// Classes and their members (node indices, ascending).
pub(crate) type Classes = BTreeMap<Class, BTreeSet<usize>>;

/// One label value (`rack=r7`): the nodes that carry it, by class, and their free devices.
#[derive(Debug)]
pub(crate) struct Pair {
    pub key: usize,
    pub value: String,
    pub classes: Classes,
    /// Free (usable) devices over its nodes.
    pub free: u64,
    /// Nodes whose usable devices are not all free (bin-packing domains only).
    busy: u32,
    /// Nodes by free device count: `hist[c]` nodes have exactly `c` free.
    hist: Vec<u32>,
}

impl Pair {
    /// Nodes with at least `count` free devices.
    pub fn nodes_with(&self, count: u32) -> u32 {
        self.hist.iter().skip(count as usize).sum()
    }

    /// The most free devices any of its nodes has.
    pub fn roomiest(&self) -> u32 {
        self.hist.iter().rposition(|&n| n > 0).unwrap_or(0) as u32
    }
}

#[derive(Debug, Default)]
pub(crate) struct Index {
    pub all: Classes,
    pub pairs: Vec<Pair>,
    pair_ids: HashMap<(usize, String), usize>,
    pub keys: Vec<String>,
    key_ids: HashMap<String, usize>,
    /// Per key: its values as (free devices, pair), ascending: best fit first.
    pub order: Vec<BTreeSet<(u64, usize)>>,
    /// The values of each key that share nodes with a value: (pair, key) -> pairs, so an outer
    /// domain lists its inner ones (a spine's NVLink domains) without reading its nodes.
    children: HashMap<(usize, usize), BTreeSet<usize>>,
    /// Per label set: its pairs, and its bin-packing pair.
    set_pairs: Vec<Vec<usize>>,
    set_bin: Vec<Option<usize>>,
}

impl Index {
    pub fn key_id(&self, key: &str) -> Option<usize> {
        self.key_ids.get(key).copied()
    }

    /// The values of `key` whose nodes share `pair` (for nested domains: the ones inside it).
    pub fn children(&self, pair: usize, key: usize) -> impl Iterator<Item = usize> + '_ {
        self.children.get(&(pair, key)).into_iter().flatten().copied()
    }

    pub fn pair_id(&self, key: &str, value: &str) -> Option<usize> {
        let k = self.key_id(key)?;
        self.pair_ids.get(&(k, value.to_owned())).copied()
    }

    /// The bin-packing domain (a pair) of a label set.
    pub fn bin_of(&self, label_set: usize) -> Option<usize> {
        self.set_bin[label_set]
    }

    /// Registers a new label set; `bin_kinds` are the keys that name bin-packing domains (the
    /// first one the set carries is its domain).
    pub fn add_label_set(&mut self, labels: &BTreeMap<String, String>, bin_kinds: &BTreeSet<String>) {
        let mut pairs = Vec::with_capacity(labels.len());
        let mut bin = None;
        for (k, v) in labels {
            let key = match self.key_ids.get(k) {
                Some(&id) => id,
                None => {
                    self.keys.push(k.clone());
                    self.order.push(BTreeSet::new());
                    self.key_ids.insert(k.clone(), self.keys.len() - 1);
                    self.keys.len() - 1
                }
            };
            let is_bin = bin_kinds.contains(k);
            let id = *self.pair_ids.entry((key, v.clone())).or_insert_with(|| {
                self.pairs.push(Pair {
                    key,
                    value: v.clone(),
                    classes: Classes::new(),
                    free: 0,
                    busy: 0,
                    hist: vec![0; crate::MAX_DEVICES_PER_NODE + 1],
                });
                self.order[key].insert((0, self.pairs.len() - 1));
                self.pairs.len() - 1
            });
            if is_bin && bin.is_none() {
                bin = Some(id);
            }
            pairs.push(id);
        }
        for &a in &pairs {
            for &b in &pairs {
                if a != b {
                    self.children.entry((a, self.pairs[b].key)).or_default().insert(b);
                }
            }
        }
        self.set_pairs.push(pairs);
        self.set_bin.push(bin);
    }

    /// Whether the bin-packing domain of a label set has every usable device free.
    pub fn whole(&self, label_set: usize) -> bool {
        self.set_bin[label_set].is_some_and(|b| self.pairs[b].busy == 0)
    }

    fn class(&self, label_set: usize, topo: usize, free: u64) -> Class {
        Class { topo, free, whole: self.whole(label_set) }
    }

    fn remove(&mut self, node: usize, label_set: usize, class: Class) {
        fn take(classes: &mut Classes, class: Class, node: usize) {
            if let Some(set) = classes.get_mut(&class) {
                set.remove(&node);
                if set.is_empty() {
                    classes.remove(&class);
                }
            }
        }
        take(&mut self.all, class, node);
        for i in 0..self.set_pairs[label_set].len() {
            let p = self.set_pairs[label_set][i];
            take(&mut self.pairs[p].classes, class, node);
        }
    }

    fn insert(&mut self, node: usize, label_set: usize, class: Class) {
        self.all.entry(class).or_default().insert(node);
        for i in 0..self.set_pairs[label_set].len() {
            let p = self.set_pairs[label_set][i];
            self.pairs[p].classes.entry(class).or_default().insert(node);
        }
    }

    /// Adds a node with `free` of its `usable` devices free. `nodes` gives any node's (label
    /// set, topology, free devices), for the members of a bin-packing domain that changes
    /// standing.
    pub fn add_node(
        &mut self,
        node: usize,
        label_set: usize,
        topo: usize,
        (usable, free): (u64, u64),
        nodes: &dyn Fn(usize) -> (usize, usize, u64),
    ) {
        for i in 0..self.set_pairs[label_set].len() {
            let p = self.set_pairs[label_set][i];
            self.pairs[p].hist[free.count_ones() as usize] += 1;
        }
        self.move_free(label_set, 0, free);
        if let Some(b) = self.set_bin[label_set].filter(|_| free != usable) {
            self.shift_busy(b, true, node, nodes);
        }
        let class = self.class(label_set, topo, free);
        self.insert(node, label_set, class);
    }

    /// Moves a node from `old` free devices to `new` (of `usable`).
    pub fn update(
        &mut self,
        node: usize,
        label_set: usize,
        topo: usize,
        (old, new, usable): (u64, u64, u64),
        nodes: &dyn Fn(usize) -> (usize, usize, u64),
    ) {
        let class = self.class(label_set, topo, old);
        self.remove(node, label_set, class);
        for i in 0..self.set_pairs[label_set].len() {
            let p = self.set_pairs[label_set][i];
            self.pairs[p].hist[old.count_ones() as usize] -= 1;
            self.pairs[p].hist[new.count_ones() as usize] += 1;
        }
        self.move_free(label_set, old, new);
        let (was, is) = (old != usable, new != usable);
        if let Some(b) = self.set_bin[label_set].filter(|_| was != is) {
            self.shift_busy(b, is, node, nodes);
        }
        let class = self.class(label_set, topo, new);
        self.insert(node, label_set, class);
    }

    /// One more (`up`) or one fewer busy node in domain `b`. When the domain turns from whole
    /// to partly used or back, every other member changes class. `node` is in no class now.
    fn shift_busy(&mut self, b: usize, up: bool, node: usize, nodes: &dyn Fn(usize) -> (usize, usize, u64)) {
        let before = self.pairs[b].busy;
        let after = if up { before + 1 } else { before.saturating_sub(1) };
        if (before == 0) == (after == 0) {
            self.pairs[b].busy = after;
            return;
        }
        let members: Vec<usize> = self.pairs[b].classes.values().flatten().copied().filter(|&m| m != node).collect();
        let moved: Vec<(usize, usize, usize, u64)> = members
            .into_iter()
            .map(|m| {
                let (ls, t, f) = nodes(m);
                (m, ls, t, f)
            })
            .collect();
        for &(m, ls, t, f) in &moved {
            let c = self.class(ls, t, f);
            self.remove(m, ls, c);
        }
        self.pairs[b].busy = after;
        for (m, ls, t, f) in moved {
            let c = self.class(ls, t, f);
            self.insert(m, ls, c);
        }
    }

    fn move_free(&mut self, label_set: usize, old: u64, new: u64) {
        let (old, new) = (u64::from(old.count_ones()), u64::from(new.count_ones()));
        if old == new {
            return;
        }
        for i in 0..self.set_pairs[label_set].len() {
            let p = self.set_pairs[label_set][i];
            let key = self.pairs[p].key;
            self.order[key].remove(&(self.pairs[p].free, p));
            self.pairs[p].free = self.pairs[p].free + new - old;
            self.order[key].insert((self.pairs[p].free, p));
        }
    }
}
