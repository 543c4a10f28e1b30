//! The Kubernetes exports against the real schemas vendored in `test_data/k8s/` (README there):
//! Kueue's and KAI Scheduler's `Topology` CRDs for clusters of real captures, and Kubernetes'
//! own `resource.k8s.io/v1` `DeviceClass` schema for the DRA classes. Strict: a field the schema does
//! not name is an error, patterns are checked, and every CEL rule the CRD carries is checked by
//! its hand-written equivalent below (an unknown rule fails the test, so a new CRD version cannot
//! slip through unchecked).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use accel_discover::schema::Validator;
use accel_discover::{default_plugins, discover, fs::MemTree, Host};
use accel_export::topology::{self, Scheduler, HOSTNAME};
use accel_model::{Machine, SkuRegistry};
use accel_plan::{Cluster, ClusterNode, MachineRef};
use serde_json::Value;

fn k8s_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../test_data/k8s")
}

/// A real capture, discovered as `accel cluster build` discovers it.
fn real(name: &str) -> Machine {
    let tree = MemTree::parse_bundle(&accel_testdata::bundle(name)).expect("valid bundle");
    discover(&Host::in_memory(Arc::new(tree), SkuRegistry::builtin()), &default_plugins())
}

/// The `openAPIV3Schema` of `version` in a vendored CRD.
fn crd_schema(file: &str, version: &str) -> Value {
    let text = std::fs::read_to_string(k8s_dir().join(file)).unwrap();
    let crd: Value = serde_norway::from_str(&text).unwrap();
    let v = crd["spec"]["versions"].as_array().unwrap().iter().find(|v| v["name"] == version).expect("version served");
    assert_eq!(v["served"], true, "{file} {version} is served");
    v["schema"]["openAPIV3Schema"].clone()
}

fn matches(pattern: &str, text: &str) -> bool {
    regex::Regex::new(pattern).expect("a valid pattern").is_match(text)
}

/// The CEL rules of the two Topology CRDs, by message, as Rust: `levels` is `spec.levels`.
fn cel(message: &str, levels: &Value) -> Result<(), String> {
    let labels: Vec<&str> = levels.as_array().unwrap().iter().map(|l| l["nodeLabel"].as_str().unwrap()).collect();
    let ok = match message {
        // `self == oldSelf`: holds on create.
        "field is immutable" => true,
        "must be unique" => labels.iter().collect::<BTreeSet<_>>().len() == labels.len(),
        "the kubernetes.io/hostname label can only be used at the lowest level of topology" => {
            !labels.contains(&HOSTNAME) || labels.last() == Some(&HOSTNAME)
        }
        other => panic!("a CEL rule this test does not know: {other:?}; write its equivalent"),
    };
    ok.then_some(()).ok_or_else(|| message.to_owned())
}

/// Validates one Topology against a CRD's schema: every error, CEL rules included.
fn validate_topology(schema: &Value, object: &Value) -> Vec<String> {
    let v = Validator { defs: None, strict: true, pattern: Some(&matches) };
    let found = v.check(schema, object);
    let mut errors = found.errors;
    for (at, message, _) in &found.cel_rules {
        assert_eq!(at, "$.spec.levels", "a rule elsewhere: {message}");
        if let Err(e) = cel(message, &object["spec"]["levels"]) {
            errors.push(format!("{at}: {e}"));
        }
    }
    // The API server's own check of every object's name: a DNS subdomain.
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    if !matches(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$", name) || name.len() > 253 {
        errors.push(format!("metadata.name {name:?} is not a DNS subdomain"));
    }
    errors
}

fn node(name: &str, machine: &str, labels: &[(&str, &str)]) -> ClusterNode {
    ClusterNode {
        name: name.into(),
        machine: MachineRef::Name(machine.into()),
        labels: labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        allocated: Vec::new(),
    }
}

fn cluster(machines: &[&str], nodes: Vec<ClusterNode>) -> Cluster {
    Cluster { machines: machines.iter().map(|m| ((*m).to_owned(), real(m))).collect(), nodes, ..Cluster::default() }
}

/// Three clusters of real captures: EC2 H200 and B200 instances under two leaves of a spine
/// (topograph v1 tier labels); GB200 instances in two NVLink domains (topograph's domain
/// label); the LLNL H100 and MI300A nodes and an MI300X CPX node under topograph v0's keys.
fn real_clusters() -> Vec<(&'static str, Cluster)> {
    let (t0, t1) = ("fabric.topograph.run/tier-0", "fabric.topograph.run/tier-1");
    let ec2 = cluster(
        &["aws-p5en-48xlarge", "aws-p6-b200-48xlarge"],
        vec![
            node("p5en-0", "aws-p5en-48xlarge", &[(t0, "leaf-a"), (t1, "spine-1")]),
            node("p5en-1", "aws-p5en-48xlarge", &[(t0, "leaf-a"), (t1, "spine-1")]),
            node("b200-0", "aws-p6-b200-48xlarge", &[(t0, "leaf-b"), (t1, "spine-1")]),
            node("b200-1", "aws-p6-b200-48xlarge", &[(t0, "leaf-b"), (t1, "spine-1")]),
        ],
    );
    let d = "accelerator.topograph.run/domain";
    let gb200 = cluster(
        &["aws-p6e-gb200-36xlarge"],
        (0..4)
            .map(|i| {
                let us = if i < 2 { "us-1" } else { "us-2" };
                node(&format!("gb200-{i}"), "aws-p6e-gb200-36xlarge", &[(d, us), (t0, &format!("leaf-{us}"))])
            })
            .collect(),
    );
    let (leaf, spine) = ("network.topology.nvidia.com/leaf", "network.topology.nvidia.com/spine");
    let llnl = cluster(
        &["llnl-xe8640-4xh100", "llnl-ex255a-4xmi300a-cpx", "mi300x-cpx"],
        vec![
            node("tuolumne-1", "llnl-ex255a-4xmi300a-cpx", &[(leaf, "r1"), (spine, "s1")]),
            node("tuolumne-2", "llnl-ex255a-4xmi300a-cpx", &[(leaf, "r1"), (spine, "s1")]),
            node("h100-1", "llnl-xe8640-4xh100", &[(leaf, "r2"), (spine, "s1")]),
            node("mi300x-1", "mi300x-cpx", &[(leaf, "r3"), (spine, "s2")]),
        ],
    );
    vec![("ec2", ec2), ("gb200", gb200), ("llnl", llnl)]
}

#[test]
fn kueue_and_kai_topologies_of_real_clusters_validate_against_their_crds() {
    let kueue = crd_schema("kueue.x-k8s.io_topologies.yaml", "v1beta2");
    let kai = crd_schema("kai.scheduler_topologies.yaml", "v1alpha1");
    let label_key = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";
    let label_value = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$";
    for (what, c) in real_clusters() {
        let levels = topology::levels(&c).unwrap_or_else(|e| panic!("{what}: {e}"));
        for (scheduler, schema) in [(Scheduler::Kueue, &kueue), (Scheduler::Kai, &kai)] {
            let object = topology::topology(scheduler, "accel", &levels);
            let errors = validate_topology(schema, &object);
            assert!(errors.is_empty(), "{what} {scheduler:?}: {errors:?}");
        }
        // Every node carries every level, as a valid label.
        assert_eq!(levels.nodes.len(), c.nodes.len());
        for (n, values) in &levels.nodes {
            assert_eq!(values.keys().collect::<BTreeSet<_>>(), levels.keys.iter().collect(), "{what} {n}");
            for (k, v) in values {
                assert!(matches(label_key, k) && matches(label_value, v), "{what} {n}: {k}={v}");
            }
        }
    }
    let by_name: BTreeMap<&str, topology::Levels> =
        real_clusters().into_iter().map(|(w, c)| (w, topology::levels(&c).unwrap())).collect();
    let keys = |w: &str| by_name[w].keys.iter().map(String::as_str).collect::<Vec<_>>();
    assert_eq!(keys("ec2"), ["fabric.topograph.run/tier-1", "fabric.topograph.run/tier-0", HOSTNAME]);
    assert_eq!(keys("gb200"), ["fabric.topograph.run/tier-0", "accelerator.topograph.run/domain", HOSTNAME]);
    assert_eq!(by_name["gb200"].nodes["gb200-3"]["accelerator.topograph.run/domain"], "us-2");
    // topograph v0's leaf and spine become v1's closest-first tiers.
    assert_eq!(by_name["llnl"].nodes["mi300x-1"]["fabric.topograph.run/tier-0"], "r3");
    assert_eq!(by_name["llnl"].nodes["mi300x-1"]["fabric.topograph.run/tier-1"], "s2");
}

#[test]
fn the_validation_fails_on_broken_topologies() {
    let kueue = crd_schema("kueue.x-k8s.io_topologies.yaml", "v1beta2");
    let (_, c) = real_clusters().remove(0);
    let levels = topology::levels(&c).unwrap();
    let good = topology::topology(Scheduler::Kueue, "accel", &levels);
    let broken = |edit: &dyn Fn(&mut Value)| {
        let mut o = good.clone();
        edit(&mut o);
        validate_topology(&kueue, &o)
    };
    type Edit<'a> = &'a dyn Fn(&mut Value);
    let cases: [(&str, Edit); 6] = [
        ("unknown field", &|o| o["spec"]["extra"] = Value::Bool(true)),
        ("does not match", &|o| o["spec"]["levels"][0]["nodeLabel"] = "Bad Key!".into()),
        ("must be unique", &|o| o["spec"]["levels"][1] = o["spec"]["levels"][0].clone()),
        ("lowest level", &|o| o["spec"]["levels"].as_array_mut().unwrap().reverse()),
        ("fewer than 1", &|o| o["spec"]["levels"] = Value::Array(Vec::new())),
        ("DNS subdomain", &|o| o["metadata"]["name"] = "Accel_Topology".into()),
    ];
    for (part, edit) in cases {
        let errors = broken(edit);
        assert!(errors.iter().any(|e| e.contains(part)), "{part}: {errors:?}");
    }
}

#[test]
fn a_cluster_whose_levels_do_not_nest_is_refused_with_the_two_nodes_named() {
    let (_, mut c) = real_clusters().remove(0);
    // b200-1 hangs under leaf-a, which sits under spine-1 for the p5en nodes, but says spine-2.
    let b = c.nodes.iter_mut().find(|n| n.name == "b200-1").unwrap();
    b.labels.insert("fabric.topograph.run/tier-0".into(), "leaf-a".into());
    b.labels.insert("fabric.topograph.run/tier-1".into(), "spine-2".into());
    let e = topology::levels(&c).unwrap_err().to_string();
    assert!(e.contains("do not nest") && e.contains("p5en-0") && e.contains("b200-1"), "{e}");
    // A node without a tier its peers have is refused too, named.
    let (_, mut c) = real_clusters().remove(0);
    c.nodes[3].labels.remove("fabric.topograph.run/tier-1");
    let e = topology::levels(&c).unwrap_err().to_string();
    assert!(e.contains("b200-1") && e.contains("every level"), "{e}");
}

#[test]
fn the_planner_reads_the_exported_labels_back() {
    // The labels the export names, given to the planner as node labels: tier caps and `same`
    // work on topograph v1's keys.
    let (_, c) = real_clusters().remove(0);
    let levels = topology::levels(&c).unwrap();
    let mut relabelled = c.clone();
    for n in &mut relabelled.nodes {
        n.labels = levels.nodes[&n.name].clone();
        n.labels.remove(HOSTNAME);
    }
    let mut p = accel_plan::Planner::new(&relabelled).unwrap();
    assert_eq!(p.tiers(), ["fabric.topograph.run/tier-0", "fabric.topograph.run/tier-1"]);
    let req: accel_plan::Request = serde_json::from_value(serde_json::json!({
        "bundles": [{"count": 8}, {"count": 8}], "strategy": "spread", "within": {"tier": "tier-0"}
    }))
    .unwrap();
    let placed = p.plan(&req).unwrap();
    let nodes: BTreeSet<&str> = placed.bundles.iter().map(|b| b.node.as_str()).collect();
    assert!(
        nodes == BTreeSet::from(["p5en-0", "p5en-1"]) || nodes == BTreeSet::from(["b200-0", "b200-1"]),
        "{nodes:?}"
    );
}

/// A vendored Kubernetes JSON Schema and the definitions its `$ref`s name.
fn k8s_schema(version: &str, file: &str) -> (Value, serde_json::Map<String, Value>) {
    let dir = k8s_dir().join(format!("kubernetes-{version}"));
    let read = |f: &str| -> Value { serde_json::from_str(&std::fs::read_to_string(dir.join(f)).unwrap()).unwrap() };
    let defs = read("_definitions.json")["$defs"].as_object().unwrap().clone();
    (read(file), defs)
}

fn validate_class(version: &str, class: &Value) -> Vec<String> {
    let (schema, defs) = k8s_schema(version, "deviceclass-resource-v1.json");
    let v = Validator { defs: Some(&defs), strict: true, pattern: Some(&matches) };
    let found = v.check(&schema, class);
    let mut errors = found.errors;
    // The API server's checks that the schema leaves to code: a DNS subdomain name, and a class
    // that selects something (the driver it names).
    let name = class["metadata"]["name"].as_str().unwrap_or_default();
    if !matches(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$", name) {
        errors.push(format!("metadata.name {name:?} is not a DNS subdomain"));
    }
    let cel = class["spec"]["selectors"][0]["cel"]["expression"].as_str().unwrap_or_default();
    if !matches(
        r#"^device\.driver == "[a-z0-9.-]+"( && device\.attributes\["[a-z0-9.-]+"\]\.vendor == "[^"]+")?$"#,
        cel,
    ) {
        errors.push(format!("selector {cel:?} names no driver"));
    }
    errors
}

#[test]
fn dra_device_classes_name_the_vendors_drivers_and_validate_against_kubernetes_schemas() {
    use accel_export::dra_classes::{device_classes, K8sVersion, NEEDS_PLUGIN};
    let machines: Vec<Machine> =
        ["dgx-h100", "mi300x", "tpu-v6e"].iter().map(|n| accel_discover::samples::machine(n).unwrap()).collect();
    let refs: Vec<&Machine> = machines.iter().collect();
    for (version, extended) in [("1.36.0", false), ("1.37.0", true)] {
        let classes = device_classes(&refs, version.parse::<K8sVersion>().unwrap()).unwrap();
        let by_name: BTreeMap<&str, &Value> =
            classes.iter().map(|c| (c["metadata"]["name"].as_str().unwrap(), c)).collect();
        assert_eq!(
            by_name.keys().copied().collect::<Vec<_>>(),
            ["accel-gpu-amd", "accel-gpu-nvidia", "accel-tpu-google"]
        );
        for c in &classes {
            let errors = validate_class(version, c);
            assert!(errors.is_empty(), "{version} {}: {errors:?}", c["metadata"]["name"]);
        }
        let expr = |n: &str| by_name[n]["spec"]["selectors"][0]["cel"]["expression"].as_str().unwrap().to_owned();
        assert_eq!(expr("accel-gpu-nvidia"), r#"device.driver == "gpu.nvidia.com""#);
        assert_eq!(expr("accel-gpu-amd"), r#"device.driver == "gpu.amd.com""#);
        // A family without a DRA driver: accel's own slices, marked as needing a kubelet plugin.
        assert_eq!(
            expr("accel-tpu-google"),
            r#"device.driver == "accel.io" && device.attributes["accel.io"].vendor == "google""#
        );
        assert!(by_name["accel-tpu-google"]["metadata"]["annotations"][NEEDS_PLUGIN]
            .as_str()
            .unwrap()
            .contains("no kubelet plugin"));
        assert!(by_name["accel-gpu-nvidia"]["metadata"].get("annotations").is_none());
        // KEP-5004 from 1.37: the family's extended resource is served through its class.
        let ext = |n: &str| by_name[n]["spec"].get("extendedResourceName").and_then(Value::as_str).map(str::to_owned);
        assert_eq!(ext("accel-gpu-nvidia"), extended.then(|| "nvidia.com/gpu".to_owned()));
        assert_eq!(ext("accel-gpu-amd"), extended.then(|| "amd.com/gpu".to_owned()));
    }
}

#[test]
fn the_device_class_validation_fails_on_broken_classes() {
    use accel_export::dra_classes::{device_classes, K8sVersion};
    let m = accel_discover::samples::machine("dgx-h100").unwrap();
    let good = device_classes(&[&m], "1.37".parse::<K8sVersion>().unwrap()).unwrap().remove(0);
    assert!(validate_class("1.37.0", &good).is_empty());
    type Edit = fn(&mut Value);
    let cases: [(&str, Edit); 5] = [
        ("unknown field", |c| c["spec"]["extendedResources"] = "x".into()),
        ("expected [\"array\",\"null\"]", |c| c["spec"]["selectors"] = "device.driver".into()),
        ("expected [\"string\",\"null\"]", |c| c["spec"]["extendedResourceName"] = 3.into()),
        ("DNS subdomain", |c| c["metadata"]["name"] = "Accel GPU".into()),
        ("names no driver", |c| c["spec"]["selectors"][0]["cel"]["expression"] = "true".into()),
    ];
    for (part, edit) in cases {
        let mut c = good.clone();
        edit(&mut c);
        let errors = validate_class("1.37.0", &c);
        assert!(errors.iter().any(|e| e.contains(part)), "{part}: {errors:?}");
    }
}

fn validate_template(version: &str, template: &Value) -> Vec<String> {
    let (schema, defs) = k8s_schema(version, "resourceclaimtemplate-resource-v1.json");
    let v = Validator { defs: Some(&defs), strict: true, pattern: Some(&matches) };
    let mut errors = v.check(&schema, template).errors;
    // What the API server checks in code: every constraint names requests the claim makes.
    let devices = &template["spec"]["spec"]["devices"];
    let made: BTreeSet<&str> =
        devices["requests"].as_array().into_iter().flatten().filter_map(|r| r["name"].as_str()).collect();
    for c in devices["constraints"].as_array().into_iter().flatten() {
        for r in c["requests"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            if !made.contains(r) {
                errors.push(format!("constraint names request {r:?}, which the claim does not make"));
            }
        }
    }
    errors
}

#[test]
fn dra_claim_templates_keep_devices_together_on_attributes_the_slices_carry() {
    use accel_export::dra_classes::claim_templates;
    let machines: Vec<Machine> =
        ["dgx-h100", "tpu-v6e", "mi210-2hive"].iter().map(|n| accel_discover::samples::machine(n).unwrap()).collect();
    let refs: Vec<&Machine> = machines.iter().collect();
    let templates = claim_templates(&refs, Some("rdma-nics")).unwrap();
    let names: Vec<&str> = templates.iter().map(|t| t["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["accel-gpu-amd-with-nic", "accel-gpu-nvidia-with-nic", "accel-tpu-google-with-nic", "accel-tpu-google-x8"]
    );
    for version in ["1.36.0", "1.37.0"] {
        for t in &templates {
            let errors = validate_template(version, t);
            assert!(errors.is_empty(), "{version} {}: {errors:?}", t["metadata"]["name"]);
        }
    }
    // The island constraint names an attribute accel's own slices give every TPU, with one value
    // for the whole island of 8.
    let x8 = &templates[3]["spec"]["spec"]["devices"];
    assert_eq!(x8["constraints"][0]["matchAttribute"], "accel.io/scaleUpIsland");
    assert_eq!(x8["requests"][0]["exactly"]["count"], 8);
    let slices = accel_export::dra::resource_slices(&machines[1], "tpu-0", "accel.io").unwrap().slices;
    let islands: BTreeSet<String> = slices
        .iter()
        .flat_map(|s| &s.spec.devices)
        .map(|d| serde_json::to_string(&d.attributes["scaleUpIsland"]).unwrap())
        .collect();
    assert_eq!(islands.len(), 1, "{islands:?}");
    // The NIC template: one device and one NIC on the same PCIe root.
    let nic = &templates[1]["spec"]["spec"]["devices"];
    assert_eq!(nic["constraints"][0]["matchAttribute"], "resource.kubernetes.io/pcieRoot");
    assert_eq!(nic["requests"][1]["exactly"]["deviceClassName"], "rdma-nics");
    // No NIC class: no NIC templates; a bad one is refused.
    assert_eq!(claim_templates(&refs, None).unwrap().len(), 1);
    assert!(claim_templates(&refs, Some("Bad Class")).is_err());
}

#[test]
fn the_claim_template_validation_fails_on_broken_templates() {
    let m = accel_discover::samples::machine("tpu-v6e").unwrap();
    let good = accel_export::dra_classes::claim_templates(&[&m], None).unwrap().remove(0);
    assert!(validate_template("1.37.0", &good).is_empty());
    type Edit = fn(&mut Value);
    let cases: [(&str, Edit); 3] = [
        ("unknown field", |t| t["spec"]["spec"]["devices"]["requests"][0]["exactly"]["cuont"] = 8.into()),
        ("missing required field \"deviceClassName\"", |t| {
            t["spec"]["spec"]["devices"]["requests"][0]["exactly"].as_object_mut().unwrap().remove("deviceClassName");
        }),
        ("which the claim does not make", |t| {
            t["spec"]["spec"]["devices"]["constraints"][0]["requests"][0] = "gpus".into()
        }),
    ];
    for (part, edit) in cases {
        let mut t = good.clone();
        edit(&mut t);
        let errors = validate_template("1.37.0", &t);
        assert!(errors.iter().any(|e| e.contains(part)), "{part}: {errors:?}");
    }
}
