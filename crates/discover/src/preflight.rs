//! Pre-flight screens (REP enhancements#71's checks before a job starts): the node as it is
//! now against what the job expects of it. Each screen names what differs:
//!
//! - `health`: every device healthy (unknown fails: a verdict that could not be taken is no pass);
//! - `devices`: every expected device present;
//! - `links`: every scale-up link the expected machine has is up, with as many links, of the same
//!   kind;
//! - `nics`: every expected NIC present and at the speed expected (an unreadable speed fails);
//! - `fingerprint`: every field of the job's expected environment fingerprint (`accel env
//!   --json`, whole or cut down to the fields that matter) has the same value here.
//!
//! Pure functions of two machines and two fingerprints; `accel preflight` reads them.

use std::collections::BTreeMap;

use accel_model::{HealthState, Machine};
use serde::Serialize;

use crate::fingerprint::Fingerprint;

/// One thing that differs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Failure {
    /// The screen: `health`, `devices`, `links`, `nics`, `fingerprint`.
    pub check: &'static str,
    /// What differs, in words, naming the device, link, NIC or field.
    pub detail: String,
}

/// The screens' verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Screen {
    pub passed: bool,
    /// The screens that ran.
    pub checks: Vec<&'static str>,
    pub failures: Vec<Failure>,
}

/// Screens `found` (the node now) against `expected` (the machine the job was planned on) and,
/// when both are given, the fingerprint here against the job's expected one.
pub fn screen(found: &Machine, expected: &Machine, fingerprint: Option<(&Fingerprint, &Fingerprint)>) -> Screen {
    let mut failures = Vec::new();
    let mut fail = |check: &'static str, detail: String| failures.push(Failure { check, detail });
    let (here, there) = (short_names(found), short_names(expected));
    let name = |id: &str| here.get(id).or_else(|| there.get(id)).cloned().unwrap_or_else(|| id.to_owned());

    for acc in &found.accelerators {
        let h = acc.health.clone().unwrap_or_default();
        if h.state != HealthState::Healthy {
            let why = if h.reasons.is_empty() { String::new() } else { format!(": {}", h.reasons.join("; ")) };
            fail("health", format!("{} ({}) is {}{why}", name(&acc.id), acc.id, h.state.as_str()));
        }
    }
    for acc in &expected.accelerators {
        match found.accelerators.iter().find(|a| a.id == acc.id) {
            None => fail("devices", format!("{} ({}) is missing", name(&acc.id), acc.id)),
            Some(a) if a.sku != acc.sku => fail(
                "devices",
                format!(
                    "{} ({}) is sku {}, expected {}",
                    name(&acc.id),
                    acc.id,
                    a.sku.as_deref().unwrap_or("unknown"),
                    acc.sku.as_deref().unwrap_or("unknown")
                ),
            ),
            Some(_) => {}
        }
    }
    for link in &expected.links {
        let pair = format!("{}-{} {}", name(&link.a), name(&link.b), link.kind);
        let same = |l: &&accel_model::Link| {
            l.kind == link.kind && ((l.a == link.a && l.b == link.b) || (l.a == link.b && l.b == link.a))
        };
        match found.links.iter().find(same) {
            None => fail("links", format!("link {pair} is down (expected {} links)", link.count)),
            Some(l) if l.count < link.count => {
                fail("links", format!("link {pair} has {} links up, expected {}", l.count, link.count))
            }
            Some(_) => {}
        }
    }
    for nic in &expected.nics {
        let Some(here) = found.nics.iter().find(|n| n.name == nic.name) else {
            fail("nics", format!("NIC {} is missing", nic.name));
            continue;
        };
        match (nic.speed_mbps, here.speed_mbps) {
            (Some(want), Some(got)) if got != want => {
                fail("nics", format!("NIC {} runs at {} Mb/s, expected {want} Mb/s", nic.name, got))
            }
            (Some(want), None) => fail("nics", format!("NIC {} speed unreadable, expected {want} Mb/s", nic.name)),
            _ => {}
        }
    }
    let mut checks = vec!["health", "devices", "links", "nics"];
    if let Some((here, want)) = fingerprint {
        checks.push("fingerprint");
        let show = |v: Option<&String>| v.cloned().unwrap_or_else(|| "(unknown)".into());
        for (key, field) in &want.fields {
            let got = here.fields.get(key).and_then(|f| f.value.as_ref());
            if got != field.value.as_ref() {
                fail("fingerprint", format!("{key} is {}, expected {}", show(got), show(field.value.as_ref())));
            }
        }
    }
    Screen { passed: failures.is_empty(), checks, failures }
}

/// Device id to its short name (`GPU3`).
fn short_names(machine: &Machine) -> BTreeMap<String, String> {
    machine.accelerators.iter().map(|a| a.id.clone()).zip(machine.device_labels()).collect()
}
