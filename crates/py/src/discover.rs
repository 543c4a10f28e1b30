//! Discovery from Python: `discover_json(root, sku_files)` returns the machine as JSON text
//! (the Python layer turns it into dicts).

use std::path::PathBuf;

use accel_discover::{default_plugins, discover, load_registry, Host};
use pyo3::prelude::*;

use crate::errors::{discovery_error, to_py};

/// Discovers the machine under `root` (`/` for this machine) and returns its JSON description.
#[pyfunction]
#[pyo3(signature = (root = None, sku_files = Vec::new(), sku_dir = None))]
fn discover_json(
    py: Python<'_>,
    root: Option<PathBuf>,
    sku_files: Vec<PathBuf>,
    sku_dir: Option<PathBuf>,
) -> PyResult<String> {
    let root = root.unwrap_or_else(|| PathBuf::from("/"));
    if !root.join("sys").is_dir() {
        return Err(discovery_error(format!(
            "{} has no sys/ directory: not a Linux root or a captured machine",
            root.display()
        )));
    }
    let registry = load_registry(sku_dir.as_deref(), &sku_files).map_err(to_py(discovery_error))?;
    let live = root == std::path::Path::new("/");
    let machine = py.detach(|| {
        let mut host = Host::new(&root, registry);
        if live {
            host = host.with_env(std::env::vars().collect());
        }
        discover(&host, &default_plugins())
    });
    serde_json::to_string(&machine).map_err(to_py(discovery_error))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(discover_json, m)?)?;
    Ok(())
}
