//! Import skeleton of crates/discover/src/families/nvidia/mod.rs at commit 9bf77bf (before issue 38): its
//! top-level `use` and `mod` items verbatim, and every `crate::`/`super::`/child-module path
//! of its other code (tests left out) as a statement, for the house rules' cycle check.

pub mod metrics;
pub mod nvml;
pub mod nvml_live;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use accel_model::{
    Accelerator, Domain, DomainKind, Link, LinkKind, LinkKindInfo, Machine, Partition, PciAddr, Warning,
};
use crate::plugin::{isolate_by_index, link_gbps, pci_accelerator, pci_functions};
use crate::{Host, Isolation, Report, Vendor};
use nvml::{parse_recorded, NvmlDevice, NvmlSnapshot, NvmlSource, RemoteType};

fn paths() {
    let _ = crate::plugin::Environment;
    let _ = crate::plugin::Keep;
    let _ = crate::plugin::Keep::EachEntry;
    let _ = crate::plugin::Keep::Record;
    let _ = crate::plugin::Keep::File;
    let _ = metrics::RECORDED;
    let _ = nvml_live::open;
    let _ = crate::readings::Metrics;
    let _ = crate::protocol::PluginError;
    let _ = metrics::read;
    let _ = crate::plugin::vocabulary;
    let _ = crate::labels::label_value;
    let _ = crate::plugin::isolation_values;
    let _ = nvml::NvmlFabric::STATE_COMPLETED;
}
