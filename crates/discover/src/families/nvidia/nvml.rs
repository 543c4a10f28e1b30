//! The narrow view of NVML that the NVIDIA plugin needs, as serialisable snapshots (what
//! discovery reads, [`NvmlSnapshot`], and the readings, [`NvmlMetrics`]), the recorded-JSON
//! source that replays one (`/accel/nvml.json` in a capture), and [`NvmlHost`], which carries a
//! source on the `Host`. The live source
//! (`nvml_live`, behind the `nvml` feature) loads libnvidia-ml at run time.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::Host;

/// Where NVML data comes from: the live library or a recording. One call, so a capture is the
/// serialised result of that call.
pub trait NvmlSource: Send + Sync {
    /// Everything the plugin reads. A source that fails outright returns `Err` (NVIDIA is then
    /// discovered through procfs); per-device failures go into [`NvmlSnapshot::errors`].
    fn snapshot(&self) -> Result<NvmlSnapshot, String>;

    /// The readings now (utilisation, memory, power, clocks, ECC, NVLink counters), for the
    /// family's `metrics`. `None` for a source without live readings (a recording).
    fn metrics(&self) -> Option<NvmlMetrics> {
        None
    }
}

/// What NVML said about this node.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NvmlSnapshot {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_version: Option<String>,
    #[serde(default)]
    pub devices: Vec<NvmlDevice>,
    /// NVML calls that failed, as `call: error` (become warnings).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// One GPU as NVML reports it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NvmlDevice {
    pub index: u32,
    /// `nvmlDeviceGetPciInfo().busId`: `00000000:18:00.0`.
    pub pci_bus_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    /// `nvmlDeviceGetMemoryInfo().total`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// `nvmlDeviceGetMigMode` current mode; `None` when the device does not support MIG.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_enabled: Option<bool>,
    /// The MIG devices (GPU instance + compute instance) that exist, from
    /// `nvmlDeviceGetMigDeviceHandleByIndex` over `nvmlDeviceGetMaxMigDeviceCount` slots. Absent in
    /// recordings made before MIG was read (`serde(default)`), and empty when MIG is off.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mig_devices: Vec<NvmlMigDevice>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nvlinks: Vec<NvmlLink>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric: Option<NvmlFabric>,
    /// `NVML_FI_DEV_C2C_LINK_COUNT`: NVLink-C2C links to the CPU (Grace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub c2c_links: Option<u32>,
}

/// One MIG device of a GPU with MIG mode enabled, read through its MIG device handle.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NvmlMigDevice {
    /// The slot index passed to `nvmlDeviceGetMigDeviceHandleByIndex`.
    pub index: u32,
    /// `nvmlDeviceGetUUID` on the MIG handle: `MIG-<uuid>`, what `CUDA_VISIBLE_DEVICES` takes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// `nvmlDeviceGetName` on the MIG handle (`NVIDIA H100 80GB HBM3 MIG 1g.10gb`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The GPU instance profile name (`1g.10gb`); when absent, taken from `name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// `nvmlDeviceGetMemoryInfo().total` on the MIG handle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// `nvmlDeviceGetGpuInstanceId`, `nvmlDeviceGetComputeInstanceId`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_instance_id: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_instance_id: Option<u32>,
}

impl NvmlMigDevice {
    /// The profile name: `profile` when recorded, else the word after `MIG ` in the device name
    /// (`NVIDIA H100 80GB HBM3 MIG 1g.10gb` -> `1g.10gb`). Never empty.
    pub fn profile_name(&self) -> Option<String> {
        let clean = |p: &str| {
            let p = p.trim();
            (!p.is_empty() && p.len() <= 64 && !p.chars().any(char::is_control)).then(|| p.to_owned())
        };
        if let Some(p) = self.profile.as_deref().and_then(clean) {
            return Some(p);
        }
        let name = self.name.as_deref()?;
        let (_, rest) = name.rsplit_once("MIG ")?;
        rest.split_whitespace().next().and_then(clean)
    }
}

/// One NVLink of a GPU (`nvmlDeviceGetNvLinkState`, `...RemotePciInfo`, `...RemoteDeviceType`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NvmlLink {
    pub link: u32,
    pub active: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_pci: Option<String>,
    pub remote_type: RemoteType,
}

/// `nvmlIntNvLinkDeviceType_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RemoteType {
    Gpu,
    Switch,
    Ibmnpu,
    Unknown,
}

/// `nvmlDeviceGetGpuFabricInfoV`: the NVLink fabric (multi-node NVLink, NVL72) this GPU joined.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NvmlFabric {
    /// `clusterUuid` as a UUID string; all zeros when unassigned.
    pub cluster_uuid: String,
    pub clique_id: u32,
    /// `NVML_GPU_FABRIC_STATE_*`: 0 not supported, 1 not started, 2 in progress, 3 completed.
    pub state: u32,
    /// `nvmlReturn_t` of the registration; 0 is success. Meaningful only when completed.
    pub status: u32,
}

impl NvmlFabric {
    pub const STATE_COMPLETED: u32 = 3;

    /// The NVLink domain name `<clusterUuid>.<cliqueId>` (as GPU Feature Discovery's
    /// `nvidia.com/gpu.clique`), only when registration completed successfully with a real UUID.
    pub fn clique(&self) -> Option<String> {
        let zero = self.cluster_uuid.chars().all(|c| c == '0' || c == '-');
        (self.state == Self::STATE_COMPLETED && self.status == 0 && !zero && !self.cluster_uuid.is_empty())
            .then(|| format!("{}.{}", self.cluster_uuid, self.clique_id))
    }
}

/// Parses a recorded snapshot.
pub fn parse_recorded(text: &str) -> Result<NvmlSnapshot, String> {
    serde_json::from_str(text).map_err(|e| format!("recorded NVML JSON: {e}"))
}

/// A source that replays a snapshot (tests, captures).
#[derive(Debug, Clone)]
pub struct RecordedNvml(pub Result<NvmlSnapshot, String>);

impl NvmlSource for RecordedNvml {
    fn snapshot(&self) -> Result<NvmlSnapshot, String> {
        self.0.clone()
    }
}

/// The NVML a host carries: the live library `open_live` attached, or a test's source.
pub trait NvmlHost {
    /// `self` with `nvml` as its NVIDIA runtime.
    fn with_nvml(self, nvml: Arc<dyn NvmlSource>) -> Host;
    fn nvml(&self) -> Option<&dyn NvmlSource>;
}

impl NvmlHost for Host {
    fn with_nvml(self, nvml: Arc<dyn NvmlSource>) -> Host {
        self.with_runtime("nvidia", Arc::new(nvml))
    }

    fn nvml(&self) -> Option<&dyn NvmlSource> {
        self.runtime("nvidia")?.downcast_ref::<Arc<dyn NvmlSource>>().map(|n| &**n)
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn cliques() {
        let f = |uuid: &str, state, status| NvmlFabric { cluster_uuid: uuid.into(), clique_id: 7, state, status };
        assert_eq!(f("a1b2", 3, 0).clique().as_deref(), Some("a1b2.7"));
        assert_eq!(f("a1b2", 2, 0).clique(), None);
        assert_eq!(f("a1b2", 3, 1).clique(), None);
        assert_eq!(f("00000000-0000-0000-0000-000000000000", 3, 0).clique(), None);
    }

    #[test]
    fn recorded() {
        let s = parse_recorded(r#"{"devices":[{"index":0,"pci_bus_id":"00000000:18:00.0"}]}"#).unwrap();
        assert_eq!(s.devices.len(), 1);
        assert!(parse_recorded("{").is_err());
        assert!(parse_recorded(r#"{"devices":[{"index":-1}]}"#).is_err());
    }

    #[test]
    fn mig_fields() {
        // Recordings without MIG fields still load.
        let old = parse_recorded(r#"{"devices":[{"index":0,"pci_bus_id":"0","mig_enabled":true}]}"#).unwrap();
        assert!(old.devices[0].mig_devices.is_empty());
        let s = parse_recorded(
            r#"{"devices":[{"index":0,"pci_bus_id":"0","mig_enabled":true,"mig_devices":[
                {"index":2,"uuid":"MIG-a","name":"NVIDIA H100 80GB HBM3 MIG 1g.10gb","memory_bytes":10}]}]}"#,
        )
        .unwrap();
        let m = &s.devices[0].mig_devices[0];
        assert_eq!((m.index, m.uuid.as_deref(), m.profile_name().as_deref()), (2, Some("MIG-a"), Some("1g.10gb")));
        let with = |profile: Option<&str>, name: Option<&str>| NvmlMigDevice {
            profile: profile.map(Into::into),
            name: name.map(Into::into),
            ..NvmlMigDevice::default()
        };
        assert_eq!(with(Some("3g.40gb"), Some("x MIG 1g.10gb")).profile_name().as_deref(), Some("3g.40gb"));
        assert_eq!(with(Some(" "), Some("MIG ")).profile_name(), None);
        assert_eq!(with(None, Some("NVIDIA H100")).profile_name(), None);
        assert!(parse_recorded(r#"{"devices":[{"index":0,"pci_bus_id":"0","mig_devices":[{"uuid":1}]}]}"#).is_err());
    }

    proptest! {
        #[test]
        fn parse_never_panics(text in ".{0,80}") {
            let _ = parse_recorded(&text);
        }

        #[test]
        fn mig_garbage_never_panics(
            uuid in proptest::option::of(".{0,40}"),
            name in proptest::option::of(".{0,60}"),
            profile in proptest::option::of(".{0,20}"),
            index in any::<u32>(),
            memory in proptest::option::of(any::<u64>()),
        ) {
            let m = NvmlMigDevice { index, uuid, name, profile, memory_bytes: memory, ..NvmlMigDevice::default() };
            if let Some(p) = m.profile_name() {
                prop_assert!(!p.is_empty());
            }
            let json = serde_json::to_string(&m).unwrap();
            let back: NvmlMigDevice = serde_json::from_str(&json).unwrap();
            prop_assert_eq!(back, m);
        }
    }
}
