//! A node probe in the shape of Ray's REP enhancements#71 (`ProbeResult{metrics, devices,
//! events, passed, detail}`), taken through the families' own readers, and the tracker that
//! turns a series of probes into events (a device withdrawn, a device recovered).
//!
//! The probe fails closed: a device is `passed` only when its verdict is `healthy` and every
//! check of it ran. A check its source could not run (a capture that recorded no readings, a
//! family whose runtime is not loaded, a reader that failed) makes the device `unknown`, never
//! `passed`. The tracker withdraws a device at the first probe that does not pass it, and
//! restores it only after `recover_after` consecutive passing probes.

use std::collections::BTreeMap;

use accel_model::HealthState;
use serde::{Deserialize, Serialize};

use crate::readings::Readings;
use crate::{Host, Vendor};

/// One device in a probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceProbe {
    pub id: String,
    /// Its short name on the node (`GPU3`).
    pub label: String,
    pub vendor: String,
    /// `healthy`, `unhealthy` or `unknown`.
    pub state: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
    pub passed: bool,
}

/// A change the tracker saw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The probe (its sequence number) that saw it.
    pub seq: u64,
    /// `withdrawn` (the device stops passing) or `recovered` (it passed `recover_after` probes
    /// in a row).
    pub kind: String,
    pub device: String,
    pub label: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
}

/// REP #71's `ProbeResult`: the readings (`metrics`, the protocol's document of every family),
/// each device's verdict, the events of this probe (filled by [`Tracker::observe`]), whether
/// every device passed, and one line saying why not.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProbeResult {
    pub metrics: Readings,
    pub devices: Vec<DeviceProbe>,
    #[serde(default)]
    pub events: Vec<Event>,
    pub passed: bool,
    pub detail: String,
    /// Filled by the tracker: this probe's sequence number (1 for the first).
    #[serde(default)]
    pub seq: u64,
}

/// Probes `host` through `plugins`: discovery's verdicts (the PCIe link rule and each family's
/// health source) and each family's readings. A node without accelerators passes with nothing
/// to say; a reader that fails is named in `detail`.
pub fn probe(host: &Host, plugins: &[Box<dyn Vendor>]) -> ProbeResult {
    let machine = crate::discover(host, plugins);
    let labels = machine.device_labels();
    let mut out = ProbeResult::default();
    let mut notes = Vec::new();
    for plugin in plugins {
        if !machine.accelerators.iter().any(|a| a.plugin == plugin.id()) {
            continue;
        }
        match plugin.metrics(host) {
            Some(Ok(m)) => out.metrics.extend(m.readings),
            Some(Err(e)) => notes.push(format!("reader {}: {e}", plugin.id())),
            None => {}
        }
    }
    for (acc, label) in machine.accelerators.iter().zip(labels) {
        let (state, reasons) = match &acc.health {
            None => (HealthState::Unknown, vec!["no verdict".to_owned()]),
            Some(h) if h.state == HealthState::Healthy && !h.unchecked.is_empty() => {
                let why = h.unchecked.iter().map(|c| format!("{c}: not checked (no source recorded)"));
                (HealthState::Unknown, h.reasons.iter().cloned().chain(why).collect())
            }
            Some(h) => (h.state, h.reasons.clone()),
        };
        let passed = state == HealthState::Healthy;
        if !passed {
            notes.push(format!("{label} {}: {}", state.as_str(), reasons.join("; ")));
        }
        out.devices.push(DeviceProbe {
            id: acc.id.clone(),
            label,
            vendor: acc.vendor.clone(),
            state: state.as_str().to_owned(),
            reasons,
            passed,
        });
    }
    out.passed = out.devices.iter().all(|d| d.passed) && notes.is_empty();
    out.detail = if notes.is_empty() { format!("{} devices passed", out.devices.len()) } else { notes.join("; ") };
    out
}

/// What the tracker remembers of one device.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceTrack {
    pub withdrawn: bool,
    /// Passing probes in a row since it was withdrawn.
    pub streak: u32,
}

/// The state across probes: a series of [`ProbeResult`]s in, [`Event`]s out. Serialisable, so a
/// caller in another language can keep it between calls.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Tracker {
    /// Consecutive passing probes that restore a withdrawn device (at least 1).
    pub recover_after: u32,
    pub seq: u64,
    #[serde(default)]
    pub devices: BTreeMap<String, DeviceTrack>,
}

impl Tracker {
    pub fn new(recover_after: u32) -> Tracker {
        Tracker { recover_after: recover_after.max(1), ..Tracker::default() }
    }

    /// Numbers `result`, compares it with what came before, and fills its `events`: a device
    /// that does not pass is withdrawn at once (once); a withdrawn device is recovered after
    /// `recover_after` passing probes in a row, and any failure on the way starts it over.
    pub fn observe(&mut self, result: &mut ProbeResult) {
        self.seq += 1;
        result.seq = self.seq;
        let need = self.recover_after.max(1);
        for d in &result.devices {
            let track = self.devices.entry(d.id.clone()).or_default();
            let event = |kind: &str| Event {
                seq: result.seq,
                kind: kind.into(),
                device: d.id.clone(),
                label: d.label.clone(),
                reasons: d.reasons.clone(),
            };
            match (track.withdrawn, d.passed) {
                (false, false) => {
                    track.withdrawn = true;
                    track.streak = 0;
                    result.events.push(event("withdrawn"));
                }
                (true, false) => track.streak = 0,
                (true, true) => {
                    track.streak += 1;
                    if track.streak >= need {
                        track.withdrawn = false;
                        track.streak = 0;
                        result.events.push(event("recovered"));
                    }
                }
                (false, true) => {}
            }
        }
    }

    /// The devices withdrawn now.
    pub fn withdrawn(&self) -> Vec<&str> {
        self.devices.iter().filter(|(_, t)| t.withdrawn).map(|(id, _)| id.as_str()).collect()
    }
}

/// Tells a published machine what a probe's events mean for placement: a withdrawn device takes
/// the probe's verdict (unhealthy or unknown, with its reasons), so the planner leaves it out
/// (`Topo::usable`) and the labels name it; a recovered one is healthy again. Devices without an
/// event keep their verdict. Returns the devices changed.
pub fn apply(machine: &mut accel_model::Machine, result: &ProbeResult) -> Vec<String> {
    let mut changed = Vec::new();
    for e in &result.events {
        let Some(acc) = machine.accelerators.iter_mut().find(|a| a.id == e.device) else { continue };
        let probe = result.devices.iter().find(|d| d.id == e.device);
        let state = match (e.kind.as_str(), probe.map(|d| d.state.as_str())) {
            ("recovered", _) => HealthState::Healthy,
            (_, Some("unknown")) => HealthState::Unknown,
            _ => HealthState::Unhealthy,
        };
        let reasons = if state == HealthState::Healthy { Vec::new() } else { e.reasons.clone() };
        acc.health =
            Some(accel_model::Health { state, reasons, checked: vec!["monitor".into()], unchecked: Vec::new() });
        changed.push(e.device.clone());
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(passed: &[bool]) -> ProbeResult {
        let devices = passed
            .iter()
            .enumerate()
            .map(|(i, &p)| DeviceProbe {
                id: format!("d{i}"),
                label: format!("GPU{i}"),
                vendor: "v".into(),
                state: if p { "healthy" } else { "unhealthy" }.into(),
                reasons: if p { vec![] } else { vec!["XID 79".into()] },
                passed: p,
            })
            .collect();
        ProbeResult { devices, ..ProbeResult::default() }
    }

    fn kinds(r: &ProbeResult) -> Vec<(String, String)> {
        r.events.iter().map(|e| (e.kind.clone(), e.label.clone())).collect()
    }

    #[test]
    fn a_device_is_withdrawn_once_and_recovers_after_n_passing_probes_in_a_row() {
        let mut t = Tracker::new(3);
        let mut steps = Vec::new();
        for passed in [true, false, false, true, true, false, true, true, true, true] {
            let mut r = result(&[true, passed]);
            t.observe(&mut r);
            steps.push(kinds(&r));
        }
        let w = vec![("withdrawn".to_owned(), "GPU1".to_owned())];
        let rec = vec![("recovered".to_owned(), "GPU1".to_owned())];
        // Withdrawn at the first failure, not again; two passes then a failure start over;
        // recovered at the third pass in a row, then quiet.
        let none = Vec::new();
        let want = [vec![none.clone(), w], vec![none.clone(); 6], vec![rec, none]].concat();
        assert_eq!(steps, want);
        assert!(t.withdrawn().is_empty());
        assert_eq!(t.seq, 10);
    }

    #[test]
    fn events_reach_the_published_machine() {
        let mut m = crate::samples::machine("gb200-nvl72-tray").unwrap();
        let id = m.accelerators[1].id.clone();
        let mut r = result(&[true, false]);
        r.devices[1].id = id.clone();
        let mut t = Tracker::new(1);
        t.observe(&mut r);
        assert_eq!(apply(&mut m, &r), std::slice::from_ref(&id));
        let h = m.accelerators[1].health.clone().unwrap();
        assert_eq!((h.state, h.reasons), (HealthState::Unhealthy, vec!["XID 79".to_owned()]));
        assert!(!accel_model::Health::placeable(m.accelerators[1].health.as_ref(), true));
        let mut ok = result(&[true, true]);
        ok.devices[1].id = id;
        t.observe(&mut ok);
        apply(&mut m, &ok);
        assert_eq!(m.accelerators[1].health.as_ref().unwrap().state, HealthState::Healthy);
    }

    #[test]
    fn the_state_survives_a_round_trip_through_json() {
        let mut t = Tracker::new(2);
        let mut r = result(&[false]);
        t.observe(&mut r);
        let back: Tracker = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
        assert_eq!(back.withdrawn(), ["d0"]);
    }

    #[test]
    fn a_capture_without_recorded_readings_never_passes() {
        // The real p5en capture recorded no NVML readings: its GPUs are unchecked, so unknown.
        let host = crate::samples::host("aws-p5en-48xlarge", accel_model::SkuRegistry::builtin()).unwrap();
        let r = probe(&host, &crate::default_plugins());
        assert!(!r.passed, "{r:?}");
        assert!(r.devices.iter().all(|d| d.state == "unknown" && !d.passed));
        assert!(r.detail.contains("not checked"), "{}", r.detail);
        // The GB200 tray recorded its readings: every device passed.
        let host = crate::samples::host("gb200-nvl72-tray", accel_model::SkuRegistry::builtin()).unwrap();
        let r = probe(&host, &crate::default_plugins());
        assert!(r.passed, "{}", r.detail);
        assert_eq!(r.devices.len(), 4);
        assert_eq!(r.metrics.devices.len(), 4);
    }
}
