//! The Python exception hierarchy, rooted at `accel.AccelError`, and the one place Rust errors
//! become Python exceptions.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(accel, AccelError, PyException, "Base class of every error accel raises.");
create_exception!(accel, DiscoveryError, AccelError, "Discovery could not start (a bad root or SKU file).");

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("AccelError", py.get_type::<AccelError>())?;
    m.add("DiscoveryError", py.get_type::<DiscoveryError>())?;
    Ok(())
}

/// Converts any displayable Rust error into the given accel exception.
pub fn to_py<E: std::fmt::Display>(kind: fn(String) -> PyErr) -> impl Fn(E) -> PyErr {
    move |e| kind(e.to_string())
}

pub fn discovery_error(message: String) -> PyErr {
    DiscoveryError::new_err(message)
}
