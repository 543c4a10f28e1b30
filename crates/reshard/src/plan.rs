//! The transfer plan: destination classes, the pieces each class needs from each source box,
//! the source rank chosen for each piece, and the buffers a source packs (one per class it
//! serves) with every piece's place in them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::balance::{Links, Load};
use crate::layout::{intersect, show, volume, Boxed, Layout};
use crate::{dtype, Error};

/// Every piece starts at a multiple of this many bytes in its buffer.
pub const ALIGN: u64 = 64;

/// A tensor as the plan moves it: stored as `src_dtype` in the sources' buffers, converted to
/// `dst_dtype` by the destination.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanTensor {
    pub name: String,
    pub shape: Vec<u64>,
    pub src_dtype: String,
    pub dst_dtype: String,
}

/// One box of one tensor (global coordinates) at `offset` in a buffer, C-order, `nbytes` bytes
/// in the source dtype.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Piece {
    pub tensor: usize,
    #[serde(rename = "box")]
    pub boxed: Vec<[u64; 2]>,
    pub offset: u64,
    pub nbytes: u64,
}

/// What one source rank packs for one destination class: every piece the class takes from it.
/// `readers` are the class's ranks, each reading it once; `relay`: they pass it on to each
/// other instead of each streaming it from the source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Buffer {
    pub class: usize,
    pub readers: Vec<usize>,
    pub relay: bool,
    pub nbytes: u64,
    pub pieces: Vec<Piece>,
}

/// One buffer a destination reads: `sources[src][buffer]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fetch {
    pub src: usize,
    pub buffer: usize,
}

/// The moves of one sync, the same every step for the same pair of layouts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Indexed like the destination layout's tensors.
    pub tensors: Vec<PlanTensor>,
    /// Per source rank, the buffers it packs.
    pub sources: Vec<Vec<Buffer>>,
    /// Per destination rank, the buffers it reads.
    pub destinations: Vec<Vec<Fetch>>,
    /// Destination ranks with identical boxes.
    pub classes: Vec<Vec<usize>>,
    /// The bytes each host's link carries in one sync, under the planner's model.
    pub links: Links,
    /// Bytes the destination ranks receive in all (source dtype; replicas count each time).
    pub bytes: u64,
}

/// A piece before its source rank is chosen: the box, the ranks holding it, the class needing it.
struct Need {
    tensor: usize,
    boxed: Boxed,
    holders: Vec<usize>,
    class: usize,
    nbytes: u64,
}

/// Plans the sync from `src` to `dst` (see the crate documentation).
pub fn plan(src: &Layout, dst: &Layout) -> Result<Plan, Error> {
    src.validate("source")?;
    dst.validate("destination")?;
    let classes = classes(dst);
    let mut tensors = Vec::with_capacity(dst.tensors.len());
    let mut needs = Vec::new();
    for (ti, t) in dst.tensors.iter().enumerate() {
        let mismatch = |message: String| Error::Mismatch { tensor: t.name.clone(), message };
        let needed = classes.iter().any(|c| dst.held(c[0], &t.name).is_some());
        let Some(s) = src.tensor(&t.name) else {
            if needed {
                return Err(mismatch("the destination layout holds it, the source layout has no such tensor".into()));
            }
            tensors.push(PlanTensor {
                name: t.name.clone(),
                shape: t.shape.clone(),
                src_dtype: t.dtype.clone(),
                dst_dtype: t.dtype.clone(),
            });
            continue;
        };
        if s.shape != t.shape {
            return Err(mismatch(format!("shape {:?} in the source, {:?} in the destination", s.shape, t.shape)));
        }
        if !dtype::convertible(&s.dtype, &t.dtype) {
            return Err(mismatch(format!(
                "cannot convert {} to {} (a destination converts between floating types only)",
                s.dtype, t.dtype
            )));
        }
        tensors.push(PlanTensor {
            name: t.name.clone(),
            shape: t.shape.clone(),
            src_dtype: s.dtype.clone(),
            dst_dtype: t.dtype.clone(),
        });
        if !needed {
            continue;
        }
        let size = dtype::itemsize(&s.dtype).unwrap_or(1);
        let groups = holders(src, &t.name)?;
        for (c, members) in classes.iter().enumerate() {
            let Some(want) = dst.held(members[0], &t.name) else { continue };
            let mut covered = 0;
            for (boxed, ranks) in &groups {
                if let Some(cut) = intersect(boxed, want) {
                    covered += volume(&cut);
                    let nbytes = volume(&cut) * size;
                    needs.push(Need { tensor: ti, boxed: cut, holders: ranks.clone(), class: c, nbytes });
                }
            }
            if covered < volume(want) {
                return Err(Error::Uncovered {
                    tensor: t.name.clone(),
                    rank: members[0],
                    missing: volume(want) - covered,
                    boxed: show(want),
                });
            }
        }
    }
    // Largest pieces first: the greedy choice balances best when the big ones go down first.
    needs.sort_by(|a, b| {
        b.nbytes.cmp(&a.nbytes).then((a.tensor, &a.boxed, a.class).cmp(&(b.tensor, &b.boxed, b.class)))
    });
    // Hosts by index: the sources' and destinations' names, each once.
    let mut names: Vec<String> = Vec::new();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    let mut intern = |name: String| {
        *index.entry(name.clone()).or_insert_with(|| {
            names.push(name);
            names.len() - 1
        })
    };
    let src_hosts: Vec<usize> = (0..src.ranks.len()).map(|r| intern(src.host("src", r))).collect();
    let dst_hosts: Vec<usize> = (0..dst.ranks.len()).map(|r| intern(dst.host("dst", r))).collect();
    let readers: Vec<Vec<usize>> = classes
        .iter()
        .map(|c| {
            let mut hosts: Vec<usize> = c.iter().map(|&d| dst_hosts[d]).collect();
            hosts.sort_unstable();
            hosts
        })
        .collect();
    let mut load = Load::new(names.len());
    let mut chosen: BTreeMap<(usize, usize), (bool, Vec<Need>)> = BTreeMap::new();
    let mut bytes = 0;
    let mut candidates = Vec::new();
    for need in needs {
        let readers = &readers[need.class];
        candidates.clear();
        candidates.extend(need.holders.iter().map(|&r| (r, src_hosts[r])));
        let (provider, host) = load.choose(&candidates, readers, need.nbytes);
        load.add(host, readers, need.nbytes);
        bytes += need.nbytes * readers.len() as u64;
        let relay = Load::relayed(host, readers);
        chosen.entry((provider, need.class)).or_insert((relay, Vec::new())).1.push(need);
    }
    let links = load.links(&names);
    let mut sources: Vec<Vec<Buffer>> = vec![Vec::new(); src.ranks.len()];
    let mut destinations: Vec<Vec<Fetch>> = vec![Vec::new(); dst.ranks.len()];
    for ((provider, class), (relay, mut pieces)) in chosen {
        pieces.sort_by(|a, b| (a.tensor, &a.boxed).cmp(&(b.tensor, &b.boxed)));
        let mut offset = 0;
        let pieces: Vec<Piece> = pieces
            .into_iter()
            .map(|n| {
                let at = offset;
                offset = (offset + n.nbytes).div_ceil(ALIGN) * ALIGN;
                Piece { tensor: n.tensor, boxed: n.boxed, offset: at, nbytes: n.nbytes }
            })
            .collect();
        let readers = classes[class].clone();
        for &d in &readers {
            destinations[d].push(Fetch { src: provider, buffer: sources[provider].len() });
        }
        sources[provider].push(Buffer { class, readers, relay, nbytes: offset, pieces });
    }
    Ok(Plan { tensors, sources, destinations, classes, links, bytes })
}

/// Destination ranks grouped by identical boxes (empty boxes left out), in rank order.
fn classes(dst: &Layout) -> Vec<Vec<usize>> {
    let mut by_boxes: BTreeMap<Vec<(&str, &Boxed)>, usize> = BTreeMap::new();
    let mut classes: Vec<Vec<usize>> = Vec::new();
    for r in 0..dst.ranks.len() {
        let key: Vec<(&str, &Boxed)> =
            dst.ranks[r].slices.iter().filter(|(_, b)| volume(b) > 0).map(|(n, b)| (n.as_str(), b)).collect();
        match by_boxes.get(&key) {
            Some(&c) => classes[c].push(r),
            None => {
                by_boxes.insert(key, classes.len());
                classes.push(vec![r]);
            }
        }
    }
    classes
}

/// The distinct boxes of `tensor` among the source ranks, each with the ranks holding exactly
/// it; distinct boxes must not overlap (a rank holds all of a replica or none of it).
fn holders(src: &Layout, tensor: &str) -> Result<Vec<(Boxed, Vec<usize>)>, Error> {
    let mut groups: BTreeMap<&Boxed, Vec<usize>> = BTreeMap::new();
    for r in 0..src.ranks.len() {
        if let Some(b) = src.held(r, tensor) {
            groups.entry(b).or_default().push(r);
        }
    }
    let groups: Vec<(Boxed, Vec<usize>)> = groups.into_iter().map(|(b, r)| (b.clone(), r)).collect();
    for (i, (a, ra)) in groups.iter().enumerate() {
        for (b, rb) in &groups[i + 1..] {
            if intersect(a, b).is_some() {
                return Err(Error::Mismatch {
                    tensor: tensor.into(),
                    message: format!(
                        "source ranks {} and {} hold overlapping boxes {} and {} that are not the same box \
                         (replicas must hold identical boxes)",
                        ra[0],
                        rb[0],
                        show(a),
                        show(b)
                    ),
                });
            }
        }
    }
    Ok(groups)
}
