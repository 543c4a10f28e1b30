//! The embedded samples made from real NCCL/RCCL topology files (`test_data/hosts/nccl-*`) are
//! exactly what `accel import nccl` writes from their source (`test_data/nccl-topo/`), so a
//! bundle is never edited by hand; and each loads as a sample with its accelerators and links.

use std::path::Path;

/// (sample, source file) for every sample imported from an NCCL topology file.
const IMPORTED: &[(&str, &str)] = &[("nccl-rccl-8x-mi300x", "rccl-8x-mi300x.xml")];

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

#[test]
fn imported_samples_are_reproduced_byte_for_byte_and_load() {
    for (sample, file) in IMPORTED {
        let text = std::fs::read(repo().join("test_data/nccl-topo").join(file)).unwrap();
        let bundle = std::fs::read(repo().join("test_data/hosts").join(sample).join("capture.bundle")).unwrap();
        let fresh = accel_nccl::import(&text).unwrap().tree.to_bundle();
        assert!(fresh == bundle, "{sample}: the embedded bundle differs from a fresh import; regenerate it (README)");
        let mut changed = accel_nccl::import(&text).unwrap().tree;
        changed.add_file("/sys/devices/system/cpu/online", "0\n");
        assert!(changed.to_bundle() != bundle, "the byte check can fail");
        let readme = std::fs::read_to_string(repo().join("test_data/hosts").join(sample).join("README.md")).unwrap();
        assert!(readme.lines().next().is_some_and(|l| l.contains("(real)")) && readme.contains("accel import nccl"));
        let m = accel_discover::samples::machine(sample).unwrap_or_else(|| panic!("{sample} is embedded"));
        assert!(!m.accelerators.is_empty() && !m.links.is_empty(), "{sample}");
    }
}
