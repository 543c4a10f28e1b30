//! What a strategy is asked and what it answers: an [`Ask`] (the request, its bundles' search
//! keys, the nodes a repair must avoid) and a [`Proposal`], a partial or complete decision that
//! the face ([`crate::Planner`]) turns into a placement and commits.

use std::collections::BTreeSet;

use crate::request::Request;
use crate::scope::Scope;
use crate::score::Breakdown;
use crate::state::{bundle_key, Read};

/// One decision's question.
#[derive(Debug)]
pub(crate) struct Ask<'a> {
    pub request: &'a Request,
    /// Each bundle's memo key ([`bundle_key`]).
    pub keys: Vec<u64>,
    /// Nodes this decision must not use (a repair's lost nodes).
    pub exclude: &'a BTreeSet<usize>,
}

impl<'a> Ask<'a> {
    pub fn new(request: &'a Request, exclude: &'a BTreeSet<usize>) -> Ask<'a> {
        Ask { request, keys: request.bundles.iter().map(bundle_key).collect(), exclude }
    }
}

/// Each placed bundle: (bundle, node, devices, score).
pub(crate) type Placed = Vec<(usize, usize, u64, Breakdown)>;

/// A partial or complete decision.
#[derive(Debug, Clone, Default)]
pub(crate) struct Proposal {
    pub placed: Placed,
    pub total: f64,
    pub failed_bundle: Option<usize>,
    /// Free devices of the nodes this decision takes from, after it.
    pub overrides: Vec<(usize, u64)>,
    /// Bin-packing domains this decision takes from.
    pub touched: Vec<usize>,
    /// Per placed bundle with a sub-group: (bundle, sub-group, domain value).
    pub domains: Vec<(usize, usize, String)>,
    /// The domains sub-groups took (pairs, or nodes for `node`), per sub-group.
    pub group_domains: Vec<Scope>,
}

impl Proposal {
    /// A node's free devices as this decision leaves them.
    pub fn free(&self, r: &(impl Read + ?Sized), node: usize) -> u64 {
        self.overrides.iter().find(|(n, _)| *n == node).map_or(r.free(node), |(_, f)| *f)
    }

    /// Takes `mask` of `node` (whose free devices were `free`) for bundle `b`, scoring `total`.
    pub fn take(&mut self, r: &(impl Read + ?Sized), b: usize, node: usize, mask: u64, total: f64) {
        let free = self.free(r, node);
        let breakdown = crate::score::score(r.topo(node), mask, free);
        self.total += total;
        self.placed.push((b, node, mask, breakdown));
        if let Some(d) = r.index().bin_of(r.label_set(node)) {
            if !self.touched.contains(&d) {
                self.touched.push(d);
            }
        }
        match self.overrides.iter_mut().find(|(n, _)| *n == node) {
            Some(entry) => entry.1 &= !mask,
            None => self.overrides.push((node, free & !mask)),
        }
    }
}
