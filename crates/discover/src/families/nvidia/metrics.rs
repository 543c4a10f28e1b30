//! NVIDIA's metrics through NVML: the serialisable [`NvmlMetrics`] snapshot (`nvml.rs`: what the
//! live library said, through discovery's one NVML loader, or a recording of it) and its
//! conversion to [`Readings`]. No library and no recording means no NVIDIA series, not an error.

use super::nvml::{NvmlHost, NvmlMetrics};
use crate::protocol::PluginError;
use crate::readings::{normalize_pci, DeviceReading, LinkReading, Metrics, Readings};
use crate::Host;

/// Converts NVML's units to the protocol's: percent to ratio, mW to W, MHz to Hz, KiB to bytes.
pub fn to_readings(m: &NvmlMetrics) -> Readings {
    let mut out = Readings::default();
    for d in &m.devices {
        let pci = normalize_pci(&d.pci_bus_id);
        let mut r = DeviceReading {
            pci: pci.clone(),
            uuid: d.uuid.clone(),
            utilization_ratio: d.utilization_gpu_percent.map(|p| f64::from(p.min(100)) / 100.0),
            memory_used_bytes: d.memory_used_bytes,
            memory_total_bytes: d.memory_total_bytes,
            power_watts: d.power_usage_mw.map(|mw| f64::from(mw) / 1000.0),
            temperature_celsius: d.temperature_gpu_c.map(f64::from),
            ..Default::default()
        };
        if let Some(c) = d.clock_sm_mhz {
            r.clock_hz.insert("sm".into(), u64::from(c) * 1_000_000);
        }
        if let Some(c) = d.clock_mem_mhz {
            r.clock_hz.insert("memory".into(), u64::from(c) * 1_000_000);
        }
        if let Some(n) = d.ecc_corrected_volatile {
            r.errors.insert("ecc_corrected_total".into(), n);
        }
        if let Some(n) = d.ecc_uncorrected_volatile {
            r.errors.insert("ecc_uncorrected_total".into(), n);
        }
        out.devices.push(r);
        for l in &d.nvlinks {
            out.links.push(LinkReading {
                pci: pci.clone(),
                link: l.link,
                peer_pci: l.remote_pci.as_deref().map(normalize_pci),
                tx_bytes_total: l.data_tx_kib.map(|k| k.saturating_mul(1024)),
                rx_bytes_total: l.data_rx_kib.map(|k| k.saturating_mul(1024)),
                errors_total: l.errors,
            });
        }
    }
    out
}

/// Where a recording of NVML's readings sits in a captured tree (beside discovery's
/// `/accel/nvml.json`).
pub const RECORDED: &str = "/accel/nvml-metrics.json";

/// The NVIDIA readings of `host`: its live NVML's, else a recording in the tree, else none
/// (the family then provides no metrics on this host).
pub fn read(host: &Host) -> Option<Result<Metrics, PluginError>> {
    let m = match host.nvml().and_then(|n| n.metrics()) {
        Some(m) => m,
        None => {
            let mut warnings = Vec::new();
            let text = host.read_text(&host.path(RECORDED), 16 << 20, "nvml", &mut warnings)?;
            match serde_json::from_str::<NvmlMetrics>(&text) {
                Ok(m) => m,
                Err(e) => {
                    return Some(Err(PluginError::Garbage {
                        name: "nvidia".into(),
                        verb: "metrics".into(),
                        message: format!("{RECORDED}: {e}"),
                    }))
                }
            }
        }
    };
    Some(Ok(Metrics { readings: to_readings(&m), warnings: m.errors }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::families::nvidia::nvml::{NvmlDeviceMetrics, NvmlLinkMetrics};

    #[test]
    fn units_convert() {
        let m = NvmlMetrics {
            devices: vec![NvmlDeviceMetrics {
                pci_bus_id: "00000000:19:00.0".into(),
                utilization_gpu_percent: Some(42),
                power_usage_mw: Some(72020),
                clock_sm_mhz: Some(345),
                nvlinks: vec![NvmlLinkMetrics { link: 3, data_tx_kib: Some(2), ..Default::default() }],
                ..Default::default()
            }],
            errors: vec![],
        };
        let r = to_readings(&m);
        assert_eq!(r.devices[0].pci, "0000:19:00.0");
        assert_eq!(r.devices[0].utilization_ratio, Some(0.42));
        assert_eq!(r.devices[0].power_watts, Some(72.02));
        assert_eq!(r.devices[0].clock_hz["sm"], 345_000_000);
        assert!(r.devices[0].errors.is_empty(), "ECC not read must not appear as 0");
        assert_eq!(r.links[0].tx_bytes_total, Some(2048));
        assert_eq!(r.links[0].rx_bytes_total, None);
    }
}
