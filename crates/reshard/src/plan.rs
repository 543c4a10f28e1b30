//! The transfer plan, kept as templates: tensors that share a geometry (shape, the distinct
//! boxes the sources hold, the distinct boxes the destination classes want) share one template
//! of pieces (the intersections), and each tensor is an instance naming which ranks hold each
//! source box and which classes want each destination box. The only per-piece state is the
//! source rank chosen for each (piece, class). A rank's buffers (its pieces with their offsets)
//! are expanded from that when asked (`source`, `destination`), so a plan of a trillion
//! parameters is a few megabytes and serialises (`codec`) for reuse across steps and processes.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::balance::{Links, Load};
use crate::fp8::{self, Scale, BLOCK};
use crate::layout::{intersect, show, volume, Boxed, FxMap, Held, Layout};
use crate::{dtype, Error};

/// Every piece starts at a multiple of this many bytes in its buffer.
pub const ALIGN: u64 = 64;
/// An instance of no template: a tensor no destination holds.
pub(crate) const NONE: u32 = u32::MAX;

/// A tensor as the plan moves it: held as `src_dtype` by the sources, travelling as
/// [`dtype::wire`] of the two (FP8 is quantised at the source, with `scale`), and held as
/// `dst_dtype` by the destinations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanTensor {
    pub name: String,
    /// Shared among the tensors of one shape (a decoded plan allocates each shape once).
    pub shape: std::sync::Arc<[u64]>,
    pub src_dtype: &'static str,
    pub dst_dtype: &'static str,
    pub scale: Option<Scale>,
}

impl PlanTensor {
    /// Whether the source quantises this tensor to FP8.
    pub fn quantized(&self) -> bool {
        dtype::is_fp8(self.dst_dtype) && !dtype::is_fp8(self.src_dtype)
    }

    /// The bytes a piece of `boxed` travels in, and where its scales start (quantised only).
    pub fn piece_bytes(&self, boxed: &[[u64; 2]]) -> (u64, Option<u64>) {
        match (self.quantized(), self.scale) {
            (true, Some(scale)) => {
                let (n, at) = fp8::piece_bytes(boxed, scale);
                (n, Some(at))
            }
            _ => {
                let size = dtype::itemsize(dtype::wire(self.src_dtype, self.dst_dtype)).unwrap_or(1);
                (volume(boxed) * size, None)
            }
        }
    }
}

/// One box of one tensor (global coordinates) at `offset` in a buffer: `nbytes` bytes, C order
/// in the wire dtype, then (quantised) the scales from `scales_at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Piece {
    pub tensor: usize,
    #[serde(rename = "box")]
    pub boxed: Vec<[u64; 2]>,
    pub offset: u64,
    pub nbytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scales_at: Option<u64>,
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

/// One buffer a destination reads: `source(src)[buffer]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fetch {
    pub src: usize,
    pub buffer: usize,
}

/// One geometry: the distinct source boxes, the distinct destination boxes, and their
/// intersections (`pieces`, sorted by box).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Template {
    pub nsrc: u32,
    pub ndst: u32,
    pub pieces: Vec<TPiece>,
    /// Whether every 128x128 block of the last two dimensions lies in one source box.
    pub block_aligned: bool,
    /// Whether the one source box is the whole tensor.
    pub whole: bool,
}

/// A piece of a template: the source box and destination box it comes from and goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TPiece {
    pub src: u32,
    pub dst: u32,
    pub boxed: Boxed,
}

/// The moves of one sync, the same every step for the same pair of layouts.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Indexed like the destination layout's tensors.
    pub tensors: Vec<PlanTensor>,
    /// Destination ranks with identical boxes.
    pub classes: Vec<Vec<usize>>,
    /// The bytes each host's link carries in one sync, under the planner's model.
    pub links: Links,
    /// Bytes the destination ranks receive in all: the pieces' bytes in the wire dtype (FP8
    /// with its scales), each replica counted, without the buffers' alignment padding.
    pub bytes: u64,
    pub(crate) sources: usize,
    pub(crate) templates: Vec<Template>,
    /// Per tensor, its template (or `NONE`).
    pub(crate) inst: Vec<u32>,
    /// Per tensor, flat: a holder group per source box, then a class set per destination box.
    pub(crate) groups: Vec<u32>,
    pub(crate) holders: Vec<Vec<u32>>,
    pub(crate) class_sets: Vec<Vec<u32>>,
    /// The source rank chosen for each (tensor, template piece, class), in that order.
    pub(crate) choice: Vec<u32>,
    /// Per source rank, the classes it serves (its buffers, in this order).
    pub(crate) served: Vec<Vec<u32>>,
    /// The host of each source rank, and the hosts of each class's ranks (sorted).
    pub(crate) src_hosts: Vec<u32>,
    pub(crate) class_hosts: Vec<Vec<u32>>,
    /// Host names by index.
    pub(crate) hosts: Vec<String>,
    /// Every destination rank's host, by rank (a rank that left keeps its slot).
    pub(crate) dst_hosts: Vec<u32>,
    // Derived on construction and load: where each tensor's groups and choices start.
    pub(crate) group_at: Vec<u32>,
    pub(crate) need_at: Vec<u32>,
}

/// A (piece, class) before its source rank is chosen.
struct Need {
    nbytes: u64,
    tensor: u32,
    piece: u32,
    class: u32,
    holders: u32,
    index: u32,
}

/// A template's key: the shape, the distinct source boxes, the distinct wanted boxes.
type Geometry<'a> = (&'a [u64], Vec<&'a Boxed>, Vec<&'a Boxed>);

/// Interns lists of ranks or classes.
#[derive(Default)]
struct Interner {
    ids: FxMap<Vec<u32>, u32>,
    lists: Vec<Vec<u32>>,
}

impl Interner {
    fn id(&mut self, list: Vec<u32>) -> u32 {
        if let Some(&id) = self.ids.get(&list) {
            return id;
        }
        let id = self.lists.len() as u32;
        self.lists.push(list.clone());
        self.ids.insert(list, id);
        id
    }
}

/// Plans the sync from `src` to `dst` (see the crate documentation).
pub fn plan(src: &Layout, dst: &Layout) -> Result<Plan, Error> {
    let src_held = src.indexed("source")?;
    let dst_held = dst.indexed("destination")?;
    let classes = classes(&dst_held);
    let src_index: FxMap<&str, usize> = src.tensors.iter().enumerate().map(|(i, t)| (t.name.as_str(), i)).collect();
    // Who holds what, and which class wants what, by tensor.
    let mut held: Vec<Vec<(&Boxed, u32)>> = vec![Vec::new(); src.tensors.len()];
    for (r, boxes) in src_held.iter().enumerate() {
        for &(ti, b) in boxes {
            held[ti as usize].push((b, r as u32));
        }
    }
    let mut wanted: Vec<Vec<(&Boxed, u32)>> = vec![Vec::new(); dst.tensors.len()];
    for (c, members) in classes.iter().enumerate() {
        for &(ti, b) in &dst_held[members[0]] {
            wanted[ti as usize].push((b, c as u32));
        }
    }
    let mut tensors = Vec::with_capacity(dst.tensors.len());
    let mut templates: Vec<Template> = Vec::new();
    let mut template_ids: FxMap<Geometry<'_>, u32> = FxMap::default();
    let (mut holders, mut class_sets) = (Interner::default(), Interner::default());
    let mut inst = Vec::with_capacity(dst.tensors.len());
    let mut groups = Vec::new();
    for (ti, t) in dst.tensors.iter().enumerate() {
        let mismatch = |message: String| Error::Mismatch { tensor: t.name.clone(), message };
        let want = &mut wanted[ti];
        let Some(&si) = src_index.get(t.name.as_str()) else {
            if !want.is_empty() {
                return Err(mismatch("the destination layout holds it, the source layout has no such tensor".into()));
            }
            tensors.push(PlanTensor {
                name: t.name.clone(),
                shape: t.shape.as_slice().into(),
                src_dtype: static_dtype(&t.dtype),
                dst_dtype: static_dtype(&t.dtype),
                scale: t.scale,
            });
            inst.push(NONE);
            continue;
        };
        let s = &src.tensors[si];
        if s.shape != t.shape {
            return Err(mismatch(format!("shape {:?} in the source, {:?} in the destination", s.shape, t.shape)));
        }
        if !dtype::convertible(&s.dtype, &t.dtype) {
            return Err(mismatch(format!(
                "cannot convert {} to {} (a destination converts between floating types, and quantises wider \
                 floats to FP8)",
                s.dtype, t.dtype
            )));
        }
        let pt = PlanTensor {
            name: t.name.clone(),
            shape: t.shape.as_slice().into(),
            src_dtype: static_dtype(&s.dtype),
            dst_dtype: static_dtype(&t.dtype),
            scale: t.scale,
        };
        if pt.quantized() && pt.scale.is_none() {
            return Err(mismatch(format!(
                "quantising {} to {} needs a scale (\"tensor\" or \"block\")",
                s.dtype, t.dtype
            )));
        }
        if want.is_empty() {
            tensors.push(pt);
            inst.push(NONE);
            continue;
        }
        // The geometry: distinct source boxes (with their holders), distinct wanted boxes.
        let have = &mut held[si];
        have.sort_unstable();
        want.sort_unstable();
        let mut sboxes: Vec<&Boxed> = Vec::new();
        let mut sranks: Vec<Vec<u32>> = Vec::new();
        for &(b, r) in have.iter() {
            if sboxes.last() == Some(&b) {
                if let Some(v) = sranks.last_mut() {
                    v.push(r);
                }
            } else {
                sboxes.push(b);
                sranks.push(vec![r]);
            }
        }
        let mut dboxes: Vec<&Boxed> = Vec::new();
        let mut dclasses: Vec<Vec<u32>> = Vec::new();
        for &(b, c) in want.iter() {
            if dboxes.last() == Some(&b) {
                if let Some(v) = dclasses.last_mut() {
                    v.push(c);
                }
            } else {
                dboxes.push(b);
                dclasses.push(vec![c]);
            }
        }
        let key = (t.shape.as_slice(), sboxes.clone(), dboxes.clone());
        let id = match template_ids.get(&key) {
            Some(&id) => id,
            None => {
                let made = template(&t.shape, &sboxes, &dboxes).map_err(|e| match e {
                    NoTemplate::Overlap(a, b) => mismatch(format!(
                        "source ranks {} and {} hold overlapping boxes {} and {} that are not the same box \
                         (replicas must hold identical boxes)",
                        sranks[a][0],
                        sranks[b][0],
                        show(sboxes[a]),
                        show(sboxes[b])
                    )),
                    NoTemplate::Uncovered(j, missing) => Error::Uncovered {
                        tensor: t.name.clone(),
                        rank: classes[dclasses[j][0] as usize][0],
                        missing,
                        boxed: show(dboxes[j]),
                    },
                })?;
                templates.push(made);
                let id = (templates.len() - 1) as u32;
                template_ids.insert(key, id);
                id
            }
        };
        let tpl = &templates[id as usize];
        if pt.quantized() {
            match pt.scale {
                Some(Scale::Tensor) if !tpl.whole => {
                    return Err(mismatch(format!(
                        "a per-tensor FP8 scale needs the whole tensor on each source rank that holds it; the \
                         sources split it ({} distinct boxes, e.g. {})",
                        sboxes.len(),
                        show(sboxes[0])
                    )))
                }
                Some(Scale::Block) if !tpl.block_aligned => {
                    return Err(mismatch(format!(
                        "FP8 block scales need every {BLOCK}x{BLOCK} block on one source rank; a source box \
                         splits one (e.g. {})",
                        sboxes.iter().map(|b| show(b)).collect::<Vec<_>>().join(", ")
                    )))
                }
                _ => {}
            }
        }
        inst.push(id);
        groups.extend(sranks.into_iter().map(|r| holders.id(r)));
        groups.extend(dclasses.into_iter().map(|c| class_sets.id(c)));
        tensors.push(pt);
    }
    let mut planned = Plan {
        tensors,
        classes: classes.clone(),
        links: Links::default(),
        bytes: 0,
        sources: src.ranks.len(),
        templates,
        inst,
        groups,
        holders: holders.lists,
        class_sets: class_sets.lists,
        choice: Vec::new(),
        served: Vec::new(),
        src_hosts: Vec::new(),
        class_hosts: Vec::new(),
        hosts: Vec::new(),
        dst_hosts: Vec::new(),
        group_at: Vec::new(),
        need_at: Vec::new(),
    };
    planned.derive();
    // Hosts by index: the sources' and destinations' names, each once.
    let mut names: Vec<String> = Vec::new();
    let mut index: FxMap<String, u32> = FxMap::default();
    let mut intern = |name: String| {
        *index.entry(name.clone()).or_insert_with(|| {
            names.push(name);
            (names.len() - 1) as u32
        })
    };
    planned.src_hosts = (0..src.ranks.len()).map(|r| intern(src.host("src", r))).collect();
    let dst_hosts: Vec<u32> = (0..dst.ranks.len()).map(|r| intern(dst.host("dst", r))).collect();
    planned.class_hosts = classes
        .iter()
        .map(|c| {
            let mut hosts: Vec<u32> = c.iter().map(|&d| dst_hosts[d]).collect();
            hosts.sort_unstable();
            hosts
        })
        .collect();
    planned.dst_hosts = dst_hosts;
    planned.hosts = names;
    planned.balance();
    Ok(planned)
}

/// A validated layout's dtype name, as the table's `'static` copy.
fn static_dtype(name: &str) -> &'static str {
    dtype::canonical(name).unwrap_or("u8")
}

/// Why a geometry has no template.
enum NoTemplate {
    /// Two distinct source boxes overlap (their indices).
    Overlap(usize, usize),
    /// A wanted box (its index) misses this many elements.
    Uncovered(usize, u64),
}

fn template(shape: &[u64], sboxes: &[&Boxed], dboxes: &[&Boxed]) -> Result<Template, NoTemplate> {
    for (i, a) in sboxes.iter().enumerate() {
        for (j, b) in sboxes.iter().enumerate().skip(i + 1) {
            if intersect(a, b).is_some() {
                return Err(NoTemplate::Overlap(i, j));
            }
        }
    }
    let mut pieces = Vec::new();
    for (j, want) in dboxes.iter().enumerate() {
        let mut covered = 0;
        for (i, have) in sboxes.iter().enumerate() {
            if let Some(cut) = intersect(have, want) {
                covered += volume(&cut);
                pieces.push(TPiece { src: i as u32, dst: j as u32, boxed: cut });
            }
        }
        if covered < volume(want) {
            return Err(NoTemplate::Uncovered(j, volume(want) - covered));
        }
    }
    pieces.sort_by(|a, b| a.boxed.cmp(&b.boxed));
    let n = shape.len();
    let aligned = |[lo, hi]: [u64; 2], extent: u64| lo % BLOCK == 0 && (hi % BLOCK == 0 || hi == extent);
    let block_aligned =
        n >= 2 && sboxes.iter().all(|b| aligned(b[n - 2], shape[n - 2]) && aligned(b[n - 1], shape[n - 1]));
    let whole = sboxes.len() == 1 && sboxes[0].iter().zip(shape).all(|(&[lo, hi], &s)| lo == 0 && hi == s);
    Ok(Template { nsrc: sboxes.len() as u32, ndst: dboxes.len() as u32, pieces, block_aligned, whole })
}

/// Destination ranks grouped by identical boxes (empty boxes left out), in rank order.
fn classes(held: &Held<'_>) -> Vec<Vec<usize>> {
    let mut by_boxes: FxMap<&[(u32, &Boxed)], usize> = FxMap::default();
    let mut classes: Vec<Vec<usize>> = Vec::new();
    for (r, key) in held.iter().enumerate() {
        let key = key.as_slice();
        match by_boxes.get(key) {
            Some(&c) => classes[c].push(r),
            None => {
                by_boxes.insert(key, classes.len());
                classes.push(vec![r]);
            }
        }
    }
    classes
}

impl Plan {
    /// Recomputes where each tensor's groups and choices start (after planning or loading).
    pub(crate) fn derive(&mut self) {
        self.group_at.clear();
        self.need_at.clear();
        let (mut g, mut n) = (0u32, 0u32);
        for &id in &self.inst {
            self.group_at.push(g);
            self.need_at.push(n);
            if id == NONE {
                continue;
            }
            let t = &self.templates[id as usize];
            let dst = &self.groups[(g + t.nsrc) as usize..(g + t.nsrc + t.ndst) as usize];
            for p in &t.pieces {
                n += self.class_sets[dst[p.dst as usize] as usize].len() as u32;
            }
            g += t.nsrc + t.ndst;
        }
        self.group_at.push(g);
        self.need_at.push(n);
    }

    /// Calls `f(tensor, template piece index, template piece, class, need index, holder group)`
    /// for every need, in the plan's order.
    fn each_need(&self, mut f: impl FnMut(usize, u32, &TPiece, u32, usize, u32)) {
        for (ti, &id) in self.inst.iter().enumerate() {
            if id == NONE {
                continue;
            }
            let t = &self.templates[id as usize];
            let g = self.group_at[ti] as usize;
            let (src, dst) = (&self.groups[g..g + t.nsrc as usize], &self.groups[g + t.nsrc as usize..]);
            let mut n = self.need_at[ti] as usize;
            for (k, p) in t.pieces.iter().enumerate() {
                for &c in &self.class_sets[dst[p.dst as usize] as usize] {
                    f(ti, k as u32, p, c, n, src[p.src as usize]);
                    n += 1;
                }
            }
        }
    }

    /// Chooses a source rank for every need: largest pieces first, each where it keeps the
    /// busiest link least busy (`balance`).
    fn balance(&mut self) {
        let mut needs = Vec::with_capacity(*self.need_at.last().unwrap_or(&0) as usize);
        self.each_need(|ti, k, p, c, n, h| {
            let (nbytes, _) = self.tensors[ti].piece_bytes(&p.boxed);
            needs.push(Need { nbytes, tensor: ti as u32, piece: k, class: c, holders: h, index: n as u32 });
        });
        needs.sort_unstable_by(|a, b| {
            b.nbytes.cmp(&a.nbytes).then((a.tensor, a.piece, a.class).cmp(&(b.tensor, b.piece, b.class)))
        });
        let mut load = Load::new(self.hosts.len());
        let mut choice = vec![0u32; needs.len()];
        let mut bytes = 0;
        let mut candidates: Vec<(usize, usize)> = Vec::new();
        let readers: Vec<Vec<usize>> =
            self.class_hosts.iter().map(|h| h.iter().map(|&x| x as usize).collect()).collect();
        for need in &needs {
            let readers = &readers[need.class as usize];
            candidates.clear();
            candidates.extend(
                self.holders[need.holders as usize].iter().map(|&r| (r as usize, self.src_hosts[r as usize] as usize)),
            );
            let (provider, host) =
                if candidates.len() == 1 { candidates[0] } else { load.choose(&candidates, readers, need.nbytes) };
            load.add(host, readers, need.nbytes);
            bytes += need.nbytes * readers.len() as u64;
            choice[need.index as usize] = provider as u32;
        }
        let mut served: Vec<BTreeSet<u32>> = vec![BTreeSet::new(); self.sources];
        self.each_need(|_, _, _, c, n, _| {
            served[choice[n] as usize].insert(c);
        });
        self.served = served.into_iter().map(|s| s.into_iter().collect()).collect();
        self.choice = choice;
        self.links = load.links(&self.hosts);
        self.bytes = bytes;
    }

    /// The links and bytes again from the choices (after a rank joined or left).
    fn relink(&mut self) {
        let mut load = Load::new(self.hosts.len());
        let mut bytes = 0;
        let readers: Vec<Vec<usize>> =
            self.class_hosts.iter().map(|h| h.iter().map(|&x| x as usize).collect()).collect();
        self.each_need(|ti, _, p, c, n, _| {
            let (nbytes, _) = self.tensors[ti].piece_bytes(&p.boxed);
            let r = &readers[c as usize];
            load.add(self.src_hosts[self.choice[n] as usize] as usize, r, nbytes);
            bytes += nbytes * r.len() as u64;
        });
        self.links = load.links(&self.hosts);
        self.bytes = bytes;
    }

    /// The plan with one more destination rank on `host`, a replica of rank `like` (same
    /// boxes): it joins `like`'s class, so it reads the same buffers and nothing is planned
    /// again; every other rank's part stays as it was (the class's buffers gain a reader).
    /// Returns the plan and the new rank's index.
    pub fn with_replica(&self, like: usize, host: &str) -> Result<(Plan, usize), Error> {
        let class = self
            .class_of(like)
            .ok_or_else(|| Error::Membership(format!("destination rank {like} is not in the plan")))?;
        let mut p = self.clone();
        let h = match p.hosts.iter().position(|x| x == host) {
            Some(h) => h as u32,
            None => {
                p.hosts.push(host.to_owned());
                (p.hosts.len() - 1) as u32
            }
        };
        let rank = p.dst_hosts.len();
        p.dst_hosts.push(h);
        p.classes[class].push(rank);
        p.class_hosts[class].push(h);
        p.class_hosts[class].sort_unstable();
        p.relink();
        Ok((p, rank))
    }

    /// The plan without destination rank `rank` (it left or died): its class reads on without
    /// it, and its slot stays empty (no rank is renumbered). The last rank of a class cannot
    /// leave: nobody else would hold its shard (plan again with a new layout).
    pub fn without_replica(&self, rank: usize) -> Result<Plan, Error> {
        let class = self
            .class_of(rank)
            .ok_or_else(|| Error::Membership(format!("destination rank {rank} is not in the plan")))?;
        if self.classes[class].len() == 1 {
            return Err(Error::Membership(format!(
                "destination rank {rank} is the only one holding its shard: plan again with a layout without it"
            )));
        }
        let mut p = self.clone();
        p.classes[class].retain(|&r| r != rank);
        p.class_hosts[class] = p.classes[class].iter().map(|&r| p.dst_hosts[r]).collect();
        p.class_hosts[class].sort_unstable();
        p.relink();
        Ok(p)
    }

    /// The class of destination rank `rank`.
    pub fn class_of(&self, rank: usize) -> Option<usize> {
        self.classes.iter().position(|c| c.contains(&rank))
    }

    /// Calls `f(provider host, class, reader hosts (sorted), bytes, relayed)` for every piece
    /// placed: what the fabric model replays.
    pub(crate) fn each_move(&self, mut f: impl FnMut(usize, usize, &[u32], u64, bool)) {
        let relayed: Vec<Vec<bool>> = self
            .class_hosts
            .iter()
            .map(|hosts| {
                let readers: Vec<usize> = hosts.iter().map(|&h| h as usize).collect();
                (0..self.hosts.len()).map(|p| Load::relayed(p, &readers)).collect()
            })
            .collect();
        self.each_need(|ti, _, p, c, n, _| {
            let (nbytes, _) = self.tensors[ti].piece_bytes(&p.boxed);
            let host = self.src_hosts[self.choice[n] as usize] as usize;
            f(host, c as usize, &self.class_hosts[c as usize], nbytes, relayed[c as usize][host]);
        });
    }

    /// Per source rank, the bytes it packs each step, as `Sender.publish` does: (the source-dtype
    /// bytes it reads to quantise to FP8: the scales pass, which reads its whole box of every
    /// tensor it quantises once; the encoding, which reads each piece once per buffer that
    /// carries it; and the bytes it copies into its buffers for the tensors it does not
    /// quantise, each piece once per buffer).
    pub(crate) fn packing_bytes(&self) -> Vec<(u64, u64, u64)> {
        // Each source box's volume: the template pieces cut from it (the destination covers
        // the tensor, so they tile it), each counted once.
        let boxes: Vec<Vec<u64>> = self
            .templates
            .iter()
            .map(|t| {
                let mut v = vec![0u64; t.nsrc as usize];
                for p in &t.pieces {
                    v[p.src as usize] += volume(&p.boxed);
                }
                v
            })
            .collect();
        let mut out = vec![(0u64, 0u64, 0u64); self.sources];
        let mut last = vec![usize::MAX; self.sources];
        self.each_need(|ti, _, p, _, n, _| {
            let t = &self.tensors[ti];
            let r = self.choice[n] as usize;
            if !t.quantized() {
                out[r].2 += t.piece_bytes(&p.boxed).0;
                return;
            }
            let size = dtype::itemsize(t.src_dtype).unwrap_or(1);
            if last[r] != ti {
                last[r] = ti;
                out[r].0 += boxes[self.inst[ti] as usize][p.src as usize] * size;
            }
            out[r].1 += volume(&p.boxed) * size;
        });
        out
    }

    /// Calls `f(source rank, class, bytes)` for every piece placed.
    pub(crate) fn each_need_bytes(&self, mut f: impl FnMut(usize, usize, u64)) {
        self.each_need(|ti, _, p, c, n, _| {
            f(self.choice[n] as usize, c as usize, self.tensors[ti].piece_bytes(&p.boxed).0);
        });
    }

    /// The host index of each source rank and of each destination rank slot, and each class's
    /// ranks: what the fabric model needs to place conversion and admission.
    pub(crate) fn rank_hosts(&self) -> (&[u32], &[u32], &[Vec<usize>]) {
        (&self.src_hosts, &self.dst_hosts, &self.classes)
    }

    /// Whether every chosen source rank holds its piece's box (a loaded plan is checked).
    pub(crate) fn choices_valid(&self) -> bool {
        let mut ok = true;
        self.each_need(|_, _, _, _, n, h| {
            // Holder lists are in rank order (`plan` makes them so, and `decode` checks it).
            ok &= self.holders[h as usize].binary_search(&self.choice[n]).is_ok();
        });
        ok
    }

    /// Number of source ranks.
    pub fn source_ranks(&self) -> usize {
        self.sources
    }

    /// Number of destination rank slots (ranks that left keep theirs).
    pub fn destination_ranks(&self) -> usize {
        self.dst_hosts.len()
    }

    /// Distinct geometries (templates) and pieces to place (piece, class) in the plan.
    pub fn counts(&self) -> (usize, usize) {
        (self.templates.len(), self.choice.len())
    }

    /// Bytes the plan holds in memory (its tables; the layouts are the caller's).
    pub fn memory(&self) -> usize {
        use std::mem::size_of;
        let tensors: usize = self
            .tensors
            .iter()
            .map(|t| size_of::<PlanTensor>() + t.name.len() + t.shape.len() * 8 + t.src_dtype.len() + t.dst_dtype.len())
            .sum();
        let templates: usize = self
            .templates
            .iter()
            .map(|t| {
                size_of::<Template>() + t.pieces.iter().map(|p| size_of::<TPiece>() + p.boxed.len() * 16).sum::<usize>()
            })
            .sum();
        let lists = |l: &[Vec<u32>]| l.iter().map(|v| size_of::<Vec<u32>>() + v.len() * 4).sum::<usize>();
        tensors
            + templates
            + 4 * (self.inst.len() + self.groups.len() + self.choice.len() + self.group_at.len() + self.need_at.len())
            + lists(&self.holders)
            + lists(&self.class_sets)
            + lists(&self.served)
            + lists(&self.class_hosts)
            + 4 * self.src_hosts.len()
            + self.classes.iter().map(|c| 24 + 8 * c.len()).sum::<usize>()
    }

    /// The buffers source rank `rank` packs, in order (its pieces expanded now).
    pub fn source(&self, rank: usize) -> Vec<Buffer> {
        let served = self.served.get(rank).cloned().unwrap_or_default();
        let mut buffers: Vec<Buffer> = served.iter().map(|&c| self.empty_buffer(rank, c as usize)).collect();
        self.each_need(|ti, _, p, c, n, _| {
            if self.choice[n] as usize == rank {
                if let Ok(b) = served.binary_search(&c) {
                    self.append(&mut buffers[b], ti, p);
                }
            }
        });
        buffers
    }

    /// The buffers destination rank `rank` reads, each with where it comes from.
    pub fn destination(&self, rank: usize) -> Vec<(Fetch, Buffer)> {
        let Some(class) = self.class_of(rank) else { return Vec::new() };
        let mut by_src: Vec<Option<Buffer>> = vec![None; self.sources];
        self.each_need(|ti, _, p, c, n, _| {
            if c as usize == class {
                let s = self.choice[n] as usize;
                let b = by_src[s].get_or_insert_with(|| self.empty_buffer(s, class));
                self.append(b, ti, p);
            }
        });
        by_src
            .into_iter()
            .enumerate()
            .filter_map(|(s, b)| {
                let b = b?;
                let index = self.served[s].binary_search(&(class as u32)).ok()?;
                Some((Fetch { src: s, buffer: index }, b))
            })
            .collect()
    }

    /// Every source rank's buffers, expanded on all cores.
    pub fn sources_all(&self) -> Vec<Vec<Buffer>> {
        parallel(self.sources, |r| self.source(r))
    }

    fn empty_buffer(&self, src: usize, class: usize) -> Buffer {
        let readers = self.classes[class].clone();
        let relay = Load::relayed(
            self.src_hosts[src] as usize,
            &self.class_hosts[class].iter().map(|&h| h as usize).collect::<Vec<_>>(),
        );
        Buffer { class, readers, relay, nbytes: 0, pieces: Vec::new() }
    }

    fn append(&self, b: &mut Buffer, ti: usize, p: &TPiece) {
        let (nbytes, scales) = self.tensors[ti].piece_bytes(&p.boxed);
        let offset = b.nbytes;
        b.nbytes = (offset + nbytes).div_ceil(ALIGN) * ALIGN;
        b.pieces.push(Piece { tensor: ti, boxed: p.boxed.clone(), offset, nbytes, scales_at: scales });
    }
}

/// `f(i)` for `i` in `0..n`, over the machine's cores.
fn parallel<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let threads = std::thread::available_parallelism().map_or(1, |c| c.get()).min(n.max(1));
    let mut out: Vec<Option<T>> = (0..n).map(|_| None).collect();
    std::thread::scope(|s| {
        for (t, chunk) in out.chunks_mut(n.div_ceil(threads).max(1)).enumerate() {
            let f = &f;
            let base = t * n.div_ceil(threads).max(1);
            s.spawn(move || {
                for (i, slot) in chunk.iter_mut().enumerate() {
                    *slot = Some(f(base + i));
                }
            });
        }
    });
    out.into_iter().flatten().collect()
}
