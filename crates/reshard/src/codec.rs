//! A plan as bytes, to cache it across steps and processes: a tag (the caller's key, e.g. a
//! digest of the two layouts) and the plan's tables, little-endian, read back with every length
//! and index checked, so a damaged or foreign file is an error, never a panic or a wrong plan.

use crate::balance::Links;
use crate::dtype::DTYPES;
use crate::fp8::Scale;
use crate::plan::{Plan, PlanTensor, TPiece, Template, NONE};
use crate::Error;

const MAGIC: &[u8] = b"accel-plan 1\n";

struct W(Vec<u8>);

impl W {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn len(&mut self, n: usize) {
        self.u32(n as u32);
    }
    fn str(&mut self, s: &str) {
        self.len(s.len());
        self.0.extend_from_slice(s.as_bytes());
    }
    fn u32s(&mut self, v: &[u32]) {
        self.len(v.len());
        self.0.reserve(v.len() * 4);
        for &x in v {
            self.u32(x);
        }
    }
    fn lists(&mut self, l: &[Vec<u32>]) {
        self.len(l.len());
        for v in l {
            self.u32s(v);
        }
    }
}

struct R<'a> {
    b: &'a [u8],
    at: usize,
}

fn bad(what: &str) -> Error {
    Error::Cache(format!("not a plan this version wrote: {what}"))
}

impl<'a> R<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len()).ok_or_else(|| bad("it ends early"))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, Error> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, Error> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().map_err(|_| bad("u32"))?))
    }
    fn u64(&mut self) -> Result<u64, Error> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().map_err(|_| bad("u64"))?))
    }
    /// A count, bounded by what is left (each item takes at least `min` bytes).
    fn len(&mut self, min: usize) -> Result<usize, Error> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min) > self.b.len() - self.at {
            return Err(bad("a count larger than the file"));
        }
        Ok(n)
    }
    fn str(&mut self) -> Result<String, Error> {
        let n = self.len(1)?;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| bad("a name that is not UTF-8"))
    }
    fn u32s(&mut self) -> Result<Vec<u32>, Error> {
        let n = self.len(4)?;
        let raw = self.take(n * 4)?;
        Ok(raw.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }
    fn lists(&mut self) -> Result<Vec<Vec<u32>>, Error> {
        let n = self.len(4)?;
        (0..n).map(|_| self.u32s()).collect()
    }
}

fn dtype_index(name: &str) -> u8 {
    DTYPES.iter().position(|d| d.0 == name).unwrap_or(0) as u8
}

fn dtype_name(i: u8) -> Result<&'static str, Error> {
    DTYPES.get(i as usize).map(|d| d.0).ok_or_else(|| bad("an unknown dtype"))
}

/// The plan as bytes, with `tag` (read back by [`decode`]).
pub fn encode(plan: &Plan, tag: &str) -> Vec<u8> {
    let mut w = W(Vec::with_capacity(plan.memory()));
    w.0.extend_from_slice(MAGIC);
    w.str(tag);
    w.u64(plan.sources as u64);
    w.u64(plan.bytes);
    w.len(plan.tensors.len());
    for t in &plan.tensors {
        w.str(&t.name);
        w.len(t.shape.len());
        for &d in t.shape.iter() {
            w.u64(d);
        }
        w.u8(dtype_index(t.src_dtype));
        w.u8(dtype_index(t.dst_dtype));
        w.u8(match t.scale {
            None => 0,
            Some(Scale::Tensor) => 1,
            Some(Scale::Block) => 2,
        });
    }
    let classes: Vec<Vec<u32>> = plan.classes.iter().map(|c| c.iter().map(|&r| r as u32).collect()).collect();
    w.lists(&classes);
    for side in [&plan.links.out, &plan.links.inn] {
        w.len(side.len());
        for (host, &b) in side {
            w.str(host);
            w.u64(b);
        }
    }
    w.len(plan.templates.len());
    for t in &plan.templates {
        w.u32(t.nsrc);
        w.u32(t.ndst);
        w.u8(u8::from(t.block_aligned) | u8::from(t.whole) << 1);
        w.len(t.pieces.len());
        for p in &t.pieces {
            w.u32(p.src);
            w.u32(p.dst);
            w.len(p.boxed.len());
            for &[lo, hi] in &p.boxed {
                w.u64(lo);
                w.u64(hi);
            }
        }
    }
    w.u32s(&plan.inst);
    w.u32s(&plan.groups);
    w.lists(&plan.holders);
    w.lists(&plan.class_sets);
    w.u32s(&plan.choice);
    w.lists(&plan.served);
    w.u32s(&plan.src_hosts);
    w.lists(&plan.class_hosts);
    w.len(plan.hosts.len());
    for h in &plan.hosts {
        w.str(h);
    }
    w.u32s(&plan.dst_hosts);
    w.0
}

/// The tag and the plan from [`encode`]'s bytes; anything inconsistent is `Error::Cache`.
pub fn decode(bytes: &[u8]) -> Result<(String, Plan), Error> {
    if !bytes.starts_with(MAGIC) {
        return Err(bad("no accel-plan header"));
    }
    let mut r = R { b: bytes, at: MAGIC.len() };
    let tag = r.str()?;
    let sources = r.u64()? as usize;
    let total = r.u64()?;
    let n = r.len(8)?;
    let mut tensors = Vec::with_capacity(n);
    let mut shapes: Vec<std::sync::Arc<[u64]>> = Vec::new();
    for _ in 0..n {
        let name = r.str()?;
        let dims = r.len(8)?;
        let raw = r.take(dims * 8)?;
        // Tensors of one shape mostly follow each other: look back a little, then allocate.
        let same = |s: &std::sync::Arc<[u64]>| {
            s.len() == dims && s.iter().zip(raw.chunks_exact(8)).all(|(&a, b)| b == a.to_le_bytes())
        };
        let shape = match shapes.iter().rev().take(8).find(|s| same(s)) {
            Some(s) => s.clone(),
            None => {
                let made: std::sync::Arc<[u64]> = raw
                    .chunks_exact(8)
                    .map(|b| u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
                    .collect();
                shapes.push(made.clone());
                made
            }
        };
        let (src_dtype, dst_dtype) = (dtype_name(r.u8()?)?, dtype_name(r.u8()?)?);
        let scale = match r.u8()? {
            0 => None,
            1 => Some(Scale::Tensor),
            2 => Some(Scale::Block),
            _ => return Err(bad("an unknown scale")),
        };
        tensors.push(PlanTensor { name, shape, src_dtype, dst_dtype, scale });
    }
    let classes: Vec<Vec<usize>> =
        r.lists()?.into_iter().map(|c| c.into_iter().map(|x| x as usize).collect()).collect();
    let mut links = Links::default();
    for side in [&mut links.out, &mut links.inn] {
        for _ in 0..r.len(12)? {
            let host = r.str()?;
            side.insert(host, r.u64()?);
        }
    }
    let nt = r.len(13)?;
    let mut templates = Vec::with_capacity(nt);
    for _ in 0..nt {
        let (nsrc, ndst, flags) = (r.u32()?, r.u32()?, r.u8()?);
        let np = r.len(12)?;
        let mut pieces = Vec::with_capacity(np);
        for _ in 0..np {
            let (src, dst) = (r.u32()?, r.u32()?);
            if src >= nsrc || dst >= ndst {
                return Err(bad("a piece of a box the template does not have"));
            }
            let dims = r.len(16)?;
            let boxed = (0..dims).map(|_| Ok([r.u64()?, r.u64()?])).collect::<Result<Vec<_>, Error>>()?;
            pieces.push(TPiece { src, dst, boxed });
        }
        templates.push(Template { nsrc, ndst, pieces, block_aligned: flags & 1 != 0, whole: flags & 2 != 0 });
    }
    let inst = r.u32s()?;
    let groups = r.u32s()?;
    let holders = r.lists()?;
    let class_sets = r.lists()?;
    let choice = r.u32s()?;
    let served = r.lists()?;
    let src_hosts = r.u32s()?;
    let class_hosts = r.lists()?;
    let nh = r.len(4)?;
    let hosts = (0..nh).map(|_| r.str()).collect::<Result<Vec<_>, _>>()?;
    let dst_hosts = r.u32s()?;
    if r.at != bytes.len() {
        return Err(bad("bytes after the end"));
    }
    let mut plan = Plan {
        tensors,
        classes,
        links,
        bytes: total,
        sources,
        templates,
        inst,
        groups,
        holders,
        class_sets,
        choice,
        served,
        src_hosts,
        class_hosts,
        hosts,
        dst_hosts,
        group_at: Vec::new(),
        need_at: Vec::new(),
    };
    check(&plan)?;
    plan.derive();
    if *plan.group_at.last().unwrap_or(&0) as usize != plan.groups.len()
        || *plan.need_at.last().unwrap_or(&0) as usize != plan.choice.len()
    {
        return Err(bad("tables of different lengths"));
    }
    if !plan.choices_valid() {
        return Err(bad("a piece from a rank that does not hold it"));
    }
    Ok((tag, plan))
}

/// Every index in range, before `derive` walks the tables.
fn check(p: &Plan) -> Result<(), Error> {
    let within = |v: &[u32], n: usize| v.iter().all(|&x| (x as usize) < n);
    let ok = p.inst.len() == p.tensors.len()
        && p.inst.iter().all(|&t| t == NONE || (t as usize) < p.templates.len())
        && p.holders.iter().all(|h| !h.is_empty() && within(h, p.sources))
        && p.class_sets.iter().all(|c| within(c, p.classes.len()))
        && p.classes.iter().all(|c| !c.is_empty())
        && within(&p.choice, p.sources)
        && p.served.len() == p.sources
        && p.served.iter().all(|s| within(s, p.classes.len()))
        && p.src_hosts.len() == p.sources
        && p.class_hosts.len() == p.classes.len()
        && p.class_hosts.iter().all(|h| within(h, p.hosts.len()))
        && within(&p.src_hosts, p.hosts.len())
        && within(&p.dst_hosts, p.hosts.len())
        && p.classes.iter().flatten().all(|&r| r < p.dst_hosts.len());
    if !ok {
        return Err(bad("an index out of range"));
    }
    // `choices_valid` searches each holder list: in rank order, each rank once, as `plan` makes them.
    if !p.holders.iter().all(|h| h.windows(2).all(|w| w[0] < w[1])) {
        return Err(bad("source ranks out of order"));
    }
    // Each instance's groups must exist and name holder groups then class sets.
    let mut g = 0usize;
    for &id in &p.inst {
        if id == NONE {
            continue;
        }
        let t = &p.templates[id as usize];
        let (ns, nd) = (t.nsrc as usize, t.ndst as usize);
        let Some(slice) = p.groups.get(g..g + ns + nd) else { return Err(bad("too few groups")) };
        if !within(&slice[..ns], p.holders.len()) || !within(&slice[ns..], p.class_sets.len()) {
            return Err(bad("a group out of range"));
        }
        g += ns + nd;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Layout, RankSpec, TensorSpec};

    #[test]
    fn holders_out_of_rank_order_are_refused() {
        // Two source ranks hold the whole tensor: its one box has two holders.
        let rank =
            |host: &str| RankSpec { host: host.into(), slices: [("w".to_string(), vec![[0, 8], [0, 8]])].into() };
        let layout = |ranks| Layout { tensors: vec![TensorSpec::new("w", &[8, 8], "bf16")], ranks };
        let (src, dst) = (layout(vec![rank("a"), rank("b")]), layout(vec![rank("c")]));
        let mut plan = crate::plan(&src, &dst).unwrap();
        assert!(decode(&encode(&plan, "t")).is_ok());
        let h = plan.holders.iter().position(|h| h.len() > 1).expect("a box with two holders");
        plan.holders[h].reverse();
        let err = decode(&encode(&plan, "t")).unwrap_err().to_string();
        assert!(err.contains("source ranks out of order"), "{err}");
    }
}
