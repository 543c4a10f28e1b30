//! Weight-sync planning from Python: the transfer plan between two layouts (JSON in, JSON out)
//! and the dtype table the layouts name.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use accel_reshard::{plan, Layout, DTYPES};

fn layout(text: &str, side: &str) -> PyResult<Layout> {
    serde_json::from_str(text).map_err(|e| PyValueError::new_err(format!("invalid {side} layout: {e}")))
}

/// The plan (JSON, `accel_reshard::Plan`) that moves `src` into `dst` (layout JSON); a
/// `ValueError` names the mistake in either.
#[pyfunction]
fn reshard_plan(py: Python<'_>, src: String, dst: String) -> PyResult<String> {
    let (src, dst) = (layout(&src, "source")?, layout(&dst, "destination")?);
    let planned = py.detach(|| plan(&src, &dst)).map_err(|e| PyValueError::new_err(e.to_string()))?;
    serde_json::to_string(&planned).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// Every dtype a layout may name: (name, bytes per element, floating point).
#[pyfunction]
fn reshard_dtypes() -> Vec<(&'static str, u64, bool)> {
    DTYPES.to_vec()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(reshard_plan, m)?)?;
    m.add_function(wrap_pyfunction!(reshard_dtypes, m)?)?;
    Ok(())
}
