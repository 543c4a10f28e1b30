//! The planner's face: [`Planner`] holds the one mutable [`State`] (free devices per node and the
//! index over them) and the allocations; the strategies (`domains`, `groups`, `packing`,
//! `repair`) read the state through [`Read`] and return proposals, which this face turns into
//! placements and commits. Nodes of one class (same topology, free devices and bin-packing
//! standing) are searched once; a decision reads the classes and domains it needs, in best-fit
//! order, never every node.

use std::collections::{BTreeMap, BTreeSet};

use accel_model::Machine;

use crate::cluster::{Cluster, Topo};
use crate::domains::{self, Failed};
use crate::explain::{self, View};
use crate::placement::{self, DeviceSet, Placement};
use crate::proposal::{Ask, Proposal};
use crate::request::{Bundle, Request};
use crate::score::{score, Breakdown};
use crate::search::{self, Meter};
use crate::state::{bundle_key, Read, State};
use crate::{repair, scope, PlanError};

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
    st: State,
    allocations: BTreeMap<u64, Allocation>,
    next_id: u64,
}

/// No node excluded.
static NONE: BTreeSet<usize> = BTreeSet::new();

impl Planner {
    /// A planner over `cluster`. Everything it needs about a device (dtypes, memory, link
    /// bandwidth) is on the machines: discovery resolved the SKUs.
    pub fn new(cluster: &Cluster) -> Result<Planner, PlanError> {
        Ok(Planner { st: State::new(cluster)?, allocations: BTreeMap::new(), next_id: 1 })
    }

    /// Adds one node (labels override the machine's own domains). Its machine's scale-up
    /// domain kinds become bin-packing domains for the nodes added after it.
    pub fn add_node(
        &mut self,
        name: &str,
        labels: &BTreeMap<String, String>,
        machine: &Machine,
    ) -> Result<(), PlanError> {
        self.st.add_node(name, labels, machine)
    }

    pub fn node_count(&self) -> usize {
        self.st.node_count()
    }

    /// Marks devices (ids or labels such as `GPU3`) of a node as used by work the planner did
    /// not place.
    pub fn mark_used(&mut self, node: &str, devices: &[&str]) -> Result<(), PlanError> {
        let i = self.st.node_index(node)?;
        let mask = self.st.mask_of(i, devices)?;
        self.st.set_free(i, self.st.free(i) & !mask);
        Ok(())
    }

    /// Sets exactly which devices of a node are free (to follow an outside source of truth,
    /// such as Ray's per-device resources). `sync_free(node, &[])` takes a node that is gone
    /// out of every later decision.
    pub fn sync_free(&mut self, node: &str, free_devices: &[&str]) -> Result<(), PlanError> {
        let i = self.st.node_index(node)?;
        let mask = self.st.mask_of(i, free_devices)?;
        self.st.set_free(i, mask);
        Ok(())
    }

    /// Free device ids of a node.
    pub fn free_devices(&self, node: &str) -> Result<Vec<String>, PlanError> {
        let i = self.st.node_index(node)?;
        Ok(self.st.names_of(i, self.st.free(i), false))
    }

    /// The short labels (`GPU3`) of devices of a node, given by id.
    pub fn labels(&self, node: &str, devices: &[&str]) -> Result<Vec<String>, PlanError> {
        let i = self.st.node_index(node)?;
        let mask = self.st.mask_of(i, devices)?;
        Ok(self.st.names_of(i, mask, true))
    }

    /// A node's labels, its machine's domains included.
    pub fn node_labels(&self, node: &str) -> Result<&BTreeMap<String, String>, PlanError> {
        let i = self.st.node_index(node)?;
        Ok(self.st.labels(i))
    }

    /// The fabric tiers this planner counts, lowest first (label keys).
    pub fn tiers(&self) -> &[String] {
        self.st.tiers()
    }

    /// Tiers crossed between two nodes: 0 for the same node, `k` when the lowest tier whose
    /// one switch holds both is the `k`-th, and one more than the tier count when none does.
    pub fn distance(&self, a: &str, b: &str) -> Result<u32, PlanError> {
        let (a, b) = (self.st.node_index(a)?, self.st.node_index(b)?);
        Ok(self.st.distance_of(&[a, b]))
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
            let node = self.st.node_index(&b.node)?;
            let ids: Vec<&str> = b.devices.iter().map(|d| d.id.as_str()).collect();
            let mask = self.st.mask_of(node, &ids)?;
            self.st.set_free(node, self.st.free(node) & !mask);
            taken.push((node, mask));
        }
        Ok(taken)
    }

    /// Frees the devices of an allocation.
    pub fn release(&mut self, id: u64) -> Result<(), PlanError> {
        let taken = self.allocations.remove(&id).ok_or(PlanError::UnknownAllocation(id))?;
        for (node, mask) in taken.bundles {
            self.st.set_free(node, self.st.free(node) | mask);
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
        let lost: BTreeSet<usize> = lost.iter().copied().collect();
        let ask = repair::ask(&self.st, id, &alloc.request, &alloc.bundles, &lost)?;
        // The lost bundles' devices stay taken (they failed, or their node did): the caller
        // frees them with `sync_free` once they are back.
        if let Some(a) = self.allocations.get_mut(&id) {
            for &b in &lost {
                a.bundles[b].1 = 0;
            }
        }
        self.st.meter.reset();
        let placed = match self.decide(&ask.request, &ask.exclude) {
            Ok(p) => p,
            Err(PlanError::Infeasible(mut why)) => {
                let place = ask.domain.as_ref().map(|(k, v)| format!(" inside {k}={v}")).unwrap_or_default();
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
        if let Some(a) = self.allocations.get_mut(&id) {
            for (k, &b) in lost.iter().enumerate() {
                a.bundles[b] = taken[k];
            }
        }
        self.placement_of(id)
    }

    /// The current placement of an allocation.
    pub fn placement_of(&self, id: u64) -> Result<Placement, PlanError> {
        let alloc = self.allocations.get(&id).ok_or(PlanError::UnknownAllocation(id))?;
        let mut proposal = Proposal::default();
        for (b, &(node, mask)) in alloc.bundles.iter().enumerate() {
            let breakdown = score(self.st.topo(node), mask, self.st.free(node) | mask);
            proposal.total += breakdown.total;
            proposal.placed.push((b, node, mask, breakdown));
            if let Some(g) = &alloc.request.groups {
                let group = b / g.size.max(1) as usize;
                let value = if g.same == "node" {
                    self.st.name(node).to_owned()
                } else {
                    self.st.labels(node).get(&g.same).cloned().unwrap_or_default()
                };
                proposal.domains.push((b, group, value));
            }
        }
        let mut p = placement::from_proposal(&self.st, &alloc.request, proposal);
        p.id = id;
        Ok(p)
    }

    /// The score the planner gives `devices` of `node` (for any bundle), in the node's current state
    /// (the devices must be free). For tests and comparisons with other placers.
    pub fn score_of(&self, node: &str, devices: &[&str]) -> Result<Breakdown, PlanError> {
        let i = self.st.node_index(node)?;
        let mask = self.st.mask_of(i, devices)?;
        Ok(score(self.st.topo(i), mask, self.st.free(i)))
    }

    /// Every valid device set of `node` for `bundle` in the node's current state, with the
    /// score the planner gives it; `None` when enumerating them would pass the search budget.
    /// For benchmarks that compare the planner with exact solvers.
    pub fn options(&mut self, node: &str, bundle: &Bundle) -> Result<Option<Vec<DeviceSet>>, PlanError> {
        let i = self.st.node_index(node)?;
        let prep = self.st.prepared(self.st.topo_id(i), bundle, bundle_key(bundle));
        let (t, free) = (self.st.topo(i), self.st.free(i));
        let Some(sets) = search::all(t, &prep, free, &self.st.meter) else { return Ok(None) };
        Ok(Some(sets.into_iter().map(|(mask, _)| (self.st.names_of(i, mask, false), score(t, mask, free))).collect()))
    }

    /// Search steps the last [`Planner::plan`] (or [`Planner::allocate`]) took, explanation
    /// included. Each search stops at [`search::SEARCH_BUDGET`] steps, so this is bounded by
    /// the request's size, never by the number of subsets.
    pub fn last_search_steps(&self) -> u64 {
        self.st.meter.steps()
    }

    /// Plans without committing. Fails with an explanation naming the constraint that cannot
    /// be met and the nearest feasible alternative. Every search is bounded; when one ran out of
    /// budget and nothing was found, the explanation says so (`budget_exhausted`).
    pub fn plan(&mut self, request: &Request) -> Result<Placement, PlanError> {
        self.st.meter.reset();
        self.decide(request, &NONE)
    }

    /// The placement of `request` off the `exclude`d nodes, or its explanation.
    fn decide(&mut self, request: &Request, exclude: &BTreeSet<usize>) -> Result<Placement, PlanError> {
        match self.propose(request, exclude)? {
            Ok(p) => Ok(p),
            Err(failed) => Err(self.explain(failed, exclude)),
        }
    }

    /// The placement of `request`, or why the strategies found none (not yet explained).
    fn propose(&self, request: &Request, exclude: &BTreeSet<usize>) -> Result<Result<Placement, Failed>, PlanError> {
        validate(request)?;
        self.st.known.check(request)?;
        let ask = Ask::new(request, exclude);
        Ok(domains::decide(&self.st, &ask)?.map(|proposal| {
            let nodes: BTreeSet<usize> = proposal.placed.iter().map(|&(_, n, _, _)| n).collect();
            let mut p = placement::from_proposal(&self.st, request, proposal);
            if request.within.is_some() || !self.st.tiers().is_empty() {
                p.span = domains::span(&self.st, &nodes);
            }
            p
        }))
    }

    /// The explanation of a failed decision, naming the one constraint (`explain::explain`).
    fn explain(&mut self, failed: Failed, exclude: &BTreeSet<usize>) -> PlanError {
        // One node per class among those the decision could use.
        let reps: Vec<usize> = scope::selected(&self.st, &failed.request)
            .map(|unit| {
                scope::representatives(&self.st, exclude, &unit, 0, &[]).into_iter().map(|(n, _, _)| n).collect()
            })
            .unwrap_or_default();
        let mut err = explain::explain(self, &failed.request, &reps, failed.tried, failed.partial);
        if let PlanError::Infeasible(why) = &mut err {
            if failed.exhausted && !why.budget_exhausted {
                why.budget_exhausted = true;
                why.message += &format!(
                    " (infeasible, budget exhausted: a search stopped after {} steps without a valid set)",
                    search::SEARCH_BUDGET
                );
            }
        }
        err
    }
}

/// What the explanation reads of the planner.
impl View for Planner {
    fn topo(&self, node: usize) -> &Topo {
        self.st.topo(node)
    }
    fn node_name(&self, node: usize) -> &str {
        self.st.name(node)
    }
    fn free_mask(&self, node: usize) -> u64 {
        self.st.free(node)
    }
    fn meter(&self) -> &Meter {
        &self.st.meter
    }
    fn plan_summary(&mut self, request: &Request) -> Option<String> {
        let pl = self.propose(request, &NONE).ok()?.ok()?;
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
    fn plan_size(&mut self, request: &Request) -> Option<(usize, usize)> {
        let pl = self.propose(request, &NONE).ok()?.ok()?;
        let nodes: BTreeSet<&str> = pl.bundles.iter().map(|b| b.node.as_str()).collect();
        Some((pl.bundles.len(), nodes.len()))
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
