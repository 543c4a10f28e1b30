//! Host discovery for accel: reads a Linux root (live `/` or a captured tree) through one
//! explicit [`Host`] context and fills an [`accel_model::Machine`].
//!
//! The host layer ([`linux`]) reads NUMA, the PCI tree, NICs and DMI; vendor plugins
//! ([`Vendor`]) then add accelerators, links and domains. Broken input becomes a warning in the
//! machine's report, never a panic.

pub mod amd;
mod assemble;
pub mod capture;
pub mod conformance;
pub mod exec;
pub mod export;
pub mod fingerprint;
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
mod plugin_list;
pub mod protocol;
pub mod samples;
pub mod schema;
mod skufiles;
mod source;
pub mod tpu;
pub mod validate;

pub use amd::Amd;
pub use assemble::{discover, discover_all};
pub use gaudi::Gaudi;
pub use generic::GenericPci;
pub use host::{Host, NetConfig};
pub use neuron::Neuron;
pub use nvidia::Nvidia;
pub use others::{Groq, IntelGpu};
pub use platform::Platform;
pub use plugin::{
    in_process, isolate, isolate_by_index, isolate_from_model, pci_accelerator, Isolation, Report, Vendor,
};
pub use plugin_list::{default_plugins, plugins_with_external};
pub use skufiles::{load_registry, SkuLoadError};
pub use source::{OpenError, OpenOptions, Source};
pub use tpu::Tpu;

/// The optional cargo features this build of discovery has (`accel --version` prints them).
pub const FEATURES: &[&str] = &[
    #[cfg(feature = "nvml")]
    "nvml",
];
