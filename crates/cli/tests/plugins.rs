//! The example Huawei Ascend plugin (examples/plugins/ascend), through the protocol alone: its
//! NPUs appear in `topo`, `discover --json`, the labels and plans, and nothing in accel names
//! Ascend.

use std::path::PathBuf;
use std::process::{Command, Output};

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/plugins/ascend")
}

fn accel(args: &[&str], with_plugin: bool) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_accel"));
    cmd.args(args).env_remove("ACCEL_SKU_DIR").env_remove("ACCEL_PLUGIN_DIR");
    if with_plugin {
        cmd.env("ACCEL_PLUGIN_DIR", example());
    }
    cmd.output().unwrap()
}

fn stdout(out: Output) -> String {
    assert!(out.status.success(), "failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn ascend_through_the_protocol_alone() {
    let root = example().join("capture");
    let root = root.to_str().unwrap();
    // Without the plugin: eight unknown devices from the generic PCI fallback.
    let topo = stdout(accel(&["topo", "--root", root], false));
    assert!(topo.contains("ACC7") && !topo.contains("NPU0"), "{topo}");

    let topo = stdout(accel(&["topo", "--root", root], true));
    assert!(topo.contains("[NPU7]") && !topo.contains("ACC0"), "{topo}");
    let m: serde_json::Value =
        serde_json::from_str(&stdout(accel(&["discover", "--root", root, "--json"], true))).unwrap();
    let accs = m["accelerators"].as_array().unwrap();
    assert_eq!(accs.len(), 8);
    assert!(accs.iter().all(|a| a["plugin"] == "ascend" && a["product"] == "Huawei Ascend 910B"));
    assert_eq!(accs[5]["vocabulary"]["isolation"], serde_json::json!(["5"]));
    assert_eq!(accs[5]["vocabulary"]["ray_resource"], "NPU");
    assert_eq!(accs[5]["vocabulary"]["device_files"], serde_json::json!(["/dev/davinci5"]));
    assert!(m["warnings"].as_array().unwrap().is_empty(), "{}", m["warnings"]);

    let labels = stdout(accel(&["labels", "--root", root], true));
    assert!(
        labels.contains("accel.io/accelerator-type=Ascend910B") && labels.contains("accel_dev_huawei_7"),
        "{labels}"
    );
    let k8s = stdout(accel(&["labels", "--root", root, "--format", "k8s"], true));
    assert!(k8s.contains("accel.io/accelerator-count=8"), "{k8s}");

    // Plan two NPUs on one NUMA node with bf16 (the plugin's dtypes), and isolate them.
    let dir = accel_testdata::TempDir::new("ascend");
    let cluster = dir.join("cluster.json");
    std::fs::write(&cluster, serde_json::json!({"nodes": [{"name": "atlas-0", "machine": m}]}).to_string()).unwrap();
    let request = dir.join("request.json");
    std::fs::write(
        &request,
        r#"{"bundles": [{"count": 2, "same_numa": true, "dtypes": ["bf16"], "min_memory_gb": 60}]}"#,
    )
    .unwrap();
    let placed: serde_json::Value = serde_json::from_str(&stdout(accel(
        &["plan", "--cluster", cluster.to_str().unwrap(), "--request", request.to_str().unwrap(), "--json"],
        false,
    )))
    .unwrap();
    let devices = placed["bundles"][0]["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2, "{placed}");
    assert!(devices.iter().all(|d| d["label"].as_str().unwrap().starts_with("NPU")), "{placed}");
}
