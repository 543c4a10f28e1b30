//! The planner at frontier scale: a Kimi-K2-shaped model (about 1.03e12 parameters, 69,975
//! tensors), bf16 on 256 trainer ranks (PP x TP x DP, EP for experts) to FP8 on 128 inference
//! ranks (TP x DP, EP x TP for experts). Every destination byte is covered exactly once: every
//! rank's pieces add up to each of its boxes, and sampled (rank, tensor) pairs match an
//! independent brute-force intersection of the layouts (the boxes, which rank may send each,
//! the bytes on the wire with the FP8 scales). The plan round-trips through its bytes. Timings
//! are printed, never asserted (docs/BENCHMARKS.md has them).

#[path = "support/kimi.rs"]
mod kimi;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use accel_reshard::{decode, encode, plan, Layout};

/// A deterministic generator.
struct Lcg(u64);
impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// `a ∩ b` per dimension, written here again on purpose (the oracle does not share the
/// planner's code).
fn overlap(a: &[[u64; 2]], b: &[[u64; 2]]) -> Option<Vec<[u64; 2]>> {
    let mut out = Vec::new();
    for (x, y) in a.iter().zip(b) {
        let (lo, hi) = (x[0].max(y[0]), x[1].min(y[1]));
        if lo >= hi {
            return None;
        }
        out.push([lo, hi]);
    }
    Some(out)
}

fn elems(b: &[[u64; 2]]) -> u64 {
    b.iter().map(|r| r[1] - r[0]).product()
}

/// The bytes a piece of `b` travels in: one byte per element and a 4-byte scale per 128x128
/// block it touches for FP8, two bytes per element for bf16.
fn wire_bytes(b: &[[u64; 2]], fp8: bool) -> u64 {
    if !fp8 {
        return 2 * elems(b);
    }
    let blocks = |[lo, hi]: [u64; 2]| hi.div_ceil(128) - lo / 128;
    elems(b).div_ceil(4) * 4 + 4 * blocks(b[0]) * blocks(b[1])
}

/// The brute-force answer for destination `d`, tensor `name`: each distinct source box's cut of
/// the wanted box, with the ranks that hold it.
fn brute(src: &Layout, dst: &Layout, d: usize, name: &str) -> BTreeMap<Vec<[u64; 2]>, BTreeSet<usize>> {
    let want = &dst.ranks[d].slices[name];
    let mut out: BTreeMap<Vec<[u64; 2]>, BTreeSet<usize>> = BTreeMap::new();
    for (r, rank) in src.ranks.iter().enumerate() {
        if let Some(cut) = rank.slices.get(name).and_then(|have| overlap(have, want)) {
            out.entry(cut).or_default().insert(r);
        }
    }
    out
}

#[test]
fn kimi_k2_plan_covers_every_destination_byte_once() {
    let t0 = Instant::now();
    let (src, dst) = (kimi::source(), kimi::destination());
    let built = t0.elapsed();
    assert_eq!(src.tensors.len(), 69_975);
    let params = kimi::parameters(&src);
    assert!((1.02e12..1.04e12).contains(&(params as f64)), "{params} parameters");

    let t1 = Instant::now();
    let p = plan(&src, &dst).unwrap();
    let cold = t1.elapsed();
    let (templates, needs) = p.counts();
    let t2 = Instant::now();
    let bytes = encode(&p, "kimi");
    let encoded = t2.elapsed();
    let t3 = Instant::now();
    let (tag, back) = decode(&bytes).unwrap();
    let decoded = t3.elapsed();
    assert_eq!((tag.as_str(), &back), ("kimi", &p), "the plan round-trips through its bytes");
    eprintln!(
        "kimi-k2: layouts {built:?}; plan {cold:?} cold ({templates} templates, {needs} pieces to place, {} MiB in \
         memory, {} MiB encoded in {encoded:?}), decoded in {decoded:?}",
        p.memory() >> 20,
        bytes.len() >> 20
    );
    assert!(templates < 200, "{templates} templates: the plan should grow with geometries, not tensors");

    // Every destination rank: its pieces, per tensor, add up to its box and stay inside it.
    let index: BTreeMap<&str, usize> = dst.tensors.iter().enumerate().map(|(i, t)| (t.name.as_str(), i)).collect();
    let t4 = Instant::now();
    let mut total = 0u64;
    let mut parts = Vec::new();
    for d in 0..dst.ranks.len() {
        let part = p.destination(d);
        let mut got: BTreeMap<usize, u64> = BTreeMap::new();
        for (_, buffer) in &part {
            for piece in &buffer.pieces {
                let want = &dst.ranks[d].slices[&p.tensors[piece.tensor].name];
                assert_eq!(
                    overlap(&piece.boxed, want).as_ref(),
                    Some(&piece.boxed),
                    "rank {d}: a piece outside its box"
                );
                *got.entry(piece.tensor).or_default() += elems(&piece.boxed);
                total += piece.nbytes;
            }
        }
        for (name, want) in &dst.ranks[d].slices {
            assert_eq!(got.get(&index[name.as_str()]).copied().unwrap_or(0), elems(want), "rank {d}, {name}");
        }
        parts.push(part);
    }
    eprintln!("kimi-k2: every destination expanded in {:?}", t4.elapsed());
    assert_eq!(total, p.bytes, "plan.bytes is what the destinations receive");

    // Sampled (rank, tensor) pairs against brute force: the same boxes, each once, each from a
    // rank holding it, in the bytes FP8 takes on the wire.
    let mut rng = Lcg(36);
    let names: Vec<&String> = dst.tensors.iter().map(|t| &t.name).collect();
    let mut checked = 0;
    while checked < 400 {
        let d = rng.below(dst.ranks.len() as u64) as usize;
        let name = names[rng.below(names.len() as u64) as usize];
        if !dst.ranks[d].slices.contains_key(name) {
            continue;
        }
        checked += 1;
        let expected = brute(&src, &dst, d, name);
        let ti = index[name.as_str()];
        let fp8 = dst.tensors[ti].dtype == "f8e4m3";
        let mut seen: BTreeMap<Vec<[u64; 2]>, usize> = BTreeMap::new();
        for (fetch, buffer) in &parts[d] {
            assert!(buffer.readers.contains(&d));
            for piece in buffer.pieces.iter().filter(|x| x.tensor == ti) {
                assert!(seen.insert(piece.boxed.clone(), fetch.src).is_none(), "rank {d}, {name}: a box twice");
                assert_eq!(piece.nbytes, wire_bytes(&piece.boxed, fp8), "rank {d}, {name}: wire bytes");
            }
        }
        assert_eq!(seen.keys().collect::<Vec<_>>(), expected.keys().collect::<Vec<_>>(), "rank {d}, {name}");
        for (b, src_rank) in &seen {
            assert!(expected[b].contains(src_rank), "rank {d}, {name}: {src_rank} does not hold {b:?}");
        }
    }
}

#[test]
fn a_broken_oracle_input_is_caught() {
    // The check above must be able to fail: a destination wanting more than the sources hold
    // (the embedding's last rows dropped from every trainer) is refused with the tensor named.
    let (mut src, dst) = (kimi::source(), kimi::destination());
    for r in &mut src.ranks {
        if let Some(b) = r.slices.get_mut("model.embed_tokens.weight") {
            if b[0][1] == kimi::VOCAB {
                b[0][1] -= 1;
            }
        }
    }
    let err = plan(&src, &dst).unwrap_err().to_string();
    assert!(err.contains("model.embed_tokens.weight") && err.contains("no source rank holds"), "{err}");
}
