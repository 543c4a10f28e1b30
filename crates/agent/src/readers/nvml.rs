//! NVIDIA through NVML: a serialisable [`NvmlMetrics`] snapshot (what the live library said, or
//! a recording of it) and its conversion to [`Readings`]. The live source loads
//! libnvidia-ml at run time through nvml-wrapper: no library means no NVIDIA series, not an error.

use serde::{Deserialize, Serialize};

use crate::readings::{normalize_pci, DeviceReading, LinkReading, Readings};

/// The raw NVML values of one node, in NVML's own units (a recording is this as JSON).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NvmlMetrics {
    #[serde(default)]
    pub devices: Vec<NvmlDeviceMetrics>,
    /// NVML calls that failed, `call(device i): error`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// One GPU. `None` is "NVML answered NotSupported" (or the call failed: then also in `errors`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NvmlDeviceMetrics {
    /// `nvmlDeviceGetPciInfo().busId`, `00000000:19:00.0`.
    pub pci_bus_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// `nvmlDeviceGetUtilizationRates().gpu`, percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization_gpu_percent: Option<u32>,
    /// `nvmlDeviceGetMemoryInfo()`, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_total_bytes: Option<u64>,
    /// `nvmlDeviceGetPowerUsage`, milliwatts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_usage_mw: Option<u32>,
    /// `nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)`, °C.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature_gpu_c: Option<u32>,
    /// `nvmlDeviceGetClockInfo(NVML_CLOCK_SM / NVML_CLOCK_MEM)`, MHz.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_sm_mhz: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_mem_mhz: Option<u32>,
    /// `nvmlDeviceGetTotalEccErrors(CORRECTED / UNCORRECTED, NVML_VOLATILE_ECC)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc_corrected_volatile: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc_uncorrected_volatile: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nvlinks: Vec<NvmlLinkMetrics>,
}

/// One active NVLink.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NvmlLinkMetrics {
    pub link: u32,
    /// `nvmlDeviceGetNvLinkRemotePciInfo().busId` (absent for a link to an off-tray switch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_pci: Option<String>,
    /// `NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX / _RX` with scope = link, KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_tx_kib: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_rx_kib: Option<u64>,
    /// Sum of `nvmlDeviceGetNvLinkErrorCounter` (DL replay, recovery, CRC flit, CRC data).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<u64>,
}

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

/// The live NVML, or `None` when libnvidia-ml cannot be loaded or initialised.
#[cfg(feature = "nvml")]
pub fn open_live() -> Option<live::Live> {
    live::Live::open()
}

#[cfg(feature = "nvml")]
pub mod live {
    //! The nvml-wrapper calls. NVLink throughput needs `nvmlDeviceGetFieldValues` with a
    //! per-link scope, which nvml-wrapper 0.11 does not expose (it always sends scope 0), so
    //! that one call goes through the raw library handle, as discovery's fabric call does.

    use nvml_wrapper::enum_wrappers::device::{Clock, EccCounter, MemoryError, TemperatureSensor};
    use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;
    use nvml_wrapper::Nvml;

    use super::{NvmlDeviceMetrics, NvmlLinkMetrics, NvmlMetrics};

    /// `NVML_NVLINK_MAX_LINKS`.
    const MAX_LINKS: u32 = 18;

    /// An initialised NVML.
    pub struct Live {
        nvml: Nvml,
        raw: Option<raw::RawLib>,
    }

    impl std::fmt::Debug for Live {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("LiveNvml")
        }
    }

    impl Live {
        pub fn open() -> Option<Live> {
            let nvml = Nvml::init().ok()?;
            Some(Live { nvml, raw: raw::RawLib::open() })
        }

        /// Reads every device; a failing call is `None` plus an entry in `errors`.
        pub fn snapshot(&self) -> NvmlMetrics {
            let mut out = NvmlMetrics::default();
            let count = match self.nvml.device_count() {
                Ok(n) => n,
                Err(e) => {
                    out.errors.push(format!("nvmlDeviceGetCount: {e}"));
                    return out;
                }
            };
            for index in 0..count {
                let device = match self.nvml.device_by_index(index) {
                    Ok(d) => d,
                    Err(e) => {
                        out.errors.push(format!("nvmlDeviceGetHandleByIndex(device {index}): {e}"));
                        continue;
                    }
                };
                let Ok(pci) = device.pci_info() else {
                    out.errors.push(format!("nvmlDeviceGetPciInfo(device {index}) failed"));
                    continue;
                };
                let mem = device.memory_info().ok();
                let mut d = NvmlDeviceMetrics {
                    pci_bus_id: pci.bus_id,
                    uuid: device.uuid().ok(),
                    utilization_gpu_percent: device.utilization_rates().ok().map(|u| u.gpu),
                    memory_used_bytes: mem.as_ref().map(|m| m.used),
                    memory_total_bytes: mem.as_ref().map(|m| m.total),
                    power_usage_mw: device.power_usage().ok(),
                    temperature_gpu_c: device.temperature(TemperatureSensor::Gpu).ok(),
                    clock_sm_mhz: device.clock_info(Clock::SM).ok(),
                    clock_mem_mhz: device.clock_info(Clock::Memory).ok(),
                    ecc_corrected_volatile: device.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile).ok(),
                    ecc_uncorrected_volatile: device
                        .total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
                        .ok(),
                    nvlinks: Vec::new(),
                };
                for link in 0..MAX_LINKS {
                    let w = device.link_wrapper_for(link);
                    if !w.is_active().unwrap_or(false) {
                        continue;
                    }
                    let errors = [
                        ErrorCounter::DlReplay,
                        ErrorCounter::DlRecovery,
                        ErrorCounter::DlCrcFlit,
                        ErrorCounter::DlCrcData,
                    ]
                    .into_iter()
                    .filter_map(|c| w.error_counter(c).ok())
                    .reduce(|a, b| a.saturating_add(b));
                    let (tx, rx) = match &self.raw {
                        Some(raw) => raw.throughput(&device, link),
                        None => (None, None),
                    };
                    d.nvlinks.push(NvmlLinkMetrics {
                        link,
                        remote_pci: w.remote_pci_info().ok().map(|p| p.bus_id),
                        data_tx_kib: tx,
                        data_rx_kib: rx,
                        errors,
                    });
                }
                out.devices.push(d);
            }
            out
        }
    }

    #[allow(unsafe_code)]
    mod raw {
        use nvml_wrapper::Device;
        use nvml_wrapper_sys::bindings::{nvmlFieldValue_t, NvmlLib};

        /// `NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX`, `_RX` (KiB, per link by scope).
        const FI_DATA_TX: u32 = 138;
        const FI_DATA_RX: u32 = 139;
        const SUCCESS: u32 = 0;

        pub struct RawLib(NvmlLib);

        impl RawLib {
            pub fn open() -> Option<RawLib> {
                // SAFETY: loading libnvidia-ml runs its initialisers, which nvml-wrapper has
                // already done for the same library in this process (Nvml::init succeeded).
                unsafe { NvmlLib::new("libnvidia-ml.so.1") }.ok().map(RawLib)
            }

            /// Data tx and rx KiB of one link; `None` where the field is unsupported.
            pub fn throughput(&self, device: &Device, link: u32) -> (Option<u64>, Option<u64>) {
                let Ok(get) = &self.0.nvmlDeviceGetFieldValues else { return (None, None) };
                // SAFETY: nvmlFieldValue_t is a plain C struct for which all-zero is valid.
                let mut values: [nvmlFieldValue_t; 2] = unsafe { std::mem::zeroed() };
                values[0].fieldId = FI_DATA_TX;
                values[1].fieldId = FI_DATA_RX;
                values[0].scopeId = link;
                values[1].scopeId = link;
                // SAFETY: the handle comes from a live `Device` of an initialised NVML; `values`
                // is a writable array of the length passed.
                let ret = unsafe { get(device.handle(), 2, values.as_mut_ptr()) };
                if ret != SUCCESS {
                    return (None, None);
                }
                let read = |v: &nvmlFieldValue_t| {
                    // SAFETY: the union was zeroed and NVML fills it; every bit pattern is a valid
                    // u64, and unsigned long long is the type these two fields report.
                    let value = unsafe { v.value.ullVal };
                    (v.nvmlReturn == SUCCESS).then_some(value)
                };
                (read(&values[0]), read(&values[1]))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
