//! `accel cluster`, `accel plan` and `accel bench plan` as a user meets them.

use std::process::{Command, Output};

fn accel(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_accel")).args(args).env_remove("ACCEL_SKU_DIR").output().unwrap()
}

fn ok(out: Output) -> String {
    assert!(out.status.success(), "failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn scratch(name: &str) -> accel_testdata::TempDir {
    accel_testdata::TempDir::new(&format!("cli-plan-{name}"))
}

#[test]
fn cluster_then_plan_json_yaml_and_infeasible() {
    let dir = scratch("flow");
    let cluster = dir.join("cluster.json");
    std::fs::write(&cluster, ok(accel(&["cluster", "--sample", "dgx-h100:2,mi300x:1", "--rack-size", "2"]))).unwrap();
    let text = std::fs::read_to_string(&cluster).unwrap();
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["nodes"].as_array().unwrap().len(), 3);
    assert_eq!(value["nodes"][2]["labels"]["rack"], "r1");

    let request = dir.join("request.json");
    std::fs::write(&request, r#"{"bundles": [{"count": 4, "connectivity": "scale-up"}]}"#).unwrap();
    let args = ["plan", "--cluster", cluster.to_str().unwrap(), "--request", request.to_str().unwrap()];
    let human = ok(accel(&args));
    assert!(human.starts_with("bundle 0: dgx-h100-0 GPU0,GPU1,GPU2,GPU3  min 900 GB/s  numa [0]"), "{human}");
    let json: serde_json::Value = serde_json::from_str(&ok(accel(&[&args[..], &["--json"]].concat()))).unwrap();
    assert_eq!(json["bundles"][0]["devices"].as_array().unwrap().len(), 4);

    let yaml = dir.join("request.yaml");
    std::fs::write(&yaml, "bundles:\n  - count: 2\n    vendor: [amd]\n").unwrap();
    let amd = ok(accel(&["plan", "--cluster", cluster.to_str().unwrap(), "--request", yaml.to_str().unwrap()]));
    assert!(amd.starts_with("bundle 0: mi300x-0 "), "{amd}");

    std::fs::write(&request, r#"{"bundles": [{"count": 9, "connectivity": "scale-up"}]}"#).unwrap();
    let out = accel(&args);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.starts_with("accel: error: cannot place the request: bundle 0: no node has 9 accelerators"), "{err}");
    assert!(err.contains("nearest feasible: count 8 on dgx-h100-0"), "{err}");
    let out = accel(&[&args[..], &["--json"]].concat());
    assert!(!out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["error"]["constraint"], "count");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn unknown_sample_is_one_clear_error() {
    let out = accel(&["cluster", "--sample", "no-such-box:2"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no sample named \"no-such-box\""));
}

#[test]
fn bench_plan_prints_percentiles() {
    let out = ok(accel(&["bench", "plan", "--nodes", "40", "--requests", "50", "--json"]));
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    for key in ["p50_ms", "p99_ms", "max_ms"] {
        assert!(json[key].as_f64().is_some_and(|v| v >= 0.0), "{key} in {out}");
    }
    assert_eq!(json["nodes"], 40);
    assert!(json["vs_first_fit"]["cases"].as_u64().unwrap() > 0);
}

/// Regression: `accel plan` exited 1 both for "cannot be placed" and for a malformed request.
/// Every command: 0 success, 1 a valid request that cannot be met, 2 invalid input or usage.
#[test]
fn exit_codes_separate_unmet_from_invalid() {
    let dir = scratch("exit");
    let cluster = dir.join("cluster.json");
    std::fs::write(&cluster, ok(accel(&["cluster", "--sample", "dgx-h100:1"]))).unwrap();
    let request = dir.join("request.json");
    let plan = |body: &str| {
        std::fs::write(&request, body).unwrap();
        accel(&["plan", "--cluster", cluster.to_str().unwrap(), "--request", request.to_str().unwrap()])
    };
    assert_eq!(plan(r#"{"bundles": [{"count": 2}]}"#).status.code(), Some(0));
    assert_eq!(plan(r#"{"bundles": [{"count": 9}]}"#).status.code(), Some(1));
    assert_eq!(plan(r#"{"bundles": [{"count": 12, "cpus": 100000}]}"#).status.code(), Some(1));
    assert_eq!(plan(r#"{"bundles": [{"count": "two"}]}"#).status.code(), Some(2));
    assert_eq!(plan(r#"{"bundles": []}"#).status.code(), Some(2));
    assert_eq!(plan("not json").status.code(), Some(2));
    let missing = accel(&["plan", "--cluster", "/nonexistent/c.json", "--request", request.to_str().unwrap()]);
    assert_eq!(missing.status.code(), Some(2));
    assert_eq!(accel(&["cluster", "--sample", "no-such-box:2"]).status.code(), Some(2));
    assert_eq!(accel(&["topo", "--sample", "no-such-box"]).status.code(), Some(2));
    assert_eq!(accel(&["topo", "--root", "/nonexistent"]).status.code(), Some(2));
    assert_eq!(accel(&["no-such-command"]).status.code(), Some(2));
    assert_eq!(accel(&["plan"]).status.code(), Some(2));
    assert_eq!(accel(&["samples"]).status.code(), Some(0));
    // Documented in --help, for the program and every subcommand.
    for args in [&["--help"][..], &["plan", "--help"], &["topo", "--help"], &["bench", "plan", "--help"]] {
        let out = accel(args);
        assert_eq!(out.status.code(), Some(0));
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains("Exit status:") && text.contains("1  a valid request that cannot be met"), "{text}");
    }
    std::fs::remove_dir_all(dir).ok();
}

/// docs/placement.md, "NIC per device": devices equally near several RDMA NICs are spread over
/// them. The GB200 tray's GPU0 and GPU1 are both at NODE from mlx5_0 and mlx5_1 (GPU2 and GPU3
/// from mlx5_2 and mlx5_3): one GPU per bundle gets every NIC once, and `--json` carries the
/// environment the Ray path sets (NCCL_IB_HCA, UCX_NET_DEVICES, ACCEL_CPUS, visibility).
#[test]
fn plan_spreads_tied_nics_and_prints_the_ray_environment() {
    let dir = scratch("nics");
    let cluster = dir.join("cluster.json");
    std::fs::write(&cluster, ok(accel(&["cluster", "--sample", "gb200-nvl72-tray:1"]))).unwrap();
    let request = dir.join("request.json");
    std::fs::write(&request, r#"{"bundles": [{"count": 1}, {"count": 1}, {"count": 1}, {"count": 1}]}"#).unwrap();
    let args = ["plan", "--cluster", cluster.to_str().unwrap(), "--request", request.to_str().unwrap(), "--json"];
    let json: serde_json::Value = serde_json::from_str(&ok(accel(&args))).unwrap();
    let bundles = json["bundles"].as_array().unwrap();
    let nics: Vec<&str> = bundles.iter().map(|b| b["devices"][0]["nic"].as_str().unwrap()).collect();
    assert_eq!(nics, ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"], "{json}");
    for (b, nic) in bundles.iter().zip(&nics) {
        let env = &b["env"];
        assert_eq!(env["NCCL_IB_HCA"], format!("={nic}"), "{env}");
        assert_eq!(env["UCX_NET_DEVICES"], format!("{nic}:1"), "{env}");
        let numa = b["devices"][0]["numa_node"].as_u64().unwrap();
        assert_eq!(env["ACCEL_CPUS"], if numa == 0 { "0-71" } else { "72-143" }, "{env}");
        assert!(env["CUDA_VISIBLE_DEVICES"].as_str().unwrap().starts_with("GPU-"), "{env}");
        assert_eq!(env["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"], "1", "{env}");
    }
    // A bundle of two tied GPUs names both NICs.
    std::fs::write(&request, r#"{"bundles": [{"count": 2, "same_numa": true}]}"#).unwrap();
    let json: serde_json::Value = serde_json::from_str(&ok(accel(&args))).unwrap();
    assert_eq!(json["bundles"][0]["env"]["NCCL_IB_HCA"], "=mlx5_0,mlx5_1", "{json}");
}

#[test]
fn a_node_local_domain_never_spans_nodes() {
    // Two MI355X boxes cloned from one capture carry the same KFD hive id, but an xGMI hive
    // joins the GPUs of one node only: `same: xgmi_hive` over both is infeasible, naming it.
    let dir = scratch("hive");
    let cluster = dir.join("cluster.json");
    std::fs::write(&cluster, ok(accel(&["cluster", "--sample", "mi355x:2"]))).unwrap();
    let request = dir.join("request.json");
    std::fs::write(&request, r#"{"bundles": [{"count": 8}, {"count": 8}], "same": "xgmi_hive"}"#).unwrap();
    let out = accel(&["plan", "--cluster", cluster.to_str().unwrap(), "--request", request.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "infeasible, not placed: {err}");
    assert!(err.contains("no xgmi_hive domain can hold all 2 bundles"), "{err}");
    // One node's hive still holds one bundle.
    std::fs::write(&request, r#"{"bundles": [{"count": 4}, {"count": 4}], "same": "xgmi_hive"}"#).unwrap();
    let placed = ok(accel(&["plan", "--cluster", cluster.to_str().unwrap(), "--request", request.to_str().unwrap()]));
    assert!(placed.contains("bundle 0: mi355x-0") && placed.contains("bundle 1: mi355x-0"), "{placed}");

    // The Slurm export makes no block of a node-local domain.
    let slurm = dir.join("slurm");
    ok(accel(&["export", "slurm", "--cluster", cluster.to_str().unwrap(), "--out-dir", slurm.to_str().unwrap()]));
    let yaml = std::fs::read_to_string(slurm.join("topology.yaml")).unwrap();
    assert!(!yaml.contains("xgmi") && !yaml.contains("block:"), "{yaml}");

    // Three one-host TPU v6e-8 VMs are three slices; NVL72 trays share a clique per --clique-trays.
    let tpus: serde_json::Value = serde_json::from_str(&ok(accel(&["cluster", "--sample", "tpu-v6e:3"]))).unwrap();
    let slices: std::collections::BTreeSet<String> = tpus["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["labels"].get("tpu_slice").map_or_else(|| n["name"].to_string(), ToString::to_string))
        .collect();
    assert_eq!(slices.len(), 3, "{tpus}");
    let trays: serde_json::Value =
        serde_json::from_str(&ok(accel(&["cluster", "--sample", "gb200-nvl72-tray:4", "--clique-trays", "2"])))
            .unwrap();
    let cliques: Vec<&str> =
        trays["nodes"].as_array().unwrap().iter().map(|n| n["labels"]["nvlink_clique"].as_str().unwrap()).collect();
    assert_eq!(cliques[0], cliques[1]);
    assert_ne!(cliques[1], cliques[2]);
}
