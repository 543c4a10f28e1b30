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

fn nccl_file(name: &str) -> String {
    format!("{}/../../test_data/nccl-topo/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn import_nccl_then_read_like_any_root() {
    let help = String::from_utf8(accel(&["import", "nccl", "--help"]).stdout).unwrap();
    assert!(help.contains("NCCL_TOPO_DUMP_FILE") && help.contains("accel import nccl system.xml"), "{help}");
    let dir = accel_testdata::TempDir::new("cli-import-nccl");
    let bundle = dir.join("h100.bundle");
    let out = accel(&["import", "nccl", &nccl_file("ibm-gx3d-8xh100.xml"), "-o", bundle.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("24 PCI functions") && said.contains("8 accelerators found"), "{said}");
    let topo = String::from_utf8(accel(&["topo", "--root", bundle.to_str().unwrap()]).stdout).unwrap();
    assert!(topo.contains("NV18") && topo.contains("mlx5_7"), "{topo}");
    // The planner reads it like any capture: 8 GPUs joined by NVSwitch, observed.
    let cluster = dir.join("cluster.json");
    let built = accel(&["cluster", "build", bundle.to_str().unwrap(), "-o", cluster.to_str().unwrap()]);
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
    let request = dir.join("request.json");
    std::fs::write(&request, r#"{"bundles": [{"count": 8, "connectivity": "scale-up"}]}"#).unwrap();
    let plan = accel(&["plan", "--cluster", cluster.to_str().unwrap(), "--request", request.to_str().unwrap()]);
    assert!(plan.status.success(), "{}", String::from_utf8_lossy(&plan.stderr));
    assert!(!String::from_utf8_lossy(&plan.stdout).contains("declared"));
}

#[test]
fn a_truncated_or_malformed_nccl_file_is_one_line_naming_the_place() {
    let dir = accel_testdata::TempDir::new("cli-import-nccl-bad");
    let text = std::fs::read_to_string(nccl_file("rccl-8x-mi300x.xml")).unwrap();
    let cases = [
        ("truncated.xml", text[..text.len() * 2 / 3].to_owned(), "not well-formed XML"),
        ("busid.xml", text.replacen("busid=\"0000:15:00.0\"", "busid=\"0000:15:00\"", 1), "not a PCI address"),
    ];
    for (name, body, what) in cases {
        let path = dir.join(name);
        std::fs::write(&path, &body).unwrap();
        let out = accel(&["import", "nccl", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{name}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains(name) && err.contains("line ") && err.contains(what), "{err}");
    }
}
