//! The link model the planner balances: the bytes each host sends and receives over its one
//! link (ranks on one host share memory, which no link carries), and the choice of a source
//! rank among replicas that keeps the busiest link least busy.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Bytes each host sends (`out`) and receives (`in`) over its link under a plan.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Links {
    pub out: BTreeMap<String, u64>,
    #[serde(rename = "in")]
    pub inn: BTreeMap<String, u64>,
}

impl Links {
    /// The bytes on the busiest link, either way.
    pub fn busiest(&self) -> u64 {
        self.out.values().chain(self.inn.values()).copied().max().unwrap_or(0)
    }
}

/// The load while planning: hosts by index, the busiest link kept up to date.
#[derive(Debug, Clone)]
pub(crate) struct Load {
    out: Vec<u64>,
    inn: Vec<u64>,
    worst: u64,
    /// `cost`'s per-host sums, kept to spare an allocation per candidate.
    scratch: std::cell::RefCell<Vec<(usize, u64, u64)>>,
}

impl Load {
    pub fn new(hosts: usize) -> Load {
        Load { out: vec![0; hosts], inn: vec![0; hosts], worst: 0, scratch: Default::default() }
    }

    /// Whether a buffer from a provider on `provider` reaches `readers` (a host per reader)
    /// relayed: with two or more readers on other hosts they pass it on to each other (the
    /// transport's relayed broadcast), so it leaves the provider once.
    pub fn relayed(provider: usize, readers: &[usize]) -> bool {
        readers.iter().filter(|&&h| h != provider).count() >= 2
    }

    /// Calls `f(host, out, in)` for each link a buffer of `bytes` loads: relayed, it leaves
    /// the provider once and enters each remote host once, and every remote host but the last
    /// passes it on; otherwise the provider sends it to each remote reader. `readers` is
    /// sorted.
    fn each(provider: usize, readers: &[usize], bytes: u64, mut f: impl FnMut(usize, u64, u64)) {
        if Load::relayed(provider, readers) {
            f(provider, bytes, 0);
            let mut remote = readers.iter().copied().filter(|&h| h != provider).peekable();
            let mut last = None;
            while let Some(h) = remote.next() {
                if last == Some(h) {
                    continue;
                }
                last = Some(h);
                let more = remote.clone().any(|n| n != h);
                f(h, if more { bytes } else { 0 }, bytes);
            }
        } else {
            for &h in readers.iter().filter(|&&h| h != provider) {
                f(provider, bytes, 0);
                f(h, 0, bytes);
            }
        }
    }

    /// The busiest link and the link bytes added, if the buffer were added.
    fn cost(&self, provider: usize, readers: &[usize], bytes: u64) -> (u64, u64) {
        let (mut worst, mut total) = (self.worst, 0);
        // A host may appear twice (the provider's out, then a reader's in): bounded by adding.
        let mut seen = self.scratch.borrow_mut();
        seen.clear();
        Load::each(provider, readers, bytes, |h, o, i| {
            match seen.iter_mut().find(|s| s.0 == h) {
                Some(s) => {
                    s.1 += o;
                    s.2 += i;
                }
                None => seen.push((h, o, i)),
            }
            total += o + i;
        });
        for &(h, o, i) in seen.iter() {
            worst = worst.max(self.out[h] + o).max(self.inn[h] + i);
        }
        (worst, total)
    }

    /// Adds one buffer's traffic.
    pub fn add(&mut self, provider: usize, readers: &[usize], bytes: u64) {
        let Load { out, inn, worst, .. } = self;
        Load::each(provider, readers, bytes, |h, o, i| {
            out[h] += o;
            inn[h] += i;
            *worst = (*worst).max(out[h]).max(inn[h]);
        });
    }

    /// Of `candidates` (rank, host), the one to send `bytes` to `readers`: the least busy
    /// busiest link, then the fewest link bytes (a replica on the readers' host costs none),
    /// then the least busy own uplink, then the lowest rank.
    pub fn choose(&self, candidates: &[(usize, usize)], readers: &[usize], bytes: u64) -> (usize, usize) {
        let key = |&(rank, host): &(usize, usize)| {
            let (worst, total) = self.cost(host, readers, bytes);
            (worst, total, self.out[host], rank)
        };
        *candidates.iter().min_by_key(|c| key(c)).expect("a piece has at least one holder")
    }

    /// The load by host name (hosts with no traffic left out).
    pub fn links(&self, names: &[String]) -> Links {
        let pick = |v: &[u64]| names.iter().zip(v).filter(|(_, &b)| b > 0).map(|(n, &b)| (n.clone(), b)).collect();
        Links { out: pick(&self.out), inn: pick(&self.inn) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        ["a", "b", "c", "d"].map(String::from).to_vec()
    }

    #[test]
    fn relaying_sends_once_from_the_provider() {
        let mut l = Load::new(4);
        assert!(Load::relayed(0, &[0, 1, 2]));
        l.add(0, &[0, 1, 2], 10);
        let links = l.links(&names());
        assert_eq!(links.out["a"], 10);
        assert_eq!(links.inn["b"] + links.inn["c"], 20);
        assert_eq!((links.busiest(), l.worst), (10, 10));
        // Two readers on one remote host: the link into it carries the buffer once.
        let mut same = Load::new(4);
        same.add(0, &[1, 1], 10);
        assert_eq!(same.links(&names()).inn["b"], 10);
        let mut direct = Load::new(4);
        assert!(!Load::relayed(0, &[1]));
        direct.add(0, &[1], 10);
        assert_eq!(direct.links(&names()).out["a"], 10);
    }

    #[test]
    fn the_replica_on_the_readers_host_wins_then_the_idle_one() {
        let mut l = Load::new(4);
        assert_eq!(l.choose(&[(0, 0), (1, 1)], &[1], 5).0, 1);
        l.add(0, &[2], 100);
        assert_eq!(l.choose(&[(0, 0), (1, 3)], &[2], 5).0, 1);
    }
}
