//! `accel import hwloc` through the binary: its help teaches, `-o` and stdout give the same
//! bundle, the bundle reads like any root, and bad input is a one-line error with exit status 2.

use std::process::Command;

fn accel(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_accel")).args(args).env_remove("ACCEL_SKU_DIR").output().unwrap()
}

fn xml(name: &str) -> String {
    format!("{}/../../test_data/hwloc-xml/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn help_teaches() {
    let help = String::from_utf8(accel(&["import", "hwloc", "--help"]).stdout).unwrap();
    for needle in
        ["lstopo --of xml --whole-io", "accel import hwloc machine.xml -o machine.bundle", "accel topo --root"]
    {
        assert!(help.contains(needle), "help lacks {needle:?}:\n{help}");
    }
}

#[test]
fn import_then_read_like_any_root() {
    let dir = accel_testdata::TempDir::new("cli-import");
    let bundle = dir.join("p4d.bundle");
    let out = accel(&["import", "hwloc", &xml("aws-p4d-24xlarge.xml"), "-o", bundle.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("35 PCI functions"));
    // EC2's emulated VGA (1d0f:1111, with hwloc's `card0`) is a display, not an unknown device.
    assert!(!String::from_utf8_lossy(&out.stderr).contains("1d0f:1111"));
    // Warnings on stderr name what no plugin identifies, with its raw ids (the HP server's
    // ATI ES1000, 1002:515e).
    let hp = accel(&["import", "hwloc", &xml("24em64t-2n6c2t-pci.xml")]);
    assert!(hp.status.success());
    assert!(String::from_utf8_lossy(&hp.stderr).contains("unknown accelerator 1002:515e"));
    // Nothing else was left beside it (the temporary file was renamed).
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(left.len(), 1, "{left:?}");
    let to_stdout = accel(&["import", "hwloc", &xml("aws-p4d-24xlarge.xml")]);
    assert!(to_stdout.status.success());
    assert_eq!(to_stdout.stdout, std::fs::read(&bundle).unwrap());
    let topo = accel(&["topo", "--root", bundle.to_str().unwrap()]);
    let topo = String::from_utf8(topo.stdout).unwrap();
    assert!(topo.contains("p4d.24xlarge") && topo.contains("rdmap16s27"), "{topo}");
    let discover = accel(&["discover", "--root", bundle.to_str().unwrap(), "--json"]);
    assert!(discover.status.success());
}

#[test]
fn bad_input_is_a_clear_error() {
    let dir = accel_testdata::TempDir::new("cli-import-bad");
    let bad = dir.join("bad.xml");
    std::fs::write(&bad, "this is not XML").unwrap();
    let out = accel(&["import", "hwloc", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not XML") && err.contains("bad.xml"), "{err}");
    let missing = accel(&["import", "hwloc", dir.join("nope.xml").to_str().unwrap()]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot read"));
}
