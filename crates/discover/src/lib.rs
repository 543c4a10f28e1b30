//! Host discovery for accel: reads a Linux root (live `/` or a captured tree) through one
//! explicit [`Host`] context and fills an [`accel_model::Machine`].
//!
//! The host layer ([`linux`]) reads NUMA, the PCI tree, NICs and DMI; vendor plugins
//! ([`Vendor`]) then add accelerators, links and domains. Broken input becomes a warning in the
//! machine's report, never a panic.

mod assemble;
pub mod bundle;
pub mod capture;
pub mod conformance;
mod declared;
pub mod exec;
pub mod families {
    //! The built-in families, one module each (`src/families/`), found by build.rs: adding one
    //! needs no edit here (docs/contributing-hardware.md).
    include!(concat!(env!("OUT_DIR"), "/families.rs"));
}
pub mod fingerprint;
pub mod fs;
mod generic;
pub mod health;
mod host;
mod hwmon;
pub mod labels;
pub mod linux;
pub mod net;
pub mod osdevs;
mod plugin;
mod plugin_list;
pub mod predict;
pub mod preflight;
pub mod probe;
pub mod protocol;
pub mod provenance;
pub mod readings;
pub mod samples;
pub mod schema;
mod skufiles;
mod source;
pub mod validate;

pub use assemble::{discover, discover_all};
pub use families::platform::Platform;
pub use generic::GenericPci;
pub use host::{Host, NetConfig};
pub use plugin::{
    in_process, isolate, isolate_by_index, isolate_from_model, pci_accelerator, Isolation, Report, Vendor,
};
pub use plugin_list::{default_plugins, plugins_with_external};
pub use skufiles::{load_registry, sku_dir, SkuLoadError, SKU_DIR_VAR};
pub use source::{OpenError, OpenOptions, Source};

/// The optional cargo features this build of discovery has (`accel --version` prints them).
pub const FEATURES: &[&str] = &[
    #[cfg(feature = "nvml")]
    "nvml",
];
