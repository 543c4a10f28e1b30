//! The embedded samples made from real hwloc XMLs (`test_data/hosts/aws-*`, `llnl-*`) are exactly what
//! `accel import hwloc` writes from their source XML (`test_data/hwloc-xml/`), so a bundle is
//! never edited by hand; and each imported sample loads as a sample with its accelerators.

use std::path::Path;

/// (sample, source XML) for every sample imported from an hwloc XML.
const IMPORTED: &[(&str, &str)] = &[
    ("aws-p4d-24xlarge", "aws-p4d-24xlarge.xml"),
    ("aws-p5en-48xlarge", "aws-p5en-48xlarge.xml"),
    ("aws-p6-b200-48xlarge", "aws-p6-b200-48xlarge.xml"),
    ("aws-p6-b300-48xlarge", "aws-p6-b300-48xlarge.xml"),
    ("aws-p6e-gb200-36xlarge", "aws-p6e-gb200-36xlarge.xml"),
    ("llnl-xe8640-4xh100", "dell-xe8640-4xh100.xml"),
    ("llnl-ex255a-4xmi300a-cpx", "hpe-ex255a-4xmi300a-cpx.xml"),
];

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// The first line where two bundles differ, for a readable failure.
fn first_difference(a: &[u8], b: &[u8]) -> Option<String> {
    let (a, b) = (String::from_utf8_lossy(a), String::from_utf8_lossy(b));
    let line = a.lines().zip(b.lines()).position(|(x, y)| x != y);
    match line {
        Some(n) => Some(format!("line {}: {:?} vs {:?}", n + 1, a.lines().nth(n), b.lines().nth(n))),
        None if a.len() != b.len() => Some(format!("lengths {} and {}", a.len(), b.len())),
        None => None,
    }
}

#[test]
fn imported_samples_are_reproduced_byte_for_byte() {
    for (sample, xml) in IMPORTED {
        let xml = std::fs::read(repo().join("test_data/hwloc-xml").join(xml)).unwrap();
        let bundle = std::fs::read(repo().join("test_data/hosts").join(sample).join("capture.bundle")).unwrap();
        let fresh = accel_hwloc::import(&xml).unwrap().tree.to_bundle();
        assert!(
            fresh == bundle,
            "{sample}: the embedded bundle differs from a fresh import ({:?}); regenerate it with \
             `accel import hwloc` (see its README)",
            first_difference(&fresh, &bundle)
        );
        let readme = std::fs::read_to_string(repo().join("test_data/hosts").join(sample).join("README.md")).unwrap();
        assert!(readme.lines().next().is_some_and(|l| l.contains("(real)")), "{sample}: README title says (real)");
        assert!(readme.contains("accel import hwloc"), "{sample}: README names how it was made");
    }
}

#[test]
fn the_byte_check_can_fail() {
    let (sample, xml) = IMPORTED[0];
    let xml = std::fs::read(repo().join("test_data/hwloc-xml").join(xml)).unwrap();
    let mut tree = accel_hwloc::import(&xml).unwrap().tree;
    let fresh = tree.to_bundle();
    tree.add_file("/sys/devices/system/cpu/online", "0\n");
    assert!(first_difference(&fresh, &tree.to_bundle()).is_some(), "{sample}");
    assert!(first_difference(&fresh, &fresh).is_none());
}

#[test]
fn imported_samples_load_as_samples() {
    for (sample, _) in IMPORTED {
        let m = accel_discover::samples::machine(sample).unwrap_or_else(|| panic!("{sample} is embedded"));
        assert!(!m.accelerators.is_empty(), "{sample}: no accelerators");
        assert!(m.host.product_name.is_some(), "{sample}: no product name");
    }
}
