//! The readers: every family's `metrics` (a built-in family's reader in process, an external
//! plugin's `metrics` verb through discovery's one plugin runner), plus a replayed document.
//! [`Readers::sample`] asks them all once; a family that provides nothing on this host
//! contributes no devices and no series.

use accel_discover::health::ByPlugin;
use accel_discover::readings::{Metrics, Readings};
use accel_discover::{Host, Vendor};
use accel_model::Machine;
use serde::Serialize;

/// Every reader of one node.
pub struct Readers {
    /// The machine read: the live `/`, a captured directory or an in-memory sample (its
    /// recordings replay through the same readers).
    pub host: Host,
    /// The families, built-in and external, in discovery's order.
    pub plugins: Vec<Box<dyn Vendor>>,
    /// A readings document replayed verbatim (`--replay FILE`), for demos and benchmarks.
    pub replay: Option<Readings>,
}

impl std::fmt::Debug for Readers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<&str> = self.plugins.iter().map(|p| p.id()).collect();
        f.debug_struct("Readers").field("host", &self.host).field("plugins", &ids).finish_non_exhaustive()
    }
}

/// What one reader contributed to a sample.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ReaderStatus {
    /// The family (plugin) name, or `replay`.
    pub name: String,
    /// `live` (the live machine), `recording` (a captured tree) or `replay`.
    pub source: String,
    pub devices: usize,
    pub links: usize,
    pub ok: bool,
}

/// One pass over every reader.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Sample {
    pub readings: Readings,
    pub readers: Vec<ReaderStatus>,
    pub warnings: Vec<String>,
}

impl Readers {
    /// Readers of `host` through `plugins`.
    pub fn new(host: Host, plugins: Vec<Box<dyn Vendor>>) -> Readers {
        Readers { host, plugins, replay: None }
    }

    /// `machine` with every device's health judged again now, by discovery's rules
    /// (`accel_discover::health::evaluate`: the PCIe link the machine shows, then each family's
    /// own health source on this host), so a device that turns bad while the agent runs is named
    /// on the page and in `accel_device_health`. Blocking, like [`Readers::sample`].
    pub fn judge(&self, machine: &Machine) -> Machine {
        let mut live = machine.clone();
        let mut by_plugin = ByPlugin::new();
        for plugin in &self.plugins {
            if machine.accelerators.iter().any(|a| a.plugin == plugin.id()) {
                by_plugin.insert(plugin.id(), plugin.health(&self.host, machine));
            }
        }
        accel_discover::health::evaluate(self.host.is_live(), &by_plugin, &mut live);
        live
    }

    /// Runs every reader once. Blocking (files, library calls, plugin processes).
    pub fn sample(&self) -> Sample {
        let mut s = Sample::default();
        let add = |s: &mut Sample, name: &str, source: &str, m: Metrics, ok: bool| {
            let mut r = m.readings;
            s.warnings.extend(r.sanitize(name));
            s.warnings.extend(m.warnings);
            s.readers.push(ReaderStatus {
                name: name.to_owned(),
                source: source.to_owned(),
                devices: r.devices.len(),
                links: r.links.len(),
                ok,
            });
            s.readings.extend(r);
        };
        let source = if self.host.is_live() { "live" } else { "recording" };
        for plugin in &self.plugins {
            match plugin.metrics(&self.host) {
                None => {}
                Some(Ok(m)) => add(&mut s, plugin.id(), source, m, true),
                Some(Err(e)) => add(
                    &mut s,
                    plugin.id(),
                    source,
                    Metrics { warnings: vec![e.to_string()], ..Metrics::default() },
                    false,
                ),
            }
        }
        if let Some(r) = &self.replay {
            add(&mut s, "replay", "replay", Metrics { readings: r.clone(), warnings: Vec::new() }, true);
        }
        s
    }
}
