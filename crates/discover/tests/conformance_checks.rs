//! Every conformance check can fail: a table of checks against broken inputs. One external
//! plugin (Python, through the protocol) on a directory capture answers every verb correctly;
//! each row breaks it in one way and shows that exactly the check it names fails, while the
//! unbroken plugin passes every check. A capability the plugin does not provide is `none`.

use std::path::Path;
use std::time::Duration;

use accel_discover::conformance::{self, Capture, Status, CHECKS};
use accel_discover::exec::ExecPlugin;
use accel_discover::fs::MemTree;
use accel_discover::Vendor;
use accel_model::SkuRegistry;

/// A captured root with two H100 SXM functions (10de:2330), each under its own root port.
fn capture_dir(dir: &Path) {
    let mut t = MemTree::new();
    for (port, bus) in [("3a", "3b"), ("5a", "5b")] {
        let rp = format!("/sys/devices/pci0000:{port}/0000:{port}:00.0");
        let dev = format!("{rp}/0000:{bus}:00.0");
        for (path, vendor, device, class) in
            [(&rp, "0x8086", "0x2030", "0x060400"), (&dev, "0x10de", "0x2330", "0x030200")]
        {
            t.add_file(format!("{path}/vendor"), format!("{vendor}\n"));
            t.add_file(format!("{path}/device"), format!("{device}\n"));
            t.add_file(format!("{path}/class"), format!("{class}\n"));
            t.add_file(format!("{path}/numa_node"), "-1\n");
            let name = path.rsplit('/').next().unwrap();
            t.add_link(format!("/sys/bus/pci/devices/{name}"), format!("../../..{}", &path[4..]));
        }
    }
    t.write_to(dir).unwrap();
}

/// The probe plugin. `FLAW` names the one thing it gets wrong (`none`: nothing).
const PLUGIN: &str = r#"#!/usr/bin/env python3
"""A conformance probe: correct on every verb unless FLAW says otherwise."""
import json, os, random, sys, time

FLAW = "@FLAW@"
verb = sys.argv[1] if len(sys.argv) > 1 else ""
root = os.environ.get("ACCEL_ROOT", "/nonexistent")
def out(doc):
    print(json.dumps(dict(protocol=1, **doc)))
    sys.exit(0)
if verb == "version":
    out(dict(name="probe", version="1"))
request = json.loads(sys.stdin.read() or "null")
if not os.path.exists(os.path.join(root, "sys/bus/pci/devices/0000:3b:00.0/vendor")):
    if FLAW == "robustness":
        time.sleep(30)
    out(dict(accelerators=[], devices=[]))
PCIS = ["0000:3b:00.0", "0000:5b:00.0"]
def device(pci):
    d = {"id": "probe-" + pci, "vendor": "probe", "product": "Probe P1", "pci": pci, "sku": "nvidia-h100-sxm",
         "vocabulary": {"visibility_env": "PROBE_VISIBLE", "isolation": ["p" + pci[5:7]]}}
    if FLAW == "deterministic":
        d["product"] = "Probe P1 rev %d" % random.randrange(1 << 30)
    if FLAW == "identified_or_warned":
        d["product"], d["sku"] = "unknown probe", None
    return d
if verb == "discover":
    devices = [device(p) for p in PCIS]
    links = [{"a": devices[0]["id"], "b": devices[1]["id"], "kind": "nvlink", "count": 2, "gbps": 100.0}]
    if FLAW == "schema":
        devices.append({"id": "probe-broken", "pci": "0000:3b:00.0"})
    if FLAW == "unique_ids":
        devices.append(device(PCIS[0]))
    if FLAW == "in_pci_tree":
        devices.append(dict(device("0000:99:00.0"), id="probe-0000:99:00.0"))
    if FLAW == "links_valid":
        links.append({"a": devices[0]["id"], "b": "probe-nowhere", "kind": "nvlink", "count": 1})
    if FLAW == "bandwidth_from_sku":
        links[0]["gbps"] = 1.0
    out(dict(accelerators=devices, links=links))
if verb == "isolate":
    values = ["p" + d["pci"][5:7] for d in request["devices"]]
    if FLAW == "visibility":
        values = ["zz" for _ in values]
    if FLAW == "bundle_order":
        values = sorted(values)
    out(dict(env={"PROBE_VISIBLE": ",".join(values)}))
if verb in ("health", "metrics"):
    if verb == "health" and FLAW == "health_not_provided":
        sys.exit(3)
    pcis = PCIS + (["0000:99:00.0"] if FLAW == verb else [])
    if verb == "health":
        out(dict(devices=[{"pci": p, "healthy": True} for p in pcis]))
    out(dict(devices=[{"pci": p, "power_watts": 70.5} for p in pcis]))
sys.exit(3)
"#;

/// The suite's report for the probe with `flaw`, on the capture in `root`.
fn run(dir: &Path, root: &Path, flaw: &str) -> conformance::PluginResult {
    let path = dir.join(format!("accel-plugin-probe-{flaw}"));
    std::fs::write(&path, PLUGIN.replace("@FLAW@", flaw)).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let plugins: Vec<Box<dyn Vendor>> = vec![Box::new(ExecPlugin::at("probe", &path, Duration::from_secs(2)))];
    let capture = Capture::path(root, SkuRegistry::builtin()).unwrap();
    let report = conformance::run(&plugins, &["probe"], &[], &[capture]);
    report.plugins.into_iter().next().unwrap()
}

fn status(result: &conformance::PluginResult, name: &str) -> Vec<(Status, String)> {
    result
        .captures
        .iter()
        .flat_map(|c| &c.checks)
        .filter(|k| k.name == name)
        .map(|k| (k.status, k.detail.clone()))
        .collect()
}

#[test]
fn every_check_fails_on_the_input_that_breaks_it() {
    let tmp = accel_testdata::TempDir::new("conformance-checks");
    let root = tmp.path().join("capture");
    std::fs::create_dir_all(&root).unwrap();
    capture_dir(&root);

    // The unbroken plugin passes every check, and the table below names every check there is.
    let good = run(tmp.path(), &root, "none");
    assert_eq!(good.captures.len(), 1, "the probe finds its devices: {good:?}");
    let emitted: Vec<(&str, &str)> =
        good.captures[0].checks.iter().map(|k| (k.capability.as_str(), k.name.as_str())).collect();
    assert_eq!(emitted, CHECKS.to_vec(), "the suite's checks and CHECKS differ");
    for k in &good.captures[0].checks {
        assert_eq!(k.status, Status::Pass, "{} does not pass for the unbroken plugin: {}", k.name, k.detail);
    }
    for (capability, grade) in &good.tiers {
        assert_eq!(grade.tier, "T3", "{capability}: {}", grade.evidence);
    }

    // check name -> the flaw that must make it (and only it) fail.
    let table: [(&str, &str); 12] = [
        ("schema", "schema"),
        ("deterministic", "deterministic"),
        ("unique_ids", "unique_ids"),
        ("in_pci_tree", "in_pci_tree"),
        ("identified_or_warned", "identified_or_warned"),
        ("robustness", "robustness"),
        ("links_valid", "links_valid"),
        ("bandwidth_from_sku", "bandwidth_from_sku"),
        ("visibility", "visibility"),
        ("bundle_order", "bundle_order"),
        ("health", "health"),
        ("metrics", "metrics"),
    ];
    let covered: Vec<&str> = table.iter().map(|(c, _)| *c).collect();
    assert_eq!(covered, CHECKS.iter().map(|(_, n)| *n).collect::<Vec<_>>(), "every check has a row");
    for (check, flaw) in table {
        let result = run(tmp.path(), &root, flaw);
        let got = status(&result, check);
        assert!(
            !got.is_empty() && got.iter().all(|(s, _)| *s == Status::Fail),
            "{check} does not fail when the plugin breaks it ({flaw}): {got:?}"
        );
        // A failure reads as prose: no Rust debug syntax (`Some("0,1")`, `None`) reaches the user.
        for (_, detail) in &got {
            assert!(!detail.contains("Some(") && !detail.contains("None"), "{check}: {detail}");
        }
        let capability = CHECKS.iter().find(|(_, n)| *n == check).unwrap().0;
        assert_eq!(result.tiers[capability].tier, "none", "{check} failing must cost {capability} its tier");
    }
}

#[test]
fn a_capability_not_provided_is_graded_none() {
    let tmp = accel_testdata::TempDir::new("conformance-none");
    let root = tmp.path().join("capture");
    std::fs::create_dir_all(&root).unwrap();
    capture_dir(&root);
    let result = run(tmp.path(), &root, "health_not_provided");
    assert_eq!(status(&result, "health"), vec![(Status::Skip, "not provided".to_owned())]);
    assert_eq!(result.tiers["health"].tier, "none");
    assert_eq!(result.tiers["health"].evidence, "not provided");
    assert_eq!(result.tiers["metrics"].tier, "T3", "metrics is graded on its own");
}
