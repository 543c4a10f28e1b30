//! Machines embedded in the binary (`accel topo --sample NAME`, `accel samples`), for demos, the
//! planner's tests and anyone without the hardware. Each is a bundle from
//! `test_data/hosts/<name>/capture.bundle`, whose README describes it and whose
//! `provenance.toml` says whether it is `real`, `derived` or `synthetic` (crate::provenance).

use std::sync::Arc;

use accel_model::{Machine, SkuRegistry};

use crate::fs::MemTree;
use crate::provenance::Provenance;
use crate::{default_plugins, discover, Host};

/// Every embedded sample, by name: each `test_data/hosts/<name>/capture.bundle` with its README
/// and its provenance.toml (found by build.rs, in name order).
const SAMPLES: &[(&str, &[u8], &str, &str)] = include!(concat!(env!("OUT_DIR"), "/samples.rs"));

/// Names of the embedded samples, in a stable order.
pub fn names() -> Vec<&'static str> {
    SAMPLES.iter().map(|(n, ..)| *n).collect()
}

/// What to say about a sample name nothing embeds: the nearest name, if it is close, and where
/// the list is (`no sample named "gb200"; did you mean "gb200-nvl72-tray"? `accel samples`
/// lists them`).
pub fn unknown(name: &str) -> String {
    let hint = accel_model::suggest(name, names()).map(|s| format!("; did you mean {s:?}?")).unwrap_or_default();
    format!("no sample named {name:?}{hint} (`accel samples` lists them)")
}

/// The file tree of a sample.
pub fn tree(name: &str) -> Option<MemTree> {
    let (_, bytes, ..) = SAMPLES.iter().find(|(n, ..)| *n == name)?;
    Some(MemTree::parse_bundle(bytes).expect("embedded samples are valid bundles (tested)"))
}

/// The README describing a sample.
pub fn readme(name: &str) -> Option<&'static str> {
    SAMPLES.iter().find(|(n, ..)| *n == name).map(|(_, _, r, _)| *r)
}

/// A sample's provenance: `real`, `derived` or `synthetic`, its sources and traced facts
/// (every embedded one parses: tested).
pub fn provenance(name: &str) -> Option<Result<Provenance, crate::provenance::Error>> {
    SAMPLES.iter().find(|(n, ..)| *n == name).map(|(_, _, _, p)| Provenance::parse(p))
}

/// A host reading a sample, with the given registry and no network.
pub fn host(name: &str, skus: SkuRegistry) -> Option<Host> {
    Some(Host::in_memory(Arc::new(tree(name)?), skus))
}

/// The machine discovery finds in a sample, with the built-in registry and every plugin.
pub fn machine(name: &str) -> Option<Machine> {
    Some(discover(&host(name, SkuRegistry::builtin())?, &default_plugins()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_unknown_name_gets_the_nearest_one() {
        assert!(super::unknown("gb200").contains("did you mean \"gb200-nvl72-tray\"?"), "{}", super::unknown("gb200"));
        assert!(super::unknown("mi355y").contains("did you mean \"mi355x\"?"));
        assert!(!super::unknown("zzzz").contains("did you mean"));
    }

    #[test]
    fn every_sample_loads() {
        for name in super::names() {
            let m = super::machine(name).unwrap();
            assert!(!m.numa_nodes.is_empty(), "{name}: nothing discovered");
            if !name.starts_with("hwloc-") {
                assert!(!m.accelerators.is_empty(), "{name}: no accelerators");
            }
        }
        assert!(super::machine("nope").is_none());
    }

    #[test]
    fn every_sample_states_its_provenance() {
        for name in super::names() {
            if let Err(e) = super::provenance(name).unwrap() {
                panic!("test_data/hosts/{name}/provenance.toml: {e}");
            }
        }
    }
}
