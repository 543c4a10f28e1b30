//! Repair: what placing the lost bundles of an allocation again asks. The lost bundles stay in
//! the same domain as before (the sub-group's domain, the request's `same` domain, or else the
//! lost node's bin-packing domain; anywhere only when the old node had none), off the lost nodes
//! (and, for `spread`, off the surviving bundles' nodes). Reads the state through [`Read`]; the
//! face plans the answer and commits it.

use std::collections::BTreeSet;

use crate::request::{Request, Strategy};
use crate::state::Read;
use crate::PlanError;

/// The question a repair asks the planner.
#[derive(Debug)]
pub(crate) struct Repair {
    /// The lost bundles, as a request of their own, confined to their domain by `select`.
    pub request: Request,
    /// The domain kept, as (kind, value).
    pub domain: Option<(String, String)>,
    /// Nodes the repair must not use.
    pub exclude: BTreeSet<usize>,
}

/// The repair of the `lost` bundles of allocation `id` (`request`, placed as `old`: each
/// bundle's node and devices).
pub(crate) fn ask(
    r: &(impl Read + ?Sized),
    id: u64,
    request: &Request,
    old: &[(usize, u64)],
    lost: &BTreeSet<usize>,
) -> Result<Repair, PlanError> {
    if let Some(&b) = lost.iter().find(|&&b| b >= old.len()) {
        return Err(PlanError::Request(format!("allocation {id} has no bundle {b} ({} bundles)", old.len())));
    }
    // The lost bundles' nodes sit this repair out.
    let mut exclude: BTreeSet<usize> = lost.iter().map(|&b| old[b].0).collect();
    let mut sub = Request::new(Vec::new());
    sub.strategy = request.strategy;
    sub.select = request.select.clone();
    let mut select: Option<(String, String)> = None;
    let ix = r.index();
    for &b in lost {
        sub.bundles.push(request.bundles[b].clone());
        let node = old[b].0;
        let kind = match (&request.groups, &request.same) {
            (Some(g), _) => Some(g.same.clone()),
            (None, Some(same)) => Some(same.clone()),
            (None, None) => ix.bin_of(r.label_set(node)).map(|p| ix.keys[ix.pairs[p].key].clone()),
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
                Some(("node".to_owned(), r.name(holder).to_owned()))
            } else {
                r.labels(holder).get(&k).map(|v| (k.clone(), v.clone()))
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
            exclude.retain(|&n| r.name(n) != v);
        }
        sub.select.insert(k.clone(), v.clone());
    }
    if request.strategy == Strategy::Spread {
        exclude.extend(old.iter().enumerate().filter(|(b, _)| !lost.contains(b)).map(|(_, (n, _))| *n));
    }
    Ok(Repair { request: sub, domain: select, exclude })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Bundle;
    use crate::state::testkit::state;

    #[test]
    fn a_lost_bundle_stays_in_its_domain_off_its_node() {
        let st = state(&[("a0", 4, "A"), ("a1", 4, "A"), ("b0", 4, "B")], &[]);
        let request = Request::new(vec![Bundle::new(4), Bundle::new(4)]);
        // Bundle 1 was on a1 (clique A, the nodes' bin-packing domain); a1 died.
        let old = [(0, 0xf), (1, 0xf)];
        let lost = BTreeSet::from([1]);
        let repair = ask(&st, 7, &request, &old, &lost).unwrap();
        assert_eq!(repair.domain, Some(("clique".to_owned(), "A".to_owned())));
        assert_eq!(repair.request.bundles.len(), 1);
        assert_eq!(repair.request.select["clique"], "A");
        assert_eq!(repair.exclude, BTreeSet::from([1]));
        let bad = BTreeSet::from([5]);
        assert!(matches!(ask(&st, 7, &request, &old, &bad), Err(PlanError::Request(m)) if m.contains("no bundle 5")));
    }
}
