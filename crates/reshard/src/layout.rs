//! Layouts: the tensors of a model and the box of each tensor that each rank holds, and their
//! validation (boxes inside the shape, known tensors, known dtypes).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::fp8::Scale;
use crate::{dtype, Error};

/// One tensor of the model: its global shape and element type, and for an FP8 destination how
/// it is scaled (per tensor, or per 128x128 block of its last two dimensions).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorSpec {
    pub name: String,
    pub shape: Vec<u64>,
    pub dtype: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<Scale>,
}

impl TensorSpec {
    /// A tensor without scales.
    pub fn new(name: impl Into<String>, shape: &[u64], dtype: impl Into<String>) -> TensorSpec {
        TensorSpec { name: name.into(), shape: shape.to_vec(), dtype: dtype.into(), scale: None }
    }
}

/// One rank: the host it runs on (ranks on one host share memory; empty: a host of its own) and
/// the box it holds of each tensor, `[start, stop)` per dimension. A tensor it does not name, or
/// an empty box, it does not hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankSpec {
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub slices: BTreeMap<String, Vec<[u64; 2]>>,
}

/// A sharded model state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Layout {
    pub tensors: Vec<TensorSpec>,
    pub ranks: Vec<RankSpec>,
}

/// A box: `[lo, hi)` per dimension.
pub(crate) type Boxed = Vec<[u64; 2]>;

pub(crate) fn volume(b: &[[u64; 2]]) -> u64 {
    b.iter().map(|[lo, hi]| hi - lo).product()
}

pub(crate) fn intersect(a: &[[u64; 2]], b: &[[u64; 2]]) -> Option<Boxed> {
    a.iter()
        .zip(b)
        .map(|(&[alo, ahi], &[blo, bhi])| {
            let (lo, hi) = (alo.max(blo), ahi.min(bhi));
            (lo < hi).then_some([lo, hi])
        })
        .collect()
}

pub(crate) fn show(b: &[[u64; 2]]) -> String {
    let dims: Vec<String> = b.iter().map(|[lo, hi]| format!("{lo}:{hi}")).collect();
    format!("[{}]", dims.join(", "))
}

/// A hasher for the planner's own tables (names, boxes, rank lists): FxHash's multiply-rotate,
/// several times faster than SipHash on the ~300,000 names of a trillion-parameter layout. The
/// layouts are the caller's own data, so hash flooding is not a concern here.
#[derive(Default, Clone, Copy)]
pub(crate) struct Fx(u64);

impl Fx {
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl std::hash::Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(b));
        }
    }
    fn write_u8(&mut self, v: u8) {
        self.add(u64::from(v));
    }
    fn write_u32(&mut self, v: u32) {
        self.add(u64::from(v));
    }
    fn write_u64(&mut self, v: u64) {
        self.add(v);
    }
    fn write_usize(&mut self, v: usize) {
        self.add(v as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A hash map over [`Fx`].
pub(crate) type FxMap<K, V> = std::collections::HashMap<K, V, std::hash::BuildHasherDefault<Fx>>;

/// Each rank's non-empty boxes by tensor index, in name order: a layout read once, so planning
/// never looks a name up again.
pub(crate) type Held<'a> = Vec<Vec<(u32, &'a Boxed)>>;

impl Layout {
    /// Checks every name, dtype and box; `side` names the layout in errors.
    pub fn validate(&self, side: &'static str) -> Result<(), Error> {
        self.indexed(side).map(|_| ())
    }

    /// Validates, and gives each rank's boxes by tensor index.
    pub(crate) fn indexed(&self, side: &'static str) -> Result<Held<'_>, Error> {
        let bad = |message: String| Error::Layout { side, message };
        if self.ranks.is_empty() {
            return Err(bad("it has no ranks".into()));
        }
        let mut shapes: FxMap<&str, (u32, &[u64])> = FxMap::default();
        shapes.reserve(self.tensors.len());
        for (i, t) in self.tensors.iter().enumerate() {
            if dtype::itemsize(&t.dtype).is_none() {
                let known: Vec<&str> = dtype::DTYPES.iter().map(|d| d.0).collect();
                return Err(bad(format!(
                    "tensor {:?}: unknown dtype {:?} (known: {})",
                    t.name,
                    t.dtype,
                    known.join(", ")
                )));
            }
            match (t.scale, dtype::is_fp8(&t.dtype)) {
                (Some(_), false) => {
                    return Err(bad(format!("tensor {:?}: a scale is for FP8 tensors, not {}", t.name, t.dtype)))
                }
                (Some(Scale::Block), true) if t.shape.len() != 2 => {
                    return Err(bad(format!(
                        "tensor {:?}: 128x128 block scales are for matrices (two dimensions), it has {}",
                        t.name,
                        t.shape.len()
                    )))
                }
                _ => {}
            }
            if shapes.insert(&t.name, (i as u32, &t.shape)).is_some() {
                return Err(bad(format!("tensor {:?} is listed twice", t.name)));
            }
        }
        let mut held: Held<'_> = Vec::with_capacity(self.ranks.len());
        for (r, rank) in self.ranks.iter().enumerate() {
            let mut mine = Vec::with_capacity(rank.slices.len());
            for (name, b) in &rank.slices {
                let Some(&(index, shape)) = shapes.get(name.as_str()) else {
                    return Err(bad(format!("rank {r} holds {name:?}, which is not among the tensors")));
                };
                if b.len() != shape.len() {
                    return Err(bad(format!(
                        "rank {r}, tensor {name:?}: a box of {} dimension(s) for a tensor of {}",
                        b.len(),
                        shape.len()
                    )));
                }
                for (d, (&[lo, hi], &n)) in b.iter().zip(shape.iter()).enumerate() {
                    if lo > hi || hi > n {
                        return Err(bad(format!(
                            "rank {r}, tensor {name:?}, dimension {d}: {lo}:{hi} is not inside 0:{n}"
                        )));
                    }
                }
                if volume(b) > 0 {
                    mine.push((index, b));
                }
            }
            held.push(mine);
        }
        Ok(held)
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorSpec> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The host of `rank`: its own name, or a host of its own when none is given.
    pub(crate) fn host(&self, side: &str, rank: usize) -> String {
        match self.ranks[rank].host.as_str() {
            "" => format!("{side}:{rank}"),
            h => h.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boxes_intersect_per_dimension() {
        assert_eq!(intersect(&[[0, 4], [2, 6]], &[[2, 8], [0, 3]]), Some(vec![[2, 4], [2, 3]]));
        assert_eq!(intersect(&[[0, 4]], &[[4, 8]]), None);
        assert_eq!(volume(&[[2, 4], [2, 3]]), 2);
    }
}
