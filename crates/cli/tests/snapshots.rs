//! Snapshot tests: `accel discover --json` and `accel topo` on every captured machine.
//! `UPDATE_EXPECT=1 cargo test` rewrites the expectations after a deliberate change.

use std::process::Command;

use expect_test::expect_file;

fn accel(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_accel")).args(args).env_remove("ACCEL_SKU_DIR").output().unwrap();
    assert!(out.status.success(), "accel {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn every_capture_matches_its_snapshots() {
    let hosts = accel_testdata::hosts();
    assert!(hosts.len() >= 4, "captures missing: {hosts:?}");
    for host in hosts {
        let root = accel_testdata::root(&host);
        let root = root.to_str().unwrap();
        let expected = accel_testdata::hosts_dir().join(&host).join("expected");
        expect_file![expected.join("discover.json")].assert_eq(&accel(&["discover", "--root", root, "--json"]));
        expect_file![expected.join("topo.txt")].assert_eq(&accel(&["topo", "--root", root]));
        expect_file![expected.join("topo.json")].assert_eq(&accel(&["topo", "--root", root, "--json"]));
    }
}
