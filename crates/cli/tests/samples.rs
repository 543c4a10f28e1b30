//! The embedded samples through the binary: `accel samples`, `topo --sample`, `labels`, and
//! `capture` followed by discovery of the written bundle.

use std::process::Command;

use expect_test::expect_file;

fn accel(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_accel")).args(args).env_remove("ACCEL_SKU_DIR").output().unwrap();
    assert!(out.status.success(), "accel {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn samples_topo_and_labels() {
    let names = accel(&["samples"]);
    // `name  kind  summary`: the kind is what its provenance.toml says.
    let names: Vec<&str> = names.lines().map(|l| l.split_whitespace().next().unwrap()).collect();
    for line in accel(&["samples"]).lines() {
        let kind = line.split_whitespace().nth(1).unwrap();
        assert!(["real", "derived", "synthetic"].contains(&kind), "{line}");
    }
    assert_eq!(names, accel_discover::samples::names());
    for name in names {
        let expected = accel_testdata::hosts_dir().join(name).join("expected");
        expect_file![expected.join("topo.txt")].assert_eq(&accel(&["topo", "--sample", name]));
        expect_file![expected.join("labels-k8s.txt")]
            .assert_eq(&accel(&["labels", "--sample", name, "--format", "k8s"]));
        let ray = accel(&["labels", "--sample", name]);
        let has_devices = accel_discover::samples::machine(name).is_some_and(|m| !m.accelerators.is_empty());
        if has_devices {
            let labels = ray.trim_start_matches(|c| c != '-').split_once("--labels='accel.io/").map(|x| x.0);
            // `--num-gpus=N ` comes first where the node has Ray GPUs.
            assert!(labels.is_some_and(|p| p.is_empty() || p.starts_with("--num-gpus=")), "{ray}");
            assert!(ray.contains(" --resources='{\""), "{ray}");
        } else {
            assert_eq!(ray.trim(), "--labels='' --resources='{}'");
        }
    }
    let err = Command::new(env!("CARGO_BIN_EXE_accel")).args(["topo", "--sample", "nope"]).output().unwrap();
    assert!(!err.status.success());
    assert!(String::from_utf8_lossy(&err.stderr).contains("accel samples"));
}

#[test]
fn capture_then_discover_the_bundle() {
    let tmp = accel_testdata::TempDir::new("cli-capture");
    let dir = tmp.path().join("capture");
    let out = accel(&["capture", dir.to_str().unwrap(), "--sample", "gb200-nvl72-tray"]);
    assert!(out.contains("4 accelerators"), "{out}");
    assert!(dir.join("README.md").exists());
    let bundle = dir.join("capture.bundle");
    let replay = accel(&["discover", "--root", bundle.to_str().unwrap(), "--json"]);
    assert_eq!(replay, accel(&["discover", "--sample", "gb200-nvl72-tray", "--json"]));
    // A capture of a synthetic sample stays synthetic: its provenance travels with it and the
    // README does not call it real.
    let provenance = std::fs::read_to_string(dir.join("provenance.toml")).unwrap();
    let p = accel_discover::provenance::Provenance::parse(&provenance).unwrap();
    assert_eq!(p.kind, accel_discover::provenance::Kind::Synthetic);
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    assert!(readme.contains("(synthetic)") && !readme.contains("real"), "{readme}");
    // Re-capturing that capture keeps it; a root with no provenance.toml gets none, and a warning.
    let again = tmp.path().join("again");
    accel(&["capture", again.to_str().unwrap(), "--root", bundle.to_str().unwrap()]);
    assert_eq!(std::fs::read_to_string(again.join("provenance.toml")).unwrap(), provenance);
    let bare = tmp.path().join("bare");
    std::fs::create_dir_all(&bare).unwrap();
    std::fs::copy(&bundle, bare.join("capture.bundle")).unwrap();
    let unknown = tmp.path().join("unknown");
    let out = Command::new(env!("CARGO_BIN_EXE_accel"))
        .args(["capture", unknown.to_str().unwrap(), "--root", bare.join("capture.bundle").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no provenance.toml"));
    assert!(!unknown.join("provenance.toml").exists());
    assert!(std::fs::read_to_string(unknown.join("README.md")).unwrap().contains("(origin unknown)"));
    let _ = std::fs::remove_dir_all(&dir);
}
