//! The Prometheus exposition (OpenMetrics text, through prometheus-client) of one [`Sample`]
//! joined with the node's [`Machine`]: one vendor-neutral naming scheme that follows
//! OpenTelemetry's `hw.gpu.*` semantic conventions (`hw.gpu.utilization` becomes
//! `accel_hw_gpu_utilization_ratio`), every device series labelled `vendor`, `model`, `uuid`,
//! `pci` and `index`. docs/metrics.md maps each name to dcgm-exporter's and AMD's.
//!
//! Label values come from the machine and from plugins (a product name, a reader's name), so
//! every one is written through [`LabelValue`], which escapes it by the exposition format's rules
//! (prometheus-client writes values as given): a value cannot end its label or its line.

use std::sync::atomic::AtomicU64;

use accel_model::{Accelerator, Machine, PciAddr};
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::readers::Sample;
use crate::readings::DeviceReading;

type Labels = Vec<(String, LabelValue)>;

/// A label value, escaped when written: `\` as `\\`, `"` as `\"`, a line feed as `\n` (the
/// rules of the Prometheus text format and OpenMetrics alike). The only way a value reaches the
/// exposition.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LabelValue(pub String);

impl<T: Into<String>> From<T> for LabelValue {
    fn from(v: T) -> LabelValue {
        LabelValue(v.into())
    }
}

impl EncodeLabelValue for LabelValue {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        escape_label_value(&self.0, encoder)
    }
}

/// Writes `value` escaped for a label value of the text exposition formats.
pub fn escape_label_value(value: &str, out: &mut impl std::fmt::Write) -> std::fmt::Result {
    let mut rest = value;
    while let Some(i) = rest.find(['\\', '"', '\n']) {
        out.write_str(&rest[..i])?;
        out.write_str(match rest.as_bytes()[i] {
            b'\\' => "\\\\",
            b'"' => "\\\"",
            _ => "\\n",
        })?;
        rest = &rest[i + 1..];
    }
    out.write_str(rest)
}
type G = Family<Labels, Gauge<f64, AtomicU64>>;
type C = Family<Labels, Counter<u64>>;

/// Every family the agent can emit: (name, help). A family with no series is not printed.
pub const FAMILIES: &[(&str, &str)] = &[
    ("accel_device_info", "An accelerator the node's discovery found (value 1), with its SKU and partition"),
    (
        "accel_device_health",
        "A device's health verdict, judged again every sample (value 1 on its state: healthy, unhealthy or unknown; device is its name on the node, reason the first reason)",
    ),
    ("accel_hw_gpu_utilization_ratio", "Fraction of time the device was busy (OpenTelemetry hw.gpu.utilization)"),
    ("accel_hw_gpu_memory_usage_bytes", "Device memory in use (hw.gpu.memory.usage)"),
    ("accel_hw_gpu_memory_limit_bytes", "Device memory in total (hw.gpu.memory.limit)"),
    ("accel_hw_power_watts", "Board power draw (hw.power)"),
    (
        "accel_hw_temperature_celsius",
        "Device temperature: the hottest labelled sensor the vendor exposes (hw.temperature)",
    ),
    ("accel_hw_gpu_clock_hertz", "Current clock of one clock domain (sm = compute, memory, soc)"),
    ("accel_hw_errors", "Error counters by type: ECC corrected/uncorrected, RAS blocks (hw.errors)"),
    (
        "accel_hw_gpu_xid_last",
        "The last XID (driver error code) the device's driver reported (dcgm-exporter's DCGM_FI_DEV_XID_ERRORS)",
    ),
    ("accel_hw_gpu_link_io_bytes", "Bytes through one scale-up link, by direction (hw.gpu.io per link)"),
    ("accel_hw_gpu_link_errors", "Errors on one scale-up link (replay, recovery, CRC)"),
    ("accel_topology_links", "Scale-up links discovery found between two devices (bonded link count)"),
    ("accel_discovery_warnings", "Warnings discovery raised, by source"),
    ("accel_reader_up", "Whether a metrics reader answered in the last sample (1) or failed (0)"),
    ("accel_reader_devices", "Devices a metrics reader reported in the last sample"),
    ("accel_reader_warnings", "Warnings of the last sample (unmatched devices, malformed plugin output, failed calls)"),
];

fn label(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), LabelValue::from(*v))).collect()
}

/// The device labels of an accelerator.
fn device_labels(acc: &Accelerator) -> Labels {
    let model = acc.sku.clone().unwrap_or_else(|| acc.product.clone());
    let pci = acc.pci.map(|p| p.to_string()).unwrap_or_default();
    label(&[
        ("vendor", &acc.vendor),
        ("model", &model),
        ("uuid", acc.uuid.as_deref().unwrap_or("")),
        ("pci", &pci),
        ("index", &acc.index.to_string()),
    ])
}

/// The accelerator a reading is for: same PCI function and, for a partitioned device, the
/// same partition. A whole-device reading of a partitioned device matches no single
/// accelerator (its series carry the PCI address and the vendor, with empty index and uuid).
pub fn match_reading<'m>(machine: &'m Machine, pci: &str, partition: Option<u32>) -> Match<'m> {
    let Ok(addr) = pci.parse::<PciAddr>() else { return Match::None };
    let at: Vec<&Accelerator> = machine.accelerators.iter().filter(|a| a.pci == Some(addr)).collect();
    match (at.as_slice(), partition) {
        ([], _) => Match::None,
        ([one], None) if one.partition.is_none() => Match::One(one),
        (many, Some(p)) => many
            .iter()
            .find(|a| a.partition.as_ref().is_some_and(|x| x.index == p))
            .map_or(Match::None, |a| Match::One(a)),
        (many, None) => Match::Whole(many[0]),
    }
}

/// How a reading joined the model.
#[derive(Debug)]
pub enum Match<'m> {
    One(&'m Accelerator),
    /// The physical device under several partitions (one of them given, for the vendor).
    Whole(&'m Accelerator),
    None,
}

fn reading_labels(machine: &Machine, r: &DeviceReading, warnings: &mut Vec<String>) -> Labels {
    match match_reading(machine, &r.pci, r.partition) {
        Match::One(acc) => {
            let mut l = device_labels(acc);
            if acc.uuid.is_none() {
                if let Some(u) = &r.uuid {
                    l[2].1 = LabelValue::from(u.as_str());
                }
            }
            l
        }
        Match::Whole(acc) => {
            let model = acc.sku.clone().unwrap_or_else(|| acc.product.clone());
            label(&[("vendor", &acc.vendor), ("model", &model), ("uuid", ""), ("pci", &r.pci), ("index", "")])
        }
        Match::None => {
            warnings.push(format!("a reading for PCI {} matches no discovered accelerator", r.pci));
            label(&[
                ("vendor", ""),
                ("model", ""),
                ("uuid", r.uuid.as_deref().unwrap_or("")),
                ("pci", &r.pci),
                ("index", ""),
            ])
        }
    }
}

/// Renders the exposition of one sample.
pub fn render(machine: &Machine, sample: &Sample) -> String {
    let mut registry = Registry::default();
    let g = |registry: &mut Registry, name: &str| -> G {
        let f = G::default();
        let help = FAMILIES.iter().find(|(n, _)| *n == name).map(|(_, h)| *h).unwrap_or("");
        registry.register(name, help, f.clone());
        f
    };
    let c = |registry: &mut Registry, name: &str| -> C {
        let f = C::default();
        let help = FAMILIES.iter().find(|(n, _)| *n == name).map(|(_, h)| *h).unwrap_or("");
        registry.register(name, help, f.clone());
        f
    };
    let info = g(&mut registry, "accel_device_info");
    let health = g(&mut registry, "accel_device_health");
    let util = g(&mut registry, "accel_hw_gpu_utilization_ratio");
    let mem_used = g(&mut registry, "accel_hw_gpu_memory_usage_bytes");
    let mem_total = g(&mut registry, "accel_hw_gpu_memory_limit_bytes");
    let power = g(&mut registry, "accel_hw_power_watts");
    let temp = g(&mut registry, "accel_hw_temperature_celsius");
    let clock = g(&mut registry, "accel_hw_gpu_clock_hertz");
    let errors = c(&mut registry, "accel_hw_errors");
    let xid = g(&mut registry, "accel_hw_gpu_xid_last");
    let link_io = c(&mut registry, "accel_hw_gpu_link_io_bytes");
    let link_err = c(&mut registry, "accel_hw_gpu_link_errors");
    let topo = g(&mut registry, "accel_topology_links");
    let disc = g(&mut registry, "accel_discovery_warnings");
    let up = g(&mut registry, "accel_reader_up");
    let rdev = g(&mut registry, "accel_reader_devices");
    let rwarn = g(&mut registry, "accel_reader_warnings");

    for acc in &machine.accelerators {
        let mut l = device_labels(acc);
        l.push(("sku".into(), acc.sku.clone().unwrap_or_default().into()));
        l.push((
            "partition".into(),
            acc.partition.as_ref().map(|p| format!("{} {}", p.mode, p.index)).unwrap_or_default().into(),
        ));
        info.get_or_create(&l).set(1.0);
    }
    for (acc, name) in machine.accelerators.iter().zip(machine.device_labels()) {
        let Some(h) = &acc.health else { continue };
        let mut l = device_labels(acc);
        l.push(("device".into(), name.into()));
        l.push(("state".into(), h.state.as_str().into()));
        l.push(("reason".into(), h.reasons.first().cloned().unwrap_or_default().into()));
        health.get_or_create(&l).set(1.0);
    }
    let mut warnings = sample.warnings.clone();
    for r in &sample.readings.devices {
        let l = reading_labels(machine, r, &mut warnings);
        let set = |f: &G, v: Option<f64>| {
            if let Some(v) = v {
                f.get_or_create(&l).set(v);
            }
        };
        set(&util, r.utilization_ratio);
        set(&mem_used, r.memory_used_bytes.map(|v| v as f64));
        set(&mem_total, r.memory_total_bytes.map(|v| v as f64));
        set(&power, r.power_watts);
        set(&temp, r.temperature_celsius);
        for (domain, hz) in &r.clock_hz {
            let mut l = l.clone();
            l.push(("clock".into(), domain.as_str().into()));
            clock.get_or_create(&l).set(*hz as f64);
        }
        for (kind, n) in &r.errors {
            if kind == "xid_last" {
                xid.get_or_create(&l).set(*n as f64);
                continue;
            }
            let mut l = l.clone();
            l.push(("error_type".into(), kind.strip_suffix("_total").unwrap_or(kind).into()));
            errors.get_or_create(&l).inc_by(*n);
        }
    }
    for lr in &sample.readings.links {
        let base = DeviceReading { pci: lr.pci.clone(), ..Default::default() };
        let mut l = reading_labels(machine, &base, &mut warnings);
        l.push(("link".into(), lr.link.to_string().into()));
        l.push(("peer_pci".into(), lr.peer_pci.clone().unwrap_or_default().into()));
        for (dir, v) in [("transmit", lr.tx_bytes_total), ("receive", lr.rx_bytes_total)] {
            if let Some(v) = v {
                let mut l = l.clone();
                l.push(("direction".into(), LabelValue::from(dir)));
                link_io.get_or_create(&l).inc_by(v);
            }
        }
        if let Some(e) = lr.errors_total {
            link_err.get_or_create(&l).inc_by(e);
        }
    }
    for link in &machine.links {
        let l = label(&[("a", &link.a), ("b", &link.b), ("kind", link.kind.as_str())]);
        topo.get_or_create(&l).set(f64::from(link.count));
    }
    let mut by_source = std::collections::BTreeMap::<&str, u32>::new();
    for w in &machine.warnings {
        *by_source.entry(w.source.as_str()).or_default() += 1;
    }
    for (source, n) in by_source {
        disc.get_or_create(&label(&[("source", source)])).set(f64::from(n));
    }
    for rs in &sample.readers {
        let l = label(&[("reader", &rs.name), ("source", &rs.source)]);
        up.get_or_create(&l).set(if rs.ok { 1.0 } else { 0.0 });
        rdev.get_or_create(&l).set(rs.devices as f64);
    }
    rwarn.get_or_create(&Labels::new()).set(warnings.len() as f64);
    let mut out = String::new();
    encode(&mut out, &registry).expect("writing to a String cannot fail");
    // prometheus-client prints HELP/TYPE for families without series too; drop those.
    strip_empty_families(&out)
}

/// Removes `# HELP`/`# TYPE`/`# UNIT` blocks that no sample follows.
fn strip_empty_families(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut header = String::new();
    for line in text.lines() {
        if line.starts_with("# HELP ") || line.starts_with("# TYPE ") || line.starts_with("# UNIT ") {
            if line.starts_with("# HELP ") {
                header.clear();
            }
            header.push_str(line);
            header.push('\n');
        } else {
            out.push_str(&header);
            header.clear();
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The OpenMetrics content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
