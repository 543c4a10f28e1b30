//! Import skeleton of crates/discover/src/lib.rs at commit 9bf77bf (before issue 38): its
//! top-level `use` and `mod` items verbatim, and every `crate::`/`super::`/child-module path
//! of its other code (tests left out) as a statement, for the house rules' cycle check.

mod assemble;
pub mod capture;
pub mod conformance;
pub mod exec;
pub mod families {}
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
pub use skufiles::{load_registry, SkuLoadError};
pub use source::{OpenError, OpenOptions, Source};
