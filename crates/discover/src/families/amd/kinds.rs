//! The AMD family's own names, shared by its KFD reader (`mod.rs`) and its reader of imported
//! files (`imported.rs`): the source tag of its warnings, its link kinds and its domain kind.

use accel_model::{DomainKind, LinkKind};

/// The source every warning of this family names.
pub(crate) const SRC: &str = "amd";
/// The xGMI hive, the AMD scale-up fabric's domain (KFD's `hive_id`).
pub const XGMI_HIVE: DomainKind = DomainKind::new("xgmi_hive");
/// The link kind of AMD Infinity Fabric (xGMI).
pub const XGMI: LinkKind = LinkKind::new("xgmi");
/// The link kind of chip-to-chip (two dies of one package).
pub const C2C: LinkKind = LinkKind::new("c2c");
