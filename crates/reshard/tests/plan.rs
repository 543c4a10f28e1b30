//! The plan against brute force: on random pairs of shardings (splits along any dimension,
//! replicas on both sides, ranks sharing hosts), every element each destination rank holds
//! arrives exactly once, from a source rank that holds it, at a place no other piece uses; and
//! every layout mistake is refused with its tensor named.

use std::collections::BTreeMap;

use accel_reshard::{plan, Error, Layout, RankSpec, TensorSpec, ALIGN};

/// A deterministic generator (no dev-dependency needed for this much randomness).
struct Lcg(u64);
impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// `ranks` ranks: `replicas` copies of a split into `ranks / replicas` parts along `dim`.
fn sharded(tensors: &[TensorSpec], ranks: usize, replicas: usize, dims: &[usize], hosts: usize) -> Layout {
    let parts = ranks / replicas;
    let ranks = (0..ranks)
        .map(|r| {
            let part = (r % parts) as u64;
            let slices = tensors
                .iter()
                .zip(dims)
                .map(|(t, &d)| {
                    let b = t
                        .shape
                        .iter()
                        .enumerate()
                        .map(|(i, &n)| {
                            if i == d % t.shape.len() {
                                let p = parts as u64;
                                [n * part / p, n * (part + 1) / p]
                            } else {
                                [0, n]
                            }
                        })
                        .collect();
                    (t.name.clone(), b)
                })
                .collect();
            RankSpec { host: format!("h{}", r % hosts), slices }
        })
        .collect();
    Layout { tensors: tensors.to_vec(), ranks }
}

fn contains(b: &[[u64; 2]], at: &[u64]) -> bool {
    b.iter().zip(at).all(|(&[lo, hi], &x)| lo <= x && x < hi)
}

fn each_index(b: &[[u64; 2]], f: &mut impl FnMut(&[u64])) {
    let mut at: Vec<u64> = b.iter().map(|r| r[0]).collect();
    if b.iter().any(|[lo, hi]| lo >= hi) {
        return;
    }
    loop {
        f(&at);
        let mut d = b.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            at[d] += 1;
            if at[d] < b[d][1] {
                break;
            }
            at[d] = b[d][0];
        }
    }
}

#[test]
fn every_element_arrives_once_from_a_holder() {
    let mut rng = Lcg(7);
    for case in 0..60 {
        let n = 1 + rng.below(4) as usize;
        let tensors: Vec<TensorSpec> = (0..n)
            .map(|i| {
                let dims = 1 + rng.below(3) as usize;
                let shape: Vec<u64> = (0..dims).map(|_| 1 + rng.below(9)).collect();
                TensorSpec::new(format!("t{i}"), &shape, ["f32", "bf16", "i8"][rng.below(3) as usize])
            })
            .collect();
        let (sr, srep) = [(4, 1), (4, 2), (2, 1), (6, 3)][rng.below(4) as usize];
        let (dr, drep) = [(8, 1), (8, 2), (3, 1), (4, 4)][rng.below(4) as usize];
        let sdims: Vec<usize> = (0..n).map(|_| rng.below(3) as usize).collect();
        let ddims: Vec<usize> = (0..n).map(|_| rng.below(3) as usize).collect();
        let src = sharded(&tensors, sr, srep, &sdims, 1 + rng.below(3) as usize);
        let dst = sharded(&tensors, dr, drep, &ddims, 1 + rng.below(4) as usize);
        let p = plan(&src, &dst).unwrap_or_else(|e| panic!("case {case}: {e}"));
        let sources = p.sources_all();
        for d in 0..dr {
            let mut seen: BTreeMap<(usize, Vec<u64>), u32> = BTreeMap::new();
            for (f, buffer) in p.destination(d) {
                assert_eq!(buffer, sources[f.src][f.buffer], "case {case}: both sides expand one buffer alike");
                let buffer = &buffer;
                assert!(buffer.readers.contains(&d), "case {case}: rank {d} reads a buffer not meant for it");
                let mut end = 0;
                for piece in &buffer.pieces {
                    assert!(piece.offset >= end && piece.offset % ALIGN == 0, "case {case}: pieces overlap");
                    end = piece.offset + piece.nbytes;
                    let name = &p.tensors[piece.tensor].name;
                    let held = &src.ranks[f.src].slices[name];
                    let want = &dst.ranks[d].slices[name];
                    each_index(&piece.boxed, &mut |at| {
                        assert!(contains(held, at), "case {case}: source {} does not hold {name}{at:?}", f.src);
                        assert!(contains(want, at), "case {case}: rank {d} does not want {name}{at:?}");
                        *seen.entry((piece.tensor, at.to_vec())).or_default() += 1;
                    });
                }
                assert!(end <= buffer.nbytes);
            }
            for (ti, t) in tensors.iter().enumerate() {
                each_index(&dst.ranks[d].slices[&t.name], &mut |at| {
                    assert_eq!(seen.get(&(ti, at.to_vec())), Some(&1), "case {case}: rank {d}, {}{at:?}", t.name);
                });
            }
        }
    }
}

fn t(name: &str, shape: &[u64], dtype: &str) -> TensorSpec {
    TensorSpec::new(name, shape, dtype)
}

fn rank(host: &str, slices: &[(&str, &[[u64; 2]])]) -> RankSpec {
    RankSpec { host: host.into(), slices: slices.iter().map(|(n, b)| (n.to_string(), b.to_vec())).collect() }
}

#[test]
fn replicas_share_the_load_and_a_local_replica_costs_no_link() {
    // Two data-parallel replicas of one 2-way split, on hosts a and b; readers on b and c.
    let w = [t("w", &[8, 8], "f32")];
    let half = |i: u64| [[i * 4, i * 4 + 4], [0, 8]];
    let src = Layout {
        tensors: w.to_vec(),
        ranks: vec![
            rank("a", &[("w", &half(0))]),
            rank("a", &[("w", &half(1))]),
            rank("b", &[("w", &half(0))]),
            rank("b", &[("w", &half(1))]),
        ],
    };
    let dst = Layout {
        tensors: w.to_vec(),
        ranks: vec![rank("b", &[("w", &[[0, 8], [0, 8]])]), rank("c", &[("w", &[[0, 8], [0, 4]])])],
    };
    let p = plan(&src, &dst).unwrap();
    // Rank 0 (on b) reads only b's replicas, through memory; rank 1 (on c) takes one half from
    // each host, so no uplink carries more than half of what c receives.
    assert!(p.destination(0).iter().all(|(f, _)| f.src >= 2), "{:?}", p.destination(0));
    assert_eq!(p.links.inn.get("b"), None);
    assert_eq!((p.links.out["a"], p.links.out["b"], p.links.inn["c"]), (64, 64, 128));
}

#[test]
fn mistakes_are_refused_with_the_tensor_named() {
    let w = [t("w", &[4, 4], "bf16")];
    let full = rank("", &[("w", &[[0, 4], [0, 4]])]);
    let ok = Layout { tensors: w.to_vec(), ranks: vec![full.clone()] };
    // A gap: nobody holds rows 2..4.
    let gap = Layout { tensors: w.to_vec(), ranks: vec![rank("", &[("w", &[[0, 2], [0, 4]])])] };
    match plan(&gap, &ok) {
        Err(Error::Uncovered { tensor, missing: 8, .. }) => assert_eq!(tensor, "w"),
        other => panic!("{other:?}"),
    }
    // Overlapping boxes that are not replicas.
    let overlap = Layout {
        tensors: w.to_vec(),
        ranks: vec![rank("", &[("w", &[[0, 3], [0, 4]])]), rank("", &[("w", &[[2, 4], [0, 4]])])],
    };
    assert!(matches!(plan(&overlap, &ok), Err(Error::Mismatch { .. })));
    // A shape that differs, a dtype that does not convert, an unknown dtype, a box outside.
    let other_shape = Layout { tensors: vec![t("w", &[4, 5], "bf16")], ranks: vec![] };
    assert!(plan(&ok, &Layout { ranks: vec![rank("", &[])], ..other_shape }).is_err());
    let ints = Layout { tensors: vec![t("w", &[4, 4], "i8")], ranks: vec![full.clone()] };
    assert!(matches!(plan(&ok, &ints), Err(Error::Mismatch { .. })));
    let f8 = Layout { tensors: vec![t("w", &[4, 4], "f8")], ranks: vec![full.clone()] };
    assert!(matches!(plan(&f8, &ok), Err(Error::Layout { side: "source", .. })));
    let outside = Layout { tensors: w.to_vec(), ranks: vec![rank("", &[("w", &[[0, 5], [0, 4]])])] };
    assert!(matches!(plan(&ok, &outside), Err(Error::Layout { side: "destination", .. })));
    // Converting bf16 to f16 is fine.
    let halves = Layout { tensors: vec![t("w", &[4, 4], "f16")], ranks: vec![full] };
    assert_eq!(plan(&ok, &halves).unwrap().tensors[0].dst_dtype, "f16");
}

#[test]
fn a_replica_joins_and_leaves_without_planning_again() {
    let w = [t("w", &[8, 8], "f32")];
    let half = |i: u64| [[i * 4, i * 4 + 4], [0, 8]];
    let src = Layout { tensors: w.to_vec(), ranks: vec![rank("a", &[("w", &half(0))]), rank("a", &[("w", &half(1))])] };
    let col = |i: u64| [[0, 8], [i * 4, i * 4 + 4]];
    let dst = Layout {
        tensors: w.to_vec(),
        ranks: vec![rank("b", &[("w", &col(0))]), rank("c", &[("w", &col(1))]), rank("d", &[("w", &col(0))])],
    };
    let p = plan(&src, &dst).unwrap();
    let per_rank = p.bytes / 3;
    let (joined, new) = p.with_replica(2, "e").unwrap();
    assert_eq!(new, 3);
    assert_eq!(joined.class_of(3), joined.class_of(0));
    assert_eq!(joined.bytes, p.bytes + per_rank);
    // The joiner reads what its replica reads; the other class is untouched.
    let strip = |v: Vec<(accel_reshard::Fetch, accel_reshard::Buffer)>| {
        v.into_iter().map(|(f, b)| (f, b.pieces)).collect::<Vec<_>>()
    };
    assert_eq!(strip(joined.destination(3)), strip(joined.destination(0)));
    assert_eq!(joined.destination(1), p.destination(1));
    assert!(joined.destination(0).iter().all(|(_, b)| b.readers == vec![0, 2, 3] && b.relay));
    assert_eq!(joined.links.inn["e"], per_rank);
    // Leaving: back to two readers; the last rank of a class cannot leave.
    let left = joined.without_replica(2).unwrap().without_replica(3).unwrap();
    assert_eq!(left.bytes, p.bytes - per_rank);
    assert!(left.destination(2).is_empty() && left.class_of(2).is_none());
    assert!(left.without_replica(0).unwrap_err().to_string().contains("only one holding its shard"));
    assert!(p.with_replica(9, "x").is_err());
    // A plan that changed membership round-trips through its bytes too.
    let (_, back) = accel_reshard::decode(&accel_reshard::encode(&joined, "j")).unwrap();
    assert_eq!(back, joined);
}
