//! The vendor-neutral hardware model of accel: machines, the path classifier and the SKU registry.
//!
//! This crate is data and pure functions only. It never reads a file, a socket or the environment:
//! discovery (in `accel-discover`) fills a [`Machine`], and everything above consumes one.

mod cpuset;
mod machine;
mod name;
mod path;
mod pci;
mod sku;
mod suggest;
mod system;

pub use cpuset::{CpuSet, CpuSetError};
pub use machine::{
    Accelerator, Domain, DomainKind, Health, HealthState, HostInfo, Link, LinkKind, LinkKindInfo, LinkOrigin, Machine,
    Name, Nic, NumaNode, Partition, PciNode, PciNodeKind, Vocabulary, Warning, HEALTH_UNKNOWN_ATTR, SCHEMA_VERSION,
};
pub use path::{Endpoint, PathClass, PathClassifier};
pub use pci::{PciAddr, PciAddrError, PciClass, PciId, PciLink};
pub use sku::{vendor_name, PciMatch, ScaleUp, Sku, SkuError, SkuRegistry};
pub use suggest::{distance, suggest};
pub use system::System;
