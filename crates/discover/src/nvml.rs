//! The narrow view of NVML that the NVIDIA plugin needs, as one serialisable snapshot, and the
//! recorded-JSON source that replays one (`/accel/nvml.json` in a capture). The live source
//! (`nvml_live`, behind the `nvml` feature) loads libnvidia-ml at run time.

use serde::{Deserialize, Serialize};

/// Where NVML data comes from: the live library or a recording. One call, so a capture is the
/// serialised result of that call.
pub trait NvmlSource: Send + Sync {
    /// Everything the plugin reads. A source that fails outright returns `Err` (NVIDIA is then
    /// discovered through procfs); per-device failures go into [`NvmlSnapshot::errors`].
    fn snapshot(&self) -> Result<NvmlSnapshot, String>;
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
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nvlinks: Vec<NvmlLink>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric: Option<NvmlFabric>,
    /// `NVML_FI_DEV_C2C_LINK_COUNT`: NVLink-C2C links to the CPU (Grace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub c2c_links: Option<u32>,
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

    proptest! {
        #[test]
        fn parse_never_panics(text in ".{0,80}") {
            let _ = parse_recorded(&text);
        }
    }
}
