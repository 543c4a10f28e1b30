//! The live [`NvmlSource`]: libnvidia-ml loaded at run time through nvml-wrapper. A missing
//! library (no driver, a container without it) means "no NVML", never a crash; every failing
//! call becomes an entry in [`crate::families::nvidia::nvml::NvmlSnapshot::errors`]. Built only with the `nvml` feature.

use std::sync::Arc;

use crate::families::nvidia::nvml::NvmlSource;

/// The live NVML, or `None` when the library cannot be loaded or initialised.
pub fn open() -> Option<Arc<dyn NvmlSource>> {
    #[cfg(feature = "nvml")]
    {
        live::Live::open().map(|l| Arc::new(l) as Arc<dyn NvmlSource>)
    }
    #[cfg(not(feature = "nvml"))]
    {
        None
    }
}

#[cfg(feature = "nvml")]
mod live {
    use nvml_wrapper::error::NvmlError;
    use nvml_wrapper::struct_wrappers::device::FieldValueSample;
    use nvml_wrapper::structs::device::FieldId;
    use nvml_wrapper::Nvml;

    use nvml_wrapper::enum_wrappers::device::{Clock, EccCounter, MemoryError, TemperatureSensor};
    use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;

    use crate::families::nvidia::nvml::{
        NvmlDevice, NvmlDeviceMetrics, NvmlLink, NvmlLinkMetrics, NvmlMetrics, NvmlSnapshot, NvmlSource, RemoteType,
    };

    /// `NVML_NVLINK_MAX_LINKS`.
    const MAX_LINKS: u32 = 18;
    /// `NVML_FI_DEV_C2C_LINK_COUNT`.
    const FI_C2C_LINK_COUNT: u32 = 170;

    pub struct Live {
        nvml: Nvml,
        /// A second handle on the same library for the calls nvml-wrapper does not wrap
        /// (`nvmlDeviceGetGpuFabricInfo`, the MIG device handles); `None` if it cannot be loaded.
        raw: Option<fabric::RawLib>,
    }

    impl std::fmt::Debug for Live {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("LiveNvml")
        }
    }

    impl Live {
        pub fn open() -> Option<Live> {
            let nvml = Nvml::init().ok()?;
            Some(Live { nvml, raw: fabric::RawLib::open() })
        }
    }

    fn err(call: &str, index: u32, e: NvmlError) -> String {
        format!("{call}(device {index}): {e}")
    }

    impl NvmlSource for Live {
        fn snapshot(&self) -> Result<NvmlSnapshot, String> {
            let count = self.nvml.device_count().map_err(|e| format!("nvmlDeviceGetCount: {e}"))?;
            let mut snap =
                NvmlSnapshot { driver_version: self.nvml.sys_driver_version().ok(), ..NvmlSnapshot::default() };
            for index in 0..count {
                let device = match self.nvml.device_by_index(index) {
                    Ok(d) => d,
                    Err(e) => {
                        snap.errors.push(err("nvmlDeviceGetHandleByIndex", index, e));
                        continue;
                    }
                };
                let pci_bus_id = match device.pci_info() {
                    Ok(p) => p.bus_id,
                    Err(e) => {
                        snap.errors.push(err("nvmlDeviceGetPciInfo", index, e));
                        continue;
                    }
                };
                let mut dev = NvmlDevice {
                    index,
                    pci_bus_id,
                    name: device.name().ok(),
                    uuid: device.uuid().ok(),
                    serial: device.serial().ok(),
                    memory_bytes: device.memory_info().ok().map(|m| m.total),
                    mig_enabled: device.mig_mode().ok().map(|m| m.current == 1),
                    ..NvmlDevice::default()
                };
                for link in 0..MAX_LINKS {
                    let w = device.link_wrapper_for(link);
                    // Links past the device's count answer InvalidArg or NotSupported.
                    let Ok(active) = w.is_active() else { continue };
                    let remote_pci = if active { w.remote_pci_info().ok().map(|p| p.bus_id) } else { None };
                    dev.nvlinks.push(NvmlLink {
                        link,
                        active,
                        version: w.version().ok(),
                        remote_pci,
                        // Decided by the plugin from the remote's PCI class, as NCCL does.
                        remote_type: RemoteType::Unknown,
                    });
                }
                if let Ok(values) = device.field_values_for(&[FieldId(FI_C2C_LINK_COUNT)]) {
                    dev.c2c_links = values.into_iter().flatten().find_map(|s: FieldValueSample| match s.value {
                        Ok(nvml_wrapper::enums::device::SampleValue::U32(n)) => Some(n),
                        Ok(nvml_wrapper::enums::device::SampleValue::U64(n)) => u32::try_from(n).ok(),
                        _ => None,
                    });
                    if dev.c2c_links == Some(0) {
                        dev.c2c_links = None;
                    }
                }
                if let Some(raw) = &self.raw {
                    match raw.fabric(&device) {
                        Ok(f) => dev.fabric = f,
                        Err(e) => snap.errors.push(format!("nvmlDeviceGetGpuFabricInfo(device {index}): {e}")),
                    }
                    if dev.mig_enabled == Some(true) {
                        match raw.mig_devices(&self.nvml, &device) {
                            Ok(m) => dev.mig_devices = m,
                            Err(e) => snap.errors.push(format!("{e} (device {index})")),
                        }
                    }
                }
                snap.devices.push(dev);
            }
            Ok(snap)
        }

        /// Reads every device; a failing call is `None` plus an entry in `errors`.
        fn metrics(&self) -> Option<NvmlMetrics> {
            let mut out = NvmlMetrics::default();
            let count = match self.nvml.device_count() {
                Ok(n) => n,
                Err(e) => {
                    out.errors.push(format!("nvmlDeviceGetCount: {e}"));
                    return Some(out);
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
            Some(out)
        }
    }

    /// The one unwrapped call, on a second handle of the same (already loaded) library.
    #[allow(unsafe_code)]
    mod fabric {
        use nvml_wrapper::{Device, Nvml};
        use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlFieldValue_t, nvmlGpuFabricInfo_t, NvmlLib};

        use crate::families::nvidia::nvml::{NvmlFabric, NvmlMigDevice};

        /// `NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX`, `_RX` (KiB, per link by scope: nvml-wrapper
        /// 0.11 always sends scope 0, so this call goes through the raw handle).
        const FI_DATA_TX: u32 = 138;
        const FI_DATA_RX: u32 = 139;

        /// `NVML_SUCCESS`, `NVML_ERROR_NOT_SUPPORTED`, `NVML_ERROR_NOT_FOUND`.
        const SUCCESS: u32 = 0;
        const NOT_SUPPORTED: u32 = 3;
        const NOT_FOUND: u32 = 6;

        pub struct RawLib(NvmlLib);

        impl RawLib {
            pub fn open() -> Option<RawLib> {
                // SAFETY: loading libnvidia-ml runs its initialisers, which nvml-wrapper has already
                // done for the same library in this process (Nvml::init succeeded first).
                unsafe { NvmlLib::new("libnvidia-ml.so.1") }.ok().map(RawLib)
            }

            /// The GPU's MIG devices (GPU mode MIG enabled): every occupied slot up to
            /// `nvmlDeviceGetMaxMigDeviceCount`, read through its MIG handle. nvml-wrapper 0.11
            /// wraps only `nvmlDeviceGetMigMode`, so the handles come from the raw library and
            /// are then read through nvml-wrapper's `Device` (UUID, name, memory).
            pub fn mig_devices(&self, nvml: &Nvml, device: &Device) -> Result<Vec<NvmlMigDevice>, String> {
                let lib = &self.0;
                let (Ok(max_count), Ok(by_index)) =
                    (&lib.nvmlDeviceGetMaxMigDeviceCount, &lib.nvmlDeviceGetMigDeviceHandleByIndex)
                else {
                    return Err("nvmlDeviceGetMigDeviceHandleByIndex: not in this driver".into());
                };
                let mut max = 0;
                // SAFETY: the handle comes from a live `Device` of an initialised NVML; `max` is writable.
                let ret = unsafe { max_count(device.handle(), &mut max) };
                if ret != SUCCESS {
                    return Err(format!("nvmlDeviceGetMaxMigDeviceCount: NVML error {ret}"));
                }
                let mut out = Vec::new();
                // NVML caps MIG devices per GPU at 7 (A100/H100) or 8; bound the loop anyway.
                for index in 0..max.min(64) {
                    let mut handle: nvmlDevice_t = std::ptr::null_mut();
                    // SAFETY: as above; `handle` is a writable handle slot.
                    let ret = unsafe { by_index(device.handle(), index, &mut handle) };
                    match ret {
                        SUCCESS if !handle.is_null() => {}
                        // An empty slot (no MIG device at this index).
                        SUCCESS | NOT_FOUND => continue,
                        code => return Err(format!("nvmlDeviceGetMigDeviceHandleByIndex({index}): NVML error {code}")),
                    }
                    // SAFETY: NVML returned this MIG device handle for a live parent device; it
                    // stays valid while NVML is initialised, which outlives this call.
                    let mig = unsafe { Device::new(handle, nvml) };
                    let instance_id = |f: &Result<unsafe extern "C" fn(nvmlDevice_t, *mut u32) -> u32, _>| {
                        let f = f.as_ref().ok()?;
                        let mut id = 0;
                        // SAFETY: a valid MIG handle and a writable id.
                        (unsafe { f(handle, &mut id) } == SUCCESS).then_some(id)
                    };
                    out.push(NvmlMigDevice {
                        index,
                        uuid: mig.uuid().ok(),
                        name: mig.name().ok(),
                        profile: None,
                        memory_bytes: mig.memory_info().ok().map(|m| m.total),
                        gpu_instance_id: instance_id(&lib.nvmlDeviceGetGpuInstanceId),
                        compute_instance_id: instance_id(&lib.nvmlDeviceGetComputeInstanceId),
                    });
                }
                Ok(out)
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

            pub fn fabric(&self, device: &Device) -> Result<Option<NvmlFabric>, String> {
                // Drivers older than R535 lack the symbol: then there is no fabric to read.
                let Ok(get_fabric) = &self.0.nvmlDeviceGetGpuFabricInfo else { return Ok(None) };
                let mut info = nvmlGpuFabricInfo_t { clusterUuid: [0; 16], status: 0, cliqueId: 0, state: 0 };
                // SAFETY: the handle comes from a live `Device` of an initialised NVML; the symbol is
                // present; `info` is a properly sized, writable struct.
                let ret = unsafe { get_fabric(device.handle(), &mut info) };
                match ret {
                    SUCCESS => {
                        let u = info.clusterUuid;
                        let uuid = format!(
                            "{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
                            u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]
                        );
                        Ok(Some(NvmlFabric {
                            cluster_uuid: uuid,
                            clique_id: info.cliqueId,
                            state: u32::from(info.state),
                            status: info.status,
                        }))
                    }
                    NOT_SUPPORTED => Ok(None),
                    code => Err(format!("NVML error {code}")),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// On any machine: with no driver, opening NVML is `None`, not a crash; with one, the
    /// snapshot either works or says why.
    #[test]
    fn open_never_panics() {
        if let Some(nvml) = super::open() {
            let _ = nvml.snapshot();
        }
    }
}
