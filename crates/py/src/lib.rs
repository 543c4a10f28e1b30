//! The `accel._native` extension module: a thin shell over the Rust crates. Each area registers
//! its functions from its own file; Python-facing errors are converted in `errors.rs` only.

// PyO3's generated glue uses unsafe code; ours reads caller-held arrays and DLPack capsules
// (`refs.rs`, `reshard.rs`, `device.rs`), each block with its SAFETY note.
#![allow(unsafe_code)]

mod device;
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
    device::register(m)?;
    plan::register(m)?;
    reshard::register(m)?;
    transport::register(m)?;
    refs::register(m)?;
    Ok(())
}
