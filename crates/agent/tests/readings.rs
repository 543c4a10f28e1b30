//! A sample's recorded readings agree with its own model: what `/metrics` and the dashboard
//! show of an embedded sample (its NVML recording, its amdgpu or habanalabs sysfs files) must
//! be the machine `accel topo`, the planner and the exports see. For each sample with
//! readings: one reading per device the model has, each device's memory total equal to the
//! model's, and a device's scale-up link readings no fewer than its widest link to one peer (NV18
//! through NVSwitch: 18 links) and no more than all its links to every peer together.

use std::collections::BTreeMap;

use accel_agent::readers::Readers;
use accel_discover::readings::Readings;
use accel_discover::{default_plugins, samples};
use accel_model::{Machine, SkuRegistry};

/// What disagrees between a machine and its readings, one line each.
fn disagreements(machine: &Machine, readings: &Readings) -> Vec<String> {
    let mut out = Vec::new();
    let key = |pci: &str, part: Option<u32>| (accel_discover::readings::normalize_pci(pci), part);
    let read: BTreeMap<_, _> = readings.devices.iter().map(|d| (key(&d.pci, d.partition), d)).collect();
    if read.len() != readings.devices.len() {
        out.push(format!("{} readings for {} distinct devices", readings.devices.len(), read.len()));
    }
    // The devices whose family read anything, as the model has them.
    let read_pcis: std::collections::BTreeSet<String> = read.keys().map(|(p, _)| p.clone()).collect();
    let modelled: Vec<_> =
        machine.accelerators.iter().filter(|a| a.pci.is_some_and(|p| read_pcis.contains(&p.to_string()))).collect();
    if modelled.len() != read.len() {
        out.push(format!("{} devices read, the model has {} of them", read.len(), modelled.len()));
    }
    for acc in modelled {
        let pci = acc.pci.expect("filtered").to_string();
        let part = acc.partition.as_ref().map(|p| p.index);
        let Some(r) = read.get(&(pci.clone(), part)).or_else(|| read.get(&(pci.clone(), None))) else {
            out.push(format!("{}: no reading", acc.id));
            continue;
        };
        if let (Some(have), Some(want)) = (r.memory_total_bytes, acc.memory_bytes) {
            // One device's reading of a partitioned package may be the package's.
            let whole = acc.partition.is_some() && r.partition.is_none();
            if !whole && have.abs_diff(want) * 100 > want {
                out.push(format!("{}: memory {:.1} GiB read, {:.1} GiB in the model", acc.id, gib(have), gib(want)));
            }
        }
        let counts: Vec<u32> =
            machine.links.iter().filter(|l| l.a == acc.id || l.b == acc.id).map(|l| l.count).collect();
        let links = readings.links.iter().filter(|l| accel_discover::readings::normalize_pci(&l.pci) == pci).count();
        // A reader that exposes no link counters (habanalabs sysfs) says nothing about links.
        if links > 0 {
            let (least, most) = (counts.iter().copied().max().unwrap_or(0), counts.iter().sum::<u32>());
            if acc.partition.is_none() && !(least as usize..=most as usize).contains(&links) {
                out.push(format!(
                    "{}: {links} link readings, the model's links say {least} to {most} ({} peers)",
                    acc.id,
                    counts.len()
                ));
            }
        }
    }
    out
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

#[test]
fn every_samples_readings_agree_with_its_model() {
    let mut checked = 0;
    let mut wrong = Vec::new();
    for name in samples::names() {
        let machine = samples::machine(name).unwrap();
        let host = samples::host(name, SkuRegistry::builtin()).unwrap();
        let sample = Readers::new(host, default_plugins()).sample();
        if sample.readings.devices.is_empty() {
            continue;
        }
        checked += 1;
        wrong.extend(disagreements(&machine, &sample.readings).into_iter().map(|w| format!("{name}: {w}")));
    }
    assert!(checked >= 3, "only {checked} samples have readings");
    assert!(wrong.is_empty(), "readings that contradict their model:\n{}", wrong.join("\n"));
}

#[test]
fn a_reading_that_contradicts_its_model_is_caught() {
    // The check fails on the input that breaks it: memory, link count, device count.
    let machine = samples::machine("gb200-nvl72-tray").unwrap();
    let host = samples::host("gb200-nvl72-tray", SkuRegistry::builtin()).unwrap();
    let good = Readers::new(host, default_plugins()).sample().readings;
    assert!(disagreements(&machine, &good).is_empty(), "{:?}", disagreements(&machine, &good));
    let mut smaller = good.clone();
    smaller.devices[0].memory_total_bytes = Some(85_520_809_984); // an H100's 79.6 GiB
    assert!(disagreements(&machine, &smaller).iter().any(|w| w.contains("79.6 GiB read")));
    let mut fewer = good.clone();
    let first = fewer.devices[0].pci.clone();
    let mut kept = 0;
    fewer.links.retain(|l| {
        l.pci != first || {
            kept += 1;
            kept <= 8
        }
    });
    assert!(disagreements(&machine, &fewer).iter().any(|w| w.contains("8 link readings")), "{fewer:?}");
    let mut extra = good;
    extra.devices.push(accel_discover::readings::DeviceReading { pci: "0000:99:00.0".into(), ..Default::default() });
    assert!(!disagreements(&machine, &extra).is_empty());
}
