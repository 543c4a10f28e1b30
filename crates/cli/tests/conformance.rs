//! `accel conformance` grades every built-in plugin and the example external one, and
//! docs/maturity.md is exactly what the suite's JSON renders to (`UPDATE_EXPECT=1` rewrites
//! it); `accel env` and `accel env diff`.

use std::path::PathBuf;
use std::process::{Command, Output};

use expect_test::expect_file;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn accel(args: &[&str], plugin_dir: Option<&PathBuf>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_accel"));
    cmd.args(args).current_dir(repo()).env_remove("ACCEL_SKU_DIR").env_remove("ACCEL_PLUGIN_DIR");
    if let Some(dir) = plugin_dir {
        cmd.env("ACCEL_PLUGIN_DIR", dir);
    }
    cmd.output().unwrap()
}

fn stdout(out: &Output) -> String {
    assert!(out.status.success(), "failed ({:?}): {}", out.status, String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[test]
fn conformance_grades_every_plugin_and_maturity_md_is_current() {
    let ascend = PathBuf::from("examples/plugins/ascend");
    let capture = "examples/plugins/ascend/capture";
    let report: serde_json::Value = serde_json::from_str(&stdout(&accel(
        &["conformance", "--samples", "--capture", capture, "--json"],
        Some(&ascend),
    )))
    .unwrap();
    let graded: Vec<&str> = report["plugins"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    for plugin in accel_discover::default_plugins() {
        assert!(graded.contains(&plugin.id()), "{} not graded: {graded:?}", plugin.id());
    }
    let ascend_result = report["plugins"].as_array().unwrap().iter().find(|p| p["name"] == "ascend").unwrap();
    assert_eq!(ascend_result["kind"], "external");
    assert_eq!(ascend_result["tiers"]["discover"]["tier"], "T3");
    // Real captures (hwloc's, the KFD one) lift a capability to T2; synthetic ones give T3.
    let amd = report["plugins"].as_array().unwrap().iter().find(|p| p["name"] == "amd").unwrap();
    assert_eq!(amd["tiers"]["discover"]["tier"], "T2", "{}", amd["tiers"]);
    let nvidia = report["plugins"].as_array().unwrap().iter().find(|p| p["name"] == "nvidia").unwrap();
    // The real EC2 lstopo captures imported by `accel import hwloc` (test_data/hosts/aws-*) lift
    // nvidia's discovery to T2.
    assert_eq!(nvidia["tiers"]["discover"]["tier"], "T2", "{}", nvidia["tiers"]);

    // The page is rendered from the JSON document (as `--markdown` does), so one run serves both.
    let report: accel_discover::conformance::Report = serde_json::from_value(report).unwrap();
    let page = accel_discover::conformance::markdown(&report, accel_discover::conformance::MATURITY_COMMAND);
    expect_file![repo().join("docs/maturity.md")].assert_eq(&page);
}

#[test]
fn a_failing_check_fails_the_run_and_costs_its_tier() {
    // A plugin whose isolate answer disagrees with its own isolation values.
    let dir = accel_testdata::TempDir::new("conf-liar");
    let dir = dir.path().to_path_buf();
    let plugin = dir.join("accel-plugin-liar");
    std::fs::write(
        &plugin,
        r#"#!/bin/sh
# Only on a machine with a Huawei function at 04:00.0 (the Ascend capture).
grep -q 0x19e5 "$ACCEL_ROOT/sys/bus/pci/devices/0000:04:00.0/vendor" 2>/dev/null || { cat > /dev/null; echo '{"protocol": 1, "accelerators": []}'; exit 0; }
case "$1" in
  discover) cat > /dev/null; echo '{"protocol": 1, "accelerators": [{"id": "liar-0000:04:00.0", "vendor": "liar", "product": "Liar L1", "pci": "0000:04:00.0", "vocabulary": {"visibility_env": "LIAR_VISIBLE", "isolation": ["4"]}}]}' ;;
  isolate) cat > /dev/null; echo '{"protocol": 1, "env": {"LIAR_VISIBLE": "0"}}' ;;
  *) exit 3 ;;
esac
"#,
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = accel(
        &["conformance", "--plugin", "liar", "--capture", "examples/plugins/ascend/capture", "--json"],
        Some(&dir),
    );
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let liar = &report["plugins"][0];
    assert_eq!(liar["tiers"]["isolate"]["tier"], "none");
    assert!(liar["tiers"]["isolate"]["evidence"].as_str().unwrap().contains("LIAR_VISIBLE"), "{liar}");
    assert_eq!(liar["tiers"]["discover"]["tier"], "T3");
    // The vendor runner script (ci/vendor-conformance.yml runs the same) writes the report and
    // keeps the suite's exit status.
    let report_path = dir.join("report.json");
    let script = Command::new("bash")
        .arg(repo().join("scripts/vendor-conformance.sh"))
        .arg(&report_path)
        .args(["--plugin", "liar", "--capture", "examples/plugins/ascend/capture"])
        .current_dir(repo())
        .env("ACCEL", env!("CARGO_BIN_EXE_accel"))
        .env("ACCEL_PLUGIN_DIR", &dir)
        .output()
        .unwrap();
    assert_eq!(script.status.code(), Some(1), "{}", String::from_utf8_lossy(&script.stderr));
    assert!(String::from_utf8_lossy(&script.stdout).contains("FAIL visibility"), "{script:?}");
    let written: serde_json::Value = serde_json::from_slice(&std::fs::read(&report_path).unwrap()).unwrap();
    assert_eq!(written["plugins"][0]["name"], "liar");
    let bad = accel(&["conformance", "--plugin", "no-such-plugin"], None);
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("no plugin named"));
    let typo = accel(&["conformance", "--plugin", "nvidai"], None);
    assert_eq!(typo.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&typo.stderr).contains("did you mean \"nvidia\"?"), "{typo:?}");
}

#[test]
fn a_vendor_grades_one_plugin_on_its_own_capture_only() {
    // The vendor's loop: `--plugin X --capture C` runs X on C, and on no embedded sample.
    let ascend = PathBuf::from("examples/plugins/ascend");
    let args = ["conformance", "--plugin", "ascend", "--capture", "examples/plugins/ascend/capture", "--json"];
    let report: serde_json::Value = serde_json::from_str(&stdout(&accel(&args, Some(&ascend)))).unwrap();
    let plugins = report["plugins"].as_array().unwrap();
    assert_eq!(plugins.len(), 1, "{report}");
    let captures: Vec<&str> =
        plugins[0]["captures"].as_array().unwrap().iter().map(|c| c["capture"].as_str().unwrap()).collect();
    assert_eq!(captures.len(), 1, "only the capture given: {captures:?}");
    assert_eq!(captures, ["ascend"], "named after the capture's directory, not a sample");
    assert!(!accel_discover::samples::names().contains(&captures[0]));
    // A built-in plugin on that capture has nothing to grade: none of its devices are there.
    let nvidia = ["conformance", "--plugin", "nvidia", "--capture", "examples/plugins/ascend/capture", "--json"];
    let report: serde_json::Value = serde_json::from_str(&stdout(&accel(&nvidia, None))).unwrap();
    assert_eq!(report["plugins"][0]["captures"].as_array().unwrap().len(), 0, "{report}");
}

#[test]
fn env_and_env_diff() {
    let live: serde_json::Value = serde_json::from_str(&stdout(&accel(&["env", "--json"], None))).unwrap();
    let fields = live["fields"].as_object().unwrap();
    // Every field gives its value's source, or says it is unknown.
    for (name, f) in fields {
        let source = f["source"].as_str().unwrap();
        assert!(f.get("value").is_some() || source.starts_with("unknown"), "{name}: {f}");
    }
    assert!(fields["kernel.release"]["value"].is_string(), "Linux has /proc/sys/kernel/osrelease");
    assert!(fields["topology.hash"]["value"].is_string());

    let tmp = accel_testdata::TempDir::new("env");
    let dir = tmp.path().to_path_buf();
    let a = dir.join("a.json");
    let b = dir.join("b.json");
    std::fs::write(&a, stdout(&accel(&["env", "--json", "--sample", "dgx-h100"], None))).unwrap();
    std::fs::write(&b, stdout(&accel(&["env", "--json", "--sample", "mi300x"], None))).unwrap();
    let same = accel(&["env", "diff", a.to_str().unwrap(), a.to_str().unwrap()], None);
    assert_eq!(same.status.code(), Some(0));
    let differ = accel(&["env", "diff", a.to_str().unwrap(), b.to_str().unwrap()], None);
    assert_eq!(differ.status.code(), Some(1));
    let text = String::from_utf8_lossy(&differ.stdout);
    assert!(text.lines().any(|l| l.starts_with("topology.hash: ")), "{text}");
    let bad = accel(&["env", "diff", a.to_str().unwrap(), "/nonexistent.json"], None);
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("/nonexistent.json"));

    // A capture carries its fingerprint.
    let cap = dir.join("cap");
    stdout(&accel(&["capture", cap.to_str().unwrap(), "--sample", "tpu-v6e"], None));
    let bundle = std::fs::read(cap.join("capture.bundle")).unwrap();
    let tree = accel_discover::fs::MemTree::parse_bundle(&bundle).unwrap();
    let env: serde_json::Value =
        serde_json::from_slice(tree.file(std::path::Path::new("/accel/env.json")).unwrap()).unwrap();
    assert!(env["fields"]["topology.hash"]["value"].is_string());
}

/// Copies a directory tree: directories, files and symbolic links (sysfs is made of them).
fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else if entry.file_type().unwrap().is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path()).unwrap(), &target).unwrap();
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

#[test]
fn the_tier_follows_the_captures_provenance() {
    // The Ascend example capture graded under three provenance files: `real` with a source lifts
    // its capabilities to T2; `synthetic`, or none at all, leaves them at T3; a file that does
    // not parse is an error naming it, not a capture of unknown origin.
    let ascend = repo().join("examples/plugins/ascend");
    let tmp = accel_testdata::TempDir::new("cli-provenance-tier");
    let capture = tmp.path().join("machine");
    copy_tree(&ascend.join("capture"), &capture);
    let tier = |provenance: Option<&str>| {
        let file = capture.join("provenance.toml");
        match provenance {
            Some(text) => std::fs::write(&file, text).unwrap(),
            None => {
                let _ = std::fs::remove_file(&file);
            }
        }
        let args = ["conformance", "--plugin", "ascend", "--capture", capture.to_str().unwrap(), "--json"];
        let out = accel(&args, Some(&ascend));
        let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        report["plugins"][0]["tiers"]["discover"]["tier"].as_str().unwrap().to_owned()
    };
    let real = "kind = \"real\"\nsummary = \"an Atlas 800T A2\"\n[[sources]]\nartifact = \"captured by a vendor\"\n";
    assert_eq!(tier(Some(real)), "T2");
    assert_eq!(tier(Some("kind = \"synthetic\"\nsummary = \"written by hand\"\n")), "T3");
    assert_eq!(tier(None), "T3");
    std::fs::write(capture.join("provenance.toml"), "kind = \"real\"\nsummary = \"no source\"\n").unwrap();
    let args = ["conformance", "--plugin", "ascend", "--capture", capture.to_str().unwrap(), "--json"];
    let out = accel(&args, Some(&ascend));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("provenance.toml"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
