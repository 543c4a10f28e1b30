//! Fuzz target `capture`: discovery over a captured machine built from the input. The input's
//! first line picks the form, the rest is capture-bundle text (`accel_discover::fs`):
//!
//! - a sample's name (`dgx-h100`, `mi300x`, ...: `samples::names()`): the rest is bundle
//!   entries (no first line) laid over that sample's tree, so they replace, add or break files
//!   and symlinks of a real machine (a file replaced by a symlink to nowhere reads as deleted);
//! - `disk`: the rest is a whole bundle, written out as a directory (under `fuzz/target/`) and
//!   discovered through the real filesystem (`Host::new`: `openat2`, confinement to the root);
//! - anything else: the rest is a whole bundle, discovered in memory.
//!
//! Each parsed bundle must write back to the same bundle; discovery runs with every built-in
//! plugin, then the path matrix and the machine's JSON; and on whole bundles (not overlays, to
//! keep a run fast) `accel capture`'s copier runs over the tree, and its bundle must parse. Never a panic, never unbounded memory. With `ACCEL_FUZZ_STRICT=1`:
//! the model's invariants, a re-captured tree discovers the same devices, and on disk the same
//! devices as in memory.

#![no_main]

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use accel_discover::fs::{MemTree, BUNDLE_MAGIC};
use accel_discover::{capture, conformance, default_plugins, discover, samples, Host};
use accel_fuzz::{materialize, registry, strict, Scratch};
use accel_model::{Machine, PathClassifier, SkuRegistry};
use libfuzzer_sys::fuzz_target;

/// Every sample's tree, parsed once.
fn base(name: &str) -> Option<&'static MemTree> {
    static BASES: OnceLock<BTreeMap<&'static str, MemTree>> = OnceLock::new();
    let bases =
        BASES.get_or_init(|| samples::names().into_iter().map(|n| (n, samples::tree(n).expect("a sample"))).collect());
    bases.get(name)
}

/// `base` with the entries of `over` laid over it, as if `over`'s bundle text followed `base`'s.
fn overlay(base: &MemTree, over: MemTree) -> MemTree {
    let mut tree = base.clone();
    let over = Arc::new(over);
    let links = Host::in_memory(over.clone(), SkuRegistry::empty());
    for (path, kind) in over.paths() {
        match kind {
            'F' => tree.add_file(path, over.file(path).unwrap_or_default()),
            'L' => {
                if let Some(target) = links.raw_link(path) {
                    tree.add_link(path, target);
                }
            }
            _ => tree.add_dir(path),
        }
    }
    tree
}

/// What discovery found that a strict comparison looks at (warnings name paths, which differ).
fn devices(m: &Machine) -> String {
    let mut accs = m.accelerators.clone();
    for a in &mut accs {
        a.index = 0;
    }
    serde_json::to_string(&(&m.numa_nodes, &m.pci, &accs, &m.nics, &m.links)).expect("serializes")
}

fn discover_checked(host: &Host) -> Machine {
    let machine = discover(host, &default_plugins());
    let _ = PathClassifier::new(&machine).matrix();
    serde_json::to_string(&machine).expect("a machine serializes");
    if strict() {
        if let Err(e) = conformance::invariants(&machine) {
            panic!("invariant broken: {e}");
        }
    }
    machine
}

fn run(data: &[u8]) {
    let (header, body) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let header = std::str::from_utf8(header).unwrap_or("");
    let disk = header == "disk";
    let base = base(header);
    let text = match base {
        Some(_) => [BUNDLE_MAGIC.as_bytes(), b"\n", body].concat(),
        None => body.to_vec(),
    };
    let Ok(parsed) = MemTree::parse_bundle(&text) else { return };
    let written = parsed.to_bundle();
    let again = MemTree::parse_bundle(&written).expect("a bundle accel wrote parses");
    assert!(again.to_bundle() == written, "a bundle does not read back as written");

    let tree = Arc::new(match base {
        Some(b) => overlay(b, parsed),
        None => parsed,
    });
    let host = Host::in_memory(tree.clone(), registry());
    let machine = discover_checked(&host);
    if base.is_none() {
        let (copied, _) = capture::capture(&host, &machine, &default_plugins());
        let copied = MemTree::parse_bundle(&copied.to_bundle()).expect("accel capture's bundle parses");
        if strict() {
            let recaptured = discover(&Host::in_memory(Arc::new(copied), registry()), &default_plugins());
            assert_eq!(devices(&recaptured), devices(&machine), "a re-captured tree discovers other devices");
        }
    }

    if disk {
        let Ok(scratch) = Scratch::new() else { return };
        let missed = materialize(&tree, &scratch.0);
        let on_disk = discover_checked(&Host::new(&scratch.0, registry()));
        if strict() && missed == 0 {
            assert_eq!(devices(&on_disk), devices(&machine), "on disk and in memory differ");
        }
    }
}

fuzz_target!(|data: &[u8]| run(data));
