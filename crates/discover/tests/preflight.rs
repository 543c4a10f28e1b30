//! Pre-flight screens: a node that matches what the job expects passes; one whose NIC speed, a
//! link, a device's health or the environment fingerprint differs fails, naming what differs.

use accel_discover::fingerprint::{Field, Fingerprint};
use accel_discover::preflight::screen;
use accel_discover::samples;
use accel_model::{Health, HealthState};

fn fingerprint(fields: &[(&str, Option<&str>)]) -> Fingerprint {
    Fingerprint {
        fingerprint_version: 1,
        fields: fields
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Field { value: v.map(str::to_owned), source: "test".into() }))
            .collect(),
    }
}

#[test]
fn a_node_as_expected_passes() {
    for name in ["dgx-h100", "aws-p5en-48xlarge", "mi300x"] {
        let m = samples::machine(name).unwrap();
        let fp = fingerprint(&[("driver.x", Some("1.0")), ("topology.hash", Some("abc"))]);
        let s = screen(&m, &m, Some((&fp, &fp)));
        assert!(s.passed, "{name}: {:?}", s.failures);
        assert_eq!(s.checks, ["health", "devices", "links", "nics", "fingerprint"]);
        assert!(!m.links.is_empty(), "{name}: the link screen has links to check");
    }
}

#[test]
fn nic_speed_link_health_device_and_fingerprint_differences_are_named() {
    let expected = samples::machine("dgx-h100").unwrap();
    assert!(!expected.nics.is_empty() && expected.nics[0].speed_mbps.is_some());
    let mut found = expected.clone();
    // A NIC negotiated down, another whose speed cannot be read, one NIC gone.
    let (nic0, nic1) = (found.nics[0].name.clone(), found.nics[1].name.clone());
    found.nics[0].speed_mbps = Some(200_000);
    found.nics[1].speed_mbps = None;
    let gone = found.nics.pop().unwrap().name;
    // A link with fewer lanes up, another down.
    found.links[0].count -= 6;
    let down = found.links.remove(1);
    // A device turned unhealthy.
    found.accelerators[2].health =
        Some(Health { state: HealthState::Unhealthy, reasons: vec!["XID 79".into()], ..Health::default() });
    let want = fingerprint(&[("driver.gpu", Some("550.54.15")), ("python.ray", Some("2.60.0"))]);
    let here = fingerprint(&[("driver.gpu", Some("535.104.05"))]);
    let s = screen(&found, &expected, Some((&here, &want)));
    assert!(!s.passed);
    let text: Vec<String> = s.failures.iter().map(|f| format!("{}: {}", f.check, f.detail)).collect();
    let labels = expected.device_labels();
    let label = |id: &str| labels[expected.accelerators.iter().position(|a| a.id == id).unwrap()].clone();
    let l0 = &expected.links[0];
    let wanted = [
        format!("nics: NIC {nic0} runs at 200000 Mb/s, expected 400000 Mb/s"),
        format!("nics: NIC {nic1} speed unreadable, expected 400000 Mb/s"),
        format!("nics: NIC {gone} is missing"),
        format!("links: link {}-{} {} has 12 links up, expected 18", label(&l0.a), label(&l0.b), l0.kind),
        format!("links: link {}-{} {} is down (expected 18 links)", label(&down.a), label(&down.b), down.kind),
        format!("health: GPU2 ({}) is unhealthy: XID 79", expected.accelerators[2].id),
        "fingerprint: driver.gpu is 535.104.05, expected 550.54.15".to_owned(),
        "fingerprint: python.ray is (unknown), expected 2.60.0".to_owned(),
    ];
    for w in &wanted {
        assert!(text.contains(w), "{w:?} missing from {text:#?}");
    }
    assert_eq!(text.len(), wanted.len(), "{text:#?}");
}

#[test]
fn a_missing_or_other_device_and_an_unknown_verdict_fail_closed() {
    let expected = samples::machine("mi300x").unwrap();
    let mut found = expected.clone();
    found.accelerators[0].health = Some(Health::default());
    found.accelerators[1].sku = Some("other".into());
    let missing = found.accelerators.pop().unwrap().id;
    let s = screen(&found, &expected, None);
    let text: Vec<String> = s.failures.iter().map(|f| format!("{}: {}", f.check, f.detail)).collect();
    assert!(text.iter().any(|t| t.starts_with("health: ") && t.ends_with(" is unknown")), "{text:?}");
    assert!(text.iter().any(|t| t.contains(&format!("({missing}) is missing"))), "{text:?}");
    assert!(text.iter().any(|t| t.contains(" is sku other, expected ")), "{text:?}");
    assert!(!s.checks.contains(&"fingerprint"));
}
