//! The Python exception hierarchy, rooted at `accel.AccelError`, and the one place Rust errors
//! become Python exceptions.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(accel, AccelError, PyException, "Base class of every error accel raises.");
create_exception!(accel, DiscoveryError, AccelError, "Discovery could not start (a bad root or SKU file).");
create_exception!(
    accel,
    PlacementError,
    AccelError,
    "A placement request cannot be met (or is invalid): the message names the failed constraint and the nearest feasible alternative."
);
create_exception!(accel, TransportError, AccelError, "A tensor transport operation failed.");
create_exception!(accel, PoolExhausted, TransportError, "The shared-memory pool bound would be exceeded.");
create_exception!(accel, OwnerGone, TransportError, "The owner of a reference has exited.");
create_exception!(accel, StaleReference, OwnerGone, "A reference to an owner that has since restarted.");
create_exception!(accel, BufferFreed, TransportError, "The referenced buffer was freed.");
create_exception!(accel, AuthError, TransportError, "The peer does not hold the cluster secret.");

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("AccelError", py.get_type::<AccelError>())?;
    m.add("DiscoveryError", py.get_type::<DiscoveryError>())?;
    m.add("PlacementError", py.get_type::<PlacementError>())?;
    m.add("TransportError", py.get_type::<TransportError>())?;
    m.add("PoolExhausted", py.get_type::<PoolExhausted>())?;
    m.add("OwnerGone", py.get_type::<OwnerGone>())?;
    m.add("StaleReference", py.get_type::<StaleReference>())?;
    m.add("BufferFreed", py.get_type::<BufferFreed>())?;
    m.add("AuthError", py.get_type::<AuthError>())?;
    m.add_function(pyo3::wrap_pyfunction!(suggest, m)?)?;
    Ok(())
}

/// The known name nearest to `word`, or None: the one suggestion rule (`accel_model::suggest`),
/// for the Python package's own "did you mean".
#[pyfunction]
fn suggest(word: &str, known: Vec<String>) -> Option<String> {
    accel_model::suggest(word, known.iter().map(String::as_str))
}

/// Converts any displayable Rust error into the given accel exception.
pub fn to_py<E: std::fmt::Display>(kind: fn(String) -> PyErr) -> impl Fn(E) -> PyErr {
    move |e| kind(e.to_string())
}

pub fn discovery_error(message: String) -> PyErr {
    DiscoveryError::new_err(message)
}

/// A placement error: `args` are the message and the explanation as JSON (`{}` when none).
pub fn placement_error(message: String, explanation_json: String) -> PyErr {
    PlacementError::new_err((message, explanation_json))
}

/// Maps a transport error onto its Python exception.
pub fn transport_error(e: accel_transport::Error) -> PyErr {
    use accel_transport::Error as E;
    let msg = e.to_string();
    match e {
        E::PoolExhausted { .. } => PoolExhausted::new_err(msg),
        E::OwnerGone { .. } => OwnerGone::new_err(msg),
        E::Stale { .. } => StaleReference::new_err(msg),
        E::Freed { .. } => BufferFreed::new_err(msg),
        E::Auth(_) => AuthError::new_err(msg),
        _ => TransportError::new_err(msg),
    }
}
