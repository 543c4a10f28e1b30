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

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    plan::builtin_plugins();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    discover::register(m)?;
    plan::register(m)?;
    reshard::register(m)?;
    transport::register(m)?;
    refs::register(m)?;
    Ok(())
}
