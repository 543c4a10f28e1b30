//! Host discovery for accel: reads a Linux root (live `/` or a captured tree) through one
//! explicit [`Host`] context and fills an [`accel_model::Machine`].
//!
//! The host layer ([`linux`]) reads NUMA, the PCI tree, NICs and DMI; vendor plugins
//! ([`Vendor`]) then add accelerators, links and domains. Broken input becomes a warning in the
//! machine's report, never a panic.

pub mod amd;
pub mod capture;
pub mod export;
pub mod fs;
pub mod gaudi;
mod generic;
mod host;
pub mod linux;
pub mod net;
pub mod neuron;
pub mod nvidia;
pub mod nvml;
pub mod nvml_live;
pub mod others;
pub mod platform;
mod plugin;
pub mod samples;
mod skufiles;
pub mod tpu;

pub use amd::Amd;
pub use gaudi::Gaudi;
pub use generic::GenericPci;
pub use host::{Host, NetConfig};
pub use neuron::Neuron;
pub use nvidia::Nvidia;
pub use others::{Groq, IntelGpu};
pub use platform::Platform;
pub use plugin::{default_plugins, pci_accelerator, Isolation, Report, Vendor};
pub use skufiles::{load_registry, SkuLoadError};
pub use tpu::Tpu;

use accel_model::Machine;

/// The optional cargo features this build of discovery has (`accel --version` prints them).
pub const FEATURES: &[&str] = &[
    #[cfg(feature = "nvml")]
    "nvml",
];

/// Discovers one machine: the host layer first, then each plugin in order.
/// A plugin sees what the host layer and earlier plugins found, and never re-reports a PCI
/// function an earlier plugin claimed.
pub fn discover(host: &Host, plugins: &[Box<dyn Vendor>]) -> Machine {
    let mut machine = linux::read_platform(host);
    for plugin in plugins {
        let report = plugin.discover(host, &machine);
        machine.accelerators.extend(report.accelerators);
        machine.links.extend(report.links);
        machine.domains.extend(report.domains);
        machine.warnings.extend(report.warnings);
        machine.attributes.extend(report.attributes);
    }
    assign_indices(&mut machine);
    machine
}

/// What a worker needs in order to see exactly the accelerators `ids` of `machine`: each
/// plugin isolates the devices it reported, and the environment variables are merged. Devices
/// whose plugin has no visibility mechanism contribute nothing.
pub fn isolate(plugins: &[Box<dyn Vendor>], machine: &Machine, ids: &[&str]) -> Isolation {
    let mut out = Isolation::default();
    for plugin in plugins {
        let devices: Vec<&accel_model::Accelerator> =
            ids.iter().filter_map(|id| machine.accelerator(id)).filter(|a| a.plugin == plugin.id()).collect();
        if !devices.is_empty() {
            out.env.extend(plugin.isolate(&devices).env);
        }
    }
    out
}

/// Orders accelerators by vendor and PCI address (partitions by their index) and numbers them
/// within each vendor, the order `CUDA_DEVICE_ORDER=PCI_BUS_ID` and its kin use.
///
/// An NVIDIA MIG device is not a CUDA ordinal (CUDA selects it by UUID), so a GPU split into
/// MIG devices still takes one ordinal, and whole GPUs after it keep their real CUDA numbers;
/// the MIG devices are numbered after every physical GPU of the node, so that each index stays
/// unique (per-device Ray resources are named by it). AMD CPX/DPX partitions are devices of
/// their own to HIP and are numbered in place.
fn assign_indices(machine: &mut Machine) {
    machine.accelerators.sort_by(|a, b| {
        let key = |x: &accel_model::Accelerator| {
            (x.vendor.clone(), x.pci, x.partition.as_ref().map(|p| p.index), x.id.clone())
        };
        key(a).cmp(&key(b))
    });
    let is_mig = |a: &accel_model::Accelerator| a.partition.as_ref().is_some_and(|p| p.mode.starts_with("MIG"));
    let mut ordinals = std::collections::HashMap::<String, u32>::new();
    let mut last_physical = std::collections::HashMap::<String, String>::new();
    for acc in machine.accelerators.iter_mut() {
        let physical = match &acc.partition {
            Some(p) if p.mode.starts_with("MIG") => p.physical_id.clone(),
            _ => acc.id.clone(),
        };
        let n = ordinals.entry(acc.vendor.clone()).or_default();
        if last_physical.get(&acc.vendor) != Some(&physical) {
            *n += 1;
            last_physical.insert(acc.vendor.clone(), physical);
        }
        acc.index = *n - 1;
    }
    let mut next_mig = ordinals;
    for acc in machine.accelerators.iter_mut().filter(|a| is_mig(a)) {
        let n = next_mig.get_mut(&acc.vendor).expect("counted above");
        acc.index = *n;
        *n += 1;
    }
    for link in &mut machine.links {
        if link.a > link.b {
            std::mem::swap(&mut link.a, &mut link.b);
        }
    }
    machine.links.sort_by(|x, y| (&x.a, &x.b, x.kind).cmp(&(&y.a, &y.b, y.kind)));
}
