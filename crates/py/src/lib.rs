//! The `accel._native` extension module: a thin shell over the Rust crates. Each area registers
//! its functions from its own file; Python-facing errors are converted in `errors.rs` only.

// PyO3's generated glue uses unsafe code internally; our own code here has none.
#![allow(unsafe_code)]

mod discover;
mod errors;
mod plan;
mod refs;
mod reshard;
mod transport;

use std::sync::OnceLock;

use accel_discover::Vendor;
use pyo3::prelude::*;

/// The built-in plugins, built once when the module loads: a bundle's environment asks their
/// `isolate` (pure functions of a node's stored device facts), never a plugin found on this
/// process's `PATH`.
static BUILTIN: OnceLock<Vec<Box<dyn Vendor>>> = OnceLock::new();

pub(crate) fn builtin_plugins() -> &'static [Box<dyn Vendor>] {
    BUILTIN.get_or_init(accel_discover::default_plugins)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    builtin_plugins();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    discover::register(m)?;
    plan::register(m)?;
    reshard::register(m)?;
    transport::register(m)?;
    refs::register(m)?;
    Ok(())
}
