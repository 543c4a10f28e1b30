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
    let names: Vec<&str> = names.lines().collect();
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
    let _ = std::fs::remove_dir_all(&dir);
}
