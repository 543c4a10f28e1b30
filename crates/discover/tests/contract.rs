//! The plugin contract's open parts, each shown failing on a broken input: link kinds a
//! plugin declares (and the ones it does not), Kubernetes labels in its own scheme, and
//! `isolate` for whole ordered bundles, through the plugin (external ones by the protocol).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use accel_discover::exec::{parse_isolate, ExecOptions};
use accel_discover::validate::check_k8s_label;
use accel_discover::{discover, isolate, plugins_with_external, Host, Isolation, Report, Vendor};
use accel_model::{Accelerator, Link, LinkKind, LinkKindInfo, Machine, SkuRegistry};
use accel_testdata::TempDir;

fn host() -> Host {
    Host::new(accel_testdata::root("hwloc-2p8co2t-8ve"), SkuRegistry::builtin())
}

fn acc(id: &str) -> Accelerator {
    serde_json::from_value(serde_json::json!({
        "id": id, "index": 0, "vendor": "toy", "plugin": "toy", "product": "Toy",
        "vocabulary": {"kind": "tpu", "label": "TOY", "visibility_env": "TOY_VISIBLE", "visibility_separator": ":"}
    }))
    .unwrap()
}

/// A built-in-shaped plugin with an Ethernet scale-up and labels of its own.
struct Toy {
    short: &'static str,
    labels: &'static [(&'static str, &'static str)],
}

const ETH: LinkKind = LinkKind::new("toy_eth");

impl Vendor for Toy {
    fn id(&self) -> &'static str {
        "toy"
    }

    fn discover(&self, _host: &Host, _platform: &Machine) -> Report {
        let link = |a: &str, b: &str, kind| Link::new(a, b, kind, 2, None);
        Report {
            accelerators: vec![acc("t-0"), acc("t-1"), acc("t-2")],
            links: vec![link("t-0", "t-1", ETH), link("t-1", "t-2", LinkKind::new("mystery"))],
            ..Report::default()
        }
    }

    fn link_kinds(&self) -> Vec<LinkKindInfo> {
        let mut info = LinkKindInfo::new(ETH, "ETH", "toy scale-up Ethernet");
        info.short = accel_model::Name::new(self.short).unwrap();
        info.gbps_per_link = Some(50.0);
        vec![info]
    }

    fn k8s_labels(&self, _m: &Machine, _d: &[&Accelerator]) -> std::collections::BTreeMap<String, String> {
        self.labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn isolate(&self, devices: &[&Accelerator]) -> Isolation {
        accel_discover::isolate_by_index(devices, &["TOY_VISIBLE"])
    }
}

#[test]
fn declared_link_kinds_are_shown_and_valued_and_undeclared_ones_kept() {
    let m = discover(&host(), &[Box::new(Toy { short: "ETH", labels: &[] })]);
    assert_eq!(m.links.len(), 2, "{:?}", m.warnings);
    let eth = m.links.iter().find(|l| l.kind == ETH).unwrap();
    assert_eq!(eth.gbps, Some(100.0), "two links at the declared 50 GB/s");
    assert_eq!(m.link_kinds.len(), 1, "only declared kinds are described: {:?}", m.link_kinds);
    assert_eq!(m.link_kind(ETH).short.as_str(), "ETH");
    assert_eq!(m.link_kind(LinkKind::new("mystery")).short.as_str(), "MYSTERY");
    let matrix = accel_model::PathClassifier::new(&m).matrix();
    assert_eq!((matrix[0][1].to_string(), matrix[1][2].to_string()), ("ETH2".into(), "MYSTERY2".into()));

    // A short tag over 8 characters would break the matrix: the kind's default stands in.
    let m = discover(&host(), &[Box::new(Toy { short: "WAYTOOLONGTAG", labels: &[] })]);
    assert_eq!(m.link_kind(ETH).short.as_str(), "TOY_ETH");
    assert!(m.warnings.iter().any(|w| w.message.contains("link_kinds[0].short")), "{:?}", m.warnings);
}

#[test]
fn kubernetes_labels_are_checked() {
    for (key, value) in [("huawei.com/npu.count", "8"), ("accelerator", "huawei-Ascend910"), ("a.b/c", "")] {
        assert!(check_k8s_label(key, value).is_ok(), "{key}={value}");
    }
    for (key, value) in [
        ("accel.io/accelerator-type", "fake"),
        ("feature.node.kubernetes.io/pci-0300_10de.present", "true"),
        ("node.kubernetes.io/instance-type", "x"),
        ("Bad_Prefix.com/x", "1"),
        ("x/", "1"),
        ("ok.com/name", "has space"),
        ("ok.com/name", "\u{1b}[31m"),
        ("ok.com/name", &"v".repeat(64)),
    ] {
        assert!(check_k8s_label(key, value).is_err(), "{key}={value} accepted");
    }
    let m = discover(
        &host(),
        &[Box::new(Toy { short: "ETH", labels: &[("toy.example.com/chips", "3"), ("accel.io/vendors", "forged")] })],
    );
    assert_eq!(m.k8s_labels.get("toy.example.com/chips").map(String::as_str), Some("3"));
    assert!(!m.k8s_labels.contains_key("accel.io/vendors"));
    assert!(m.warnings.iter().any(|w| w.source == "plugin:toy" && w.message.contains("accel.io/vendors")));
    assert_eq!(accel_discover::labels::k8s_labels(&m)["toy.example.com/chips"], "3");
}

#[test]
fn isolate_answers_are_checked() {
    let ok = serde_json::json!({"protocol": 1, "env": {"TOY_VISIBLE": "2,0"}});
    assert_eq!(parse_isolate(&ok).unwrap()["TOY_VISIBLE"], "2,0");
    for bad in [
        serde_json::json!({"protocol": 1}),
        serde_json::json!({"protocol": 1, "env": {"1BAD": "x"}}),
        serde_json::json!({"protocol": 1, "env": {"A B": "x"}}),
        serde_json::json!({"protocol": 1, "env": {"TOY": 3}}),
        serde_json::json!({"protocol": 1, "env": {"TOY": "a\nLD_PRELOAD=/x"}}),
    ] {
        assert!(parse_isolate(&bad).is_err(), "{bad} accepted");
    }
}

/// A machine of three toy devices, as a cluster file would carry it.
fn toy_machine() -> Machine {
    discover(&host(), &[Box::new(Toy { short: "ETH", labels: &[] })])
}

#[test]
fn bundles_are_isolated_in_order_by_their_plugin() {
    let m = toy_machine();
    let plugins: Vec<Box<dyn Vendor>> = vec![Box::new(Toy { short: "ETH", labels: &[] })];
    let env = isolate(&plugins, &m, &["t-2", "t-0"]).env;
    assert_eq!(env["TOY_VISIBLE"], "2:0", "bundle order and the plugin's separator: {env:?}");

    // Without the plugin: the discovered values, in order, with the separator, and a warning.
    let got = isolate(&[], &m, &["t-2", "t-0"]);
    assert_eq!(got.env["TOY_VISIBLE"], "2:0");
    assert!(got.warnings.iter().any(|w| w.message.contains("plugin toy not found here")), "{:?}", got.warnings);

    // A built-in family: the order reaches CUDA_VISIBLE_DEVICES, and Ray keeps its hands off.
    let dgx = accel_discover::samples::machine("dgx-h100").unwrap();
    let ids: Vec<&str> = [5, 1].iter().map(|&i| dgx.accelerators[i].id.as_str()).collect();
    let env = isolate(&accel_discover::default_plugins(), &dgx, &ids).env;
    let uuid = |i: usize| dgx.accelerators[i].uuid.clone().unwrap();
    assert_eq!(env["CUDA_VISIBLE_DEVICES"], format!("{},{}", uuid(5), uuid(1)));
    assert_eq!(env["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"], "1");
}

fn write_plugin(dir: &Path, isolate_answer: &str) {
    let discover = serde_json::json!({"protocol": 1, "accelerators": [
        {"id": "ext-0", "vendor": "ext", "product": "E", "vocabulary": {"visibility_env": "EXT_VISIBLE", "isolation": ["a"]}},
        {"id": "ext-1", "vendor": "ext", "product": "E", "vocabulary": {"visibility_env": "EXT_VISIBLE", "isolation": ["b"]}}
    ]});
    let script = format!(
        "#!/bin/sh\ncase \"$1\" in\nversion) echo '{{\"protocol\": 1, \"name\": \"ext\", \"version\": \"1\", \"verbs\": [\"version\", \"discover\", \"isolate\"]}}';;\n\
         discover) cat > /dev/null; echo '{discover}';;\nisolate) {isolate_answer};;\n*) exit 3;;\nesac\n"
    );
    let path = dir.join("accel-plugin-ext");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn an_external_plugin_isolates_the_ordered_bundle_itself() {
    let dir = TempDir::new("contract-isolate");
    // The plugin echoes the order it was given, by the devices' isolation values.
    write_plugin(
        dir.path(),
        r#"python3 -c 'import json,sys; d=json.load(sys.stdin)["devices"]; print(json.dumps({"protocol": 1, "env": {"EXT_VISIBLE": "+".join(x["vocabulary"]["isolation"][0] for x in d)}}))'"#,
    );
    let options =
        ExecOptions { dirs: vec![dir.path().to_path_buf()], timeout: Duration::from_secs(5), skipped: Vec::new() };
    let (plugins, _) = plugins_with_external(&options);
    let m = accel_discover::discover_all(&host(), &options);
    let got = isolate(&plugins, &m, &["ext-1", "ext-0"]);
    assert_eq!(got.env["EXT_VISIBLE"], "b+a", "{got:?}");

    // A plugin whose answer is broken: the model's values, and a warning naming it.
    write_plugin(dir.path(), r#"cat > /dev/null; echo '{"protocol": 1, "env": {"EXT_VISIBLE": 7}}'"#);
    let got = isolate(&plugins, &m, &["ext-1", "ext-0"]);
    assert_eq!(got.env["EXT_VISIBLE"], "b,a", "{got:?}");
    assert!(got.warnings.iter().any(|w| w.source.contains("ext") && w.message.contains("not a string")), "{got:?}");
}
