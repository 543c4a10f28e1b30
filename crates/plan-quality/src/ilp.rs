//! A gang as an integer linear program over every valid device set of every node (the options
//! [`Planner::options`] lists), solved exactly; the same constraints written directly for a
//! brute-force enumeration and for checking anyone's assignment.
//!
//! Variables: `y[c,o]` binary, class `c` of interchangeable bundles (same bundle, same
//! sub-group) takes option `o`; `u[n]` binary, node `n` is used; `z[d]` binary per domain of the
//! request's `same` kind, of its `within` tier, and per (sub-group, domain) of its `groups`.
//! Constraints: each class takes as many options as it has bundles; each device is in at most
//! one chosen option, and only on a used node (`Σ_{o∋d} y ≤ u[n]`, which also gives `y ≤ u`);
//! `spread` allows one bundle a node; one domain for `same` and for a hard `within`; each
//! sub-group inside one domain of its kind, a different one per sub-group when its replicas
//! spread. Objective: [`crate::objective`], written as `Σ quality(o)·y + W_PACK·(bundles − Σ u)`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use accel_plan::{machine_domains, Breakdown, Bundle, Cluster, Placement, Planner, Request, Strategy, W_PACK};
use anyhow::{bail, Context, Result};
use good_lp::{
    microlp, variable, Expression, ProblemVariables, ResolutionError, Solution, SolutionStatus, SolverModel,
};
use good_lp::{Variable, WithTimeLimit};

use crate::objective::{objective, quality};

/// One valid device set of one node for one bundle.
#[derive(Debug, Clone)]
pub struct Opt {
    pub node: usize,
    /// Device ids, in the node's order.
    pub ids: Vec<String>,
    /// Global device numbers (unique across the cluster).
    pub devices: Vec<usize>,
    pub breakdown: Breakdown,
    pub quality: f64,
}

/// Bundles that are interchangeable: the same bundle, in the same sub-group.
#[derive(Debug, Clone)]
pub struct Class {
    /// Index into [`Problem::specs`].
    pub spec: usize,
    pub subgroup: Option<usize>,
    /// The request's bundles in it, in request order.
    pub bundles: Vec<usize>,
}

/// A constraint or objective term to leave out: a deliberately wrong formulation, so that tests
/// can show the brute-force comparison catches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drop {
    /// Devices may be taken by several bundles.
    DeviceOnce,
    /// The request's `same` domain is not enforced.
    Same,
    /// The objective forgets the pack bonus.
    PackTerm,
}

/// A request on a cluster, with every option enumerated on the starting state.
#[derive(Debug)]
pub struct Problem {
    pub request: Request,
    /// Node names, in the cluster's order.
    pub nodes: Vec<String>,
    /// The labels the planner sees on each node: the machine's domains, then the node's labels.
    pub labels: Vec<BTreeMap<String, String>>,
    /// The distinct bundles of the request, and their options on the nodes the request allows.
    pub specs: Vec<(Bundle, Vec<Opt>)>,
    /// Which spec each bundle is.
    pub bundle_spec: Vec<usize>,
    pub classes: Vec<Class>,
    /// The label key of the request's `within` tier, when it is hard.
    pub tier_key: Option<String>,
}

/// Why a problem was not built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// A node's enumeration would pass the planner's search budget.
    Budget,
    /// More options than the limit (the count).
    TooMany(usize),
}

/// A solution: for each bundle of the request, its (spec, option index).
pub type Assignment = Vec<(usize, usize)>;

/// What the solver returned.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Proven optimal: the solver's objective value and the assignment.
    Optimal {
        value: f64,
        assignment: Assignment,
    },
    Infeasible,
    /// The time limit passed before optimality was proven.
    TimeLimit,
}

impl Problem {
    /// Enumerates the options of every distinct bundle on every node the request allows, on the
    /// planner's current state; skips when a node passes the search budget or the options pass
    /// `max_options` in all.
    pub fn build(
        cluster: &Cluster,
        planner: &mut Planner,
        request: &Request,
        max_options: usize,
    ) -> Result<std::result::Result<Problem, Skip>> {
        let mut nodes = Vec::new();
        let mut labels = Vec::new();
        for node in &cluster.nodes {
            let mut l = machine_domains(cluster.machine(node)?);
            l.extend(node.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
            nodes.push(node.name.clone());
            labels.push(l);
        }
        let tier_key = match &request.within {
            Some(w) if w.hard => {
                Some(tier_key(cluster, &labels, &w.tier).with_context(|| format!("tier {:?}", w.tier))?)
            }
            _ => None,
        };
        let mut problem = Problem {
            request: request.clone(),
            nodes,
            labels,
            specs: Vec::new(),
            bundle_spec: Vec::new(),
            classes: Vec::new(),
            tier_key,
        };
        if let Some(g) = &request.groups {
            if g.size == 0 || request.bundles.len() % g.size as usize != 0 {
                bail!("groups of {} do not divide {} bundles", g.size, request.bundles.len());
            }
        }
        let allowed: Vec<usize> = (0..problem.nodes.len()).filter(|&n| problem.allowed(n)).collect();
        let mut global = HashMap::new();
        let mut total = 0usize;
        for (b, bundle) in request.bundles.iter().enumerate() {
            let spec = match problem.specs.iter().position(|(s, _)| s == bundle) {
                Some(s) => s,
                None => {
                    let mut opts = Vec::new();
                    for &n in &allowed {
                        let Some(list) = planner.options(&problem.nodes[n], bundle)? else {
                            return Ok(Err(Skip::Budget));
                        };
                        total += list.len();
                        if total > max_options {
                            return Ok(Err(Skip::TooMany(total)));
                        }
                        for (ids, breakdown) in list {
                            let devices = ids
                                .iter()
                                .map(|id| {
                                    let next = global.len();
                                    *global.entry((n, id.clone())).or_insert(next)
                                })
                                .collect();
                            let quality = quality(&breakdown, bundle.count);
                            opts.push(Opt { node: n, ids, devices, breakdown, quality });
                        }
                    }
                    problem.specs.push((bundle.clone(), opts));
                    problem.specs.len() - 1
                }
            };
            problem.bundle_spec.push(spec);
            let subgroup = request.groups.as_ref().map(|g| b / g.size as usize);
            match problem.classes.iter_mut().find(|c| c.spec == spec && c.subgroup == subgroup) {
                Some(c) => c.bundles.push(b),
                None => problem.classes.push(Class { spec, subgroup, bundles: vec![b] }),
            }
        }
        Ok(Ok(problem))
    }

    /// Options in all (the ILP's `y` variables, before classes share them).
    pub fn option_count(&self) -> usize {
        self.specs.iter().map(|(_, o)| o.len()).sum()
    }

    /// The node's domain of a kind (`node` is the node itself).
    fn domain(&self, node: usize, kind: &str) -> Option<String> {
        if kind == "node" {
            return Some(self.nodes[node].clone());
        }
        self.labels[node].get(kind).cloned()
    }

    /// Whether the request may use a node at all: `select`, and a value for each domain kind it
    /// constrains.
    fn allowed(&self, node: usize) -> bool {
        let r = &self.request;
        let selected = r.select.iter().all(|(k, v)| match k.as_str() {
            "node" => self.nodes[node] == *v,
            _ => self.labels[node].get(k) == Some(v),
        });
        let kinds = [r.same.as_deref(), self.tier_key.as_deref(), r.groups.as_ref().map(|g| g.same.as_str())];
        selected && kinds.into_iter().flatten().all(|k| self.domain(node, k).is_some())
    }

    pub fn opt(&self, bundle: usize, option: usize) -> &Opt {
        &self.specs[self.bundle_spec[bundle]].1[option]
    }

    /// The objective of an assignment, through [`crate::objective::objective`].
    pub fn value(&self, a: &Assignment) -> f64 {
        objective(a.iter().enumerate().map(|(b, &(s, o))| {
            let opt = &self.specs[s].1[o];
            (self.nodes[opt.node].as_str(), self.request.bundles[b].count, &opt.breakdown)
        }))
    }

    /// Every constraint, written directly: `Err` names the first one an assignment breaks.
    pub fn check(&self, a: &Assignment) -> std::result::Result<(), String> {
        let r = &self.request;
        if a.len() != r.bundles.len() {
            return Err(format!("{} bundles assigned of {}", a.len(), r.bundles.len()));
        }
        let mut used = BTreeSet::new();
        let mut nodes = BTreeSet::new();
        for (b, &(s, o)) in a.iter().enumerate() {
            if s != self.bundle_spec[b] {
                return Err(format!("bundle {b}: an option of another bundle"));
            }
            let opt = &self.specs[s].1[o];
            if !nodes.insert(opt.node) && r.strategy == Strategy::Spread {
                return Err(format!("spread: two bundles on {}", self.nodes[opt.node]));
            }
            for d in &opt.devices {
                if !used.insert(*d) {
                    return Err(format!("device taken twice on {}", self.nodes[opt.node]));
                }
            }
        }
        let one_domain =
            |bundles: &mut dyn Iterator<Item = usize>, kind: &str| -> std::result::Result<String, String> {
                let values: BTreeSet<Option<String>> =
                    bundles.map(|b| self.domain(self.opt(b, a[b].1).node, kind)).collect();
                match values.into_iter().collect::<Vec<_>>().as_slice() {
                    [Some(v)] => Ok(v.clone()),
                    other => Err(format!("{kind}: bundles in {other:?}")),
                }
            };
        if let Some(kind) = &r.same {
            one_domain(&mut (0..a.len()), kind)?;
        }
        if let Some(key) = &self.tier_key {
            one_domain(&mut (0..a.len()), key)?;
        }
        if let Some(g) = &r.groups {
            let size = g.size as usize;
            let mut seen = BTreeSet::new();
            for s in 0..a.len() / size {
                let d =
                    one_domain(&mut (s * size..(s + 1) * size), &g.same).map_err(|e| format!("sub-group {s}: {e}"))?;
                if !seen.insert(d.clone()) && g.replicas == Strategy::Spread {
                    return Err(format!("replicas spread: two sub-groups in {}={d}", g.same));
                }
            }
        }
        Ok(())
    }

    /// The planner's placement as an assignment of this problem's options; `Err` when a bundle's
    /// devices are not among its options.
    pub fn assignment_of(&self, p: &Placement) -> std::result::Result<Assignment, String> {
        let mut a = vec![(0, 0); self.request.bundles.len()];
        for bp in &p.bundles {
            let s = self.bundle_spec[bp.bundle];
            let mut ids: Vec<&str> = bp.devices.iter().map(|d| d.id.as_str()).collect();
            ids.sort_unstable();
            let found = self.specs[s].1.iter().position(|o| {
                let mut mine: Vec<&str> = o.ids.iter().map(String::as_str).collect();
                mine.sort_unstable();
                self.nodes[o.node] == bp.node && mine == ids
            });
            let o = found.ok_or_else(|| format!("bundle {}: {} {ids:?} is not a listed option", bp.bundle, bp.node))?;
            a[bp.bundle] = (s, o);
        }
        Ok(a)
    }

    /// The planner's own score of an assignment: each bundle's full score (state terms
    /// included) on the state the bundles before it leave, in the planner's order (larger
    /// bundles first, ties in request order), plus `W_PACK` for a node an earlier bundle uses.
    /// Compared with a placement's `score`, it tells a deliberate trade (the planner's own
    /// objective prefers its choice) from a search miss.
    pub fn planner_score(&self, cluster: &Cluster, a: &Assignment) -> Result<f64> {
        let mut planner = Planner::new(cluster)?;
        let mut order: Vec<usize> = (0..a.len()).collect();
        order.sort_by_key(|&b| std::cmp::Reverse(self.request.bundles[b].count));
        let mut used = BTreeSet::new();
        let mut total = 0.0;
        for b in order {
            let opt = self.opt(b, a[b].1);
            let node = &self.nodes[opt.node];
            let ids: Vec<&str> = opt.ids.iter().map(String::as_str).collect();
            total += planner.score_of(node, &ids)?.total;
            if !used.insert(opt.node) && self.request.strategy == Strategy::Pack {
                total += W_PACK;
            }
            planner.mark_used(node, &ids)?;
        }
        Ok(total)
    }

    /// The best assignment by exhaustive enumeration (every option for every bundle, in request
    /// order, pruning only device clashes and spread), scored by [`Problem::value`] and checked
    /// by [`Problem::check`]. `None` when nothing is valid. For tiny instances only.
    pub fn brute_force(&self) -> Option<(f64, Assignment)> {
        fn go(p: &Problem, b: usize, a: &mut Assignment, used: &mut Vec<usize>, best: &mut Option<(f64, Assignment)>) {
            if b == p.request.bundles.len() {
                if p.check(a).is_ok() {
                    let v = p.value(a);
                    if best.as_ref().is_none_or(|(bv, _)| v > *bv) {
                        *best = Some((v, a.clone()));
                    }
                }
                return;
            }
            let s = p.bundle_spec[b];
            for (o, opt) in p.specs[s].1.iter().enumerate() {
                if opt.devices.iter().any(|d| used.contains(d)) {
                    continue;
                }
                a.push((s, o));
                used.extend(&opt.devices);
                go(p, b + 1, a, used, best);
                used.truncate(used.len() - opt.devices.len());
                a.pop();
            }
        }
        let mut best = None;
        go(self, 0, &mut Vec::new(), &mut Vec::new(), &mut best);
        best
    }

    /// Solves the ILP (leaving out `drop`, for tests) within `time_limit` seconds.
    pub fn solve(&self, time_limit: f64, drop: Option<Drop>) -> Result<Outcome> {
        let r = &self.request;
        if self.classes.iter().any(|c| self.specs[c.spec].1.is_empty()) {
            // A bundle without a single option: infeasible before any variable exists.
            return Ok(Outcome::Infeasible);
        }
        let pack = r.strategy == Strategy::Pack;
        let mut vars = ProblemVariables::new();
        let y: Vec<Vec<Variable>> = self
            .classes
            .iter()
            .map(|c| self.specs[c.spec].1.iter().map(|_| vars.add(variable().binary())).collect())
            .collect();
        let nodes: BTreeSet<usize> = self.specs.iter().flat_map(|(_, o)| o.iter().map(|o| o.node)).collect();
        let u: BTreeMap<usize, Variable> = nodes.iter().map(|&n| (n, vars.add(variable().binary()))).collect();
        let mut constraints = Vec::new();
        let mut obj = Expression::from(0.0);
        let mut per_device: BTreeMap<usize, (usize, Expression)> = BTreeMap::new();
        let mut per_node: BTreeMap<usize, Expression> = BTreeMap::new();
        for (c, class) in self.classes.iter().enumerate() {
            let mut count = Expression::from(0.0);
            for (o, opt) in self.specs[class.spec].1.iter().enumerate() {
                count.add_mul(1.0, y[c][o]);
                obj.add_mul(opt.quality, y[c][o]);
                for &d in &opt.devices {
                    per_device.entry(d).or_insert_with(|| (opt.node, Expression::from(0.0))).1.add_mul(1.0, y[c][o]);
                }
                per_node.entry(opt.node).or_default().add_mul(1.0, y[c][o]);
                if drop == Some(Drop::DeviceOnce) {
                    constraints.push((y[c][o] - u[&opt.node]).leq(0.0));
                }
            }
            constraints.push(count.eq(class.bundles.len() as f64));
        }
        // Each device in at most one chosen option, and only on a used node.
        if drop != Some(Drop::DeviceOnce) {
            for (_, (node, e)) in per_device {
                constraints.push((e - u[&node]).leq(0.0));
            }
        }
        if pack {
            if drop != Some(Drop::PackTerm) {
                obj += W_PACK * r.bundles.len() as f64;
                for v in u.values() {
                    obj.add_mul(-W_PACK, *v);
                }
            }
        } else {
            for (n, e) in per_node {
                constraints.push((e - u[&n]).leq(0.0));
            }
        }
        // Every used node in one domain of a kind: an indicator per domain, exactly one set.
        let mut one_domain = |vars: &mut ProblemVariables, kind: &str| {
            let mut z: BTreeMap<String, Variable> = BTreeMap::new();
            for (&n, &un) in &u {
                let d = self.domain(n, kind).expect("options only on nodes with the domain");
                let zd = *z.entry(d).or_insert_with(|| vars.add(variable().binary()));
                constraints.push((un - zd).leq(0.0));
            }
            let mut sum = Expression::from(0.0);
            for v in z.values() {
                sum.add_mul(1.0, *v);
            }
            constraints.push(sum.eq(1.0));
        };
        if let Some(kind) = r.same.as_deref().filter(|_| drop != Some(Drop::Same)) {
            one_domain(&mut vars, kind);
        }
        if let Some(key) = &self.tier_key {
            one_domain(&mut vars, key);
        }
        // Each sub-group in one domain of its kind: an indicator per (sub-group, domain).
        if let Some(g) = &r.groups {
            let mut per_domain: BTreeMap<String, Expression> = BTreeMap::new();
            for s in 0..r.bundles.len() / g.size as usize {
                let mut z: BTreeMap<String, Variable> = BTreeMap::new();
                for (c, class) in self.classes.iter().enumerate().filter(|(_, c)| c.subgroup == Some(s)) {
                    for (o, opt) in self.specs[class.spec].1.iter().enumerate() {
                        let d = self.domain(opt.node, &g.same).expect("options only on nodes with the domain");
                        let zd = *z.entry(d).or_insert_with(|| vars.add(variable().binary()));
                        constraints.push((y[c][o] - zd).leq(0.0));
                    }
                }
                let mut sum = Expression::from(0.0);
                for (d, v) in z {
                    sum.add_mul(1.0, v);
                    per_domain.entry(d).or_default().add_mul(1.0, v);
                }
                constraints.push(sum.eq(1.0));
            }
            if g.replicas == Strategy::Spread {
                for (_, e) in per_domain {
                    constraints.push(e.leq(1.0));
                }
            }
        }
        let mut model = vars.maximise(obj.clone()).using(microlp).with_time_limit(time_limit);
        for c in constraints {
            model = model.with(c);
        }
        let solution = match model.solve() {
            Ok(s) => s,
            Err(ResolutionError::Infeasible) => return Ok(Outcome::Infeasible),
            Err(ResolutionError::Other(msg)) if msg.contains("Time limit") => return Ok(Outcome::TimeLimit),
            Err(e) => bail!("solver: {e}"),
        };
        if !matches!(solution.status(), SolutionStatus::Optimal) {
            return Ok(Outcome::TimeLimit);
        }
        let mut assignment = vec![(0, 0); r.bundles.len()];
        for (c, class) in self.classes.iter().enumerate() {
            let chosen: Vec<usize> = (0..y[c].len()).filter(|&o| solution.value(y[c][o]) > 0.5).collect();
            if chosen.len() != class.bundles.len() {
                bail!("solver: class {c} took {} options for {} bundles", chosen.len(), class.bundles.len());
            }
            for (&b, o) in class.bundles.iter().zip(chosen) {
                assignment[b] = (class.spec, o);
            }
        }
        Ok(Outcome::Optimal { value: solution.eval(&obj), assignment })
    }
}

/// The label key of a fabric tier: the cluster's `tiers` (or the tiers its nodes carry), matched
/// whole or by its last path segment (`leaf` is `network.topology.nvidia.com/leaf`).
fn tier_key(cluster: &Cluster, labels: &[BTreeMap<String, String>], tier: &str) -> Option<String> {
    let tiers = if cluster.tiers.is_empty() {
        accel_plan::fabric::default_tiers(labels.iter().flat_map(|l| l.keys().map(String::as_str)))
    } else {
        cluster.tiers.clone()
    };
    tiers.iter().find(|k| *k == tier).or_else(|| tiers.iter().find(|k| k.rsplit('/').next() == Some(tier))).cloned()
}
