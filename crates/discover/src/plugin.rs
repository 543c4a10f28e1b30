//! The vendor-plugin trait, what a plugin returns, and the explicit list of plugins.

use std::collections::BTreeMap;

use accel_model::{Accelerator, Domain, Link, Machine, Warning};

use crate::{GenericPci, Host};

/// One accelerator family's read-only view of a host.
pub trait Vendor: Send + Sync {
    /// Stable lowercase id (`nvidia`, `amd`, `generic-pci`): config key, metric label, log field.
    fn id(&self) -> &'static str;

    /// Finds this family's devices. Absence is not an error: no devices is an empty report.
    /// `platform` holds what the host layer and earlier plugins found.
    fn discover(&self, host: &Host, platform: &Machine) -> Report;

    /// What a worker needs in order to see exactly these devices. Returns data; never sets
    /// environment variables itself.
    fn isolate(&self, devices: &[&Accelerator]) -> Isolation;
}

/// A plugin's findings: a partial answer with warnings beats an all-or-nothing error.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub accelerators: Vec<Accelerator>,
    pub links: Vec<Link>,
    pub domains: Vec<Domain>,
    pub warnings: Vec<Warning>,
}

/// Environment variables that confine a worker to a set of devices.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Isolation {
    pub env: BTreeMap<String, String>,
}

/// Every plugin this build knows, in the order they run. The generic PCI plugin runs last and
/// picks up whatever no vendor plugin claimed.
pub fn default_plugins() -> Vec<Box<dyn Vendor>> {
    vec![Box::new(GenericPci)]
}
