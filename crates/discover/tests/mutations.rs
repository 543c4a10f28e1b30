//! Properties of discovery on mutated real captures: every captured machine is taken apart
//! (files deleted, truncated, duplicated over others, replaced by garbage; symlinks pointed at
//! the wrong place, at themselves, out of the tree), thousands of times, and every result must
//! still be a coherent machine:
//!
//! - its JSON deserializes into the model and serializes back to the same JSON;
//! - accelerator ids are unique, and indices unique and dense per vendor;
//! - every accelerator's PCI function is in the PCI tree;
//! - the path matrix is symmetric;
//! - both ends of every link are accelerators of the machine.
//!
//! Each case runs discovery once on an in-memory tree (no IO, no network), so every input
//! finishes; `ACCEL_MUTATION_CASES` raises the number of cases (default 2,000 in all).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use accel_discover::fs::MemTree;
use accel_discover::{default_plugins, discover, samples, Host};
use accel_model::{Machine, PathClassifier, SkuRegistry};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// A capture and the paths mutations pick from (computed once; a path a previous mutation
/// removed is simply skipped).
struct Capture {
    name: String,
    tree: MemTree,
    /// Files the plugins read, most of the tree (all but the bulk of KFD io_links).
    files: Vec<PathBuf>,
    links: Vec<PathBuf>,
    all: Vec<PathBuf>,
}

/// The captures mutated: every embedded sample and the test-only real captures.
fn captures() -> Vec<Capture> {
    let mut trees: Vec<(String, MemTree)> =
        samples::names().into_iter().map(|n| (n.to_owned(), samples::tree(n).unwrap())).collect();
    for name in ["mi300x-cpx", "dgx-h100-mig"] {
        trees.push((name.to_owned(), MemTree::parse_bundle(&accel_testdata::bundle(name)).unwrap()));
    }
    trees
        .into_iter()
        .map(|(name, tree)| {
            let of = |kind: char| -> Vec<PathBuf> {
                tree.paths().filter(|(_, k)| *k == kind).map(|(p, _)| p.to_path_buf()).collect()
            };
            let files = of('F')
                .into_iter()
                .filter(|p| {
                    let s = p.to_string_lossy();
                    !s.contains("/io_links/") || s.contains("/io_links/0/")
                })
                .collect();
            let links = of('L');
            let all = tree.paths().map(|(p, _)| p.to_path_buf()).collect();
            Capture { name, tree, files, links, all }
        })
        .collect()
}

#[derive(Debug, Clone)]
enum Mutation {
    Delete(usize),
    Truncate(usize, usize),
    /// Copy one file's bytes over another's.
    Duplicate(usize, usize),
    Garbage(usize, Vec<u8>),
    /// Point a link at another entry's path (absolute), at itself, or out of the tree.
    Relink(usize, usize, u8),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::Delete),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::Truncate(a, b)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::Duplicate(a, b)),
        (any::<usize>(), proptest::collection::vec(any::<u8>(), 0..64)).prop_map(|(a, g)| Mutation::Garbage(a, g)),
        (any::<usize>(), any::<usize>(), any::<u8>()).prop_map(|(a, b, k)| Mutation::Relink(a, b, k)),
    ]
}

fn apply(c: &Capture, t: &mut MemTree, m: &Mutation) {
    let pick = |list: &[PathBuf], i: usize| list.get(i % list.len().max(1)).cloned();
    match m {
        Mutation::Delete(i) => {
            if let Some(p) = pick(&c.all, *i) {
                t.remove(&p);
            }
        }
        Mutation::Truncate(i, at) => {
            if let Some(p) = pick(&c.files, *i) {
                if let Some(bytes) = t.file(&p).map(<[u8]>::to_vec) {
                    t.add_file(p, bytes[..at % (bytes.len() + 1)].to_vec());
                }
            }
        }
        Mutation::Duplicate(a, b) => {
            if let (Some(from), Some(to)) = (pick(&c.files, *a), pick(&c.files, *b)) {
                if let Some(bytes) = t.file(&from).map(<[u8]>::to_vec) {
                    t.add_file(to, bytes);
                }
            }
        }
        Mutation::Garbage(i, bytes) => {
            if let Some(p) = pick(&c.files, *i) {
                t.add_file(p, bytes.clone());
            }
        }
        Mutation::Relink(i, j, kind) => {
            if let Some(p) = pick(&c.links, *i) {
                let other = pick(&c.all, *j).unwrap_or_default();
                let target = match kind % 4 {
                    0 => other,
                    1 => p.clone(),
                    2 => PathBuf::from("../../../../../../../.."),
                    _ => PathBuf::from("..").join(other.file_name().unwrap_or_default()),
                };
                t.add_link(p, target);
            }
        }
    }
}

/// Every invariant of a discovered machine; `Err` names the one broken.
fn check(m: &Machine) -> Result<(), String> {
    // The JSON is the model's, and round-trips.
    let json = serde_json::to_string(m).map_err(|e| format!("serialize: {e}"))?;
    let back: Machine = serde_json::from_str(&json).map_err(|e| format!("JSON does not deserialize: {e}"))?;
    let again = serde_json::to_string(&back).unwrap();
    if again != json {
        return Err("JSON does not round-trip".into());
    }
    // Unique ids; unique, dense indices per vendor (MIG devices are numbered after the physical
    // GPUs, so a GPU split into MIG devices leaves its own ordinal unused).
    let ids: BTreeSet<&str> = m.accelerators.iter().map(|a| a.id.as_str()).collect();
    if ids.len() != m.accelerators.len() {
        return Err("duplicate accelerator ids".into());
    }
    let mut by_vendor: BTreeMap<&str, (Vec<u32>, BTreeSet<&str>)> = BTreeMap::new();
    for a in &m.accelerators {
        let e = by_vendor.entry(a.vendor.as_str()).or_default();
        e.0.push(a.index);
        if let Some(p) = a.partition.as_ref().filter(|p| p.mode.starts_with("MIG")) {
            e.1.insert(p.physical_id.as_str());
        }
    }
    for (vendor, (mut idx, split)) in by_vendor {
        idx.sort_unstable();
        let n = idx.len();
        idx.dedup();
        if idx.len() != n {
            return Err(format!("{vendor}: duplicate indices {idx:?}"));
        }
        let bound = (n + split.len()) as u32;
        if idx.iter().any(|&i| i >= bound) || (split.is_empty() && idx != (0..n as u32).collect::<Vec<_>>()) {
            return Err(format!("{vendor}: indices {idx:?} are not dense"));
        }
    }
    // Every accelerator's PCI function is in the tree.
    for a in &m.accelerators {
        if let Some(pci) = a.pci {
            if m.pci_node(&pci.to_string()).is_none() {
                return Err(format!("{}: PCI function {pci} is not in the tree", a.id));
            }
        }
    }
    // Both ends of every link exist.
    for l in &m.links {
        if !ids.contains(l.a.as_str()) || !ids.contains(l.b.as_str()) {
            return Err(format!("link {} - {} names a missing accelerator", l.a, l.b));
        }
    }
    // The path matrix is symmetric.
    let classifier = PathClassifier::new(m);
    let matrix = classifier.matrix();
    for (i, row) in matrix.iter().enumerate() {
        for (j, class) in row.iter().enumerate().take(i) {
            if *class != matrix[j][i] {
                return Err(format!("path matrix not symmetric at {i},{j}: {class:?} vs {:?}", matrix[j][i]));
            }
        }
    }
    Ok(())
}

/// The built-in registry, parsed once (each vendor's TOML is parsed on first use; clones of a
/// used registry share nothing but are already parsed).
fn registry() -> &'static SkuRegistry {
    static REGISTRY: std::sync::OnceLock<SkuRegistry> = std::sync::OnceLock::new();
    REGISTRY.get_or_init(|| {
        let r = SkuRegistry::builtin();
        let _ = r.all(); // parses every vendor's file
        r
    })
}

fn discover_tree(t: MemTree) -> Machine {
    discover(&Host::in_memory(Arc::new(t), registry().clone()), &default_plugins())
}

#[test]
fn unmutated_captures_hold_every_invariant() {
    for c in captures() {
        check(&discover_tree(c.tree.clone())).unwrap_or_else(|e| panic!("{}: {e}", c.name));
    }
}

#[test]
fn mutated_captures_hold_every_invariant() {
    let caps = captures();
    let total: u32 = std::env::var("ACCEL_MUTATION_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
    let per = (total / caps.len() as u32).max(1);
    for c in &caps {
        // The large real capture (63 partitions, 2,000 links) is slow to discover: fewer cases.
        let cases = if c.all.len() > 5000 { per / 8 + 1 } else { per };
        let config = Config { cases, failure_persistence: None, ..Config::default() };
        // A fixed seed: the same cases on every run, so a failure reproduces.
        let rng = proptest::test_runner::TestRng::deterministic_rng(config.rng_algorithm);
        let mut runner = TestRunner::new_with_rng(config, rng);
        let started = std::time::Instant::now();
        runner
            .run(&proptest::collection::vec(mutation(), 1..5), |muts| {
                let mut t = c.tree.clone();
                for m in &muts {
                    apply(c, &mut t, m);
                }
                check(&discover_tree(t)).map_err(TestCaseError::fail)
            })
            .unwrap_or_else(|e| panic!("{}: {e}", c.name));
        eprintln!("{}: {cases} cases in {:.1} s", c.name, started.elapsed().as_secs_f64());
    }
}
