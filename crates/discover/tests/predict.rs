//! `accel labels --predict`: for every real capture of a cloud instance (the `aws-*` samples),
//! the labels and resources predicted from the registry alone, before a node exists, equal what
//! discovery gives the captured node, for every label a selector could use.

use std::collections::BTreeMap;

use accel_discover::labels::{k8s_labels, ray_labels};
use accel_discover::predict::predict;
use accel_discover::provenance::Kind;
use accel_discover::{default_plugins, samples};
use accel_model::{Machine, SkuRegistry};

/// Labels that name one node's place (its clique, its switches, its name) or its luck (a device
/// found unhealthy): no prediction can know them, so they are not compared.
fn node_specific(key: &str) -> bool {
    key == accel_discover::labels::RAY_GPU_DOMAIN
        || key == accel_discover::labels::UNHEALTHY_LABEL
        || key == accel_discover::labels::NODE_LABEL
        || key.starts_with("accel.io/network-node-")
        || key == "accel.io/nvlink-clique"
        || key == "nvidia.com/gpu.clique"
        || key.contains("topograph")
}

/// Every difference between what discovery gave `found` and the prediction `predicted`, except
/// the node-specific labels and those the prediction says it `withheld`.
fn differences(found: &Machine, predicted: &Machine, withheld: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut compare = |what: &str, a: &BTreeMap<String, String>, b: &BTreeMap<String, String>| {
        let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
        for k in keys.into_iter().filter(|k| !node_specific(k) && !withheld.contains(k)) {
            if a.get(k) != b.get(k) {
                out.push(format!("{what} {k}: discovered {:?}, predicted {:?}", a.get(k), b.get(k)));
            }
        }
    };
    let (rf, rp) = (ray_labels(found), ray_labels(predicted));
    compare("ray label", &rf.labels, &rp.labels);
    compare("k8s label", &k8s_labels(found), &k8s_labels(predicted));
    let text = |r: &BTreeMap<String, f64>| r.iter().map(|(k, v)| (k.clone(), v.to_string())).collect();
    compare("ray resource", &text(&rf.resources), &text(&rp.resources));
    if rf.num_gpus != rp.num_gpus {
        out.push(format!("--num-gpus: discovered {}, predicted {}", rf.num_gpus, rp.num_gpus));
    }
    out
}

fn aws_real_captures() -> Vec<&'static str> {
    let names: Vec<&str> = samples::names()
        .into_iter()
        .filter(|n| n.starts_with("aws-"))
        .filter(|n| samples::provenance(n).and_then(Result::ok).is_some_and(|p| p.kind == Kind::Real))
        .collect();
    assert!(names.len() >= 5, "the aws-* real captures: {names:?}");
    names
}

#[test]
fn the_prediction_for_every_aws_real_capture_equals_discovery() {
    let registry = SkuRegistry::builtin();
    let plugins = default_plugins();
    for name in aws_real_captures() {
        let found = samples::machine(name).unwrap();
        let instance = found.host.product_name.clone().expect("EC2 writes the instance type as the DMI product name");
        let p = predict(&registry, &plugins, &instance).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(p.from[0], format!("system {name}"), "{name}: the registry entry is named after the capture");
        let diff = differences(&found, &p.machine, &p.withheld);
        assert!(diff.is_empty(), "{name} ({instance}):\n{}", diff.join("\n"));
        // The comparison is not empty: GPUs, their Ray resources and the GFD labels are there.
        let k8s = k8s_labels(&p.machine);
        assert_eq!(k8s["nvidia.com/gpu.machine"], instance);
        assert!(k8s.keys().any(|k| k.starts_with("feature.node.kubernetes.io/pci-")), "{name}: {k8s:?}");
        assert!(ray_labels(&p.machine).num_gpus >= 4.0);
        // The system id predicts the same node.
        let by_id = predict(&registry, &plugins, name).unwrap();
        assert!(differences(&found, &by_id.machine, &by_id.withheld).is_empty(), "{name} by its id");
        // Only the reported memory is withheld, and it is said.
        assert_eq!(p.withheld, ["nvidia.com/gpu.memory"], "{name}");
        assert!(p.unpredictable.iter().any(|u| u.starts_with("nvidia.com/gpu.memory: the device memory")));
    }
}

#[test]
fn a_registry_entry_that_disagrees_with_the_capture_is_caught() {
    // The same instance type, declared with 4 devices of another SKU: the comparison names it.
    let mut registry = SkuRegistry::builtin();
    let wrong = r#"
[[system]]
id = "aws-p5en-48xlarge"
name = "wrong"
product_names = ["p5en.48xlarge"]
skus = ["nvidia-h100-sxm"]
devices = 4
link = "nvswitch"
sources = ["test"]
"#;
    registry.merge_systems(SkuRegistry::parse_systems("test", wrong).unwrap());
    let found = samples::machine("aws-p5en-48xlarge").unwrap();
    let p = predict(&registry, &default_plugins(), "p5en.48xlarge").unwrap();
    let diff = differences(&found, &p.machine, &p.withheld).join("\n");
    for part in [
        "ray label accel.io/accelerator-count: discovered Some(\"8\"), predicted Some(\"4\")",
        "ray label accel.io/accelerator-type: discovered Some(\"H200\"), predicted Some(\"H100\")",
        "ray resource accel_dev_nvidia_7: discovered Some(\"1\"), predicted None",
        "--num-gpus: discovered 8, predicted 4",
    ] {
        assert!(diff.contains(part), "{part} missing from:\n{diff}");
    }
}

#[test]
fn an_unknown_name_or_a_bad_count_is_refused_and_a_sku_alone_is_one_device() {
    let (r, plugins) = (SkuRegistry::builtin(), default_plugins());
    let e = predict(&r, &plugins, "p9.huge").unwrap_err().to_string();
    assert!(e.contains("\"p9.huge\" is no instance type, system or SKU"), "{e}");
    let e = predict(&r, &plugins, "nvidia-h200-sxm:0").unwrap_err().to_string();
    assert!(e.contains("1 to 1024"), "{e}");
    let one = predict(&r, &plugins, "nvidia-h200-sxm").unwrap();
    assert_eq!((one.machine.accelerators.len(), one.machine.links.len()), (1, 0));
    let four = predict(&r, &plugins, "nvidia-h200-sxm:4").unwrap();
    assert_eq!(ray_labels(&four.machine).num_gpus, 4.0);
    assert!(four.machine.links.is_empty(), "a SKU alone declares no links: the system does");
}
