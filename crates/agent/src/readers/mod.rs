//! The readers: each turns one vendor interface into [`Readings`]. [`Readers::sample`] runs
//! them all once; a reader that finds nothing (no library, no sysfs class) contributes no
//! devices and no series.

pub mod nvml;
pub mod plugins;
pub mod sysfs;

use std::path::PathBuf;
use std::time::Duration;

use accel_discover::Host;
use serde::Serialize;

use crate::readings::Readings;

/// Where a recording of NVML's readings sits in a captured tree (beside discovery's
/// `/accel/nvml.json`).
pub const RECORDED_NVML_METRICS: &str = "/accel/nvml-metrics.json";

/// The NVIDIA source: the live library, a recording, or none.
#[derive(Debug)]
pub enum NvmlSource {
    #[cfg(feature = "nvml")]
    Live(Box<nvml::live::Live>),
    Recorded(nvml::NvmlMetrics),
    None,
}

/// Every reader of one node.
#[derive(Debug)]
pub struct Readers {
    pub host: Host,
    pub nvml: NvmlSource,
    /// `ACCEL_PLUGIN_DIR`: external plugins' `metrics` verb.
    pub plugin_dir: Option<PathBuf>,
    pub plugin_timeout: Duration,
    /// A readings document replayed verbatim (`--replay FILE`), for demos and benchmarks.
    pub replay: Option<Readings>,
    /// Whether `host` is the live machine (sysfs readings are `live`, else `recording`).
    pub live: bool,
}

/// What one reader contributed to a sample.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ReaderStatus {
    pub name: String,
    /// `live`, `recording` or `replay`.
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
    /// The NVIDIA source for `host`: on the live machine (`live`, the real `/`) the library
    /// loaded at run time, else a recording in the captured tree, else none.
    pub fn nvml_for(host: &Host, live: bool) -> NvmlSource {
        if live {
            #[cfg(feature = "nvml")]
            if let Some(l) = nvml::open_live() {
                return NvmlSource::Live(Box::new(l));
            }
            return NvmlSource::None;
        }
        let mut w = Vec::new();
        match host.read_text(&host.path(RECORDED_NVML_METRICS), 16 << 20, "nvml", &mut w) {
            Some(text) => serde_json::from_str(&text).map_or(NvmlSource::None, NvmlSource::Recorded),
            None => NvmlSource::None,
        }
    }

    /// Runs every reader once. Blocking (files, NVML calls, plugin processes).
    pub fn sample(&self) -> Sample {
        let mut s = Sample::default();
        let add = |s: &mut Sample, name: &str, source: &str, mut r: Readings, warnings: Vec<String>, ok: bool| {
            s.warnings.extend(r.sanitize(name));
            s.warnings.extend(warnings);
            s.readers.push(ReaderStatus {
                name: name.to_owned(),
                source: source.to_owned(),
                devices: r.devices.len(),
                links: r.links.len(),
                ok,
            });
            s.readings.extend(r);
        };
        match &self.nvml {
            #[cfg(feature = "nvml")]
            NvmlSource::Live(l) => {
                let m = l.snapshot();
                add(&mut s, "nvml", "live", nvml::to_readings(&m), m.errors.clone(), true);
            }
            NvmlSource::Recorded(m) => add(&mut s, "nvml", "recording", nvml::to_readings(m), m.errors.clone(), true),
            NvmlSource::None => {}
        }
        let source = if self.live { "live" } else { "recording" };
        for (name, (r, w)) in [("amdgpu", sysfs::read_amd(&self.host)), ("habanalabs", sysfs::read_gaudi(&self.host))] {
            if !r.devices.is_empty() || !w.is_empty() {
                add(&mut s, name, source, r, w.into_iter().map(|w| w.to_string()).collect(), true);
            }
        }
        if let Some(dir) = &self.plugin_dir {
            for p in plugins::find(dir) {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("plugin").to_owned();
                match plugins::run(&p, self.host.root(), self.plugin_timeout) {
                    Ok(r) => add(&mut s, &name, "plugin", r, Vec::new(), true),
                    Err(e) => add(&mut s, &name, "plugin", Readings::default(), vec![e], false),
                }
            }
        }
        if let Some(r) = &self.replay {
            add(&mut s, "replay", "replay", r.clone(), Vec::new(), true);
        }
        s
    }
}
