//! The NVIDIA family's own names, shared by its NVML and procfs reader (`mod.rs`) and its
//! reader of imported files (`imported.rs`): the source tag of its warnings, its link kinds and
//! its domain kind.

use accel_model::{DomainKind, LinkKind};

/// The source every warning of this family names.
pub(crate) const SRC: &str = "nvidia";
/// The domain of GPUs sharing one NVLink fabric (NVL72): cluster UUID plus clique id.
pub const NVLINK_CLIQUE: DomainKind = DomainKind::new("nvlink_clique");
/// The link kind of NVLink (direct).
pub const NVLINK: LinkKind = LinkKind::new("nvlink");
/// The link kind of NVLink through NVSwitch.
pub const NVSWITCH: LinkKind = LinkKind::new("nvswitch");
